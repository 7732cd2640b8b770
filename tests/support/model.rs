//! The contract's ALLOW/PEEK steps on a plain list of scores, so a test that drives a key with
//! sequential calls knows every reply and the exact scores the key must hold afterwards.
#![allow(dead_code)]

/// One key's log: the score of every member, ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    pub scores: Vec<u64>,
}

impl Model {
    /// `SLIDINGWINDOW.ALLOW key window max now COST cost`, applied to the model; the five-integer reply.
    pub fn allow(&mut self, window_s: u64, max: u64, now: u64, cost: u64) -> [i64; 5] {
        let w = i128::from(window_s) * 1000;
        let now_i = i128::from(now);
        let cutoff = now_i - w;
        self.scores.retain(|&s| i128::from(s) > cutoff);
        let before = self.scores.len() as u64;
        let allowed = before + cost <= max;
        if allowed {
            self.scores
                .extend(std::iter::repeat_n(now, usize::try_from(cost).unwrap()));
            self.scores.sort_unstable();
        }
        let count = self.scores.len() as u64;
        let retry = if cost > max {
            -1
        } else {
            let need = i128::from(count) + i128::from(cost) - i128::from(max);
            if need <= 0 {
                0
            } else {
                let s = self.scores[usize::try_from(need - 1).unwrap()];
                i128::from(s) + w - now_i
            }
        };
        let reset = match self.scores.last() {
            None => 0,
            Some(&newest) => i128::from(newest) + w - now_i,
        };
        [
            i64::from(allowed),
            count as i64,
            max.saturating_sub(count) as i64,
            i64::try_from(retry).unwrap(),
            i64::try_from(reset).unwrap(),
        ]
    }

    /// `SLIDINGWINDOW.PEEK`: the reply ALLOW would give, leaving the model alone.
    pub fn peek(&self, window_s: u64, max: u64, now: u64, cost: u64) -> [i64; 5] {
        self.clone().allow(window_s, max, now, cost)
    }
}
