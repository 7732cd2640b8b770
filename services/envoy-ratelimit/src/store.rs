//! The Redis side of one request, every call on Redis's clock (`now` = `*`, so that any number of
//! services stays exact with the module's default `slidingwindow.lateness 0`): usually one call,
//! the request's `SLIDINGWINDOW.ALLOWALL ... * DETAIL`, whose reply holds every descriptor's
//! state and the `now` Redis used. Looks (hits_addend 0), shadow and quota descriptors, refunds,
//! and requests that need several ALLOWALLs add their calls to the same MULTI/EXEC; a request
//! refused after some of its charges were admitted takes them back in a second one, each
//! `REFUND ... AT` the `now` its charge was logged at (the request's [`Ledger`] records them).

use crate::leases::key;
use crate::metrics::Metrics;
use crate::plan::{self, Action, Mode};
use slidingwindow_client::{
    Answer, Batch, Call, Check, CheckAll, Client, Error, Keyed, Ledger, Limit, LimitState,
    MAX_EXACT, Now, Options, Refund, Reply, RetryAfter,
};
use std::time::{Duration, Instant};

/// A request must not hang on a Redis that stopped answering: it fails after this and the
/// --on-redis-error policy decides.
const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// A descriptor's log as the request left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub remaining: u64,
    /// Until a request of this cost fits (-1: never, the cost is above the limit).
    pub retry_ms: i64,
    /// Until the window is empty.
    pub reset_ms: u64,
    /// Its own limit had no room for the request.
    pub over: bool,
    /// Requests in its window before this one (for the statistics).
    pub before: u64,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Refused: an enforced descriptor over its limit, or every quota descriptor over its own.
    pub refused: bool,
    /// Per descriptor, for counted ones.
    pub seen: Vec<Option<Seen>>,
    /// Redis round trips made.
    pub round_trips: usize,
}

pub struct Store {
    client: Client,
}

/// What each call of the first round trip answers for.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// A descriptor's log as it is (looks, and after a refund).
    AsIs(usize),
    /// ALLOWALL number `g` of `plan::groups`.
    Group(usize),
    /// A descriptor's own ALLOW (shadow, quota).
    Own(usize),
    /// A descriptor's REFUND (its look follows).
    Refund(usize),
}

impl Store {
    /// Never waits for Redis: connections are made on first use and remade after failures.
    pub fn new(options: Options) -> Result<Store, Error> {
        let options = options
            .connect_timeout(REDIS_TIMEOUT)
            .response_timeout(REDIS_TIMEOUT);
        Ok(Store {
            client: Client::new(&options)?,
        })
    }

    /// The connection, shared with the lease maps.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Redis answers (for the health check).
    pub async fn ping(&self) -> Result<(), Error> {
        self.client
            .command(&slidingwindow_client::redis::cmd("PING"), b"health")
            .await
            .map(drop)
    }

    /// Runs the request's calls on Redis's clock; what they charged and kept is in `ledger`.
    pub async fn run(
        &self,
        actions: &[Action],
        ledger: &mut Ledger,
        metrics: &Metrics,
    ) -> Result<Outcome, Error> {
        #[cfg(feature = "bench-floor")]
        if actions.iter().any(|a| matches!(a, Action::Count { .. })) {
            return self.floor(actions).await;
        }
        let at = Now::Server;
        let known_refusal = actions.iter().any(Action::refuses_all);
        let groups = if known_refusal {
            Vec::new()
        } else {
            plan::groups(actions)
        };
        let limits = actions
            .iter()
            .map(|a| match a {
                Action::Count { limit, .. } => {
                    Limit::new(limit.unit.seconds(), u64::from(limit.requests_per_unit)).map(Some)
                }
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>, _>>()?;
        // A refund has no Call: its REFUND is added to the batch by send().
        let mut calls: Vec<(Slot, Option<Call>)> = Vec::new();
        // Looks first: they see the log before this request's own charges.
        for (i, a) in actions.iter().enumerate() {
            if let (
                Action::Count {
                    key,
                    mode: Mode::Look,
                    ..
                },
                Some(l),
            ) = (a, limits[i])
            {
                calls.push((Slot::AsIs(i), Some(as_is(key, l, 1, at)?)));
            }
        }
        for (g, (cost, members)) in groups.iter().enumerate() {
            let keys: Vec<Keyed> = members
                .iter()
                .filter_map(|&m| match (&actions[m], &limits[m]) {
                    (Action::Count { key, .. }, Some(l)) => {
                        Some(Keyed::new(key, std::slice::from_ref(l)))
                    }
                    _ => None,
                })
                .collect();
            // A group shares one precision (plan::groups).
            let precision = members.first().and_then(|&m| actions[m].limit()?.precision);
            let check = CheckAll::new(&keys)
                .now(at)
                .cost(clamp(*cost))
                .precision(precision)
                .detail(true);
            calls.push((Slot::Group(g), Some(Call::allow_all(&check)?)));
        }
        for (i, a) in actions.iter().enumerate() {
            let (
                Action::Count {
                    key,
                    limit,
                    cost,
                    mode,
                    ..
                },
                Some(l),
            ) = (a, &limits[i])
            else {
                continue;
            };
            match mode {
                Mode::Charge if limit.shadow || (limit.quota && !known_refusal) => {
                    let check = Check::new(key, std::slice::from_ref(l))
                        .now(at)
                        .cost(clamp(*cost))
                        .precision(limit.precision)
                        .detail(true);
                    calls.push((Slot::Own(i), Some(Call::allow(&check)?)));
                }
                // Nothing is charged when a zero limit refuses the request: the others' logs
                // are only read, for their statuses.
                Mode::Charge if known_refusal => {
                    calls.push((Slot::AsIs(i), Some(as_is(key, *l, clamp(*cost), at)?)));
                }
                Mode::Refund => {
                    calls.push((Slot::Refund(i), None));
                    calls.push((Slot::AsIs(i), Some(as_is(key, *l, 1, at)?)));
                }
                Mode::Charge | Mode::Look | Mode::Leased => {}
            }
        }
        let mut outcome = Outcome {
            refused: false,
            seen: vec![None; actions.len()],
            round_trips: 0,
        };
        let answers = self
            .send(actions, &calls, at, metrics, &mut outcome)
            .await?;
        let mut admitted_groups = Vec::new();
        let mut own_admitted = Vec::new();
        for ((slot, _), answer) in calls.iter().zip(answers) {
            match (*slot, answer) {
                (Slot::Refund(_), _) => {}
                (Slot::AsIs(i), Answer::Reply(r)) => {
                    let s = as_is_state(&r, limits[i].map_or(0, |l| l.max()))?;
                    outcome.seen[i] = Some(seen(s, s.count, s.retry_after != RetryAfter::Ms(0)));
                }
                (Slot::Group(g), Answer::Reply(r)) => {
                    let (cost, members) = &groups[g];
                    let states = r.detail.as_ref().map_or(&[][..], |d| &d.limits[..]);
                    for (j, &m) in members.iter().enumerate() {
                        let s = *states
                            .get(j)
                            .ok_or_else(|| Error::Reply("fewer states than limits".into()))?;
                        let before = if r.allowed {
                            s.count.saturating_sub(*cost)
                        } else {
                            s.count
                        };
                        let over = !r.allowed && s.retry_after != RetryAfter::Ms(0);
                        outcome.seen[m] = Some(seen(s, before, over));
                    }
                    if r.allowed {
                        admitted_groups.push(g);
                        let now = logged_at(&r)?;
                        for &m in members {
                            charged(ledger, actions, m, now);
                        }
                    }
                }
                (Slot::Own(i), Answer::Reply(r)) => {
                    let cost = match &actions[i] {
                        Action::Count { cost, .. } => *cost,
                        _ => 0,
                    };
                    let before = if r.allowed {
                        r.count.saturating_sub(cost)
                    } else {
                        r.count
                    };
                    outcome.seen[i] = Some(seen(state(&r), before, !r.allowed));
                    if r.allowed {
                        charged(ledger, actions, i, logged_at(&r)?);
                        if actions[i].limit().is_some_and(|l| !l.shadow) {
                            own_admitted.push(i);
                        }
                    }
                }
                (_, Answer::Removed(_)) => {
                    return Err(Error::Reply("a refund's count for a check".into()));
                }
            }
        }
        outcome.refused = refused(
            actions,
            &outcome.seen,
            known_refusal,
            &groups,
            &admitted_groups,
        );
        if outcome.refused {
            // All or nothing: what was charged for this request is taken back.
            let mut undo: Vec<usize> = admitted_groups
                .iter()
                .flat_map(|&g| groups[g].1.iter().copied())
                .collect();
            undo.extend(own_admitted);
            if !undo.is_empty() {
                self.undo(actions, &limits, &undo, ledger, metrics, &mut outcome)
                    .await?;
            }
            // What stays charged: shadow descriptors' own calls.
            ledger.forget(|m| undo.contains(&m));
        }
        Ok(outcome)
    }

    /// `make bench-envoy`'s floor, in a build with the `bench-floor` feature only: one PING in
    /// place of the request's calls, each counted descriptor admitted with its whole limit left.
    #[cfg(feature = "bench-floor")]
    async fn floor(&self, actions: &[Action]) -> Result<Outcome, Error> {
        self.ping().await?;
        let seen = actions
            .iter()
            .map(|a| match a {
                Action::Count { limit, .. } => Some(Seen {
                    remaining: u64::from(limit.requests_per_unit),
                    retry_ms: 0,
                    reset_ms: 0,
                    over: false,
                    before: 0,
                }),
                _ => None,
            })
            .collect();
        Ok(Outcome {
            refused: false,
            seen,
            round_trips: 1,
        })
    }

    /// The first round trip: one call alone, or all of them in one MULTI/EXEC.
    async fn send(
        &self,
        actions: &[Action],
        calls: &[(Slot, Option<Call>)],
        at: Now,
        metrics: &Metrics,
        outcome: &mut Outcome,
    ) -> Result<Vec<Answer>, Error> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        outcome.round_trips += 1;
        let result = if let [(_, Some(call))] = calls {
            self.client.call(call).await.map(|r| vec![Answer::Reply(r)])
        } else {
            let mut batch = Batch::transaction();
            for (slot, call) in calls {
                match (slot, call) {
                    (_, Some(call)) => {
                        batch.call(call.clone());
                    }
                    (Slot::Refund(i), None) => {
                        if let Action::Count {
                            key, cost, limit, ..
                        } = &actions[*i]
                        {
                            let refund = Refund::new(key, clamp(*cost));
                            // With a precision and no lease, the newest requests are logged up to
                            // `precision` ms after Redis's `now`: the newest whatever their time
                            // (no lease's permits are ahead of them). With a lease, `AT *` leaves
                            // the lease's permits in place.
                            if limit.precision.is_some() && limit.lease.is_none() {
                                batch.refund(&refund)?;
                            } else {
                                batch.refund(&refund.at(at))?;
                            }
                        }
                    }
                    (_, None) => {}
                }
            }
            match self.client.exec(&batch).await {
                Ok(answers) => answers.into_iter().collect::<Result<Vec<_>, _>>(),
                Err(e) => Err(e),
            }
        };
        metrics.redis_latency.observe(started.elapsed());
        result
    }

    /// Takes back the charges of `undo`'s descriptors (REFUND AT the `now` each was logged at)
    /// and reads their logs again.
    async fn undo(
        &self,
        actions: &[Action],
        limits: &[Option<Limit>],
        undo: &[usize],
        ledger: &Ledger,
        metrics: &Metrics,
        outcome: &mut Outcome,
    ) -> Result<(), Error> {
        let mut batch = Batch::transaction();
        ledger.refunds(&mut batch, |m| undo.contains(&m), |m| key(actions, m))?;
        for &m in undo {
            if let (Action::Count { key, cost, .. }, Some(l)) = (&actions[m], limits[m]) {
                batch.call(as_is(key, l, clamp(*cost), Now::Server)?);
            }
        }
        let started = Instant::now();
        outcome.round_trips += 1;
        let answers = self.client.exec(&batch).await;
        metrics.redis_latency.observe(started.elapsed());
        let mut answers = answers?.into_iter().skip(undo.len());
        for &m in undo {
            let r = answers
                .next()
                .unwrap_or_else(|| Err(Error::Reply("fewer answers than calls".into())))?
                .reply()?;
            let s = as_is_state(&r, limits[m].map_or(0, |l| l.max()))?;
            if let Some(seen) = &mut outcome.seen[m] {
                seen.remaining = s.remaining;
                seen.retry_ms = s.retry_after.as_i64();
                seen.reset_ms = s.reset_after_ms;
            }
        }
        Ok(())
    }
}

/// Records descriptor `m`'s charge, logged at `now`, in `ledger`.
fn charged(ledger: &mut Ledger, actions: &[Action], m: usize, now: u64) {
    if let Action::Count { cost, limit, .. } = &actions[m] {
        ledger.charged(m, 0, now, clamp(*cost), limit.precision);
    }
}

/// The `now` an admitted call logged its request at: DETAIL's.
fn logged_at(r: &Reply) -> Result<u64, Error> {
    r.detail
        .as_ref()
        .map(|d| d.now_ms)
        .ok_or_else(|| Error::Reply("no now in a DETAIL reply".into()))
}

/// Whether the request is refused: an enforced descriptor over its limit (a zero limit, a
/// refused ALLOWALL, a look with no room), or every quota-mode descriptor over its own.
fn refused(
    actions: &[Action],
    seen: &[Option<Seen>],
    known_refusal: bool,
    groups: &[(u64, Vec<usize>)],
    admitted_groups: &[usize],
) -> bool {
    if known_refusal || admitted_groups.len() < groups.len() {
        return true;
    }
    let (mut quota, mut quota_over) = (0, 0);
    for (a, s) in actions.iter().zip(seen) {
        let Some(l) = a.limit() else { continue };
        if l.shadow {
            continue;
        }
        let over = match a {
            Action::Zero { .. } => true,
            Action::Count {
                mode: Mode::Refund, ..
            } => continue,
            Action::Count {
                mode: Mode::Look, ..
            } => s.is_some_and(|s| s.over),
            Action::Count { .. } if l.quota => s.is_some_and(|s| s.over),
            Action::Count { .. } => continue,
            Action::Unknown | Action::Unlimited => continue,
        };
        if l.quota {
            quota += 1;
            quota_over += usize::from(over);
        } else if over {
            return true;
        }
    }
    quota > 0 && quota == quota_over
}

fn seen(s: LimitState, before: u64, over: bool) -> Seen {
    Seen {
        remaining: s.remaining,
        retry_ms: s.retry_after.as_i64(),
        reset_ms: s.reset_after_ms,
        over,
        before,
    }
}

fn state(r: &Reply) -> LimitState {
    LimitState {
        count: r.count,
        remaining: r.remaining,
        retry_after: r.retry_after,
        reset_after_ms: r.reset_after_ms,
    }
}

/// A cost as a command can carry it: above 2^53 no limit fits it any better.
fn clamp(cost: u64) -> u64 {
    cost.clamp(1, MAX_EXACT)
}

/// `PEEK key w max now COST c LIMIT w 1 DETAIL`: the second limit fits only an empty window at
/// cost 1, so the call is refused (and its states are the log as it is, with the wait for a
/// request of cost `c`) unless the window is empty, whose state is known.
fn as_is(key: &[u8], l: Limit, cost: u64, at: Now) -> Result<Call, Error> {
    let limits = [l, Limit::new(l.window_s(), 1)?];
    Call::peek(&Check::new(key, &limits).now(at).cost(cost).detail(true))
}

fn as_is_state(r: &Reply, max: u64) -> Result<LimitState, Error> {
    if r.allowed {
        return Ok(LimitState {
            count: 0,
            remaining: max,
            retry_after: RetryAfter::Ms(0),
            reset_after_ms: 0,
        });
    }
    r.detail
        .as_ref()
        .and_then(|d| d.limits.first().copied())
        .ok_or_else(|| Error::Reply("no state in a DETAIL reply".into()))
}
