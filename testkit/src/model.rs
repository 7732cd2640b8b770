//! The contract's ALLOW/PEEK, ALLOWALL/PEEKALL and REFUND steps on plain lists of scores, so a test that drives a key with
//! sequential calls knows every reply and the exact scores the key must hold afterwards; with
//! `LEASE`, `DETAIL` and `slidingwindow.lateness` too.
#![allow(dead_code)]

/// One key's log: the score of every member, ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    pub scores: Vec<u64>,
}

/// What a call carries beyond its limits, `now` and cost: `LEASE ms` (0 without it),
/// `PRECISION p` (0 or 1 without it) and the server's `slidingwindow.lateness` (ms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub lease: u64,
    pub lateness: u64,
    pub precision: u64,
}

impl Options {
    /// Where an admitted call's members are scored: `now + lease` rounded up to a multiple of
    /// the precision.
    pub fn score(&self, now: u64) -> u64 {
        let p = self.precision.max(1);
        (now + self.lease).div_ceil(p) * p
    }
}

/// A call's whole answer: the six integers (`b` is 0 for a single limit) and, in limit order,
/// each limit's `[count_i, remaining_i, retry_i, reset_i]`, as `DETAIL` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub head: [i64; 6],
    pub limits: Vec<[i64; 4]>,
}

impl Answer {
    /// The reply without `DETAIL`: five integers, or six when `named` (a call with `LIMIT`
    /// options, or ALLOWALL).
    pub fn plain(&self, named: bool) -> Vec<i64> {
        let n = if named { 6 } else { 5 };
        self.head[..n].to_vec()
    }
}

/// What one limit says after a call (the contract's `count_i`, `remaining_i`, `retry_i`,
/// `reset_i`), with its window in ms.
#[derive(Debug, Clone, Copy)]
struct Standing {
    w: i128,
    count: i128,
    remaining: i128,
    retry: i128,
    reset: i128,
}

impl Model {
    /// `SLIDINGWINDOW.ALLOW key window max now COST cost`, applied to the model; the five-integer reply.
    pub fn allow(&mut self, window_s: u64, max: u64, now: u64, cost: u64) -> [i64; 5] {
        let r = self.allow_limits(&[(window_s, max)], now, cost);
        [r[0], r[1], r[2], r[3], r[4]]
    }

    /// `SLIDINGWINDOW.PEEK`: the reply ALLOW would give, leaving the model alone.
    pub fn peek(&self, window_s: u64, max: u64, now: u64, cost: u64) -> [i64; 5] {
        self.clone().allow(window_s, max, now, cost)
    }

    /// `SLIDINGWINDOW.ALLOW key w0 m0 now COST cost LIMIT w1 m1 ...` with `limits` as
    /// (window s, max), the positional one first: the reply, with the sixth integer when
    /// there is more than one limit (that is, when `LIMIT` was given).
    pub fn allow_limits(&mut self, limits: &[(u64, u64)], now: u64, cost: u64) -> Vec<i64> {
        let keyed: Vec<(usize, u64, u64)> = limits.iter().map(|&(w, m)| (0, w, m)).collect();
        let mut reply = Model::allow_all(std::slice::from_mut(self), &keyed, now, cost);
        if limits.len() == 1 {
            reply.pop();
        }
        reply
    }

    /// `SLIDINGWINDOW.ALLOWALL numkeys key... now COST cost LIMIT keyno w m ...` over `keys`,
    /// with `limits` as (key index 0-based, window s, max) in position order: the six integers.
    pub fn allow_all(
        keys: &mut [Model],
        limits: &[(usize, u64, u64)],
        now: u64,
        cost: u64,
    ) -> Vec<i64> {
        Model::call_all(keys, limits, now, cost, Options::default())
            .head
            .to_vec()
    }

    /// ALLOW with several limits and `options`, applied to the model: its whole answer.
    pub fn allow_with(
        &mut self,
        limits: &[(u64, u64)],
        now: u64,
        cost: u64,
        options: Options,
    ) -> Answer {
        let keyed: Vec<(usize, u64, u64)> = limits.iter().map(|&(w, m)| (0, w, m)).collect();
        Model::call_all(std::slice::from_mut(self), &keyed, now, cost, options)
    }

    /// PEEK with several limits and `options`: ALLOW's answer, leaving the model alone.
    pub fn peek_with(
        &self,
        limits: &[(u64, u64)],
        now: u64,
        cost: u64,
        options: Options,
    ) -> Answer {
        self.clone().allow_with(limits, now, cost, options)
    }

    /// PEEKALL with `options`: ALLOWALL's answer, leaving every key alone.
    pub fn peek_all_with(
        keys: &[Model],
        limits: &[(usize, u64, u64)],
        now: u64,
        cost: u64,
        options: Options,
    ) -> Answer {
        Model::call_all(&mut keys.to_vec(), limits, now, cost, options)
    }

    /// ALLOWALL with `options` over `keys`: the contract's steps, and the whole answer.
    pub fn call_all(
        keys: &mut [Model],
        limits: &[(usize, u64, u64)],
        now: u64,
        cost: u64,
        options: Options,
    ) -> Answer {
        let now_i = i128::from(now);
        let n = i128::from(cost);
        let window = |w: u64| i128::from(w) * 1000;
        // 1. Each key trimmed by its own longest window, and G ms more (Lateness).
        let late = i128::from(options.lateness);
        for (k, key) in keys.iter_mut().enumerate() {
            let wmax = limits
                .iter()
                .filter(|l| l.0 == k)
                .map(|&(_, w, _)| window(w))
                .max()
                .unwrap();
            key.scores.retain(|&s| i128::from(s) > now_i - wmax - late);
        }
        // Members of one limit's window, oldest first (future scores count).
        let in_window = |scores: &[u64], w: i128| -> Vec<i128> {
            scores
                .iter()
                .map(|&s| i128::from(s))
                .filter(|&s| s > now_i - w)
                .collect()
        };
        // 2. and 3. Admitted only if the cost fits every limit of every key; a lease's members
        // are scored at its end.
        let allowed = limits.iter().all(|&(k, w, max)| {
            in_window(&keys[k].scores, window(w)).len() as i128 + n <= i128::from(max)
        });
        if allowed {
            let at = options.score(now);
            for key in keys.iter_mut() {
                key.scores
                    .extend(std::iter::repeat_n(at, usize::try_from(cost).unwrap()));
                key.scores.sort_unstable();
            }
        }
        let standings: Vec<Standing> = limits
            .iter()
            .map(|&(k, w, max)| {
                let (w, max) = (window(w), i128::from(max));
                let members = in_window(&keys[k].scores, w);
                let count = members.len() as i128;
                let retry = if n > max {
                    -1
                } else {
                    let need = count + n - max;
                    if need <= 0 {
                        0
                    } else {
                        members[usize::try_from(need - 1).unwrap()] + w - now_i
                    }
                };
                let reset = members.last().map_or(0, |&newest| newest + w - now_i);
                Standing {
                    w,
                    count,
                    remaining: (max - count).max(0),
                    retry,
                    reset,
                }
            })
            .collect();
        // The binding limit: least remaining, then larger retry (-1 = infinite), then longer
        // window, then earlier position.
        let infinite = |r: i128| if r == -1 { i128::MAX } else { r };
        let mut b = 0;
        for (i, s) in standings.iter().enumerate() {
            let best = &standings[b];
            let better = (
                s.remaining,
                std::cmp::Reverse(infinite(s.retry)),
                std::cmp::Reverse(s.w),
            ) < (
                best.remaining,
                std::cmp::Reverse(infinite(best.retry)),
                std::cmp::Reverse(best.w),
            );
            if better {
                b = i;
            }
        }
        let retry = if standings.iter().any(|s| s.retry == -1) {
            -1
        } else {
            standings.iter().map(|s| s.retry).max().unwrap()
        };
        let int = |v: i128| i64::try_from(v).unwrap();
        let s = standings[b];
        Answer {
            head: [
                i64::from(allowed),
                int(s.count),
                int(s.remaining),
                int(retry),
                int(s.reset),
                b as i64,
            ],
            limits: standings
                .iter()
                .map(|s| [int(s.count), int(s.remaining), int(s.retry), int(s.reset)])
                .collect(),
        }
    }

    /// `SLIDINGWINDOW.PEEKALL`: ALLOWALL's reply, leaving every key alone.
    pub fn peek_all(keys: &[Model], limits: &[(usize, u64, u64)], now: u64, cost: u64) -> Vec<i64> {
        Model::allow_all(&mut keys.to_vec(), limits, now, cost)
    }

    /// `SLIDINGWINDOW.REFUND key n [AT ts]`: removes the `n` newest members scored at or before
    /// `at` (any score without it); how many went.
    pub fn refund(&mut self, n: u64, at: Option<u64>) -> u64 {
        let end = match at {
            Some(ts) => self.scores.partition_point(|&s| s <= ts),
            None => self.scores.len(),
        };
        let start = end.saturating_sub(usize::try_from(n).unwrap_or(usize::MAX));
        self.scores.drain(start..end);
        (end - start) as u64
    }

    /// PEEK with several limits: ALLOW's reply, leaving the model alone.
    pub fn peek_limits(&self, limits: &[(u64, u64)], now: u64, cost: u64) -> Vec<i64> {
        self.clone().allow_limits(limits, now, cost)
    }
}

/// A key's absolute expiry as the contract sets it ("Expiry"), known within the server-clock
/// bounds `[lo, hi]` of the calls that set it: an admission makes it the later of the key's
/// current expiry and its own; a key that held no member before the admission's add (missing,
/// or emptied by its trim or a refund) takes the admission's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expiry {
    pub lo: i64,
    pub hi: i64,
}

impl Expiry {
    /// After an admission made between the server clock readings `t0` and `t1` whose own expiry
    /// is `ttl` ms from the server's clock; `fresh` when the key held no member before it.
    pub fn admit(&mut self, fresh: bool, t0: i64, t1: i64, ttl: i64) {
        let (lo, hi) = (t0 + ttl, t1 + ttl);
        if fresh {
            *self = Expiry { lo, hi };
        } else {
            self.lo = self.lo.max(lo);
            self.hi = self.hi.max(hi);
        }
    }

    /// Whether `at` (`PEXPIRETIME`) is within the bounds.
    pub fn holds(&self, at: i64) -> bool {
        (self.lo..=self.hi).contains(&at)
    }
}

impl Model {
    /// Whether a trim at `cutoff` (members scored at or before it removed) leaves no member.
    pub fn empty_after(&self, cutoff: i64) -> bool {
        self.scores.iter().all(|&s| s as i64 <= cutoff)
    }
}

#[cfg(test)]
mod expiry_tests {
    use super::*;

    #[test]
    fn an_admission_keeps_the_later_expiry_unless_the_key_was_empty() {
        let between = |lo, hi| Expiry { lo, hi };
        let mut e = Expiry::default();
        e.admit(true, 100, 110, 60_000);
        assert_eq!(e, between(60_100, 60_110));
        e.admit(false, 200, 205, 1_000);
        assert_eq!(e, between(60_100, 60_110));
        e.admit(false, 300, 320, 60_000);
        assert_eq!(e, between(60_300, 60_320));
        e.admit(true, 400, 401, 1_000);
        assert_eq!(e, between(1_400, 1_401));
        assert!(e.holds(1_400) && e.holds(1_401) && !e.holds(1_402));
        let m = Model { scores: vec![5, 9] };
        assert!(m.empty_after(9) && !m.empty_after(8));
    }
}
