//! A limit (at most `max` in any window of whole seconds) and the time a call is decided at, with
//! the contract's ranges.

use crate::error::Error;
use std::time::Duration;

/// The contract's ranges, declared once in the module's pure logic (crate `slidingwindow-core`).
pub use slidingwindow_core::error::{MAX_EXACT, MAX_KEYS, MAX_LIMITS, MAX_WINDOW_SECONDS};

/// The score an admitted call's members are logged at: `s` (its `now`, or `now + ms` with
/// `LEASE`) rounded up to a multiple of `precision` (contract, "Coarse times"). A refund of such a
/// call passes this as its `AT`.
pub fn logged_score(s: u64, precision: Option<u64>) -> u64 {
    match precision {
        Some(p) if p > 1 => s.div_ceil(p).saturating_mul(p),
        _ => s,
    }
}

/// At most `max` requests (weighted by cost) in any window of `window_s` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    window_s: u64,
    max: u64,
}

impl Limit {
    /// `1 <= window_s <= 2^53 / 1000` and `1 <= max <= 2^53`.
    pub fn new(window_s: u64, max: u64) -> Result<Limit, Error> {
        if !(1..=MAX_WINDOW_SECONDS).contains(&window_s) {
            return Err(Error::Invalid(format!(
                "window must be between 1 and {MAX_WINDOW_SECONDS} seconds (window * 1000 <= 2^53), not {window_s}"
            )));
        }
        if !(1..=MAX_EXACT).contains(&max) {
            return Err(Error::Invalid(format!(
                "max must be between 1 and {MAX_EXACT}, not {max}"
            )));
        }
        Ok(Limit { window_s, max })
    }

    /// A window given as a duration: it must be a whole number of seconds.
    pub fn per(window: Duration, max: u64) -> Result<Limit, Error> {
        if window.subsec_nanos() != 0 {
            return Err(Error::Invalid(format!(
                "window must be a whole number of seconds, not {window:?}"
            )));
        }
        Limit::new(window.as_secs(), max)
    }

    pub fn window_s(&self) -> u64 {
        self.window_s
    }

    pub fn window_ms(&self) -> u64 {
        self.window_s * 1000
    }

    pub fn max(&self) -> u64 {
        self.max
    }
}

/// The `now` of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Now {
    /// `*`: the server's clock, read when the call runs. Exact under any concurrency.
    #[default]
    Server,
    /// The caller's clock, Unix ms (`0..=2^53`).
    Ms(u64),
}

impl Now {
    pub(crate) fn check(self, what: &str) -> Result<Now, Error> {
        match self {
            Now::Ms(t) if t > MAX_EXACT => Err(Error::Invalid(format!(
                "{what} must be between 0 and {MAX_EXACT} ms, or the server's clock, not {t}"
            ))),
            ok => Ok(ok),
        }
    }
}

/// The caller's clock in Unix ms (0 before 1970, saturating far ahead).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(
            Limit::new(1, 1).map(|l| (l.window_s(), l.max())).ok(),
            Some((1, 1))
        );
        let top = Limit::new(MAX_WINDOW_SECONDS, MAX_EXACT).ok();
        assert_eq!(top.map(|l| l.window_ms()), Some(9_007_199_254_740_000));
        for (w, m) in [
            (0, 1),
            (1, 0),
            (MAX_WINDOW_SECONDS + 1, 1),
            (1, MAX_EXACT + 1),
        ] {
            assert!(
                matches!(Limit::new(w, m), Err(Error::Invalid(_))),
                "{w} {m}"
            );
        }
    }

    #[test]
    fn windows_are_whole_seconds() {
        assert_eq!(
            Limit::per(Duration::from_secs(60), 100).ok(),
            Limit::new(60, 100).ok()
        );
        for bad in [
            Duration::from_millis(1500),
            Duration::from_millis(999),
            Duration::ZERO,
        ] {
            let e = Limit::per(bad, 1).err().map(|e| e.to_string());
            assert!(e.is_some_and(|e| e.contains("second")), "{bad:?}");
        }
    }

    #[test]
    fn now_ranges() {
        assert_eq!(
            Now::Ms(MAX_EXACT).check("now").ok(),
            Some(Now::Ms(MAX_EXACT))
        );
        assert_eq!(Now::Server.check("now").ok(), Some(Now::Server));
        let e = Now::Ms(MAX_EXACT + 1)
            .check("AT")
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.starts_with("invalid request: AT ")));
    }
}
