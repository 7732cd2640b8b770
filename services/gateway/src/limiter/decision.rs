//! A request's answer for its binding limit, and the limits' names in the headers.

use crate::config::Limit;
use crate::deny_cache::Refusal;
use slidingwindow_client::Reply;
use std::time::Instant;

/// A limit and the name the headers give it: `l<i>` for the identity's, `t<i>` for the tenant's,
/// `g<i>` for the global ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub name: String,
    pub limit: Limit,
}

/// The reply, for the binding limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub remaining: i64,
    pub retry_after_ms: i64,
    pub reset_after_ms: i64,
    /// Index of the binding limit.
    pub limit: usize,
}

impl From<&Reply> for Decision {
    fn from(r: &Reply) -> Decision {
        Decision {
            allowed: r.allowed,
            remaining: i64::try_from(r.remaining).unwrap_or(i64::MAX),
            retry_after_ms: r.retry_after.as_i64(),
            reset_after_ms: i64::try_from(r.reset_after_ms).unwrap_or(i64::MAX),
            limit: r.limit,
        }
    }
}

impl Decision {
    /// A refusal remembered at `at`, seen at `now`.
    pub(super) fn cached(r: &Refusal, now: Instant) -> Decision {
        let ms_up = |t: Instant| {
            let d = t.saturating_duration_since(now);
            i64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
        };
        Decision {
            allowed: false,
            remaining: 0,
            retry_after_ms: ms_up(r.until),
            reset_after_ms: ms_up(r.reset_at),
            limit: r.limit,
        }
    }

    /// Two parts of one request's answer as one: the binding limit is the one with less left,
    /// and the wait is the longer.
    pub(super) fn and(self, other: Decision) -> Decision {
        let retry_after_ms = if self.retry_after_ms < 0 || other.retry_after_ms < 0 {
            -1
        } else {
            self.retry_after_ms.max(other.retry_after_ms)
        };
        // A part that refused binds before one that admitted; then the least remaining, then
        // the longer wait.
        let rank = |d: &Decision| (d.allowed, d.remaining, std::cmp::Reverse(d.retry_after_ms));
        let binding = if rank(&other) < rank(&self) {
            other
        } else {
            self
        };
        Decision {
            allowed: self.allowed && other.allowed,
            retry_after_ms,
            ..binding
        }
    }
}
