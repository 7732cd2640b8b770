//! The reply (five integers, a sixth naming the binding limit; with `DETAIL` eight elements, every
//! limit's state among them) and the waits it carries.

use std::ops::Deref;

/// What both commands answer, in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub allowed: bool,
    /// The binding limit's count, remaining and reset.
    pub count: u64,
    pub remaining: u64,
    /// -1 when the cost can never fit; else ms until a request of the same cost would fit.
    pub retry_after_ms: i64,
    /// ms until the window is empty; 0 when it already is.
    pub reset_after_ms: i64,
    /// The binding limit (0 = positional, i = i-th `LIMIT`), sent only when `LIMIT` was given.
    pub binding: Option<usize>,
}

impl Reply {
    /// The integers, in the order the contract gives them: five, or six with `binding`.
    pub fn fields(&self) -> Fields {
        let values = [
            i64::from(self.allowed),
            clamp(self.count),
            clamp(self.remaining),
            self.retry_after_ms,
            self.reset_after_ms,
            self.binding.map_or(0, |b| clamp(b as u64)),
        ];
        let len = if self.binding.is_some() { 6 } else { 5 };
        Fields { values, len }
    }

    /// The six integers that open a `DETAIL` reply: `b` is 0 for a single limit.
    pub fn named_fields(&self) -> Fields {
        Reply {
            binding: Some(self.binding.unwrap_or(0)),
            ..*self
        }
        .fields()
    }
}

/// One limit's state after the call, as `DETAIL` lists it: `count_i`, `remaining_i`, `retry_i`,
/// `reset_i`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitState {
    pub count: u64,
    pub remaining: u64,
    pub retry_ms: i64,
    pub reset_ms: i64,
}

impl LimitState {
    /// The four integers, in wire order.
    pub fn fields(&self) -> [i64; 4] {
        [
            clamp(self.count),
            clamp(self.remaining),
            self.retry_ms,
            self.reset_ms,
        ]
    }
}

/// What `DETAIL` adds to the reply: every limit's state in limit order, and the `now` the call
/// used (the server's clock for `*`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Detail {
    pub limits: Vec<LimitState>,
    pub now: u64,
}

impl Detail {
    /// `now` as the reply's last integer.
    pub fn now_field(&self) -> i64 {
        clamp(self.now)
    }
}

/// The reply's integers, inline; reads as a slice.
#[derive(Debug, Clone, Copy)]
pub struct Fields {
    values: [i64; 6],
    len: usize,
}

impl Deref for Fields {
    type Target = [i64];

    fn deref(&self) -> &[i64] {
        self.values.get(..self.len).unwrap_or(&self.values)
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// ms from now until a member scored `score` leaves the window, i.e. until `now' - window >= score`.
/// Equals `score + window - now`, rounded up for fractional scores, never negative, saturated at i64.
pub fn wait_ms(score: f64, cutoff: i64) -> i64 {
    // A whole score (every timestamp) in i64's range: its own ceiling, no float rounding.
    let whole = score as i64;
    if whole as f64 == score && whole != i64::MAX && whole != i64::MIN {
        return whole.saturating_sub(cutoff).max(0);
    }
    // `as` saturates (+-inf to the i128 bounds, NaN to 0; a sorted set holds no NaN), and i128 is
    // wide enough that every wait that fits an i64 is exact.
    let wait = (score.ceil() as i128).saturating_sub(i128::from(cutoff));
    i64::try_from(wait.max(0)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits() {
        let cases = [
            (100.0, -9900, 10_000),
            (1000.0, 999, 1),
            (1000.0, 1000, 0),
            (1000.0, 5000, 0),
            (100.5, -9000, 9101),
            (-0.5, -10, 10),
            (f64::INFINITY, 0, i64::MAX),
            (f64::NEG_INFINITY, 0, 0),
            (1e300, -9_007_199_254_740_992, i64::MAX),
            (9_223_372_036_854_775_808.0, 0, i64::MAX),
            (9_223_372_036_854_775_808.0, -1, i64::MAX),
            (-9_223_372_036_854_775_808.0, 5, 0),
            (-9_223_372_036_854_775_808.0, i64::MIN, 0),
            (
                4_611_686_018_427_387_904.0,
                -4_611_686_018_427_387_904,
                i64::MAX,
            ),
            (-0.0, -3, 3),
            (f64::NAN, -5, 5),
            (
                9_007_199_254_740_992.0,
                -9_007_199_254_740_992,
                18_014_398_509_481_984,
            ),
        ];
        for (score, cutoff, want) in cases {
            assert_eq!(wait_ms(score, cutoff), want, "{score} {cutoff}");
        }
    }

    #[test]
    fn fields_in_order() {
        let r = Reply {
            allowed: true,
            count: 3,
            remaining: 7,
            retry_after_ms: 0,
            reset_after_ms: 60_000,
            binding: None,
        };
        assert_eq!(*r.fields(), [1, 3, 7, 0, 60_000]);
        let huge = Reply {
            count: u64::MAX,
            ..r
        };
        assert_eq!(huge.fields()[1], i64::MAX);
        // With LIMIT options a sixth integer names the binding limit, 0 included.
        for b in [0, 1, 15] {
            let named = Reply {
                binding: Some(b),
                ..r
            };
            assert_eq!(*named.fields(), [1, 3, 7, 0, 60_000, b as i64]);
            assert_eq!(*named.named_fields(), [1, 3, 7, 0, 60_000, b as i64]);
        }
        // DETAIL always names the binding limit: 0 for a single one.
        assert_eq!(*r.named_fields(), [1, 3, 7, 0, 60_000, 0]);
        let state = LimitState {
            count: u64::MAX,
            remaining: 0,
            retry_ms: -1,
            reset_ms: 5,
        };
        assert_eq!(state.fields(), [i64::MAX, 0, -1, 5]);
    }
}
