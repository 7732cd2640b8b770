//! What a lease object hands out: a permit's source and charge, a take's outcome, the reply.

use super::Round;
use crate::error::Error;
use crate::reply::Reply;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::watch;

/// Where a permit came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// From a lease, without a call.
    Memory,
    /// One exact ALLOW of its own (no lease, or a lease refused).
    Exact,
}

/// What a permit cost, to give it back (see [`Lease::give_back`](super::Lease::give_back)).
#[derive(Debug, PartialEq, Eq)]
pub struct Charge {
    pub(super) kind: ChargeKind,
}

impl Charge {
    /// An exact call's charge, its members logged at `at_ms` (rounded by any `PRECISION`).
    pub(crate) fn exact(at_ms: u64) -> Charge {
        Charge {
            kind: ChargeKind::Exact { at_ms },
        }
    }

    /// The score its permit is logged at (a lease's end, or the exact call's `now`, each rounded
    /// up to a multiple of the object's `PRECISION` if it has one).
    pub fn logged_at(&self) -> u64 {
        match self.kind {
            ChargeKind::Lease { logged_ms, .. } => logged_ms,
            ChargeKind::Exact { at_ms } => at_ms,
        }
    }
}

/// Grant ids are unique in the process, so that a charge never matches another object's lease
/// (a lease map replaces objects).
pub(super) static NEXT_GRANT: AtomicU64 = AtomicU64::new(0);

/// What [`Lease::try_take`](super::Lease::try_take) found.
pub enum Take {
    /// A permit from memory.
    Permit(LeaseReply),
    /// A lease call is in flight (perhaps started by this call): wait for it, then try again.
    Wait(Pending),
    /// Make an exact call of your own: the key is quiet (`when_busy`), a lease was refused with
    /// room for some requests still, or the object is closed.
    Exact,
    /// Refused from memory, without a call: a refusal remembered until its retry time.
    Refused(LeaseReply),
}

/// The lease call a [`Take::Wait`] waits for.
pub struct Pending {
    pub(super) rx: watch::Receiver<Option<Round>>,
    /// Counts the callers that come back to the object after their wait (`Ok(true)`), so that
    /// the object tells them from new callers.
    pub(super) back: Arc<AtomicU64>,
}

impl Pending {
    /// Until the lease call has answered: `Ok(true)` if it was granted or refused (try again:
    /// the object then answers from what it learned), `Ok(false)` if the caller should make an
    /// exact call (granted too late to use, or closed), the call's error if it failed.
    pub async fn wait(mut self) -> Result<bool, Error> {
        // A round that ended without a word (its task was dropped): go exact.
        match self
            .rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|r| r.clone())
        {
            Some(Round::Granted | Round::Refused) => {
                self.back.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Some(Round::Failed(e)) => Err(e),
            Some(Round::Exact) | None => Ok(false),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChargeKind {
    /// Logged at `logged_ms` by lease `id`.
    Lease { id: u64, logged_ms: u64 },
    /// Logged at `at_ms` by an exact call.
    Exact { at_ms: u64 },
}

/// Settling a request charged partly from leases and partly by exact calls: whether one of its
/// `permits` was handed out too late for it, its lease having ended (its permits logged) at or
/// before `exact_now_ms`, the latest `now` of the request's exact calls (None: no exact call).
/// Such a request is undone and decided again by exact calls alone.
pub fn late<'a>(
    permits: impl IntoIterator<Item = &'a LeaseReply>,
    exact_now_ms: Option<u64>,
) -> bool {
    let Some(now) = exact_now_ms else {
        return false;
    };
    permits
        .into_iter()
        .filter_map(|r| r.charge.as_ref())
        .any(|c| c.logged_at() <= now)
}

/// The answer to one request: the same typed reply as a plain ALLOW.
#[derive(Debug)]
pub struct LeaseReply {
    /// From memory: admitted, with the lease's reply counted down (`count` and `remaining` as an
    /// exact call would say if nothing else had happened since the lease, `reset_after_ms` less
    /// the time since: with [`Clock::Own`](super::Clock::Own), `at_ms` less the lease's `now`).
    /// Never with `detail`.
    pub reply: Reply,
    /// When it was decided: the caller's clock reading (memory) or the `now` sent (exact); with
    /// `*`, the server's `now` (exact) or the lease's `now` plus the time since its call was sent,
    /// an upper bound of the server's clock (memory).
    pub at_ms: u64,
    pub source: Source,
    /// Set when admitted.
    pub charge: Option<Charge>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::RetryAfter;

    fn permit(logged_ms: u64) -> LeaseReply {
        LeaseReply {
            reply: Reply {
                allowed: true,
                count: 1,
                remaining: 0,
                retry_after: RetryAfter::Ms(0),
                reset_after_ms: 0,
                limit: 0,
                detail: None,
            },
            at_ms: 0,
            source: Source::Memory,
            charge: Some(Charge {
                kind: ChargeKind::Lease { id: 1, logged_ms },
            }),
        }
    }

    #[test]
    fn a_permit_is_late_for_an_exact_call_at_or_after_its_leases_end() {
        let permits = [permit(100), permit(200)];
        assert!(!late(&permits, None));
        assert!(!late(&permits, Some(99)));
        assert!(late(&permits, Some(100)));
        assert!(late(&permits[1..], Some(200)));
        assert!(!late(&permits[1..], Some(199)));
        let refused = LeaseReply {
            charge: None,
            ..permit(0)
        };
        assert!(!late([&refused], Some(1)));
    }
}
