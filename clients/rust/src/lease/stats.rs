//! A lease object's counters since it was made.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters since the object was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Every Redis call: leases, exact calls, refunds.
    pub calls: u64,
    pub lease_calls: u64,
    pub leases_granted: u64,
    pub leases_refused: u64,
    pub exact_calls: u64,
    /// Permits handed out from memory.
    pub from_memory: u64,
    /// Requests refused from memory (a remembered refusal), without a call.
    pub refused_from_memory: u64,
    /// Exact calls admitted.
    pub exact_admitted: u64,
    pub refund_calls: u64,
    /// Permits returned with REFUND (unused ones, and given back after their lease ended).
    pub refunded: u64,
    /// Permits given back into a live lease, without a call.
    pub returned: u64,
    /// Calls that failed (a lease's failure counts once, whoever waited on it).
    pub errors: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(super) calls: AtomicU64,
    pub(super) lease_calls: AtomicU64,
    pub(super) leases_granted: AtomicU64,
    pub(super) leases_refused: AtomicU64,
    pub(super) exact_calls: AtomicU64,
    pub(super) from_memory: AtomicU64,
    pub(super) refused_from_memory: AtomicU64,
    pub(super) exact_admitted: AtomicU64,
    pub(super) refund_calls: AtomicU64,
    pub(super) refunded: AtomicU64,
    pub(super) returned: AtomicU64,
    pub(super) errors: AtomicU64,
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

    pub(crate) fn snapshot(&self) -> Stats {
        let s = self;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            calls: get(&s.calls),
            lease_calls: get(&s.lease_calls),
            leases_granted: get(&s.leases_granted),
            leases_refused: get(&s.leases_refused),
            exact_calls: get(&s.exact_calls),
            from_memory: get(&s.from_memory),
            refused_from_memory: get(&s.refused_from_memory),
            exact_admitted: get(&s.exact_admitted),
            refund_calls: get(&s.refund_calls),
            refunded: get(&s.refunded),
            returned: get(&s.returned),
            errors: get(&s.errors),
        }
    }
}
