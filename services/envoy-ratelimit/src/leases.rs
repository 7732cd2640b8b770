//! Our extension `lease: {size, duration_ms}`: a busy descriptor takes permits in bulk
//! (`ALLOW key ... COST size LEASE duration_ms`) and the service hands them out from memory, as
//! the HTTP gateway's `--lease` does, through the crate's lease maps (one per lease spec of the
//! config), on Redis's clock (`*` with DETAIL: no lateness needed, however many services). A
//! key is leased only while its traffic fills a lease within its duration; a quieter one keeps
//! its place in the request's one exact ALLOWALL, as does a key whose lease refuses from memory
//! (the request's statuses come from that call).

use crate::config::LeaseSpec;
use crate::plan::{Action, Mode};
use slidingwindow_client::{
    Client, Error, LeaseConfig, LeaseMap, LeaseMapConfig, LeaseReply, Limit, MapStats, Take,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long a request waits for a lease call in flight, as for its exact call.
const LEASE_WAIT: Duration = Duration::from_secs(1);

/// The lease maps of one config, one per lease spec.
#[derive(Default)]
pub struct Leases {
    maps: BTreeMap<LeaseSpec, LeaseMap>,
}

/// A permit a request took from a lease: descriptor `index`'s, from `map`.
pub struct Taken {
    pub index: usize,
    pub reply: LeaseReply,
    map: LeaseMap,
}

impl Leases {
    /// The maps for `specs`: those of `old` with the same spec are kept (their live leases go on
    /// serving), the others made. Also answers the maps of `old` no spec uses any more, for the
    /// caller to close.
    pub fn new(
        client: &Client,
        specs: &BTreeSet<LeaseSpec>,
        old: Option<&Leases>,
    ) -> Result<(Leases, Vec<LeaseMap>), Error> {
        let mut maps = BTreeMap::new();
        for &spec in specs {
            let map = match old.and_then(|o| o.maps.get(&spec)) {
                Some(m) => m.clone(),
                None => {
                    let lease = LeaseConfig::new(spec.size, spec.duration_ms)
                        .when_busy(true)
                        .precision(spec.precision);
                    let cfg = LeaseMapConfig::new(spec.size, spec.duration_ms).lease(lease);
                    LeaseMap::new(client.clone(), cfg)?
                }
            };
            maps.insert(spec, map);
        }
        let retired = old
            .map(|o| {
                o.maps
                    .iter()
                    .filter(|(spec, _)| !specs.contains(spec))
                    .map(|(_, m)| m.clone())
                    .collect()
            })
            .unwrap_or_default();
        Ok((Leases { maps }, retired))
    }

    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    /// Each lease spec's map statistics, for `/metrics`.
    pub fn stats(&self) -> Vec<(LeaseSpec, MapStats)> {
        self.maps
            .iter()
            .map(|(&spec, m)| (spec, m.stats()))
            .collect()
    }

    /// A permit for each busy leased descriptor. A descriptor given a permit becomes
    /// [`Mode::Leased`]. A key whose lease call is in flight is waited for, and the permits taken
    /// meanwhile go back first (a permit is only good until its lease's end: none is held while
    /// waiting); a lease refused (or refusing from memory) puts its key in the exact call. Only
    /// enforced descriptors of cost 1 are leased, and none in a request a zero limit refuses.
    pub async fn take(&self, actions: &mut [Action]) -> Result<Vec<Taken>, Error> {
        if self.maps.is_empty() || actions.iter().any(Action::refuses_all) {
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + LEASE_WAIT;
        let mut exact = vec![false; actions.len()];
        loop {
            let mut taken = Vec::new();
            let mut wait = None;
            for (i, a) in actions.iter().enumerate() {
                let Some((map, key, limit)) = self.leasable(a).filter(|_| !exact[i]) else {
                    continue;
                };
                match map.try_take(key, &[limit], None) {
                    Ok(Take::Permit(reply)) => taken.push(Taken {
                        index: i,
                        reply,
                        map: map.clone(),
                    }),
                    Ok(Take::Exact | Take::Refused(_)) => {}
                    Ok(Take::Wait(w)) => {
                        wait = Some((i, w));
                        break;
                    }
                    Err(e) => {
                        give_back(actions, taken).await;
                        return Err(e);
                    }
                }
            }
            let Some((i, w)) = wait else {
                for t in &taken {
                    if let Action::Count { mode, .. } = &mut actions[t.index] {
                        *mode = Mode::Leased;
                    }
                }
                return Ok(taken);
            };
            give_back(actions, taken).await;
            match tokio::time::timeout_at(deadline.into(), w.wait()).await {
                // Granted, or refused: the next pass takes a permit or finds the refusal.
                Ok(Ok(true)) => {}
                // Refused (or too late to use): this descriptor goes in the exact call.
                Ok(Ok(false)) => exact[i] = true,
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(Error::Invalid(format!("no lease within {LEASE_WAIT:?}")));
                }
            }
        }
    }

    /// The map, key and limit of a descriptor that may take a permit from a lease.
    fn leasable<'a>(&'a self, a: &'a Action) -> Option<(&'a LeaseMap, &'a [u8], Limit)> {
        let Action::Count {
            key,
            limit,
            cost: 1,
            mode: Mode::Charge,
            ..
        } = a
        else {
            return None;
        };
        if limit.shadow || limit.quota {
            return None;
        }
        let map = self.maps.get(limit.lease.as_ref()?)?;
        let l = Limit::new(limit.unit.seconds(), u64::from(limit.requests_per_unit)).ok()?;
        Some((map, key, l))
    }

    /// Every map closed (for shutdown): how many unused permits went back.
    pub async fn close(&self) -> Result<u64, Error> {
        close(self.maps.values().cloned().collect()).await
    }
}

/// Closes `maps` (their unused permits go back), answering how many permits went back.
pub async fn close(maps: Vec<LeaseMap>) -> Result<u64, Error> {
    let mut back = 0;
    let mut first_error = None;
    for m in maps {
        match m.close_all().await {
            Ok(n) => back += n,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(back),
    }
}

/// Whether a permit's lease ended at or before the `now` of a call that charged the same request
/// (`charged`: descriptor, `now`): handed out too late for that request.
pub fn late(taken: &[Taken], charged: &[(usize, u64)]) -> bool {
    let latest = charged.iter().map(|&(_, now)| now).max();
    slidingwindow_client::late(taken.iter().map(|t| &t.reply), latest)
}

/// Permits of a request that is not admitted go back into their leases (no call while the lease
/// is live), so that a request is charged to every descriptor or to none.
pub async fn give_back(actions: &[Action], mut taken: Vec<Taken>) {
    let mut permits = Vec::with_capacity(taken.len());
    for t in &mut taken {
        if let (Action::Count { key, .. }, Some(charge)) =
            (&actions[t.index], t.reply.charge.take())
        {
            permits.push((&t.map, key.as_slice(), charge));
        }
    }
    if let Err(e) = slidingwindow_client::give_back_all(permits).await {
        eprintln!("envoy-ratelimit: a lease's permit could not be given back: {e}");
    }
}
