//! Test builds only (`panic-test`): a panic armed at a named point of the next call, to prove
//! that a contained panic still leaves replicas and the AOF with exactly the master's data, and
//! that one during a save stops the server instead of writing a truncated value.

use std::sync::atomic::{AtomicU8, Ordering};

/// Where the armed panic fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// Right after the log was trimmed.
    AfterTrim = 1,
    /// Right after the request's members were added.
    AfterAdd = 2,
    /// Half-way through writing a compact log into an RDB (after its count, before its bytes).
    RdbSave = 3,
}

static ARMED: AtomicU8 = AtomicU8::new(0);

/// Arms a panic for the next time a call reaches `point`.
pub fn arm(point: Point) {
    ARMED.store(point as u8, Ordering::Relaxed);
}

/// Panics (once) if a panic is armed at `point`.
pub fn hit(point: Point) {
    if ARMED
        .compare_exchange(point as u8, 0, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
    {
        std::panic::panic_any(format!("slidingwindow: a deliberate panic at {point:?}"));
    }
}
