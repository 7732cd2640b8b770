//! Failures of something a program depends on (Redis, an upstream), on stderr without flooding
//! it: at most one line per interval with the count of failures left out since the last line,
//! and one line when calls succeed again with the count left out until then.

use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

type Sink = Box<dyn Fn(&str) + Send + Sync>;

pub struct ErrorLog {
    program: String,
    what: String,
    interval: Duration,
    state: Mutex<State>,
    /// Read first on every success: the common case writes nothing shared.
    failing: AtomicBool,
    sink: Sink,
}

#[derive(Default)]
struct State {
    last: Option<Instant>,
    unreported: u64,
}

impl ErrorLog {
    /// Lines `<program>: <what> failed, ...` and `<program>: <what> answers again ...` on stderr,
    /// one failure line a second at most.
    pub fn new(program: &str, what: &str) -> ErrorLog {
        ErrorLog {
            program: program.to_string(),
            what: what.to_string(),
            interval: Duration::from_secs(1),
            state: Mutex::default(),
            failing: AtomicBool::new(false),
            sink: Box::new(|line| eprintln!("{line}")),
        }
    }

    pub fn interval(mut self, d: Duration) -> ErrorLog {
        self.interval = d;
        self
    }

    /// Lines go to `sink` instead of stderr.
    pub fn sink(mut self, sink: impl Fn(&str) + Send + Sync + 'static) -> ErrorLog {
        self.sink = Box::new(sink);
        self
    }

    /// A call failed; `action` says what the program does about it ("answering 503").
    pub fn failed(&self, action: &str, err: &dyn Display) {
        if let Some(line) = self.failure_line(Instant::now(), action, err) {
            (self.sink)(&line);
        }
    }

    /// A call succeeded: one line if the previous one failed.
    pub fn succeeded(&self) {
        if let Some(line) = self.recovery_line() {
            (self.sink)(&line);
        }
    }

    fn failure_line(&self, at: Instant, action: &str, err: &dyn Display) -> Option<String> {
        self.failing.store(true, Ordering::Relaxed);
        let mut s = self.lock();
        if s.last
            .is_some_and(|t| at.saturating_duration_since(t) < self.interval)
        {
            s.unreported += 1;
            return None;
        }
        s.last = Some(at);
        let more = std::mem::take(&mut s.unreported);
        Some(format!(
            "{}: {} failed, {action} ({more} more failures since the last report): {err}",
            self.program, self.what
        ))
    }

    fn recovery_line(&self) -> Option<String> {
        if !(self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed)) {
            return None;
        }
        let more = std::mem::take(&mut self.lock().unreported);
        Some(format!(
            "{}: {} answers again ({more} more failures since the last report)",
            self.program, self.what
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change under the lock is one step: the state is whole whatever a panic did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_line_per_interval_and_the_count_on_recovery() {
        let log = ErrorLog::new("gateway", "redis");
        let t0 = Instant::now();
        let fail =
            |ms: u64| log.failure_line(t0 + Duration::from_millis(ms), "answering 503", &"refused");
        assert_eq!(
            fail(0).as_deref(),
            Some(
                "gateway: redis failed, answering 503 (0 more failures since the last report): refused"
            )
        );
        assert_eq!(fail(10), None);
        assert_eq!(fail(999), None);
        assert_eq!(
            fail(1000).as_deref(),
            Some(
                "gateway: redis failed, answering 503 (2 more failures since the last report): refused"
            )
        );
        assert_eq!(fail(1500), None);
        assert_eq!(
            log.recovery_line().as_deref(),
            Some("gateway: redis answers again (1 more failures since the last report)")
        );
        assert_eq!(log.recovery_line(), None, "once");
        // The next failure within the interval of the last line is counted, and told on recovery.
        assert_eq!(fail(1600), None);
        assert_eq!(
            log.recovery_line().as_deref(),
            Some("gateway: redis answers again (1 more failures since the last report)")
        );
        assert_eq!(
            fail(2000).as_deref(),
            Some(
                "gateway: redis failed, answering 503 (0 more failures since the last report): refused"
            )
        );
    }

    #[test]
    fn lines_go_to_the_sink() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let got = lines.clone();
        let log = ErrorLog::new("svc", "upstream")
            .interval(Duration::from_secs(3600))
            .sink(move |l| got.lock().unwrap().push(l.to_string()));
        log.succeeded();
        for _ in 0..3 {
            log.failed("answering 502", &"connect: refused");
        }
        log.succeeded();
        log.succeeded();
        assert_eq!(
            *lines.lock().unwrap(),
            [
                "svc: upstream failed, answering 502 (0 more failures since the last report): connect: refused",
                "svc: upstream answers again (2 more failures since the last report)"
            ]
        );
    }
}
