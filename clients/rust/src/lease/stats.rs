//! A lease object's counters since it was made.

use std::sync::atomic::{AtomicU64, Ordering};

/// `Stats`, the counters' values, and `Counters`, the counters, with a field each per name
/// (the docs go on `Stats`'s), and `Counters::snapshot`, which reads them all into a `Stats`.
macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Counters since the object was made.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct Stats {
            $($(#[$doc])* pub $name: u64,)*
        }

        #[derive(Default)]
        pub(crate) struct Counters {
            $(pub(super) $name: AtomicU64,)*
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> Stats {
                Stats {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

counters! {
    /// Every Redis call: leases, exact calls, refunds.
    calls,
    lease_calls,
    leases_granted,
    leases_refused,
    exact_calls,
    /// Permits handed out from memory.
    from_memory,
    /// Requests refused from memory (a remembered refusal), without a call.
    refused_from_memory,
    /// Exact calls admitted.
    exact_admitted,
    refund_calls,
    /// Permits returned with REFUND (unused ones, and given back after their lease ended).
    refunded,
    /// Permits given back into a live lease, without a call.
    returned,
    /// Calls that failed (a lease's failure counts once, whoever waited on it).
    errors,
}

pub(super) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// An exact call made for an object's key outside it (by its lease map).
    pub(crate) fn bump_exact(&self) {
        bump(&self.calls, 1);
        bump(&self.exact_calls, 1);
    }

    pub(crate) fn bump_exact_admitted(&self) {
        bump(&self.exact_admitted, 1);
    }

    pub(crate) fn bump_refund(&self, n: u64) {
        bump(&self.calls, 1);
        bump(&self.refund_calls, 1);
        bump(&self.refunded, n);
    }

    pub(crate) fn bump_error(&self) {
        bump(&self.errors, 1);
    }
}
