//! Redis failures on stderr: at most one line a second (with the count not reported), and one
//! line when Redis answers again.

use crate::cli::OnRedisError;
use redis::RedisError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Failures {
    last: Mutex<Option<Instant>>,
    unreported: AtomicU64,
    failing: AtomicBool,
}

impl Failures {
    pub fn failed(&self, err: &RedisError, mode: OnRedisError) {
        self.failing.store(true, Ordering::Relaxed);
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            self.unreported.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(Instant::now());
        let more = self.unreported.swap(0, Ordering::Relaxed);
        let action = match mode {
            OnRedisError::Open => "answering OK",
            OnRedisError::Closed => "answering OVER_LIMIT",
        };
        eprintln!(
            "envoy-ratelimit: redis failed, {action} ({more} more since the last report): {err}"
        );
    }

    pub fn succeeded(&self) {
        // A plain load first: the common case writes nothing to the line all workers share.
        if self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed) {
            eprintln!("envoy-ratelimit: redis answers again");
        }
    }
}
