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
