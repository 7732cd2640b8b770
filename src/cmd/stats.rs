//! `INFO slidingwindow`: the version, what the commands did since the module was loaded, the
//! compact keys alive, and the configs.

use super::config;
use crate::core::version;
use crate::core::window::Outcome;
use crate::ffi::{Loader, Report, Section};
use crate::store;
use std::sync::atomic::{AtomicU64, Ordering};

/// A count since load.
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }

    /// Commands and INFO run on the main thread only, so a plain load and store is exact, and
    /// costs the hot path no locked instruction.
    #[inline]
    pub fn add(&self, n: u64) {
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(v.wrapping_add(n), Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// ALLOW(ALL) / PEEK(ALL) calls answered with their reply array (the dispatcher counts them).
pub static ALLOW_CALLS: Counter = Counter::new();
pub static PEEK_CALLS: Counter = Counter::new();
/// REFUND calls answered with a count (the dispatcher counts them).
pub static REFUND_CALLS: Counter = Counter::new();
static REFUNDED: Counter = Counter::new();
/// Calls of any SLIDINGWINDOW command the module answered with an error.
pub static ERRORS: Counter = Counter::new();
static ADMITTED: Counter = Counter::new();
static REJECTED: Counter = Counter::new();
static ADMITTED_REQUESTS: Counter = Counter::new();
static TRIMMED: Counter = Counter::new();

/// Counts one decided ALLOW call of `cost`.
#[inline]
pub fn allow(cost: u64, outcome: &Outcome) {
    if outcome.reply.allowed {
        ADMITTED.add(1);
        ADMITTED_REQUESTS.add(cost);
    } else {
        REJECTED.add(1);
    }
    TRIMMED.add(outcome.trimmed);
}

/// Counts the members one REFUND call removed.
pub fn refund(removed: u64) {
    REFUNDED.add(removed);
}

struct Fields;

impl Report for Fields {
    fn report(s: &Section<'_>) {
        s.text(c"version", version::TEXT);
        s.uint(c"allow_calls", ALLOW_CALLS.get());
        s.uint(c"peek_calls", PEEK_CALLS.get());
        s.uint(c"admitted", ADMITTED.get());
        s.uint(c"rejected", REJECTED.get());
        s.uint(c"admitted_requests", ADMITTED_REQUESTS.get());
        s.uint(c"trimmed", TRIMMED.get());
        s.uint(c"errors", ERRORS.get());
        s.uint(c"refund_calls", REFUND_CALLS.get());
        s.uint(c"refunded", REFUNDED.get());
        // Gauges, unlike the counters: what is alive now.
        for (field, value) in store::gauges() {
            s.uint(field, value);
        }
        s.text(c"storage", store::default_storage().name());
        s.uint(c"max_members_per_call", config::max_members_per_call());
        s.uint(c"lateness", config::lateness());
        let (refusals, bytes) = super::top::gauges();
        s.uint(c"top_keys", super::top::top_keys());
        s.uint(c"top_keys_refusals", refusals);
        s.uint(c"top_keys_bytes", bytes);
    }
}

/// Makes the section above the module's INFO.
pub fn register(loader: &Loader) -> Result<(), String> {
    loader.info_func::<Fields>()
}
