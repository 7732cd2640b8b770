//! One request's settlement across its keys, as both services make it: permits from the leases
//! of its busy keys first (a key whose lease call is in flight is waited for, the permits held
//! meanwhile given back), then the exact calls' charges recorded as they are admitted, all or
//! none: a request not admitted after all, or one whose permit turns out late (its lease ended
//! at or before an exact call's `now`), gives every permit back and refunds every charge at the
//! score it was logged at.

use crate::{Batch, Client, Error, LeaseMap, LeaseReply, Limit, Pending, Refund, Take, late};
use std::time::Instant;

/// A key of a request that may take a permit from a lease.
#[derive(Clone, Copy)]
pub struct Leasable<'a> {
    /// Where the key is in the request (the caller's numbering, which the ledger answers in).
    pub index: usize,
    pub map: &'a LeaseMap,
    pub key: &'a [u8],
    pub limits: &'a [Limit],
}

/// What a lease that refuses from memory does to its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRefusal {
    /// The request is refused, without a call ([`Pass::Refused`]).
    Refuse,
    /// The key goes in the request's exact call, whose reply says why.
    Exact,
}

/// A permit a request holds: key `index`'s, from `map`.
pub struct Permit {
    pub index: usize,
    pub reply: LeaseReply,
    map: LeaseMap,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("index", &self.index)
            .field("reply", &self.reply)
            .finish_non_exhaustive()
    }
}

/// One pass over a request's leasable keys ([`Ledger::try_take`]).
pub enum Pass {
    /// A permit from every key that has one in memory (the others go in the exact calls).
    Taken,
    /// Key `index`'s lease call is in flight.
    Wait(usize, Pending),
    /// Key `index`'s lease refuses from memory ([`OnRefusal::Refuse`]).
    Refused(usize, LeaseReply),
    Failed(Error),
}

/// Why [`Ledger::take`] took no permits: every permit taken went back first.
pub enum Stopped {
    /// Key `index`'s lease refuses from memory ([`OnRefusal::Refuse`]).
    Refused(usize, LeaseReply),
    Failed(Error),
    /// A lease call was still in flight at the deadline.
    TimedOut,
}

/// An exact call's charge on one key: logged at `now_ms` (rounded up to `precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Charged {
    index: usize,
    /// The exact call that charged it (one call's keys share a cluster slot).
    call: usize,
    now_ms: u64,
    cost: u64,
    precision: Option<u64>,
}

/// One request's permits and exact charges, until it is taken back (or kept: an admitted
/// request's ledger is what a later refund takes back).
#[derive(Debug)]
pub struct Ledger {
    /// Who logs a permit that could not be given back (`"gateway"`).
    who: &'static str,
    permits: Vec<Permit>,
    charges: Vec<Charged>,
    /// Keys whose lease refused while it was waited for: they go in the exact calls.
    exact: Vec<usize>,
}

impl Ledger {
    pub fn new(who: &'static str) -> Ledger {
        Ledger {
            who,
            permits: Vec::new(),
            charges: Vec::new(),
            exact: Vec::new(),
        }
    }

    /// One pass, without waiting: a permit from each key of `leasable` whose lease has one in
    /// memory. It stops at a key whose lease call is in flight, one refused from memory (with
    /// [`OnRefusal::Refuse`]) or an error, keeping the permits taken so far.
    pub fn try_take(&mut self, leasable: &[Leasable<'_>], refusal: OnRefusal) -> Pass {
        for l in leasable {
            if self.exact.contains(&l.index) || self.holds(l.index) {
                continue;
            }
            match l.map.try_take(l.key, l.limits, None) {
                Ok(Take::Permit(reply)) => self.permits.push(Permit {
                    index: l.index,
                    reply,
                    map: l.map.clone(),
                }),
                Ok(Take::Exact) => {}
                Ok(Take::Refused(r)) => match refusal {
                    OnRefusal::Refuse => return Pass::Refused(l.index, r),
                    OnRefusal::Exact => {}
                },
                Ok(Take::Wait(w)) => return Pass::Wait(l.index, w),
                Err(e) => return Pass::Failed(e),
            }
        }
        Pass::Taken
    }

    /// The permits of `leasable`, going on from `pass` (one [`Ledger::try_take`] made). A key
    /// whose lease call is in flight is waited for until `deadline`, every permit given back
    /// first (a permit is only good until its lease's end: none is held while waiting); a lease
    /// refused meanwhile (or granted too late to use) puts its key in the exact calls.
    pub async fn take(
        &mut self,
        leasable: &[Leasable<'_>],
        refusal: OnRefusal,
        deadline: Instant,
        mut pass: Pass,
    ) -> Result<(), Stopped> {
        let key = |i: usize| leasable.iter().find(|l| l.index == i).map(|l| l.key);
        loop {
            let (index, wait) = match pass {
                Pass::Taken => return Ok(()),
                Pass::Failed(e) => {
                    Box::pin(self.give_back(key)).await;
                    return Err(Stopped::Failed(e));
                }
                Pass::Refused(index, r) => {
                    Box::pin(self.give_back(key)).await;
                    return Err(Stopped::Refused(index, r));
                }
                Pass::Wait(index, w) => {
                    Box::pin(self.give_back(key)).await;
                    (index, w)
                }
            };
            match tokio::time::timeout_at(deadline.into(), wait.wait()).await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => self.exact.push(index),
                Ok(Err(e)) => return Err(Stopped::Failed(e)),
                Err(_) => return Err(Stopped::TimedOut),
            }
            pass = self.try_take(leasable, refusal);
        }
    }

    /// The permits held, in the order they were taken.
    pub fn permits(&self) -> &[Permit] {
        &self.permits
    }

    /// Whether key `index` holds a permit.
    pub fn holds(&self, index: usize) -> bool {
        self.permits.iter().any(|p| p.index == index)
    }

    /// Records that exact call number `call` (one call's keys share a cluster slot) charged key
    /// `index` `cost`, logged at `now_ms` (its `now`, rounded up to `precision`).
    pub fn charged(
        &mut self,
        index: usize,
        call: usize,
        now_ms: u64,
        cost: u64,
        precision: Option<u64>,
    ) {
        self.charges.push(Charged {
            index,
            call,
            now_ms,
            cost,
            precision,
        });
    }

    /// Each exact charge: the key's index and the `now` it was logged at.
    pub fn charges(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.charges.iter().map(|c| (c.index, c.now_ms))
    }

    /// The latest `now` of the exact charges (None: no exact charge).
    pub fn latest(&self) -> Option<u64> {
        self.charges.iter().map(|c| c.now_ms).max()
    }

    /// Whether a permit was handed out too late for the request (see [`late`]): the request is
    /// then taken back ([`Ledger::undo`]) and decided again by exact calls alone.
    pub fn late(&self) -> bool {
        late(self.permits.iter().map(|p| &p.reply), self.latest())
    }

    /// Adds `REFUND key cost AT score` to `batch` for each exact charge of a key `which` keeps,
    /// `score` the one it was logged at; `key` names each index's key.
    pub fn refunds<'k>(
        &self,
        batch: &mut Batch,
        which: impl Fn(usize) -> bool,
        key: impl Fn(usize) -> Option<&'k [u8]>,
    ) -> Result<(), Error> {
        refunds(batch, self.charges.iter().filter(|c| which(c.index)), key)
    }

    /// Forgets the exact charges of the keys `which` keeps (taken back by the caller's batch).
    pub fn forget(&mut self, which: impl Fn(usize) -> bool) {
        self.charges.retain(|c| !which(c.index));
    }

    /// Gives every permit back into its lease (no call while the lease is live); one that could
    /// not be is logged.
    pub async fn give_back<'k>(&mut self, key: impl Fn(usize) -> Option<&'k [u8]>) {
        let mut permits = std::mem::take(&mut self.permits);
        let mut back = Vec::with_capacity(permits.len());
        for p in permits.iter_mut() {
            let Permit { index, reply, map } = p;
            if let (Some(charge), Some(k)) = (reply.charge.take(), key(*index)) {
                back.push((&*map, k, charge));
            }
        }
        if let Err(e) = crate::give_back_all(back).await {
            eprintln!(
                "{}: a lease's permit could not be given back: {e}",
                self.who
            );
        }
    }

    /// Takes the whole request back: every permit given back, then each exact call's charges
    /// refunded at their logged scores, a `batch()` (pipeline or transaction) a call. Every
    /// refund is tried; the first error is answered. The ledger is empty after it.
    pub async fn undo<'k>(
        &mut self,
        client: &Client,
        batch: fn() -> Batch,
        key: impl Fn(usize) -> Option<&'k [u8]> + Copy,
    ) -> Result<(), Error> {
        Box::pin(self.give_back(key)).await;
        let charges = std::mem::take(&mut self.charges);
        let mut calls: Vec<usize> = charges.iter().map(|c| c.call).collect();
        calls.sort_unstable();
        calls.dedup();
        let mut first = Ok(());
        for call in calls {
            let mut b = batch();
            let sent = match refunds(&mut b, charges.iter().filter(|c| c.call == call), key) {
                Ok(()) => client.exec(&b).await,
                Err(e) => Err(e),
            };
            if let Err(e) = sent.and_then(|a| a.into_iter().try_for_each(|a| a.map(drop)))
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }
}

/// `REFUND key cost AT score` for each of `charges`, `score` the one it was logged at.
fn refunds<'a, 'k>(
    batch: &mut Batch,
    charges: impl Iterator<Item = &'a Charged>,
    key: impl Fn(usize) -> Option<&'k [u8]>,
) -> Result<(), Error> {
    for c in charges {
        if let Some(k) = key(c.index) {
            batch.refund(&Refund::logged(k, c.cost, c.now_ms, c.precision))?;
        }
    }
    Ok(())
}
