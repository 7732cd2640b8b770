//! Redis failures on stderr: at most one line a second, with the count of those not reported,
//! and the recovery once.

use crate::config::OnRedisError;
use std::fmt::Display;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct ErrorLog {
    last: Mutex<Option<Instant>>,
    unreported: AtomicU64,
    failing: AtomicBool,
}

impl ErrorLog {
    pub fn failed(&self, err: &dyn Display, mode: OnRedisError) {
        self.failing.store(true, Ordering::Relaxed);
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            self.unreported.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(Instant::now());
        let more = self.unreported.swap(0, Ordering::Relaxed);
        let action = match mode {
            OnRedisError::Open => "letting requests through unlimited",
            OnRedisError::Closed => "answering 503",
        };
        eprintln!(
            "gateway: redis failed, {action} ({more} more failures since the last report): {err}"
        );
    }

    pub fn succeeded(&self) {
        // A plain load first: the common case writes nothing to the line all workers share.
        if self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed) {
            eprintln!("gateway: redis answers again");
        }
    }
}
