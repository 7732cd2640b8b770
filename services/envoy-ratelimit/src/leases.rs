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
    Client, Error, Leasable, LeaseConfig, LeaseMap, LeaseMapConfig, Ledger, Limit, MapStats,
    OnRefusal, Stopped,
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

    /// A permit in `ledger` for each busy leased descriptor, which becomes [`Mode::Leased`]. A
    /// key whose lease call is in flight is waited for, the permits taken meanwhile given back
    /// first; a lease refused (or refusing from memory) puts its key in the exact call
    /// ([`Ledger::take`]). Only enforced descriptors of cost 1 are leased, and none in a request a
    /// zero limit refuses. After an error no permit is held: every descriptor is in the exact call.
    pub async fn take(&self, actions: &mut [Action], ledger: &mut Ledger) -> Result<(), Error> {
        if self.maps.is_empty() || actions.iter().any(Action::refuses_all) {
            return Ok(());
        }
        let found: Vec<(usize, &LeaseMap, &[u8], Limit)> = actions
            .iter()
            .enumerate()
            .filter_map(|(i, a)| self.leasable(a).map(|(m, k, l)| (i, m, k, l)))
            .collect();
        let leasable: Vec<Leasable> = found
            .iter()
            .map(|(index, map, key, limit)| Leasable {
                index: *index,
                map,
                key,
                limits: std::slice::from_ref(limit),
            })
            .collect();
        let deadline = Instant::now() + LEASE_WAIT;
        let first = ledger.try_take(&leasable, OnRefusal::Exact);
        match ledger
            .take(&leasable, OnRefusal::Exact, deadline, first)
            .await
        {
            Ok(()) => {}
            Err(Stopped::Failed(e)) => return Err(e),
            Err(Stopped::TimedOut) => {
                return Err(Error::Invalid(format!("no lease within {LEASE_WAIT:?}")));
            }
            Err(Stopped::Refused(..)) => unreachable!("a refusal from memory goes exact"),
        }
        drop(leasable);
        for p in ledger.permits() {
            if let Some(Action::Count { mode, .. }) = actions.get_mut(p.index) {
                *mode = Mode::Leased;
            }
        }
        Ok(())
    }

    /// The map, key and limit of a descriptor that may take a permit from a lease.
    fn leasable<'s, 'a>(&'s self, a: &'a Action) -> Option<(&'s LeaseMap, &'a [u8], Limit)> {
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

/// Descriptor `i`'s key, for the ledger's give-backs and refunds.
pub fn key(actions: &[Action], i: usize) -> Option<&[u8]> {
    match actions.get(i) {
        Some(Action::Count { key, .. }) => Some(key),
        _ => None,
    }
}
