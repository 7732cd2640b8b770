//! Fuzzes `window::allow` and `window::peek` over an in-memory log seeded with arbitrary scores
//! (inf, -inf, huge, negative, fractional), then a sequence of requests (one to sixteen limits,
//! some with `LEASE`, `DETAIL` and a lateness) and foreign writes. Each step checks PEEK against
//! ALLOW (their detail too), and both against the contract's formulas computed afresh (several
//! limits: trim by the longest and the lateness, the binding limit, the retry, every limit's
//! state, a lease's members at its end).

#![no_main]

// The module's pure logic (crate `slidingwindow-core`).
use slidingwindow_core::{error, limits, reply, window};

use error::{Error, MAX_EXACT, MAX_LIMITS, MAX_WINDOW_SECONDS};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use limits::{Limit, Limits};
use reply::{LimitState, Reply};
use testkit::model::{Model, Options};
use window::{Log, Request};

/// A sorted set reduced to what the decision reads: runs of (score, members), sorted by score.
/// Runs keep memory bounded whatever the cost, up to 2^53 members per call.
#[derive(Debug, Clone, Default, PartialEq)]
struct RunLog(Vec<(f64, u64)>);

impl RunLog {
    /// Adds `n` members scored `score` (never NaN: a sorted set cannot hold it).
    fn insert(&mut self, score: f64, n: u64) {
        if n == 0 {
            return;
        }
        let at = self.0.partition_point(|(s, _)| s.total_cmp(&score).is_lt());
        match self.0.get_mut(at) {
            Some((s, count)) if s.to_bits() == score.to_bits() => *count += n,
            _ => self.0.insert(at, (score, n)),
        }
    }

    fn total(&self) -> u64 {
        self.0.iter().map(|(_, n)| n).sum()
    }
}

impl Log for RunLog {
    fn count(&mut self) -> std::result::Result<u64, Error> {
        Ok(self.total())
    }

    fn count_through(&mut self, score: f64) -> std::result::Result<u64, Error> {
        Ok(self
            .0
            .iter()
            .filter(|(s, _)| *s <= score)
            .map(|(_, n)| n)
            .sum())
    }

    fn trim(&mut self, cutoff: i64) -> std::result::Result<u64, Error> {
        let before = self.total();
        self.0.retain(|(s, _)| *s > cutoff as f64);
        Ok(before - self.total())
    }

    fn add(&mut self, score: u64, n: u64) -> std::result::Result<(), Error> {
        self.insert(score as f64, n);
        Ok(())
    }

    fn kth_oldest(&mut self, k: u64) -> std::result::Result<Option<f64>, Error> {
        Ok(kth(&self.0, k))
    }

    fn newest(&mut self) -> std::result::Result<Option<f64>, Error> {
        Ok(self.0.last().map(|(s, _)| *s))
    }
}

/// The `k`-th oldest score, 1-based.
fn kth(runs: &[(f64, u64)], k: u64) -> Option<f64> {
    let mut seen = 0u64;
    for (s, n) in runs {
        seen += n;
        if k >= 1 && k <= seen {
            return Some(*s);
        }
    }
    None
}

/// `score + W - now` in whole ms (fractions round up), for a member still in the window; exact up to
/// ~1.7e38 ms, then saturated.
fn wait(score: f64, cutoff: i128) -> i128 {
    assert!(score > cutoff as f64, "{score} is not in the window");
    (score.ceil() as i128).saturating_sub(cutoff)
}

/// Every wait that fits an i64 is exact; larger ones saturate at i64::MAX.
fn wait_matches(got: i64, want: i128) -> bool {
    i128::from(got) == want.min(i128::from(i64::MAX))
}

/// The reply the contract asks for, with the waits before they are fitted into an i64.
#[derive(Debug)]
struct Expected {
    allowed: bool,
    count: u64,
    remaining: u64,
    retry_after_ms: i128,
    reset_after_ms: i128,
    binding: Option<usize>,
    /// Every limit's state, in limit order (what DETAIL lists).
    limits: Vec<Standing>,
}

impl Expected {
    fn matches(&self, got: &Reply) -> bool {
        got.allowed == self.allowed
            && got.count == self.count
            && got.remaining == self.remaining
            && wait_matches(got.retry_after_ms, self.retry_after_ms)
            && wait_matches(got.reset_after_ms, self.reset_after_ms)
            && got.binding == self.binding
    }

    /// Whether DETAIL's states are the contract's, limit by limit.
    fn matches_detail(&self, got: &[LimitState]) -> bool {
        got.len() == self.limits.len()
            && got.iter().zip(&self.limits).all(|(g, s)| {
                u128::from(g.count) == s.count
                    && u128::from(g.remaining) == s.remaining
                    && wait_matches(g.retry_ms, s.retry)
                    && wait_matches(g.reset_ms, s.reset)
            })
    }
}

/// What one limit says after the call, in exact arithmetic.
#[derive(Debug, Clone, Copy)]
struct Standing {
    w: u128,
    count: u128,
    remaining: u128,
    retry: i128,
    reset: i128,
}

/// The runs of `log` scored after `cutoff` (a window's members).
fn window_runs(log: &RunLog, cutoff: i128) -> RunLog {
    RunLog(
        log.0
            .iter()
            .copied()
            .filter(|(s, _)| *s > cutoff as f64)
            .collect(),
    )
}

/// The contract's steps 1-3 and reply, for several limits, in exact integer arithmetic: the
/// trim keeps `lateness` more ms, a lease's members are scored at its end.
fn expected(log: &RunLog, req: &Request) -> (Expected, RunLog) {
    let now = i128::from(req.now);
    let limits: Vec<Limit> = req.limits.iter().copied().collect();
    let wmax = limits.iter().map(|l| l.window_ms).max().expect("a limit");
    let mut after = window_runs(log, now - i128::from(wmax) - i128::from(req.lateness));
    let n = u128::from(req.cost);
    let allowed = limits.iter().all(|l| {
        let c = u128::from(window_runs(&after, now - i128::from(l.window_ms)).total());
        c + n <= u128::from(l.max)
    });
    if allowed {
        after.insert(req.at as f64, req.cost);
    }
    let standings: Vec<Standing> = limits
        .iter()
        .map(|l| {
            let cutoff = now - i128::from(l.window_ms);
            let members = window_runs(&after, cutoff);
            let count = u128::from(members.total());
            let max = u128::from(l.max);
            let retry = if n > max {
                -1
            } else {
                match (count + n).checked_sub(max) {
                    None | Some(0) => 0,
                    Some(need) => {
                        wait(kth(&members.0, need as u64).expect("need <= count"), cutoff)
                    }
                }
            };
            let reset = members.0.last().map_or(0, |(s, _)| wait(*s, cutoff));
            Standing {
                w: u128::from(l.window_ms),
                count,
                remaining: max.saturating_sub(count),
                retry,
                reset,
            }
        })
        .collect();
    // Least remaining, then the larger retry (-1 above all), then the longer window, then the
    // earlier position: the first of the positions sorted by that order. Retries compare as
    // replied, a wait past i64::MAX ms (a member scored +inf) being i64::MAX.
    let never = |r: i128| {
        if r < 0 {
            i128::MAX
        } else {
            r.min(i128::from(i64::MAX))
        }
    };
    let mut order: Vec<usize> = (0..standings.len()).collect();
    order.sort_by_key(|&i| {
        let s = &standings[i];
        (
            s.remaining,
            std::cmp::Reverse(never(s.retry)),
            std::cmp::Reverse(s.w),
            i,
        )
    });
    let b = order[0];
    let bound = standings[b];
    let retry_after_ms = if standings.iter().any(|s| s.retry < 0) {
        -1
    } else {
        standings.iter().map(|s| s.retry).max().unwrap_or(0)
    };
    let reply = Expected {
        allowed,
        count: bound.count as u64,
        remaining: bound.remaining as u64,
        retry_after_ms,
        reset_after_ms: bound.reset,
        binding: (limits.len() > 1).then_some(b),
        limits: standings,
    };
    (reply, after)
}

/// A score anyone might have written to the key: specials, raw bits, or near `now`.
fn score(u: &mut Unstructured, now: u64) -> Result<f64> {
    const SPECIAL: [f64; 12] = [
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN,
        1e300,
        -1e300,
        0.0,
        -0.0,
        f64::MIN_POSITIVE,
        MAX_EXACT as f64,
        (MAX_EXACT + 2) as f64,
        -(MAX_EXACT as f64),
    ];
    Ok(match u.int_in_range(0..=3u8)? {
        0 => SPECIAL[usize::from(u.int_in_range(0..=11u8)?)],
        1 => match f64::from_bits(u.arbitrary()?) {
            s if s.is_nan() => 0.0,
            s => s,
        },
        2 => now as f64 + f64::from(u.arbitrary::<i16>()?),
        _ => {
            now as f64 + f64::from(u.arbitrary::<i16>()?) + f64::from(u.arbitrary::<u8>()?) / 256.0
        }
    })
}

/// Mostly small numbers, so windows fill and trim; sometimes anything in range.
fn number(u: &mut Unstructured, lo: u64, small: u64, hi: u64) -> Result<u64> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => hi,
        1 => u.int_in_range(lo..=hi)?,
        _ => u.int_in_range(lo..=small)?,
    })
}

/// The next request's `now`: forward, backward, across windows, or anywhere.
fn next_now(u: &mut Unstructured, now: u64) -> Result<u64> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => now.saturating_sub(u.int_in_range(0..=5000)?),
        1 => (now + u.int_in_range(0..=100_000)?).min(MAX_EXACT),
        2 => u.int_in_range(0..=MAX_EXACT)?,
        3 => [0, 1, MAX_EXACT - 1, MAX_EXACT][usize::from(u.int_in_range(0..=3u8)?)],
        _ => (now + u.int_in_range(0..=300)?).min(MAX_EXACT),
    })
}

/// Most members, and largest cost, the testkit model is asked about (it lists every member).
const MODEL_MAX_LISTED: u64 = 4096;
const MODEL_MAX_COST: u64 = 64;

/// The log as testkit's model holds one (every member's score, whole ms in 0..=2^53), if it
/// can: None for fractional, negative, infinite or huge scores, or too many members.
fn listed(log: &RunLog) -> Option<Model> {
    if log.total() > MODEL_MAX_LISTED {
        return None;
    }
    let mut scores = Vec::new();
    for &(s, n) in &log.0 {
        if s.fract() != 0.0 || !(0.0..=MAX_EXACT as f64).contains(&s) {
            return None;
        }
        scores.extend(std::iter::repeat_n(s as u64, n as usize));
    }
    Some(Model { scores })
}

fn step(log: &mut RunLog, req: &Request) {
    let before = log.clone();
    let (want, want_log) = expected(&before, req);

    let peeked = window::peek(log, req);
    assert_eq!(*log, before, "peek changed the log: {req:?}");
    let allowed = window::allow(log, req);
    // An admission above the per-call cap is an error that changes nothing, for both.
    if want.allowed && req.cost > req.max_add {
        let refused = Err(Error::TooManyMembers {
            cost: req.cost,
            keys: 1,
            cap: req.max_add,
        });
        assert_eq!(
            peeked.map(|o| o.reply),
            refused,
            "peek over the cap: {req:?}"
        );
        assert_eq!(
            allowed.map(|o| o.reply),
            refused,
            "allow over the cap: {req:?}"
        );
        assert_eq!(*log, before, "a refused call changed the log: {req:?}");
        return;
    }
    let (Ok(peeked), Ok(out)) = (peeked, allowed) else {
        panic!("an error under the cap: {req:?} on {before:?}");
    };
    let got = out.reply;

    assert_eq!(peeked.reply, got, "peek != allow: {req:?} on {before:?}");
    assert_eq!(
        peeked.detail, out.detail,
        "peek's detail != allow's: {req:?}"
    );
    assert!(
        want.matches(&got),
        "allow != contract: {req:?} on {before:?}: got {got:?}, want {want:?}"
    );
    match &out.detail {
        Some(d) => {
            assert!(req.detail, "a detail nobody asked for: {req:?}");
            assert_eq!(d.now, req.now);
            assert!(
                want.matches_detail(&d.limits),
                "detail != contract: {req:?} on {before:?}: got {d:?}, want {want:?}"
            );
            // The binding limit's entry is the reply's.
            let b = &d.limits[got.binding.unwrap_or(0)];
            assert_eq!((b.count, b.remaining), (got.count, got.remaining));
            assert_eq!(b.reset_ms, got.reset_after_ms);
        }
        None => assert!(!req.detail, "no detail: {req:?}"),
    }
    assert_eq!(*log, want_log, "stored set: {req:?} on {before:?}");
    // The tests' contract model, a third reading, wherever it applies.
    if let Some(mut model) = listed(&before)
        && req.cost <= MODEL_MAX_COST
    {
        let limits: Vec<(u64, u64)> = req
            .limits
            .iter()
            .map(|l| (l.window_ms / 1000, l.max))
            .collect();
        // The members' score as a lease of `at - now` (the model rounds nothing more).
        let options = Options {
            lease: req.at - req.now,
            lateness: req.lateness,
            precision: 1,
        };
        let want = model.allow_with(&limits, req.now, req.cost, options);
        assert_eq!(
            &*got.named_fields(),
            want.head,
            "allow != testkit's model: {req:?} on {before:?}"
        );
        if let Some(d) = &out.detail {
            let have: Vec<[i64; 4]> = d.limits.iter().map(|l| l.fields()).collect();
            assert_eq!(have, want.limits, "detail != testkit's model: {req:?}");
        }
    }
    assert_eq!(
        out.trimmed + log.total(),
        before.total() + got.allowed as u64 * req.cost
    );
    let limits: Vec<Limit> = req.limits.iter().copied().collect();
    let bound = limits[got.binding.unwrap_or(0)];
    assert_eq!(got.binding.is_some(), limits.len() > 1);
    assert!(got.retry_after_ms >= -1);
    assert!(got.reset_after_ms >= 0);
    assert_eq!(got.reset_after_ms == 0, got.count == 0);
    assert_eq!(
        got.retry_after_ms == -1,
        limits.iter().any(|l| req.cost > l.max)
    );
    assert!(got.count <= bound.max || (!got.allowed && got.count <= before.total()));
    assert_eq!(got.remaining, bound.max.saturating_sub(got.count));
    assert!(got.count <= log.total());
    // The longest window holds every member kept, unless lateness kept older ones.
    if bound.window_ms == req.limits.longest_window_ms() && req.lateness == 0 {
        assert_eq!(got.count, log.total());
    }
}

/// One to four limits mostly (sometimes up to sixteen), windows often equal to each other.
fn limits(u: &mut Unstructured) -> Result<Limits> {
    let count = if u.ratio(1, 8)? {
        u.int_in_range(1..=MAX_LIMITS)?
    } else {
        u.int_in_range(1..=4)?
    };
    let mut one = || -> Result<Limit> {
        Ok(Limit {
            window_ms: number(u, 1, 10, MAX_WINDOW_SECONDS)? * 1000,
            max: number(u, 1, 16, MAX_EXACT)?,
        })
    };
    let mut all = Limits::new(one()?);
    for _ in 1..count {
        all.push(one()?);
    }
    Ok(all)
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let mut now = next_now(&mut u, 50_000)?;
    let mut log = RunLog::default();
    for _ in 0..u.int_in_range(0..=16u8)? {
        let s = score(&mut u, now)?;
        log.insert(s, number(&mut u, 1, 8, MAX_EXACT)?);
    }
    for _ in 0..u.int_in_range(1..=32u8)? {
        if u.ratio(1, 8)? {
            // Another writer (the old Lua script, a ZADD by hand) touches the key between calls.
            let s = score(&mut u, now)?;
            log.insert(s, number(&mut u, 1, 4, 1 << 20)?);
            continue;
        }
        now = next_now(&mut u, now)?;
        // A lease ends by 2^53, as the parser (or the call, for `*`) checks.
        let lease = match now < MAX_EXACT && u.ratio(1, 3)? {
            true => number(&mut u, 1, (MAX_EXACT - now).min(3000), MAX_EXACT - now)?,
            false => 0,
        };
        // A precision keeps the score within 2^53, as the parser checks.
        let precision = match u.ratio(1, 4)? {
            true => number(&mut u, 1, 2000, MAX_EXACT)?,
            false => 1,
        };
        // Where the parser scores the members (`args::score`): past 2^53 it refuses the call.
        let at = match (now + lease).div_ceil(precision).checked_mul(precision) {
            Some(t) if t <= MAX_EXACT => t,
            _ => now + lease,
        };
        let req = Request {
            limits: limits(&mut u)?,
            now,
            clock: now,
            cost: number(&mut u, 1, 4, MAX_EXACT)?,
            max_add: number(&mut u, 1, 6, MAX_EXACT)?,
            at,
            lateness: match u.int_in_range(0..=3u8)? {
                0 => number(&mut u, 1, 2000, 86_400_000)?,
                _ => 0,
            },
            detail: u.ratio(1, 2)?,
        };
        step(&mut log, &req);
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    // Running out of bytes just ends the sequence early.
    let _ = run(data);
});
