//! The sliding-window-log decision, generic over where the log is kept.
//!
//! Scores are ms timestamps. A member leaves the window once `score <= now - window`, exactly as the
//! seed's `ZREMRANGEBYSCORE key -inf now-window*1000`.

use super::error::{Error, MAX_KEYS, MAX_LIMITS};
#[cfg(feature = "panic-test")]
use super::fault::{self, Point};
use super::limits::{Limit, Limits, Scope, Standing, Tally};
use super::reply::{Detail, LimitState, Reply, wait_ms};

/// A log of request timestamps, oldest first. Scores are `f64` because a key may have been written by
/// something else (the Lua script, a person with ZADD) and may hold any score.
pub trait Log {
    /// Members in the log.
    fn count(&mut self) -> Result<u64, Error>;
    /// Members scored at or before `score`.
    fn count_through(&mut self, score: f64) -> Result<u64, Error>;
    /// Removes every member scored at or before `cutoff`; returns how many went.
    fn trim(&mut self, cutoff: i64) -> Result<u64, Error>;
    /// Adds `n` fresh members scored `score`.
    fn add(&mut self, score: u64, n: u64) -> Result<(), Error>;
    /// Score of the `k`-th oldest member, 1-based.
    fn kth_oldest(&mut self, k: u64) -> Result<Option<f64>, Error>;
    /// Score of the newest member.
    fn newest(&mut self) -> Result<Option<f64>, Error>;
}

/// One call, with `now` resolved: ALLOW's and PEEK's with one key's `Limits`, ALLOWALL's and
/// PEEKALL's with `KeyedLimits`. Every number is at most 2^53 (checked by the parser).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<S = Limits> {
    /// ALLOW: the positional limit first, then each `LIMIT` option; ALLOWALL: each `LIMIT` option
    /// in order, with its key (an index into the call's logs).
    pub limits: S,
    pub now: u64,
    /// The server's clock (ms) as the call read it, once: the TTL counts from it.
    pub clock: u64,
    pub cost: u64,
    /// Most members one admitted call may add (`slidingwindow.max-members-per-call`).
    pub max_add: u64,
    /// Where admitted members are scored (`args::score`): `now`, or a lease's end `now + ms`,
    /// rounded up to a multiple of `PRECISION p`; the TTL is `at - now` longer. `now <= at <= 2^53`.
    pub at: u64,
    /// `slidingwindow.lateness`: trims keep this many more ms, and the TTL is that much longer.
    pub lateness: u64,
    /// `DETAIL`: the outcome lists every limit's state.
    pub detail: bool,
}

impl<S: Scope> Request<S> {
    /// `now - window`: members scored at or before it have left that window. In `[-2^53, 2^53]`.
    pub fn cutoff(&self, window_ms: u64) -> i64 {
        to_i64(self.now).saturating_sub(to_i64(window_ms))
    }

    /// The absolute expiry (ms) an admission sets on key `key` (0 for ALLOW's): its own `Wmax_k
    /// + (score - now) + lateness` from the server's clock as the call read it.
    pub fn expire_at(&self, key: usize) -> i64 {
        expire_at(
            self.clock,
            self.limits.wmax(key),
            self.at.saturating_sub(self.now),
            self.lateness,
        )
    }

    fn call(&self) -> Call {
        Call {
            now: self.now,
            cost: self.cost,
            max_add: self.max_add,
            named: self.limits.named(),
            at: self.at,
            lateness: self.lateness,
            detail: self.detail,
        }
    }
}

/// `clock + longest + ahead + lateness`, saturated; `ahead` is how far after `now` the members
/// are scored.
fn expire_at(clock: u64, longest: u64, ahead: u64, lateness: u64) -> i64 {
    to_i64(clock)
        .saturating_add(to_i64(longest))
        .saturating_add(to_i64(ahead))
        .saturating_add(to_i64(lateness))
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// What a call did, for the caller to reply and to propagate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub reply: Reply,
    /// Members removed because they left the window.
    pub trimmed: u64,
    /// With `DETAIL`: every limit's state and the `now` used.
    pub detail: Option<Detail>,
}

/// Trim by the longest window (and `lateness` more), count each window, maybe add: one
/// `SLIDINGWINDOW.ALLOW` against `log`, the one-key case of `allow_all`. Each window shorter than
/// the longest (every window, with lateness) costs one count through its cutoff, and one k-th
/// oldest when it is full.
///
/// An admission that would add more than `max_add` members is an error that changes nothing, for
/// ALLOW and PEEK alike; a call that would be refused anyway just answers.
pub fn allow<L: Log>(log: &mut L, req: &Request) -> Result<Outcome, Error> {
    let logs = std::slice::from_mut(log);
    match req.limits.only() {
        // The common call, one limit: its per-limit arrays of one.
        Some(l) => decide::<L, _, 1, 1>(logs, std::iter::once((0, l)), &req.call()),
        None => decide::<L, _, 1, MAX_LIMITS>(logs, req.limits.each(), &req.call()),
    }
}

/// `SLIDINGWINDOW.PEEK`: what `allow` would answer now, without touching `log` (`trimmed` is
/// what it would remove).
pub fn peek<L: Log>(log: &mut L, req: &Request) -> Result<Outcome, Error> {
    allow(&mut Preview::new(log), req)
}

/// `SLIDINGWINDOW.ALLOWALL` against `logs` (one per key, in the call's order): every key trimmed
/// by its own longest window; admitted only if the cost fits every limit of every key, and then
/// added to every key. Always six integers.
pub fn allow_all<L: Log, S: Scope>(logs: &mut [L], req: &Request<S>) -> Result<Outcome, Error> {
    if logs.len() != req.limits.keys() {
        return Err(Error::Server("one log for each key"));
    }
    let call = req.call();
    // Per-limit arrays on the stack, sized for the common call or for the largest one.
    if req.limits.count() <= MAX_LIMITS {
        decide::<L, _, MAX_KEYS, MAX_LIMITS>(logs, req.limits.each(), &call)
    } else {
        decide::<L, _, MAX_KEYS, { MAX_KEYS * MAX_LIMITS }>(logs, req.limits.each(), &call)
    }
}

/// `SLIDINGWINDOW.PEEKALL`: what `allow_all` would answer now, touching no log.
pub fn peek_all<L: Log, S: Scope>(logs: &mut [L], req: &Request<S>) -> Result<Outcome, Error> {
    let mut views: Vec<Preview<'_, L>> = logs.iter_mut().map(Preview::new).collect();
    allow_all(&mut views, req)
}

/// What every limit of a call shares.
struct Call {
    now: u64,
    cost: u64,
    max_add: u64,
    /// Whether the reply names the binding limit (a sixth integer).
    named: bool,
    /// Where admitted members are scored: `now`, or later with `LEASE` or `PRECISION`.
    at: u64,
    /// Trims keep this many more ms.
    lateness: u64,
    /// Whether the outcome lists every limit's state.
    detail: bool,
}

impl Call {
    fn cutoff(&self, window_ms: u64) -> i64 {
        to_i64(self.now).saturating_sub(to_i64(window_ms))
    }
}

/// The decision over one or several logs, at most `K`; `limits` are `(log index, limit)` in
/// position order, at most `N`, every log having at least one.
fn decide<L, I, const K: usize, const N: usize>(
    logs: &mut [L],
    limits: I,
    call: &Call,
) -> Result<Outcome, Error>
where
    L: Log,
    I: Iterator<Item = (usize, Limit)> + Clone,
{
    let keys = logs.len().min(K);
    let mut longest = [0u64; K];
    for (k, l) in limits.clone() {
        if let Some(w) = longest.get_mut(k) {
            *w = (*w).max(l.window_ms);
        }
    }
    // Every key's error is known before the first key changes.
    let members = call.cost.saturating_mul(keys as u64);
    if members > call.max_add && admits_untrimmed(logs, limits.clone(), call)? {
        return Err(Error::TooManyMembers {
            cost: call.cost,
            keys,
            cap: call.max_add,
        });
    }
    let mut trimmed = 0u64;
    let mut before = [0u64; K];
    let late = to_i64(call.lateness);
    for ((log, b), w) in logs.iter_mut().zip(&mut before).zip(&longest) {
        // Lateness keeps more than any window holds, for a later call whose `now` is behind.
        let cutoff = call.cutoff(*w).saturating_sub(late);
        trimmed = trimmed.saturating_add(log.trim(cutoff)?);
        #[cfg(feature = "panic-test")]
        fault::hit(Point::AfterTrim);
        *b = log.count()?;
    }
    // Members left that are at or before each limit's cutoff; none for its key's longest window
    // when the trim cut exactly there (no lateness). Added members (scored `now` or later) never
    // are.
    let mut through = [0u64; N];
    for ((k, l), t) in limits.clone().zip(through.iter_mut()) {
        if late > 0 || l.window_ms < longest.get(k).copied().unwrap_or(0) {
            // Cutoffs are within +-2^53, so the conversion is exact.
            *t = log_of(logs, k)?.count_through(call.cutoff(l.window_ms) as f64)?;
        }
    }
    let allowed = limits.clone().zip(&through).all(|((k, l), t)| {
        let count = before.get(k).copied().unwrap_or(0);
        fits(count.saturating_sub(*t), call.cost, l.max)
    });
    if allowed {
        // Scored at or after `now` (a lease's end, rounded up to the precision), each member
        // stays in every window at least as long as one scored `now` would.
        for log in logs.iter_mut() {
            log.add(call.at, call.cost)?;
            #[cfg(feature = "panic-test")]
            fault::hit(Point::AfterAdd);
        }
    }
    let mut tally = Tally::default();
    // DETAIL's standings, with their keys; no allocation without it.
    let mut states = Vec::new();
    if call.detail {
        states.reserve_exact(limits.clone().count());
    }
    for ((k, l), t) in limits.clone().zip(&through) {
        let total = before.get(k).copied().unwrap_or(0);
        let total = if allowed {
            total.saturating_add(call.cost)
        } else {
            total
        };
        let count = total.saturating_sub(*t);
        let retry_ms = if call.cost > l.max {
            -1
        } else {
            // Only the `need` oldest members of this window have to leave before the cost fits.
            match count.saturating_add(call.cost).checked_sub(l.max) {
                None | Some(0) => 0,
                Some(need) => log_of(logs, k)?
                    .kth_oldest(t.saturating_add(need))?
                    .map_or(0, |s| wait_ms(s, call.cutoff(l.window_ms))),
            }
        };
        let standing = Standing {
            window_ms: l.window_ms,
            count,
            remaining: l.max.saturating_sub(count),
            retry_ms,
        };
        tally.push(standing);
        if call.detail {
            states.push((k, standing));
        }
    }
    let (b, bound) = tally.binding();
    // The newest member is in every window of its key that holds any member.
    let reset_after_ms = match bound.count {
        0 => 0,
        _ => log_of(logs, limits.clone().nth(b).map_or(0, |(k, _)| k))?
            .newest()?
            .map_or(0, |s| wait_ms(s, call.cutoff(bound.window_ms))),
    };
    let detail = match call.detail {
        true => Some(detail(logs, &states, call)?),
        false => None,
    };
    Ok(Outcome {
        reply: Reply {
            allowed,
            count: bound.count,
            remaining: bound.remaining,
            retry_after_ms: tally.retry_ms(),
            reset_after_ms,
            binding: call.named.then_some(b),
        },
        trimmed,
        detail,
    })
}

/// DETAIL: each limit's standing with its `reset_i` (the wait until its window is empty, from its
/// key's newest member, read once a key), in limit order.
fn detail<L: Log>(
    logs: &mut [L],
    states: &[(usize, Standing)],
    call: &Call,
) -> Result<Detail, Error> {
    let mut newest: [Option<Option<f64>>; MAX_KEYS] = [None; MAX_KEYS];
    let mut limits = Vec::with_capacity(states.len());
    for &(k, s) in states {
        let reset_ms = if s.count == 0 {
            0
        } else {
            let score = match newest.get(k).copied().flatten() {
                Some(score) => score,
                None => {
                    let score = log_of(logs, k)?.newest()?;
                    if let Some(slot) = newest.get_mut(k) {
                        *slot = Some(score);
                    }
                    score
                }
            };
            score.map_or(0, |n| wait_ms(n, call.cutoff(s.window_ms)))
        };
        limits.push(LimitState {
            count: s.count,
            remaining: s.remaining,
            retry_ms: s.retry_ms,
            reset_ms,
        });
    }
    Ok(Detail {
        limits,
        now: call.now,
    })
}

fn log_of<L>(logs: &mut [L], k: usize) -> Result<&mut L, Error> {
    logs.get_mut(k).ok_or(Error::Server("a log for each limit"))
}

/// Whether every limit of every key would admit the call, counted before any trim.
fn admits_untrimmed<L, I>(logs: &mut [L], limits: I, call: &Call) -> Result<bool, Error>
where
    L: Log,
    I: Iterator<Item = (usize, Limit)>,
{
    for (k, l) in limits {
        if call.cost > l.max {
            return Ok(false);
        }
        let log = log_of(logs, k)?;
        let all = log.count()?;
        // Cutoffs are within +-2^53, so the conversion is exact.
        let live = all.saturating_sub(log.count_through(call.cutoff(l.window_ms) as f64)?);
        if !fits(live, call.cost, l.max) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether `cost` more members fit under `max` next to `count`.
pub fn fits(count: u64, cost: u64, max: u64) -> bool {
    count.checked_add(cost).is_some_and(|total| total <= max)
}

/// A read-only view that plays trims and adds virtually over a log it never changes, so PEEK runs
/// the very same `allow` code as ALLOW.
pub struct Preview<'a, L> {
    log: &'a mut L,
    /// Stored members virtually trimmed.
    expired: u64,
    /// Members virtually added, all scored `at`.
    added: u64,
    at: f64,
}

impl<'a, L: Log> Preview<'a, L> {
    pub fn new(log: &'a mut L) -> Self {
        Preview {
            log,
            expired: 0,
            added: 0,
            at: 0.0,
        }
    }

    fn live(&mut self) -> Result<u64, Error> {
        Ok(self.log.count()?.saturating_sub(self.expired))
    }
}

impl<L: Log> Log for Preview<'_, L> {
    fn count(&mut self) -> Result<u64, Error> {
        Ok(self.live()?.saturating_add(self.added))
    }

    fn count_through(&mut self, score: f64) -> Result<u64, Error> {
        let stored = self.log.count_through(score)?.saturating_sub(self.expired);
        let virtual_ = if self.at <= score { self.added } else { 0 };
        Ok(stored.saturating_add(virtual_))
    }

    fn trim(&mut self, cutoff: i64) -> Result<u64, Error> {
        // Cutoffs are within +-2^53, so the conversion is exact.
        self.expired = self.log.count_through(cutoff as f64)?;
        Ok(self.expired)
    }

    fn add(&mut self, score: u64, n: u64) -> Result<(), Error> {
        self.at = score as f64;
        self.added = n;
        Ok(())
    }

    fn kth_oldest(&mut self, k: u64) -> Result<Option<f64>, Error> {
        let stored = self.log.kth_oldest(self.expired.saturating_add(k))?;
        if self.added == 0 {
            return Ok(stored);
        }
        // The virtual members (all at `at`) sit after every stored one scored up to `at`. Two rank
        // lookups settle it, whatever the number of stored members before `at`.
        if stored.is_some_and(|s| s <= self.at) {
            return Ok(stored);
        }
        if k <= self.added {
            return Ok(Some(self.at));
        }
        let earlier = self
            .log
            .kth_oldest(self.expired.saturating_add(k - self.added))?;
        Ok(earlier.map(|t| if t > self.at { t } else { self.at }))
    }

    fn newest(&mut self) -> Result<Option<f64>, Error> {
        let stored = match self.live()? {
            0 => None,
            _ => self.log.newest()?,
        };
        Ok(match (stored, self.added) {
            (s, 0) => s,
            (Some(s), _) if s > self.at => Some(s),
            _ => Some(self.at),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{KeyedLimits, Limit};
    use crate::rng::Rng;
    // The shared contract model (dev-only crate `testkit`): an independent reading of the contract.
    use testkit::model::Model;

    /// The simplest log: a sorted vector of scores.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct VecLog(pub Vec<f64>);

    impl Log for VecLog {
        fn count(&mut self) -> Result<u64, Error> {
            Ok(self.0.len() as u64)
        }
        fn count_through(&mut self, score: f64) -> Result<u64, Error> {
            Ok(self.0.iter().filter(|s| **s <= score).count() as u64)
        }
        fn trim(&mut self, cutoff: i64) -> Result<u64, Error> {
            let before = self.0.len();
            self.0.retain(|s| *s > cutoff as f64);
            Ok((before - self.0.len()) as u64)
        }
        fn add(&mut self, score: u64, n: u64) -> Result<(), Error> {
            self.0.extend(std::iter::repeat_n(score as f64, n as usize));
            self.0.sort_by(f64::total_cmp);
            Ok(())
        }
        fn kth_oldest(&mut self, k: u64) -> Result<Option<f64>, Error> {
            Ok(usize::try_from(k)
                .ok()
                .and_then(|k| k.checked_sub(1))
                .and_then(|i| self.0.get(i).copied()))
        }
        fn newest(&mut self) -> Result<Option<f64>, Error> {
            Ok(self.0.last().copied())
        }
    }

    /// Where the parser scores an admitted call's members (`args::score`), within 2^53.
    fn scored(now: u64, lease: u64, precision: u64) -> u64 {
        let some = |v| (v > 0).then_some(v);
        crate::args::score(now, some(lease), some(precision)).expect("within 2^53")
    }

    fn req(window_s: u64, max: u64, now: u64, cost: u64) -> Request {
        multi(&[(window_s, max)], now, cost)
    }

    /// Limits as (window s, max), the positional one first.
    fn multi(limits: &[(u64, u64)], now: u64, cost: u64) -> Request {
        let limit = |&(window_s, max): &(u64, u64)| Limit {
            window_ms: window_s * 1000,
            max,
        };
        let mut all = Limits::new(limit(&limits[0]));
        for l in &limits[1..] {
            assert!(all.push(limit(l)));
        }
        Request {
            limits: all,
            now,
            clock: now,
            cost,
            max_add: u64::MAX,
            at: now,
            lateness: 0,
            detail: false,
        }
    }

    fn reply(allowed: bool, count: u64, remaining: u64, retry: i64, reset: i64) -> Reply {
        Reply {
            allowed,
            count,
            remaining,
            retry_after_ms: retry,
            reset_after_ms: reset,
            binding: None,
        }
    }

    fn run(log: &[f64], r: &Request) -> (Reply, Vec<f64>, u64) {
        let mut l = VecLog(log.to_vec());
        let Ok(out) = allow(&mut l, r) else {
            panic!("{r:?} failed");
        };
        (out.reply, l.0, out.trimmed)
    }

    #[test]
    fn table() {
        // (stored scores, request, reply, stored after, trimmed)
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&[f64], Request, Reply, Vec<f64>, u64)> = vec![
            // Empty key, first request.
            (
                &[],
                req(10, 3, 1000, 1),
                reply(true, 1, 2, 0, 10_000),
                vec![1000.0],
                0,
            ),
            // Fills up exactly: the next request waits for the oldest.
            (
                &[100.0, 200.0],
                req(10, 3, 1000, 1),
                reply(true, 3, 0, 9100, 10_000),
                vec![100.0, 200.0, 1000.0],
                0,
            ),
            // Full: rejected, nothing added; retry when the oldest leaves.
            (
                &[100.0, 200.0, 300.0],
                req(10, 3, 1000, 1),
                reply(false, 3, 0, 9100, 9300),
                vec![100.0, 200.0, 300.0],
                0,
            ),
            // A member exactly at the cutoff leaves; one ms after stays.
            (
                &[1000.0, 1001.0],
                req(10, 2, 11_000, 1),
                reply(true, 2, 0, 1, 10_000),
                vec![1001.0, 11_000.0],
                1,
            ),
            // Cost larger than max: never admissible.
            (
                &[],
                req(10, 3, 1000, 4),
                reply(false, 0, 3, -1, 0),
                vec![],
                0,
            ),
            // Cost: need the 2nd oldest to leave.
            (
                &[100.0, 200.0, 300.0],
                req(10, 4, 1000, 3),
                reply(false, 3, 1, 9200, 9300),
                vec![100.0, 200.0, 300.0],
                0,
            ),
            // Cost admitted: the need-th oldest may be one of the new members.
            (
                &[],
                req(10, 4, 1000, 4),
                reply(true, 4, 0, 10_000, 10_000),
                vec![1000.0; 4],
                0,
            ),
            // Whole window expired.
            (
                &[1.0, 2.0, 3.0],
                req(1, 3, 5000, 1),
                reply(true, 1, 2, 0, 1000),
                vec![5000.0],
                3,
            ),
            // Members in the future count, and reset waits for them.
            (
                &[50_000.0],
                req(10, 1, 1000, 1),
                reply(false, 1, 0, 59_000, 59_000),
                vec![50_000.0],
                0,
            ),
            // Count above max (max lowered): remaining is 0, retry waits for enough to leave.
            (
                &[100.0, 200.0, 300.0, 400.0],
                req(10, 2, 1000, 1),
                reply(false, 4, 0, 9300, 9400),
                vec![100.0, 200.0, 300.0, 400.0],
                0,
            ),
            // Fractional scores written by others: round the wait up.
            (
                &[100.5],
                req(10, 1, 1000, 1),
                reply(false, 1, 0, 9101, 9101),
                vec![100.5],
                0,
            ),
            // now = 0: the cutoff is negative.
            (
                &[],
                req(10, 1, 0, 1),
                reply(true, 1, 0, 10_000, 10_000),
                vec![0.0],
                0,
            ),
        ];
        for (i, (log, r, want, after, trimmed)) in cases.into_iter().enumerate() {
            let (got, stored, t) = run(log, &r);
            assert_eq!(got, want, "case {i}");
            assert_eq!(stored, after, "case {i} stored");
            assert_eq!(t, trimmed, "case {i} trimmed");
        }
    }

    fn named(r: Reply, b: usize) -> Reply {
        Reply {
            binding: Some(b),
            ..r
        }
    }

    #[test]
    fn several_limits() {
        let sixteen: Vec<(u64, u64)> = (1..=16).map(|w| (w, 5)).collect();
        // (stored scores, request, reply, stored after, trimmed)
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&[f64], Request, Reply, Vec<f64>, u64)> = vec![
            // The cost is above the 1 s limit but not the 10 s one: never admissible, bound by
            // the 1 s limit (least remaining).
            (
                &[],
                multi(&[(10, 5), (1, 2)], 100_000, 3),
                named(reply(false, 0, 2, -1, 0), 1),
                vec![],
                0,
            ),
            // Above the positional limit only: -1, bound by it.
            (
                &[],
                multi(&[(1, 2), (60, 10)], 100_000, 3),
                named(reply(false, 0, 2, -1, 0), 0),
                vec![],
                0,
            ),
            // A member from the future counts in every window and sets the waits.
            (
                &[100_000.0, 200_000.0],
                multi(&[(10, 3), (1, 1)], 101_000, 1),
                named(reply(false, 1, 0, 100_000, 100_000), 1),
                vec![100_000.0, 200_000.0],
                0,
            ),
            // A LIMIT equal to the positional one: the same five integers, bound by position 0.
            (
                &[1000.0, 2000.0],
                multi(&[(10, 3), (10, 3)], 5000, 1),
                named(reply(true, 3, 0, 6000, 10_000), 0),
                vec![1000.0, 2000.0, 5000.0],
                0,
            ),
            // A limit longer than the positional one keeps what the positional would trim.
            (
                &[1000.0, 30_000.0, 59_500.0],
                multi(&[(1, 10), (60, 3)], 60_000, 1),
                named(reply(false, 3, 0, 1000, 59_500), 1),
                vec![1000.0, 30_000.0, 59_500.0],
                0,
            ),
            // The trim goes by the longest window; counts by each.
            (
                &[1000.0, 5000.0, 9000.0],
                multi(&[(5, 10), (10, 10)], 12_000, 1),
                named(reply(true, 3, 7, 0, 10_000), 1),
                vec![5000.0, 9000.0, 12_000.0],
                1,
            ),
            // A refused call still trims by the longest window.
            (
                &[1000.0, 15_000.0, 19_500.0],
                multi(&[(10, 5), (1, 1)], 20_000, 1),
                named(reply(false, 1, 0, 500, 500), 1),
                vec![15_000.0, 19_500.0],
                1,
            ),
            // Equal remaining: the larger retry binds, and is the call's retry.
            (
                &[1000.0, 9000.0],
                multi(&[(10, 2), (5, 1)], 10_000, 1),
                named(reply(false, 1, 0, 4000, 4000), 1),
                vec![1000.0, 9000.0],
                0,
            ),
            (
                &[3000.0, 9500.0],
                multi(&[(10, 2), (2, 1)], 10_000, 1),
                named(reply(false, 2, 0, 3000, 9500), 0),
                vec![3000.0, 9500.0],
                0,
            ),
            // The call's retry is the longest wait, even when another limit binds: the 10 s
            // limit has less left but the 60 s one makes the call wait longer.
            (
                &[20_000.0, 50_000.0, 55_000.0],
                multi(&[(60, 5), (10, 3)], 58_000, 3),
                named(reply(false, 2, 1, 22_000, 7000), 1),
                vec![20_000.0, 50_000.0, 55_000.0],
                0,
            ),
            // Equal remaining and retry: the longer window.
            (
                &[],
                multi(&[(5, 3), (10, 3)], 1000, 1),
                named(reply(true, 1, 2, 0, 10_000), 1),
                vec![1000.0],
                0,
            ),
            // 16 limits, all equal but their windows: the longest (the last) binds.
            (
                &[],
                multi(&sixteen, 1000, 1),
                named(reply(true, 1, 4, 0, 16_000), 15),
                vec![1000.0],
                0,
            ),
            // Cost fits one window's room only after the other's members leave.
            (
                &[500.0, 600.0, 9800.0],
                multi(&[(1, 3), (10, 4)], 10_000, 2),
                named(reply(false, 3, 1, 500, 9800), 1),
                vec![500.0, 600.0, 9800.0],
                0,
            ),
        ];
        for (i, (log, r, want, after, trimmed)) in cases.into_iter().enumerate() {
            let (got, stored, t) = run(log, &r);
            assert_eq!(got, want, "case {i}");
            assert_eq!(stored, after, "case {i} stored");
            assert_eq!(t, trimmed, "case {i} trimmed");
            let mut l = VecLog(log.to_vec());
            assert_eq!(peek(&mut l, &r).map(|o| o.reply), Ok(want), "case {i} peek");
            assert_eq!(l.0, log.to_vec(), "case {i}: peek changed the log");
            // The independent model agrees.
            let scores: Vec<u64> = log.iter().map(|s| *s as u64).collect();
            let limits: Vec<(u64, u64)> = r
                .limits
                .iter()
                .map(|l| (l.window_ms / 1000, l.max))
                .collect();
            let mut m = Model { scores };
            assert_eq!(
                m.allow_limits(&limits, r.now, r.cost),
                &*want.fields(),
                "case {i} model"
            );
        }
    }

    /// The next call's time: mostly a little later, sometimes back by up to half the longest
    /// window, sometimes past every window.
    fn next_now(rng: &mut Rng, now: u64, longest: u64) -> u64 {
        match rng.range(0, 9) {
            0 => now.saturating_sub(rng.range(0, longest / 2)),
            1 => now + longest * rng.range(1, 2),
            _ => now + rng.range(0, longest / 20),
        }
    }

    #[test]
    fn several_limits_follow_the_model_and_peek_equals_allow() {
        let mut rng = Rng::new(0x11_1175);
        // Admitted, refused, and bound by a LIMIT option: each must happen.
        let mut seen = [0u32; 3];
        for stream in 0..300 {
            let mut log = VecLog::default();
            let mut model = Model::default();
            // 1 to 4 limits, in any order, windows sometimes equal.
            let limits: Vec<(u64, u64)> = (0..rng.range(1, 4))
                .map(|_| (rng.pick(&[1, 2, 5, 10, 60]), rng.range(1, 12)))
                .collect();
            let longest = limits.iter().map(|l| l.0).max().unwrap_or(1) * 1000;
            let mut now: u64 = 100_000;
            for step in 0..150 {
                now = next_now(&mut rng, now, longest);
                let cost = if rng.chance(70) { 1 } else { rng.range(1, 14) };
                let r = multi(&limits, now, cost);
                let before = log.clone();
                let Ok(peeked) = peek(&mut log, &r).map(|o| o.reply) else {
                    panic!("{r:?} failed");
                };
                assert_eq!(log, before, "peek changed the log");
                let Ok(out) = allow(&mut log, &r) else {
                    panic!("{r:?} failed");
                };
                assert_eq!(
                    peeked, out.reply,
                    "stream {stream} step {step}: {r:?} on {before:?}"
                );
                let want = model.allow_limits(&limits, now, cost);
                assert_eq!(
                    &*out.reply.fields(),
                    want,
                    "stream {stream} step {step}: {r:?} on {before:?}"
                );
                let stored: Vec<u64> = log.0.iter().map(|s| *s as u64).collect();
                assert_eq!(stored, model.scores, "stream {stream} step {step}");
                seen[usize::from(out.reply.allowed)] += 1;
                seen[2] += u32::from(out.reply.binding.is_some_and(|b| b > 0));
            }
        }
        assert!(seen.iter().all(|n| *n > 3000), "{seen:?}");
    }

    #[test]
    fn limit_options_equal_to_the_positional_one_change_nothing_but_the_sixth_integer() {
        let mut rng = Rng::new(0xE0_0A1);
        let mut plain = VecLog::default();
        let mut with = VecLog::default();
        let mut now = 50_000;
        for _ in 0..3000 {
            now += rng.range(0, 700);
            let (w, max, cost) = (rng.range(1, 5), rng.range(1, 8), rng.range(1, 3));
            let copies = vec![(w, max); rng.range(2, 16) as usize];
            let Ok(a) = allow(&mut plain, &req(w, max, now, cost)) else {
                panic!("failed");
            };
            let Ok(b) = allow(&mut with, &multi(&copies, now, cost)) else {
                panic!("failed");
            };
            assert_eq!(b.reply, named(a.reply, 0));
            assert_eq!(plain, with);
        }
    }

    #[test]
    fn peek_plays_trims_and_adds_virtually() {
        // (stored scores, request): PEEK must answer ALLOW's reply and leave the log alone.
        let cases: &[(&[f64], Request)] = &[
            // A member from a clock ahead sorts after the virtual adds.
            (&[100.0, 200.0, 5000.0], req(10, 10, 1000, 6)),
            // The need-th oldest is a virtual member.
            (&[100.0, 5000.0], req(10, 4, 1000, 2)),
            // The need-th oldest is the member from the future.
            (&[100.0, 5000.0], req(10, 3, 1000, 1)),
            // Trimmed members do not count, stored or virtual.
            (&[1.0, 2.0, 900.0, 5000.0], req(1, 3, 1000, 1)),
            // Everything expired.
            (&[1.0, 2.0], req(1, 2, 5000, 2)),
        ];
        for (log, r) in cases {
            let (want, _, _) = run(log, r);
            let mut l = VecLog(log.to_vec());
            let Ok(got) = peek(&mut l, r).map(|o| o.reply) else {
                panic!("{r:?} failed");
            };
            assert_eq!(got, want, "{log:?} {r:?}");
            assert_eq!(l.0, log.to_vec(), "peek changed {log:?}");
        }
    }

    #[test]
    fn admissions_above_the_cap_are_refused_before_any_change() {
        // 1000 has left the window at 20000 (cutoff 10000); 15000 is live.
        let stored = [1000.0, 15_000.0];
        let capped = |max, cost, max_add| Request {
            max_add,
            ..req(10, max, 20_000, cost)
        };
        // (request, what ALLOW and PEEK answer)
        let cases = [
            // Admissible but above the cap: an error, and the expired member stays.
            (
                capped(10, 5, 4),
                Err(Error::TooManyMembers {
                    cost: 5,
                    keys: 1,
                    cap: 4,
                }),
            ),
            // Refused anyway: the ordinary answer, whatever the cap.
            (capped(5, 5, 4), Ok(reply(false, 1, 4, 5000, 5000))),
            // At the cap: admitted.
            (capped(10, 4, 4), Ok(reply(true, 5, 5, 0, 10_000))),
            // Several limits: the cap applies only when every limit would admit the call.
            (
                Request {
                    max_add: 4,
                    ..multi(&[(10, 10), (1, 6)], 20_000, 5)
                },
                Err(Error::TooManyMembers {
                    cost: 5,
                    keys: 1,
                    cap: 4,
                }),
            ),
            (
                Request {
                    max_add: 4,
                    ..multi(&[(10, 10), (1, 4)], 20_000, 5)
                },
                Ok(named(reply(false, 0, 4, -1, 0), 1)),
            ),
            // Refused by the longer limit (15000 is still in its window): no error.
            (
                Request {
                    max_add: 4,
                    ..multi(&[(1, 10), (10, 5)], 20_000, 5)
                },
                Ok(named(reply(false, 1, 4, 5000, 5000), 1)),
            ),
        ];
        for (r, want) in cases {
            let mut l = VecLog(stored.to_vec());
            assert_eq!(peek(&mut l, &r).map(|o| o.reply), want, "peek {r:?}");
            assert_eq!(l.0, stored.to_vec());
            let got = allow(&mut l, &r).map(|o| o.reply);
            assert_eq!(got, want, "allow {r:?}");
            if want.is_err() {
                assert_eq!(l.0, stored.to_vec(), "a refused call changed the log");
            }
        }
    }

    /// The contract's reply, straight from its definitions in wide integers: the oracle for
    /// logs whose scores the u64 model cannot hold (infinities, huge and negative scores).
    fn contract_reply(log: &[f64], limits: &[(u64, u64)], now: u64, cost: u64) -> Reply {
        let (now, cost) = (i128::from(now), i128::from(cost));
        let cutoff = |window_s: u64| now - i128::from(window_s) * 1000;
        let longest = limits.iter().map(|l| l.0).max().unwrap_or(1);
        let mut kept: Vec<f64> = log
            .iter()
            .copied()
            .filter(|s| *s > cutoff(longest) as f64)
            .collect();
        kept.sort_by(f64::total_cmp);
        let stored = |w: u64| kept.iter().filter(|s| **s > cutoff(w) as f64).count() as i128;
        let admitted = limits
            .iter()
            .all(|&(w, max)| stored(w) + cost <= i128::from(max));
        // A window's members oldest first, the call's own (scored now) among them if admitted.
        let kth = |w: u64, k: i128| -> Option<f64> {
            let mut all: Vec<f64> = kept
                .iter()
                .copied()
                .filter(|s| *s > cutoff(w) as f64)
                .collect();
            let added = if admitted { cost.min(k) } else { 0 };
            all.extend(std::iter::repeat_n(now as f64, added as usize));
            all.sort_by(f64::total_cmp);
            all.get(usize::try_from(k - 1).ok()?).copied()
        };
        // `score + W - now`, never negative, saturated at i64.
        let wait = |score: f64, w: u64| -> i64 {
            let v = (score.ceil() as i128).saturating_sub(cutoff(w)).max(0);
            i64::try_from(v).unwrap_or(i64::MAX)
        };
        // (remaining, retry, window, position, count, reset) of each limit.
        let standings: Vec<(i128, i64, u64, usize, i128, i64)> = limits
            .iter()
            .enumerate()
            .map(|(i, &(w, max))| {
                let count = stored(w) + if admitted { cost } else { 0 };
                let need = count + cost - i128::from(max);
                let retry = match () {
                    _ if cost > i128::from(max) => -1,
                    _ if need <= 0 => 0,
                    _ => kth(w, need).map_or(0, |s| wait(s, w)),
                };
                let newest = kth(w, count);
                let reset = if count == 0 {
                    0
                } else {
                    newest.map_or(0, |s| wait(s, w))
                };
                ((i128::from(max) - count).max(0), retry, w, i, count, reset)
            })
            .collect();
        let infinite = |r: i64| {
            if r < 0 {
                i64::MAX as i128 + 1
            } else {
                i128::from(r)
            }
        };
        let b = standings
            .iter()
            .min_by(|x, y| {
                (x.0, -infinite(x.1), u64::MAX - x.2, x.3).cmp(&(
                    y.0,
                    -infinite(y.1),
                    u64::MAX - y.2,
                    y.3,
                ))
            })
            .copied()
            .unwrap_or_default();
        let retry = if standings.iter().any(|s| s.1 < 0) {
            -1
        } else {
            standings.iter().map(|s| s.1).max().unwrap_or(0)
        };
        Reply {
            allowed: admitted,
            count: b.4 as u64,
            remaining: b.0 as u64,
            retry_after_ms: retry,
            reset_after_ms: b.5,
            binding: (limits.len() > 1).then_some(b.3),
        }
    }

    #[test]
    fn extremes_do_not_overflow() {
        let top = crate::error::MAX_EXACT;
        let win = crate::error::MAX_WINDOW_SECONDS;
        let weird = [f64::NEG_INFINITY, -1e300, -1.0, 0.0, 1e300, f64::INFINITY];
        for now in [0, 1, top - 1, top] {
            for window in [1, win] {
                for cost in [1, top] {
                    for max in [1, top] {
                        let one = [(window, max)];
                        let three = [(window, max), (1, top), (win, 1)];
                        for (limits, r) in [
                            (&one[..], req(window, max, now, cost)),
                            (&three[..], multi(&three, now, cost)),
                        ] {
                            let (got, _, _) = run(&weird, &r);
                            let want = contract_reply(&weird, limits, now, cost);
                            assert_eq!(got, want, "{r:?}");
                            let mut l = VecLog(weird.to_vec());
                            let Ok(p) = peek(&mut l, &r).map(|o| o.reply) else {
                                panic!("{r:?} failed");
                            };
                            assert_eq!(p, got, "peek {r:?}");
                        }
                    }
                }
            }
        }
        // -1 and 0 are still in a 1 s window at 0, beside the two future members: the 4th
        // oldest and the newest are +inf, the longest waits there are.
        let max_wait = i64::MAX;
        let (got, _, _) = run(&weird, &req(1, 1, 0, 1));
        assert_eq!(got, reply(false, 4, 0, max_wait, max_wait));
        // At 2^53 only the future members are left; a cost of 2^53 never fits the max of 1,
        // which binds (its retry, -1, counts as the longest).
        let (got, _, _) = run(&weird, &multi(&[(1, top), (win, 1)], top, top));
        assert_eq!(got, named(reply(false, 2, 0, -1, max_wait), 1));
        assert_eq!(req(win, 1, 0, 1).cutoff(win * 1000), -9_007_199_254_740_000);
        assert_eq!(req(1, 1, top, 1).cutoff(1000), 9_007_199_254_739_992);
    }

    #[test]
    fn peek_equals_allow_and_changes_nothing() {
        let mut rng = Rng::new(7);
        let mut log = VecLog::default();
        let mut now: u64 = 50_000;
        for _ in 0..20_000 {
            // Time moves forward, backward and across whole windows.
            now = match rng.range(0, 9) {
                0 => now.saturating_sub(rng.range(0, 4999)),
                1 => now + rng.range(0, 29_999),
                _ => now + rng.range(0, 299),
            };
            let r = req(rng.range(1, 5), rng.range(1, 12), now, rng.range(1, 4));
            let before = log.clone();
            let Ok(peeked) = peek(&mut log, &r).map(|o| o.reply) else {
                panic!("{r:?} failed");
            };
            assert_eq!(log, before, "peek changed the log");
            let Ok(out) = allow(&mut log, &r) else {
                panic!("{r:?} failed");
            };
            assert_eq!(peeked, out.reply, "{r:?} on {before:?}");
            assert!(
                out.reply.count
                    <= r.limits
                        .iter()
                        .next()
                        .map_or(0, |l| l.max)
                        .max(before.0.len() as u64)
            );
        }
    }

    fn all_req(
        keys: usize,
        limits: &[(usize, u64, u64)],
        now: u64,
        cost: u64,
    ) -> Request<KeyedLimits> {
        let mut all = KeyedLimits::with_capacity(keys, 0);
        for &(k, w, max) in limits {
            assert!(all.push(
                k,
                Limit {
                    window_ms: w * 1000,
                    max
                }
            ));
        }
        Request {
            limits: all,
            now,
            clock: now,
            cost,
            max_add: u64::MAX,
            at: now,
            lateness: 0,
            detail: false,
        }
    }

    #[test]
    fn several_keys_follow_the_model_and_peek_equals_allow() {
        let mut rng = Rng::new(0xA11_4EE5);
        // Admitted, refused, bound by a key past the first, refused by one key only.
        let mut seen = [0u32; 4];
        for stream in 0..120 {
            let keys = rng.range(1, 16) as usize;
            let mut limits: Vec<(usize, u64, u64)> = Vec::new();
            for k in 0..keys {
                let most = if rng.chance(20) { 16 } else { 3 };
                for _ in 0..rng.range(1, most) {
                    limits.push((k, rng.pick(&[1, 2, 5, 10, 60]), rng.range(1, 12)));
                }
            }
            // Limits in any order of keys.
            for i in (1..limits.len()).rev() {
                limits.swap(i, rng.range(0, i as u64) as usize);
            }
            let longest = limits.iter().map(|l| l.1).max().unwrap_or(1) * 1000;
            let mut logs = vec![VecLog::default(); keys];
            let mut models = vec![Model::default(); keys];
            let mut now: u64 = 100_000;
            for step in 0..60 {
                now = next_now(&mut rng, now, longest);
                // Some keys also see traffic of their own.
                if rng.chance(30) {
                    let k = rng.range(0, keys as u64 - 1) as usize;
                    let at = now.saturating_sub(rng.range(0, 2000));
                    let n = rng.range(1, 3);
                    let _ = logs[k].add(at, n);
                    models[k].scores.extend(std::iter::repeat_n(at, n as usize));
                    models[k].scores.sort_unstable();
                }
                let cost = if rng.chance(70) { 1 } else { rng.range(1, 14) };
                let r = all_req(keys, &limits, now, cost);
                let before = logs.clone();
                let Ok(peeked) = peek_all(&mut logs, &r).map(|o| o.reply) else {
                    panic!("{r:?} failed");
                };
                assert_eq!(logs, before, "peek changed a log");
                assert_eq!(
                    &*peeked.fields(),
                    Model::peek_all(&models, &limits, now, cost),
                    "stream {stream} step {step}: peek"
                );
                let Ok(out) = allow_all(&mut logs, &r) else {
                    panic!("{r:?} failed");
                };
                assert_eq!(peeked, out.reply, "stream {stream} step {step}");
                let want = Model::allow_all(&mut models, &limits, now, cost);
                assert_eq!(&*out.reply.fields(), want, "stream {stream} step {step}");
                for (log, model) in logs.iter().zip(&models) {
                    let stored: Vec<u64> = log.0.iter().map(|s| *s as u64).collect();
                    assert_eq!(stored, model.scores, "stream {stream} step {step}");
                }
                seen[usize::from(out.reply.allowed)] += 1;
                let b = out.reply.binding.unwrap_or(0);
                seen[2] += u32::from(limits[b].0 > 0);
                seen[3] += u32::from(!out.reply.allowed && keys > 1);
            }
        }
        assert!(seen.iter().all(|n| *n > 300), "{seen:?}");
    }

    #[test]
    fn one_key_allowall_is_allow_with_a_sixth_integer() {
        let mut rng = Rng::new(0x0E_4E11);
        for _ in 0..200 {
            let limits: Vec<(u64, u64)> = (0..rng.range(1, 16))
                .map(|_| (rng.range(1, 10), rng.range(1, 9)))
                .collect();
            let keyed: Vec<(usize, u64, u64)> = limits.iter().map(|&(w, m)| (0, w, m)).collect();
            let mut one = VecLog::default();
            let mut all = [VecLog::default()];
            let mut now = 50_000u64;
            for _ in 0..40 {
                now = if rng.chance(10) {
                    now.saturating_sub(rng.range(0, 3000))
                } else {
                    now + rng.range(0, 900)
                };
                let cost = rng.range(1, 3);
                let Ok(a) = allow(&mut one, &multi(&limits, now, cost)) else {
                    panic!("allow failed");
                };
                let Ok(b) = allow_all(&mut all, &all_req(1, &keyed, now, cost)) else {
                    panic!("allow_all failed");
                };
                assert_eq!(b.reply, named(a.reply, a.reply.binding.unwrap_or(0)));
                assert_eq!(b.trimmed, a.trimmed);
                assert_eq!(one, all[0]);
            }
        }
    }

    #[test]
    fn several_keys_refused_by_one_change_none() {
        // Key 1 has room, key 2 (index 1) is full: nothing added anywhere; the trims stay.
        let mut logs = vec![VecLog(vec![1.0, 9000.0]), VecLog(vec![8000.0, 9500.0])];
        let r = all_req(2, &[(0, 5, 10), (1, 10, 2)], 10_000, 1);
        let Ok(out) = allow_all(&mut logs, &r) else {
            panic!("failed");
        };
        assert_eq!(out.reply, named(reply(false, 2, 0, 8000, 9500), 1));
        assert_eq!(out.trimmed, 1);
        assert_eq!(logs, [VecLog(vec![9000.0]), VecLog(vec![8000.0, 9500.0])]);
        // Wrong number of logs: an error, nothing changed.
        assert!(allow_all(&mut logs[..1], &r).is_err());
    }

    #[test]
    fn the_cap_counts_every_key_and_comes_before_any_change() {
        let stored = [VecLog(vec![1000.0]), VecLog(vec![1000.0])];
        // 3 members to each of two keys: 6 > 5, admissible on both: an error, no trim.
        let r = Request {
            max_add: 5,
            ..all_req(2, &[(0, 1, 10), (1, 1, 10)], 20_000, 3)
        };
        let mut logs = stored.to_vec();
        assert_eq!(
            peek_all(&mut logs, &r).map(|o| o.reply),
            Err(Error::TooManyMembers {
                cost: 3,
                keys: 2,
                cap: 5,
            })
        );
        assert_eq!(
            allow_all(&mut logs, &r).map(|o| o.reply),
            Err(Error::TooManyMembers {
                cost: 3,
                keys: 2,
                cap: 5,
            })
        );
        assert_eq!(logs, stored);
        // Refused by the second key anyway: the ordinary answer.
        let r = Request {
            max_add: 5,
            ..all_req(2, &[(0, 1, 10), (1, 1, 2)], 20_000, 3)
        };
        let got = allow_all(&mut logs, &r).map(|o| o.reply);
        assert_eq!(got, Ok(named(reply(false, 0, 2, -1, 0), 1)));
        // Within the cap: admitted.
        let r = Request {
            max_add: 6,
            ..all_req(2, &[(0, 1, 10), (1, 1, 10)], 20_000, 3)
        };
        assert!(allow_all(&mut logs, &r).is_ok_and(|o| o.reply.allowed));
    }

    /// A lease logs the members at `now + ms`: decided at `now`, the reply computed at `now`
    /// (so the reset includes `ms`), the TTL longer by `ms`.
    #[test]
    fn a_lease_logs_its_members_at_its_end() {
        let leased = |r: Request, lease| Request {
            at: r.now + lease,
            ..r
        };
        // (stored, request, reply, stored after)
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&[f64], Request, Reply, Vec<f64>)> = vec![
            (
                &[],
                leased(req(10, 3, 1000, 2), 500),
                reply(true, 2, 1, 10_500, 10_500),
                vec![1500.0, 1500.0],
            ),
            // Inside the lease its permits count as members from the future.
            (
                &[1500.0, 1500.0],
                req(10, 3, 1200, 1),
                reply(true, 3, 0, 10_000, 10_300),
                vec![1200.0, 1500.0, 1500.0],
            ),
            // Refused: decided at now, nothing added, the TTL untouched.
            (
                &[1500.0, 1500.0],
                leased(req(10, 2, 1200, 1), 900),
                reply(false, 2, 0, 10_300, 10_300),
                vec![1500.0, 1500.0],
            ),
            // The trim is at now, not at now + ms.
            (
                &[100.0, 9000.0],
                leased(req(10, 2, 10_100, 1), 5000),
                reply(true, 2, 0, 8900, 15_000),
                vec![9000.0, 15_100.0],
            ),
        ];
        for (i, (log, r, want, after)) in cases.into_iter().enumerate() {
            let (got, stored, _) = run(log, &r);
            assert_eq!(got, want, "case {i}");
            assert_eq!(stored, after, "case {i} stored");
            let mut l = VecLog(log.to_vec());
            assert_eq!(peek(&mut l, &r).map(|o| o.reply), Ok(want), "case {i} peek");
        }
        let r = Request {
            clock: 7,
            at: 1000 + 500,
            lateness: 40,
            ..multi(&[(10, 3), (60, 9)], 1000, 1)
        };
        assert_eq!(r.expire_at(0), 7 + 60_000 + 500 + 40);
    }

    /// `PRECISION p` scores the members at `now` (or a lease's end) rounded up to a multiple of
    /// `p`: decided at `now` as without it, the reply computed at `now`, the TTL as far ahead.
    #[test]
    fn precision_rounds_the_members_score_up() {
        let coarse = |r: Request, lease, precision| Request {
            at: scored(r.now, lease, precision),
            ..r
        };
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&[f64], Request, Reply, Vec<f64>)> = vec![
            (
                &[],
                coarse(req(10, 3, 1001, 2), 0, 1000),
                reply(true, 2, 1, 10_999, 10_999),
                vec![2000.0, 2000.0],
            ),
            // On a multiple of p, or with p = 1: scored now.
            (
                &[],
                coarse(req(10, 3, 3000, 1), 0, 1000),
                reply(true, 1, 2, 0, 10_000),
                vec![3000.0],
            ),
            (
                &[],
                coarse(req(10, 3, 3001, 1), 0, 1),
                reply(true, 1, 2, 0, 10_000),
                vec![3001.0],
            ),
            // With a lease: its end, rounded up.
            (
                &[2000.0],
                coarse(req(10, 3, 1001, 1), 500, 1000),
                reply(true, 2, 1, 0, 10_999),
                vec![2000.0, 2000.0],
            ),
            // Refused: nothing added; a member rounded up counts until its score leaves.
            (
                &[2000.0, 2000.0],
                coarse(req(1, 2, 2500, 1), 0, 1000),
                reply(false, 2, 0, 500, 500),
                vec![2000.0, 2000.0],
            ),
            // The trim is at now.
            (
                &[1000.0, 2000.0],
                coarse(req(1, 2, 2000, 1), 0, 700),
                reply(true, 2, 0, 1000, 1100),
                vec![2000.0, 2100.0],
            ),
        ];
        for (i, (log, r, want, after)) in cases.into_iter().enumerate() {
            let (got, stored, _) = run(log, &r);
            assert_eq!(got, want, "case {i}");
            assert_eq!(stored, after, "case {i} stored");
            let mut l = VecLog(log.to_vec());
            assert_eq!(peek(&mut l, &r).map(|o| o.reply), Ok(want), "case {i} peek");
        }
        let r = Request {
            clock: 7,
            at: scored(1001, 500, 1000),
            lateness: 40,
            ..multi(&[(10, 3), (60, 9)], 1001, 1)
        };
        assert_eq!(r.at, 2000);
        assert_eq!(r.expire_at(0), 7 + 60_000 + 999 + 40);
    }

    /// Lateness keeps G more ms in the log and changes no reply: members at or before
    /// `now - W` are outside the window whether or not they are still stored.
    #[test]
    fn lateness_keeps_more_and_answers_the_same_in_order() {
        let mut rng = Rng::new(0x1A7E);
        for stream in 0..200 {
            let limits: Vec<(u64, u64)> = (0..rng.range(1, 4))
                .map(|_| (rng.pick(&[1, 2, 5, 10]), rng.range(1, 9)))
                .collect();
            let late = rng.pick(&[1, 300, 5000, 86_400_000]);
            let (mut plain, mut kept) = (VecLog::default(), VecLog::default());
            let mut now = 100_000;
            for step in 0..100 {
                // Never back: an in-order caller.
                now += rng.pick(&[0, 10, 200, 900, 4000, 30_000]);
                let cost = rng.range(1, 3);
                let a = allow(&mut plain, &multi(&limits, now, cost));
                let r = Request {
                    lateness: late,
                    ..multi(&limits, now, cost)
                };
                let b = allow(&mut kept, &r);
                let (Ok(a), Ok(b)) = (a, b) else {
                    panic!("stream {stream} step {step} failed");
                };
                assert_eq!(a.reply, b.reply, "stream {stream} step {step}");
                // The late log holds everything the plain one does, and only what is at most
                // G ms older than the longest window.
                assert!(plain.0.iter().all(|s| kept.0.contains(s)));
                let wmax = limits.iter().map(|l| l.0).max().unwrap_or(1) * 1000;
                let floor = now as f64 - wmax as f64 - late as f64;
                assert!(
                    kept.0.iter().all(|s| *s > floor),
                    "stream {stream} step {step}"
                );
            }
        }
    }

    /// LEASE, PRECISION, DETAIL and lateness over one and several keys, time going back within and
    /// beyond the lateness: every answer, every limit's state and the stored scores equal the
    /// model's; PEEK answers ALLOW's detail too.
    #[test]
    fn options_follow_the_model_and_peek_equals_allow() {
        use testkit::model::Options;
        let mut rng = Rng::new(0x0E_7105);
        // Admitted with a lease, refused with a lease, detailed, late calls kept in view.
        let mut seen = [0u32; 3];
        for stream in 0..150 {
            let keys = if rng.chance(30) { rng.range(2, 4) } else { 1 } as usize;
            let mut limits: Vec<(usize, u64, u64)> = Vec::new();
            for k in 0..keys {
                for _ in 0..rng.range(1, 3) {
                    limits.push((k, rng.pick(&[1, 2, 5, 10]), rng.range(1, 9)));
                }
            }
            let lateness = rng.pick(&[0, 0, 500, 3000]);
            let mut logs = vec![VecLog::default(); keys];
            let mut models = vec![Model::default(); keys];
            let mut now: u64 = 100_000;
            for step in 0..80 {
                now = next_now(&mut rng, now, 10_000);
                let lease = if rng.chance(40) {
                    rng.range(1, 3000)
                } else {
                    0
                };
                let precision = rng.pick(&[1, 1, 7, 1000]);
                let detail = rng.chance(50);
                let cost = rng.range(1, 3);
                let options = Options {
                    lease,
                    lateness,
                    precision,
                };
                let what = format!("stream {stream} step {step}");
                let before = logs.clone();
                // One key: ALLOW and PEEK with the same limits; else ALLOWALL and PEEKALL.
                let single = keys == 1 && rng.chance(70);
                let (peeked, out) = if single {
                    let plain: Vec<(u64, u64)> = limits.iter().map(|l| (l.1, l.2)).collect();
                    let r = Request {
                        at: scored(now, lease, precision),
                        lateness,
                        detail,
                        ..multi(&plain, now, cost)
                    };
                    (peek(&mut logs[0], &r), allow(&mut logs[0], &r))
                } else {
                    let r = Request {
                        at: scored(now, lease, precision),
                        lateness,
                        detail,
                        ..all_req(keys, &limits, now, cost)
                    };
                    (peek_all(&mut logs, &r), allow_all(&mut logs, &r))
                };
                let (Ok(peeked), Ok(out)) = (peeked, out) else {
                    panic!("{what} failed");
                };
                assert_eq!(peeked.reply, out.reply, "{what}");
                assert_eq!(peeked.detail, out.detail, "{what}: PEEK's detail");
                let want = Model::call_all(&mut models, &limits, now, cost, options);
                assert_eq!(
                    &*out.reply.named_fields(),
                    want.head,
                    "{what} on {before:?}"
                );
                match &out.detail {
                    Some(d) => {
                        let got: Vec<[i64; 4]> = d.limits.iter().map(|l| l.fields()).collect();
                        assert_eq!(got, want.limits, "{what}: detail");
                        assert_eq!(d.now, now, "{what}: detail's now");
                        seen[2] += 1;
                    }
                    None => assert!(!detail, "{what}: no detail"),
                }
                for (log, model) in logs.iter().zip(&models) {
                    let stored: Vec<u64> = log.0.iter().map(|s| *s as u64).collect();
                    assert_eq!(stored, model.scores, "{what}");
                }
                if lease > 0 {
                    seen[usize::from(out.reply.allowed)] += 1;
                }
            }
        }
        assert!(seen.iter().all(|n| *n > 500), "{seen:?}");
    }
}
