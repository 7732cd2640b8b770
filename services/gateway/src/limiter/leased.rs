//! The leases' side of a request: its busy shared keys as the ledger takes permits from them
//! (waited for when a lease call is in flight, given back when the request is not admitted), and
//! the part of its answer those permits give.

use super::{Decision, Keys, Limiter, REQUEST_DEADLINE, SHARED, Verdict};
use slidingwindow_client::{Leasable, LeaseMap, Ledger, OnRefusal, Pass, Stopped};
use std::time::Instant;

impl Limiter {
    /// The part of a request's answer its leases' permits give.
    pub(super) fn leased_decision(&self, ledger: &Ledger) -> Option<Decision> {
        let mut decision: Option<Decision> = None;
        for p in ledger.permits() {
            let mut d = Decision::from(&p.reply.reply);
            d.limit += self.offsets[p.index];
            decision = Some(decision.map_or(d, |prev| prev.and(d)));
        }
        decision
    }

    /// The request's shared keys that may take a permit from `map` (the first `n` of them).
    fn leasable<'a>(&'a self, map: &'a LeaseMap, keys: &'a Keys) -> ([Leasable<'a>; 2], usize) {
        let none = Leasable {
            index: 0,
            map,
            key: &[],
            limits: &[],
        };
        let mut leasable = [none; 2];
        let mut n = 0;
        for p in SHARED {
            if let Some(key) = keys.get(p) {
                leasable[n] = Leasable {
                    index: p as usize,
                    map,
                    key,
                    limits: self.limits_of(p),
                };
                n += 1;
            }
        }
        (leasable, n)
    }

    /// One pass over the busy shared keys' leases, without waiting.
    pub(super) fn try_leases(&self, keys: &Keys, ledger: &mut Ledger) -> Pass {
        let Some(map) = &self.leases else {
            return Pass::Taken;
        };
        let (leasable, n) = self.leasable(map, keys);
        ledger.try_take(&leasable[..n], OnRefusal::Refuse)
    }

    /// A permit from the lease of each busy shared key, going on from `pass`. A key whose lease
    /// call is in flight is waited for (within the request's deadline), and every permit taken
    /// meanwhile goes back first (a permit is only good until its lease's end: none is held while
    /// waiting). A key refused from memory refuses the request, without a call.
    pub(super) async fn take_leased(
        &self,
        keys: &Keys,
        deadline: Instant,
        ledger: &mut Ledger,
        pass: Pass,
    ) -> Result<(), Verdict> {
        let Some(map) = &self.leases else {
            return Ok(());
        };
        let (leasable, n) = self.leasable(map, keys);
        match ledger
            .take(&leasable[..n], OnRefusal::Refuse, deadline, pass)
            .await
        {
            Ok(()) => Ok(()),
            Err(Stopped::Failed(e)) => Err(self.error(&e)),
            Err(Stopped::Refused(index, r)) => {
                let mut d = Decision::from(&r.reply);
                d.limit += self.offsets[index];
                Err(Verdict::Refuse(d))
            }
            Err(Stopped::TimedOut) => {
                Err(self.failed(&format_args!("no lease within {REQUEST_DEADLINE:?}")))
            }
        }
    }
}
