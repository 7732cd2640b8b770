//! The leases' side of a request: a permit from each busy shared key's lease, waited for when
//! its lease call is in flight, and given back when the request is not admitted.

use super::{Attempt, Decision, Keys, Limiter, REQUEST_DEADLINE, SHARED, Verdict};
use slidingwindow_client::{LeaseMap, LeaseReply, Take};
use std::time::Instant;

impl Limiter {
    /// The part of a request's answer its leases' permits give.
    pub(super) fn leased_decision(&self, leased: &[Option<LeaseReply>; 3]) -> Option<Decision> {
        let mut decision: Option<Decision> = None;
        for p in SHARED {
            if let Some(r) = &leased[p as usize] {
                let mut d = Decision::from(&r.reply);
                d.limit += self.offsets[p as usize];
                decision = Some(decision.map_or(d, |prev| prev.and(d)));
            }
        }
        decision
    }

    /// One pass over the busy shared keys' leases (those not in `exact`).
    pub(super) fn try_leases(&self, map: &LeaseMap, keys: &Keys, exact: &[bool; 3]) -> Attempt {
        let mut taken: [Option<LeaseReply>; 3] = [None, None, None];
        for p in SHARED {
            let Some(key) = keys.get(p).filter(|_| !exact[p as usize]) else {
                continue;
            };
            match map.try_take(key, self.limits_of(p), None) {
                Ok(Take::Permit(r)) => taken[p as usize] = Some(r),
                Ok(Take::Exact) => {}
                Ok(Take::Wait(w)) => return Attempt::Wait(taken, p, w),
                Ok(Take::Refused(r)) => return Attempt::Refused(taken, p, Box::new(r)),
                Err(e) => return Attempt::Failed(taken, e),
            }
        }
        Attempt::Taken(taken)
    }

    /// A permit from the lease of each busy shared key. A key whose lease call is in flight is
    /// waited for (within the request's deadline), and every permit taken meanwhile goes back
    /// first (a permit is only good until its lease's end: none is held while waiting). A key
    /// refused from memory refuses the request, without a call.
    pub(super) async fn take_leased(
        &self,
        keys: &Keys,
        deadline: Instant,
        mut attempt: Attempt,
    ) -> Result<[Option<LeaseReply>; 3], Verdict> {
        let mut exact = [false; 3];
        loop {
            let (p, w) = match attempt {
                Attempt::Taken(taken) => return Ok(taken),
                Attempt::Failed(mut taken, e) => {
                    Box::pin(self.give_back(keys, &mut taken)).await;
                    return Err(self.error(&e));
                }
                Attempt::Refused(mut taken, p, r) => {
                    Box::pin(self.give_back(keys, &mut taken)).await;
                    let mut d = Decision::from(&r.reply);
                    d.limit += self.offsets[p as usize];
                    return Err(Verdict::Refuse(d));
                }
                Attempt::Wait(mut taken, p, w) => {
                    Box::pin(self.give_back(keys, &mut taken)).await;
                    (p, w)
                }
            };
            match tokio::time::timeout_at(deadline.into(), w.wait()).await {
                Ok(Ok(true)) => {}
                // Refused (or too late to use): this key goes in the exact call.
                Ok(Ok(false)) => exact[p as usize] = true,
                Ok(Err(e)) => return Err(self.error(&e)),
                Err(_) => {
                    return Err(self.failed(&format_args!("no lease within {REQUEST_DEADLINE:?}")));
                }
            }
            let Some(map) = &self.leases else {
                return Ok([None, None, None]);
            };
            attempt = self.try_leases(map, keys, &exact);
        }
    }

    /// Permits taken for a request that is not admitted go back (into their live lease: no call).
    pub(super) async fn give_back(&self, keys: &Keys, taken: &mut [Option<LeaseReply>; 3]) {
        let Some(map) = &self.leases else { return };
        let permits = SHARED.into_iter().filter_map(|p| {
            let charge = taken[p as usize].take().and_then(|r| r.charge)?;
            Some((map, keys.get(p)?, charge))
        });
        if let Err(e) = slidingwindow_client::give_back_all(permits).await {
            eprintln!("gateway: a lease's permit could not be given back: {e}");
        }
    }
}
