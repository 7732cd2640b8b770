//! The contract's ALLOW/PEEK steps on a plain list of scores, so a test that drives a key with
//! sequential calls knows every reply and the exact scores the key must hold afterwards.
#![allow(dead_code)]

/// One key's log: the score of every member, ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    pub scores: Vec<u64>,
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
        let now_i = i128::from(now);
        let n = i128::from(cost);
        let window = |w: u64| i128::from(w) * 1000;
        let wmax = limits.iter().map(|&(w, _)| window(w)).max().unwrap();
        // 1. Trim by the longest window.
        self.scores.retain(|&s| i128::from(s) > now_i - wmax);
        // Members of one limit's window, oldest first (future scores count).
        let in_window = |scores: &[u64], w: i128| -> Vec<i128> {
            scores
                .iter()
                .map(|&s| i128::from(s))
                .filter(|&s| s > now_i - w)
                .collect()
        };
        // 2. and 3. Admitted only if the cost fits every limit.
        let allowed = limits.iter().all(|&(w, max)| {
            in_window(&self.scores, window(w)).len() as i128 + n <= i128::from(max)
        });
        if allowed {
            self.scores
                .extend(std::iter::repeat_n(now, usize::try_from(cost).unwrap()));
            self.scores.sort_unstable();
        }
        let standings: Vec<Standing> = limits
            .iter()
            .map(|&(w, max)| {
                let (w, max) = (window(w), i128::from(max));
                let members = in_window(&self.scores, w);
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
        let s = standings[b];
        let mut reply = vec![
            i64::from(allowed),
            i64::try_from(s.count).unwrap(),
            i64::try_from(s.remaining).unwrap(),
            i64::try_from(retry).unwrap(),
            i64::try_from(s.reset).unwrap(),
        ];
        if limits.len() > 1 {
            reply.push(b as i64);
        }
        reply
    }

    /// PEEK with several limits: ALLOW's reply, leaving the model alone.
    pub fn peek_limits(&self, limits: &[(u64, u64)], now: u64, cost: u64) -> Vec<i64> {
        self.clone().allow_limits(limits, now, cost)
    }
}
