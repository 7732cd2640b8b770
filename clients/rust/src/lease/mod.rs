//! The lease object: takes permits in bulk with `LEASE ms` and hands them out from memory,
//! never admitting more than any limit allows (contract, "Leases").
//!
//! - While its lease is live and has permits, a call takes one from memory (no Redis call).
//! - Otherwise one call at a time asks for a new lease of `size` permits; callers that arrive
//!   meanwhile wait for that one answer, then take from it.
//! - When the lease call's round trip is over a quarter of `ms` (a server far away, see [`far`]),
//!   lease calls go out one after the other while the key is busy, several in flight, each
//!   sent so that its answer comes before the last live lease runs out, each for the permits
//!   the callers take while it is usable.
//! - A refusal is remembered until its retry time (see [`crate::refusal`]): a lease refused with
//!   room for fewer permits than a lease lets that many callers through to one exact ALLOW each
//!   (near the limit every last permit is still handed out), then answers every caller from
//!   memory, refused, until a lease fits again; an exact call refused does the same until a
//!   request fits. A full key so costs Redis about one call per lease, not one per request.
//!   A refusal that never fits (`-1`) is not remembered. The object's own refunds forget it
//!   (they make room).
//! - No permit is handed out after the lease's end: with the caller's clock, while that clock
//!   reads before `now + ms`; with `*`, until `ms` after the call was sent (monotonic clock) —
//!   the server read its `now` after that — or, with [`LeaseConfig::synced_within`] `d`, until
//!   this host's clock reads the server's `now + ms - d`.
//! - At the end (or when a newer lease replaces an expired one, or on [`Lease::close`]) the unused
//!   permits go back with `REFUND key unused AT now+ms` (with `*`, DETAIL's `now`).
//! - With [`LeaseConfig::precision`] every call passes `PRECISION p`: the permits are logged at
//!   `now + ms` rounded up to a multiple of `p` (an exact call's at `now` rounded up), and every
//!   refund passes that score as its `AT` (contract, "Coarse times"), so it takes back the
//!   members this object logged. Permits are still handed out only until `now + ms`.

use crate::client::Client;
use crate::error::Error;
use crate::limit::{Limit, MAX_EXACT, Now, logged_score, unix_ms};
use crate::refusal::{Refusal, ms_between};
use crate::reply::{Reply, RetryAfter};
use crate::request::Keyed;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};

mod answer;
mod config;
mod far;
mod round;
mod stats;
mod target;

pub use answer::{Charge, LeaseReply, Pending, Source, Take, late};
use answer::{ChargeKind, NEXT_GRANT};
pub use config::{Clock, LeaseConfig, RefundHook};
use far::{Far, MAX_ROUNDS};
pub(crate) use stats::Counters;
pub use stats::Stats;
use stats::bump;
use target::Target;

/// Shared by every clone; cheap to clone.
#[derive(Clone)]
pub struct Lease {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    target: Target,
    size: u64,
    ms: u64,
    clock: Clock,
    when_busy: bool,
    precision: Option<u64>,
    synced_within: Option<u64>,
    on_refund: Option<RefundHook>,
    state: Mutex<State>,
    /// Callers back from a wait, not yet come to `try_take` (see [`Pending`]).
    back: Arc<AtomicU64>,
    /// Told when a refund ends (close waits for them).
    refunds_done: Notify,
    /// Shared by every object of a lease map.
    stats: Arc<Counters>,
}

#[derive(Default)]
struct State {
    grant: Option<Grant>,
    /// Leases taken before the current one ran out (see [`Inner::prefetch`]), oldest first.
    next: VecDeque<Grant>,
    /// The lease calls in flight, oldest first.
    rounds: VecDeque<InFlight>,
    /// The round trip and the callers' rate (see [`far`]).
    far: Far,
    /// The last refusal, until its retry time.
    refused: Option<Refusal>,
    closed: bool,
    /// Refunds taken out of the state and not yet answered.
    refunding: usize,
    /// `when_busy`: leasing; else the calls counted in the current period.
    hot: bool,
    period: Option<(Instant, u64)>,
    /// Permits handed out from memory so far.
    handed: u64,
    /// The next lease is asked for with this many permits left (see [`Inner::prefetch`]).
    ahead: u64,
}

/// A lease call in flight.
struct InFlight {
    id: u64,
    sent: Instant,
    /// [`State::handed`] when it was sent.
    from: u64,
    /// Its outcome, once known.
    rx: watch::Receiver<Option<Round>>,
}

struct Grant {
    id: u64,
    /// Permits not handed out.
    left: u64,
    /// `now + ms` on the clock of the call: no handout from then on (with [`Clock::Own`]).
    end_ms: u64,
    /// `end_ms` rounded up to the `PRECISION`: the score its permits are logged at (the
    /// refund's AT).
    logged_ms: u64,
    /// Monotonic: no handout from then on.
    deadline: Instant,
    /// When the call was sent and its `now` (for `*`: DETAIL's).
    sent: Instant,
    now_ms: u64,
    reply: Reply,
}

#[derive(Clone)]
pub(crate) enum Round {
    /// A lease is live: take from it.
    Granted,
    /// Refused: the object remembers it.
    Refused,
    /// Granted too late to use, or closed: send an exact call.
    Exact,
    Failed(Error),
}

impl Lease {
    /// A lease object for `key` and its limits (the first positional, the others `LIMIT`).
    pub fn new(
        client: Client,
        key: &[u8],
        limits: &[Limit],
        cfg: LeaseConfig,
    ) -> Result<Lease, Error> {
        Lease::make(
            client,
            Target::One(key.to_vec(), limits.to_vec()),
            cfg,
            Arc::default(),
        )
    }

    /// A lease object over several keys at once (ALLOWALL): every permit counts on every key.
    pub fn new_all(client: Client, keys: &[Keyed<'_>], cfg: LeaseConfig) -> Result<Lease, Error> {
        let keys = keys
            .iter()
            .map(|k| (k.key.to_vec(), k.limits.to_vec()))
            .collect();
        Lease::make(client, Target::All(keys), cfg, Arc::default())
    }

    /// One key's object counting into `stats` (a lease map's, shared by its objects).
    pub(crate) fn counted(
        client: Client,
        key: &[u8],
        limits: &[Limit],
        cfg: LeaseConfig,
        stats: Arc<Counters>,
    ) -> Result<Lease, Error> {
        let target = Target::One(key.to_vec(), limits.to_vec());
        Lease::make(client, target, cfg, stats)
    }

    fn make(
        client: Client,
        target: Target,
        cfg: LeaseConfig,
        stats: Arc<Counters>,
    ) -> Result<Lease, Error> {
        if !(1..=MAX_EXACT).contains(&cfg.duration_ms) {
            return Err(Error::Invalid(format!(
                "a lease lasts 1 to {MAX_EXACT} ms, not {}",
                cfg.duration_ms
            )));
        }
        let smallest = target.limits().map(Limit::max).min().unwrap_or(0);
        if cfg.size == 0 || cfg.size > smallest {
            return Err(Error::Invalid(format!(
                "a lease holds 1 to {smallest} permits (the smallest max), not {}",
                cfg.size
            )));
        }
        // The limits and keys as the contract wants them, checked once.
        target.call(
            Now::Server,
            cfg.size,
            Some(cfg.duration_ms),
            cfg.precision,
            true,
        )?;
        Ok(Lease {
            inner: Arc::new(Inner {
                client,
                target,
                size: cfg.size,
                ms: cfg.duration_ms,
                clock: cfg.clock,
                when_busy: cfg.when_busy,
                precision: cfg.precision,
                synced_within: cfg.synced_within,
                on_refund: cfg.on_refund,
                state: Mutex::default(),
                back: Arc::default(),
                refunds_done: Notify::new(),
                stats,
            }),
        })
    }

    /// One request: a permit from memory, from a new lease, or from an exact call; or refused,
    /// from memory (a remembered refusal) or by the exact call.
    pub async fn allow(&self) -> Result<LeaseReply, Error> {
        match self.take().await? {
            Some(r) => Ok(r),
            None => self.inner.exact().await,
        }
    }

    /// A permit from a lease: from memory, or after waiting for the lease call in flight (which
    /// this call may start); or a refusal from memory (`allowed` false, no charge). `None`: make
    /// an exact call of your own (see [`Take::Exact`]), for instance as part of a call that
    /// checks other keys too.
    pub async fn take(&self) -> Result<Option<LeaseReply>, Error> {
        loop {
            match self.try_take(None) {
                Take::Permit(r) | Take::Refused(r) => return Ok(Some(r)),
                Take::Exact => return Ok(None),
                Take::Wait(p) => {
                    if !p.wait().await? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Without waiting: a permit from memory, a refusal from memory, the lease call to wait for
    /// (started here if none is in flight), or exact. `at_ms`, with [`Clock::Own`]: the time to
    /// hand the permit out at, a reading of that clock the caller uses for the rest of the
    /// request (its other keys' `now`); `None` reads the clock. Ignored with [`Clock::Server`].
    pub fn try_take(&self, at_ms: Option<u64>) -> Take {
        let inner = &self.inner;
        let mut st = inner.lock();
        let now = Instant::now();
        // A caller back from a wait is not a new one.
        let back = inner
            .back
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if back.is_err() {
            st.far.arrived(now, inner.ms);
        }
        inner.try_take(&mut st, now, at_ms)
    }

    /// Gives an admitted request's permit back: into the live lease it came from (no call), else
    /// `REFUND 1 AT` the time it was logged at. Answers how many were given back (0 or 1).
    pub async fn give_back(&self, charge: Charge) -> Result<u64, Error> {
        let inner = &self.inner;
        let at_ms = {
            let mut st = inner.lock();
            let closed = st.closed;
            let at_ms = match charge.kind {
                ChargeKind::Lease { id, logged_ms } => {
                    let now = Instant::now();
                    let st = &mut *st;
                    let live = st
                        .grant
                        .iter_mut()
                        .chain(st.next.iter_mut())
                        .find(|g| g.id == id && !closed && now < g.deadline);
                    if let Some(g) = live {
                        g.left += 1;
                        bump(&inner.stats.returned, 1);
                        return Ok(1);
                    }
                    logged_ms
                }
                ChargeKind::Exact { at_ms } => at_ms,
            };
            st.refunding += 1;
            at_ms
        };
        inner.refund(1, at_ms).await
    }

    /// Stops leasing: the live lease's unused permits go back now, a lease call in flight is
    /// waited for (and its permits go back), refunds under way are waited for. Later calls are
    /// exact. Answers how many permits went back here.
    pub async fn close(&self) -> Result<u64, Error> {
        let inner = &self.inner;
        let (grant, rounds) = {
            let mut st = inner.lock();
            st.closed = true;
            let next = std::mem::take(&mut st.next);
            let grants: Vec<Grant> = st
                .grant
                .take()
                .into_iter()
                .chain(next)
                .filter(|g| g.left > 0)
                .collect();
            st.refunding += grants.len();
            let rounds: Vec<_> = st.rounds.iter().map(|r| r.rx.clone()).collect();
            (grants, rounds)
        };
        let mut back = 0;
        for g in grant {
            back += inner.refund(g.left, g.logged_ms).await?;
        }
        for mut rx in rounds {
            let _ = rx.wait_for(Option::is_some).await;
        }
        loop {
            let done = inner.refunds_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if inner.lock().refunding == 0 {
                return Ok(back);
            }
            done.await;
        }
    }

    /// Remembers the refusal of an exact call made for this object's key and limits elsewhere
    /// (by its lease map), as its own exact calls' are.
    pub(crate) fn remember(&self, reply: &Reply, at_ms: u64) {
        self.inner.remember(reply, at_ms);
    }

    /// This object's counters (for an object of a lease map, the map's, shared by its objects).
    pub fn stats(&self) -> Stats {
        self.inner.stats.snapshot()
    }

    /// Whether this object is for exactly these limits (one key).
    pub(crate) fn has_limits(&self, limits: &[Limit]) -> bool {
        matches!(&self.inner.target, Target::One(_, l) if l == limits)
    }

    /// One key's limits (empty for several keys).
    pub(crate) fn limits(&self) -> &[Limit] {
        match &self.inner.target {
            Target::One(_, l) => l,
            Target::All(_) => &[],
        }
    }

    /// What an object for one key holds beyond its key, roughly: its shared state, a grant and
    /// its limits.
    pub(crate) fn object_bytes(limits: usize) -> usize {
        size_of::<Inner>() + size_of::<Grant>() + limits * size_of::<Limit>()
    }
}

impl Inner {
    /// [`Lease::try_take`] under the lock.
    fn try_take(self: &Arc<Self>, st: &mut State, now: Instant, at_ms: Option<u64>) -> Take {
        loop {
            if let Some(r) = self.take(st, now, at_ms) {
                self.prefetch(st, now);
                return Take::Permit(r);
            }
            // The current lease is used up or over: the next one, if it came in time.
            let Some(next) = st.next.pop_front() else {
                break;
            };
            if let Some(old) = st.grant.replace(next).filter(|g| g.left > 0) {
                st.refunding += 1;
                let this = self.clone();
                tokio::spawn(async move {
                    let _ = this.refund(old.left, old.logged_ms).await;
                });
            }
        }
        let reach = st.far.far(self.ms);
        if !st.closed
            && let Some(r) = st.refused.as_mut()
        {
            if r.live(now) {
                // Far, the refusal's room goes to a lease call (see `prefetch`), not to exact
                // calls a round trip each.
                if reach.is_none() && r.spend() {
                    return Take::Exact;
                }
                let take = self.refused(r, now, at_ms);
                if reach.is_some() {
                    self.prefetch(st, now);
                }
                return take;
            }
            // Far, a refusal within the last lease's time stays, for the callers below.
            let lease = Duration::from_millis(self.ms);
            if reach.is_none() || now >= r.until() + lease {
                st.refused = None;
            }
        }
        if !self.leasing(st, now) {
            return Take::Exact;
        }
        self.prefetch(st, now);
        if let Some(round) = st.rounds.front() {
            // Far, with a refusal that recent: refused from memory until the lease call's answer
            // is due, rather than waiting for it (see [`far`]).
            if let (Some(reach), Some(r), false) = (reach, st.refused.as_mut(), st.closed) {
                r.extend(round.sent + reach.rtt);
                return self.refused(r, now, at_ms);
            }
            return Take::Wait(Pending {
                rx: round.rx.clone(),
                back: self.back.clone(),
            });
        }
        Take::Wait(self.start_round(st))
    }

    /// A caller refused from memory by `r`.
    fn refused(&self, r: &Refusal, now: Instant, at_ms: Option<u64>) -> Take {
        bump(&self.stats.refused_from_memory, 1);
        let (reply, decided_ms) = r.answer(now);
        let at_ms = match &self.clock {
            Clock::Own(f) => at_ms.unwrap_or_else(|| f()),
            Clock::Server => decided_ms,
        };
        Take::Refused(LeaseReply {
            reply,
            at_ms,
            source: Source::Memory,
            charge: None,
        })
    }

    /// Starts a lease call: of `size` permits, or far (see [`far`]) of what the callers take
    /// while it is usable.
    fn start_round(self: &Arc<Self>, st: &mut State) -> Pending {
        let size = match st.far.far(self.ms) {
            Some(reach) => st.far.size(reach, self.size),
            None => self.size,
        };
        self.start_round_of(st, size)
    }

    /// Starts a lease call of `size` permits.
    fn start_round_of(self: &Arc<Self>, st: &mut State, size: u64) -> Pending {
        let (tx, rx) = watch::channel(None);
        let id = NEXT_GRANT.fetch_add(1, Ordering::Relaxed);
        st.rounds.push_back(InFlight {
            id,
            sent: Instant::now(),
            from: st.handed,
            rx: rx.clone(),
        });
        tokio::spawn(Inner::round(self.clone(), tx, id, size));
        Pending {
            rx,
            back: self.back.clone(),
        }
    }

    /// With `ahead` permits or fewer left in the current lease, the next lease is asked for at
    /// once, so that a busy key finds it in memory when this one runs out, rather than every
    /// caller then waiting a round trip for it. `ahead` is twice what the key handed out while
    /// its last lease call was in flight, within a quarter and a half of a lease. Far (see
    /// [`far`]), a lease call is sent whenever the leases held and asked for run out (their
    /// permits at the callers' rate, or their end) within [`Far::lead`], up to [`MAX_ROUNDS`]
    /// in flight; refused, one at a time: at once for the room the refusal saw, else a round
    /// trip before its retry time. Only while leasing (not closed, busy; near, no refusal's
    /// wait under way).
    fn prefetch(self: &Arc<Self>, st: &mut State, now: Instant) {
        if st.closed || (self.when_busy && !st.hot) {
            return;
        }
        let refused = st.refused.as_mut().filter(|r| r.live(now));
        if let Some(reach) = st.far.far(self.ms) {
            if let Some(r) = refused {
                if !st.rounds.is_empty() {
                    return;
                }
                let (room, until) = (r.take_room(), r.until());
                let size = st.far.size(reach, self.size);
                if room == 0 && until > now + reach.rtt {
                    return;
                }
                // Its callers are refused from memory until the answer is due, rather than
                // waiting for it.
                r.extend(now + reach.rtt);
                self.start_round_of(st, if room > 0 { size.min(room) } else { size });
                return;
            }
            let held = st.grant.iter().chain(st.next.iter()).filter(|g| g.left > 0);
            let until = held
                .map(|g| st.far.runs_out(g.left, g.deadline, now))
                .chain(st.rounds.iter().map(|r| Far::ends(reach, r.sent)))
                .max();
            let soon = until.is_none_or(|t| t <= now + st.far.lead(reach));
            if soon && st.rounds.len() < MAX_ROUNDS {
                self.start_round(st);
            }
            return;
        }
        let ahead = st.ahead.max(self.size / 4);
        let low = st.grant.as_ref().is_some_and(|g| g.left <= ahead);
        if low && refused.is_none() && st.rounds.is_empty() && st.next.is_empty() {
            self.start_round(st);
        }
    }

    /// When a lease whose call was sent at `sent`, answered at `arrived`, ending at `end_ms`
    /// (`now + ms` on the clock of the call) stops handing out permits: `ms` after it was sent;
    /// on the server's clock with [`LeaseConfig::synced_within`] `d`, when this host's clock
    /// reads `end_ms - d` (within `ms` of `arrived`).
    fn deadline(&self, sent: Instant, arrived: Instant, end_ms: u64) -> Instant {
        match (&self.clock, self.synced_within) {
            (Clock::Server, Some(d)) => {
                let left = end_ms.saturating_sub(d).saturating_sub(unix_ms());
                arrived + Duration::from_millis(left.min(self.ms))
            }
            _ => sent + Duration::from_millis(self.ms),
        }
    }

    /// The grant has permits and has not reached its end on either clock.
    fn usable(&self, g: &Grant) -> bool {
        g.left > 0
            && Instant::now() < g.deadline
            && match &self.clock {
                Clock::Own(f) => f() < g.end_ms,
                Clock::Server => true,
            }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change under the lock is a few plain stores: the state is whole whatever a
        // panicking holder did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A permit from the live lease, if it has one and has not reached its end.
    fn take(&self, st: &mut State, now: Instant, at_ms: Option<u64>) -> Option<LeaseReply> {
        let g = st.grant.as_mut()?;
        if g.left == 0 || now >= g.deadline {
            return None;
        }
        let at_ms = match &self.clock {
            Clock::Own(f) => Some(at_ms.unwrap_or_else(|| f())).filter(|&t| t < g.end_ms)?,
            Clock::Server => match self.synced_within {
                // This host's clock, within the lease's span on the server's.
                Some(_) => unix_ms().clamp(g.now_ms, g.end_ms.saturating_sub(1)),
                None => g.now_ms + ms_between(g.sent, now),
            },
        };
        g.left -= 1;
        st.handed += 1;
        bump(&self.stats.from_memory, 1);
        // The time since the lease call on the clock `at_ms` reads: the caller's own (so that
        // `at_ms + reset_after_ms` is the lease's), else the monotonic clock.
        let since = match &self.clock {
            Clock::Own(_) => at_ms.saturating_sub(g.now_ms),
            Clock::Server => ms_between(g.sent, now),
        };
        let remaining = g.reply.remaining + g.left;
        let reply = Reply {
            allowed: true,
            count: g.reply.count.saturating_sub(g.left),
            remaining,
            retry_after: match g.reply.retry_after {
                _ if remaining > 0 => RetryAfter::Ms(0),
                RetryAfter::Ms(ms) => RetryAfter::Ms(ms.saturating_sub(since)),
                RetryAfter::Never => RetryAfter::Never,
            },
            reset_after_ms: g.reply.reset_after_ms.saturating_sub(since),
            limit: g.reply.limit,
            detail: None,
        };
        Some(LeaseReply {
            reply,
            at_ms,
            source: Source::Memory,
            charge: Some(Charge {
                kind: ChargeKind::Lease {
                    id: g.id,
                    logged_ms: g.logged_ms,
                },
            }),
        })
    }

    /// Whether this call may ask for (or wait on) a lease rather than go exact.
    fn leasing(&self, st: &mut State, now: Instant) -> bool {
        if st.closed {
            return false;
        }
        if self.when_busy && !st.hot {
            let (start, calls) = st.period.get_or_insert((now, 0));
            if now.saturating_duration_since(*start) >= Duration::from_millis(self.ms) {
                *start = now;
                *calls = 0;
            }
            *calls += 1;
            if *calls < self.size {
                return false;
            }
            st.hot = true;
            st.period = None;
        }
        true
    }

    /// One exact ALLOW of cost 1.
    async fn exact(&self) -> Result<LeaseReply, Error> {
        let now = self.clock.now();
        let call = self
            .target
            .call(now, 1, None, self.precision, now == Now::Server)?;
        bump(&self.stats.calls, 1);
        bump(&self.stats.exact_calls, 1);
        let mut reply = self.client.call(&call).await.inspect_err(|_| {
            bump(&self.stats.errors, 1);
        })?;
        let at_ms = match now {
            Now::Ms(t) => t,
            Now::Server => reply.detail.take().map_or(0, |d| d.now_ms),
        };
        let charge = reply.allowed.then(|| {
            bump(&self.stats.exact_admitted, 1);
            Charge::exact(logged_score(at_ms, self.precision))
        });
        self.remember(&reply, at_ms);
        Ok(LeaseReply {
            reply,
            at_ms,
            source: Source::Exact,
            charge,
        })
    }

    /// Remembers an exact call's refusal (decided at `at_ms`) until its retry time; an admission
    /// or a refusal that never fits changes nothing.
    pub(crate) fn remember(&self, reply: &Reply, at_ms: u64) {
        if let Some(r) = Refusal::new(reply, at_ms, Instant::now()) {
            self.lock().refused = Some(r);
        }
    }

    /// `REFUND n AT at_ms`, counted; the caller has counted it in `refunding`.
    async fn refund(&self, n: u64, at_ms: u64) -> Result<u64, Error> {
        bump(&self.stats.calls, 1);
        bump(&self.stats.refund_calls, 1);
        let result = self.target.refund(&self.client, n, at_ms).await;
        match &result {
            Ok(_) => bump(&self.stats.refunded, n),
            Err(_) => bump(&self.stats.errors, 1),
        }
        if let (Ok(_), Some(hook)) = (&result, &self.on_refund) {
            self.target.keys().for_each(|k| hook(k));
        }
        {
            let mut st = self.lock();
            st.refunding -= 1;
            if result.is_ok() {
                // The room this refund made may admit what was refused.
                st.refused = None;
            }
        }
        self.refunds_done.notify_waiters();
        result.map(|_| n)
    }
}
