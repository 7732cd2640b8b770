//! How a lease object leases: its clock, its sizes and hooks.

use crate::limit::{Now, unix_ms};
use std::sync::Arc;

/// The clock a lease's calls are stamped with.
#[derive(Clone)]
pub enum Clock {
    /// `*` with `DETAIL`: the server's clock, exact under any concurrency.
    Server,
    /// The caller's clock in Unix ms, passed as `now`. Concurrent calls then reach Redis out of
    /// order: set the module's `slidingwindow.lateness` to cover it (contract, "Lateness").
    Own(Arc<dyn Fn() -> u64 + Send + Sync>),
}

impl Clock {
    /// The system clock in Unix ms as the caller's own.
    pub fn system() -> Clock {
        Clock::Own(Arc::new(unix_ms))
    }

    pub(super) fn now(&self) -> Now {
        match self {
            Clock::Server => Now::Server,
            Clock::Own(f) => Now::Ms(f()),
        }
    }
}

/// Told the key after each refund of a lease's permits (see [`LeaseConfig::on_refund`]).
pub type RefundHook = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// How a lease object leases.
#[derive(Clone)]
pub struct LeaseConfig {
    /// Permits per lease (at most every limit's max).
    pub size: u64,
    /// The lease's length in ms (`LEASE ms`).
    pub duration_ms: u64,
    pub clock: Clock,
    /// Lease only while the traffic fills a lease within its duration: calls go exact until
    /// `size` of them arrive within `duration_ms`, and go back to exact when a lease ends with
    /// permits unused. Off: every call that finds no live lease asks for one.
    pub when_busy: bool,
    /// `PRECISION p` on every call (lease or exact); `None` leaves it out.
    pub precision: Option<u64>,
    /// With [`Clock::Server`]: this host's clock and the server's never disagree by more than
    /// this many ms (NTP), so a lease hands out permits until this host's clock reads the
    /// server's `now + ms` less it, rather than only until `ms` after its call was sent. For a
    /// server far away: a round trip of 80 ms leaves a lease of 100 ms usable for 20 ms the
    /// default way, 60 ms less the bound this way. Wrong if the clocks disagree by more: a
    /// permit may then be handed out after its lease's end. `None` (the default): the default
    /// way, exact whatever the clocks read.
    pub synced_within: Option<u64>,
    pub(super) on_refund: Option<RefundHook>,
}

impl LeaseConfig {
    /// `size` permits for `duration_ms`, on the server's clock, always leasing.
    pub fn new(size: u64, duration_ms: u64) -> LeaseConfig {
        LeaseConfig {
            size,
            duration_ms,
            clock: Clock::Server,
            when_busy: false,
            precision: None,
            synced_within: None,
            on_refund: None,
        }
    }

    pub(crate) fn refund_hook(&self) -> Option<&RefundHook> {
        self.on_refund.as_ref()
    }

    /// Calls `hook` with each key after permits went back to it with REFUND (unused ones at a
    /// lease's end or on close, or one given back): a caller that remembers refusals (a deny
    /// cache) can forget those the permits may have caused.
    pub fn on_refund(mut self, hook: RefundHook) -> LeaseConfig {
        self.on_refund = Some(hook);
        self
    }
}

setters!(LeaseConfig {
    clock: Clock,
    when_busy: bool,
    /// `PRECISION p` on every call: members logged at a multiple of `p` ms, so that a busy key
    /// holds a bounded number of distinct scores; each request may count up to `p` ms longer.
    precision: Option<u64>,
    /// See [`LeaseConfig::synced_within`].
    synced_within: Option<u64>,
});
