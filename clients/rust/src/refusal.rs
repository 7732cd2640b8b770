//! The refusal a lease object remembers (see [`crate::Lease`]): a refused lease call or exact
//! call, kept until its `retry_after_ms`, so that a full key answers its requests from memory
//! rather than with one Redis call each. Answering from memory only ever refuses: it never
//! admits more than the calls it saves would have.

use crate::reply::{Reply, RetryAfter};
use std::time::Instant;

/// A refusal and what is left of it.
pub(crate) struct Refusal {
    /// Until then (the reply's `retry_after_ms` after it came).
    until: Instant,
    /// When the reply came, and the time its call was decided at (the `now` sent, or DETAIL's).
    at: Instant,
    at_ms: u64,
    reply: Reply,
    /// Exact calls still to be let through meanwhile: the room the refused lease call saw
    /// (fewer permits than a lease). 0 for an exact call's refusal.
    budget: u64,
}

impl Refusal {
    /// A refusal to remember, from `reply` (decided at `at_ms`, answered at `at`). `None` for an
    /// admission and for a refusal that never fits (`-1`: the caller's error, not a wait).
    pub(crate) fn new(reply: &Reply, at_ms: u64, at: Instant) -> Option<Refusal> {
        let wait = match reply.retry_after {
            _ if reply.allowed => return None,
            RetryAfter::Never => return None,
            RetryAfter::Ms(ms) => ms,
        };
        let until = at.checked_add(std::time::Duration::from_millis(wait))?;
        Some(Refusal {
            until,
            at,
            at_ms,
            reply: Reply {
                detail: None,
                ..reply.clone()
            },
            budget: reply.remaining,
        })
    }

    /// Still to be answered from (not yet past its retry time).
    pub(crate) fn live(&self, now: Instant) -> bool {
        now < self.until
    }

    /// One of the exact calls the refused lease's room allows, if any is left.
    pub(crate) fn spend(&mut self) -> bool {
        let some = self.budget > 0;
        self.budget = self.budget.saturating_sub(1);
        some
    }

    /// Its retry time.
    pub(crate) fn until(&self) -> Instant {
        self.until
    }

    /// Kept until `until` if that is later than its retry time.
    pub(crate) fn extend(&mut self, until: Instant) {
        self.until = self.until.max(until);
    }

    /// The room left for exact calls, all of it, for one lease call instead.
    pub(crate) fn take_room(&mut self) -> u64 {
        std::mem::take(&mut self.budget)
    }

    /// The refusal as seen at `now`: the room the exact calls used is counted, the waits count
    /// down. Decided at `at_ms` plus the time since.
    pub(crate) fn answer(&self, now: Instant) -> (Reply, u64) {
        let since = ms_between(self.at, now);
        let used = self.reply.remaining - self.budget;
        let up = self.until.saturating_duration_since(now);
        let retry = u64::try_from(up.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
        let reply = Reply {
            allowed: false,
            count: self.reply.count + used,
            remaining: self.reply.remaining - used,
            retry_after: RetryAfter::Ms(retry),
            reset_after_ms: self.reply.reset_after_ms.saturating_sub(since),
            limit: self.reply.limit,
            detail: None,
        };
        (reply, self.at_ms + since)
    }
}

pub(crate) fn ms_between(from: Instant, to: Instant) -> u64 {
    u64::try_from(to.saturating_duration_since(from).as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn refused(remaining: u64, retry: u64) -> Reply {
        Reply {
            allowed: false,
            count: 100 - remaining,
            remaining,
            retry_after: RetryAfter::Ms(retry),
            reset_after_ms: 1000,
            limit: 0,
            detail: None,
        }
    }

    #[test]
    fn kept_until_its_retry_time_and_counted_down() {
        let at = Instant::now();
        let r = Refusal::new(&refused(0, 300), 5000, at).unwrap();
        let later = at + Duration::from_millis(100);
        assert!(r.live(later));
        let (reply, at_ms) = r.answer(later);
        assert_eq!(at_ms, 5100);
        assert!(!reply.allowed);
        assert_eq!((reply.count, reply.remaining), (100, 0));
        assert_eq!(reply.retry_after, RetryAfter::Ms(200));
        assert_eq!(reply.reset_after_ms, 900);
        assert!(!r.live(at + Duration::from_millis(300)));
    }

    #[test]
    fn the_lease_refusals_room_lets_that_many_exact_calls_through() {
        let at = Instant::now();
        let mut r = Refusal::new(&refused(3, 300), 0, at).unwrap();
        assert!(r.spend() && r.spend() && r.spend());
        assert!(!r.spend());
        let (reply, _) = r.answer(at);
        assert_eq!((reply.count, reply.remaining), (100, 0));
    }

    #[test]
    fn admissions_and_never_are_not_remembered() {
        let at = Instant::now();
        let admitted = Reply {
            allowed: true,
            ..refused(5, 0)
        };
        assert!(Refusal::new(&admitted, 0, at).is_none());
        let never = Reply {
            retry_after: RetryAfter::Never,
            ..refused(0, 0)
        };
        assert!(Refusal::new(&never, 0, at).is_none());
    }
}
