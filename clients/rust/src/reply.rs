//! Typed replies: ALLOW, PEEK, ALLOWALL and PEEKALL answer a [`Reply`] (with `DETAIL`, every
//! limit's state and the server's `now` too), REFUND a count. Anything else the contract does not
//! allow for the call sent is an error, as is an error reply (kept as its text).

use crate::error::{Error, line};
use redis::Value;

/// Until a request of the same cost fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryAfter {
    /// The cost exceeds a limit's max: it never fits (the reply's -1).
    Never,
    /// In this many ms (0: now).
    Ms(u64),
}

impl RetryAfter {
    /// The wait in ms; None for never.
    pub fn ms(self) -> Option<u64> {
        match self {
            RetryAfter::Never => None,
            RetryAfter::Ms(ms) => Some(ms),
        }
    }

    /// As the reply has it: -1 for never.
    pub fn as_i64(self) -> i64 {
        match self {
            RetryAfter::Never => -1,
            RetryAfter::Ms(ms) => i64::try_from(ms).unwrap_or(i64::MAX),
        }
    }

    fn from_reply(v: i64) -> Option<RetryAfter> {
        match v {
            -1 => Some(RetryAfter::Never),
            v => u64::try_from(v).ok().map(RetryAfter::Ms),
        }
    }
}

/// One limit's state after the call (`DETAIL`), on its own key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LimitState {
    pub count: u64,
    pub remaining: u64,
    pub retry_after: RetryAfter,
    pub reset_after_ms: u64,
}

/// What `DETAIL` adds: every limit in the order sent (for ALLOWALL, the order of its `LIMIT`
/// options) and the `now` the call used (the server's clock for `*`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Detail {
    pub limits: Vec<LimitState>,
    pub now_ms: u64,
}

/// The answer of ALLOW, PEEK, ALLOWALL or PEEKALL, for the binding limit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reply {
    /// Admitted (for PEEK: would be).
    pub allowed: bool,
    /// Requests in the binding limit's window after the call.
    pub count: u64,
    pub remaining: u64,
    /// Until a call of the same cost fits every limit.
    pub retry_after: RetryAfter,
    /// Until the binding limit's window is empty.
    pub reset_after_ms: u64,
    /// Index of the binding limit among those sent (for ALLOWALL, its `LIMIT` option).
    pub limit: usize,
    /// With `DETAIL` only.
    pub detail: Option<Detail>,
}

/// What a call's reply must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Limits sent (the binding index is below it; `DETAIL` has one state each).
    pub limits: usize,
    /// A sixth integer (several limits, or ALLOWALL / PEEKALL).
    pub sixth: bool,
    pub detail: bool,
}

impl Shape {
    pub(crate) fn parse(self, v: &Value) -> Result<Reply, Error> {
        let bad = || Error::Reply(format!("{v:?}"));
        let items = match v {
            Value::ServerError(e) => return Err(Error::Server(line(e.code(), e.details()))),
            Value::Array(items) => items,
            _ => return Err(bad()),
        };
        let len = match (self.detail, self.sixth) {
            (true, _) => 8,
            (false, true) => 6,
            (false, false) => 5,
        };
        if items.len() != len {
            return Err(bad());
        }
        let mut head = [0i64; 6];
        for (slot, item) in head.iter_mut().zip(items) {
            *slot = int(item).ok_or_else(bad)?;
        }
        if len == 5 {
            head[5] = 0;
        }
        let [allowed, count, remaining, retry, reset, b] = head;
        let allowed = match allowed {
            0 => false,
            1 => true,
            _ => return Err(bad()),
        };
        let limit = usize::try_from(b)
            .ok()
            .filter(|&b| b < self.limits)
            .ok_or_else(bad)?;
        let detail = if self.detail {
            let states = match &items[6] {
                Value::Array(states) if states.len() == self.limits => states,
                _ => return Err(bad()),
            };
            let limits = states
                .iter()
                .map(|s| match s {
                    Value::Array(f) if f.len() == 4 => {
                        state([int(&f[0]), int(&f[1]), int(&f[2]), int(&f[3])])
                    }
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?;
            let now_ms = int(&items[7])
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(bad)?;
            Some(Detail { limits, now_ms })
        } else {
            None
        };
        let s = state([Some(count), Some(remaining), Some(retry), Some(reset)]).ok_or_else(bad)?;
        Ok(Reply {
            allowed,
            count: s.count,
            remaining: s.remaining,
            retry_after: s.retry_after,
            reset_after_ms: s.reset_after_ms,
            limit,
            detail,
        })
    }
}

/// REFUND's reply: the number of members removed.
pub(crate) fn removed(v: &Value) -> Result<u64, Error> {
    match v {
        Value::ServerError(e) => Err(Error::Server(line(e.code(), e.details()))),
        Value::Int(n) => u64::try_from(*n).map_err(|_| Error::Reply(format!("{v:?}"))),
        _ => Err(Error::Reply(format!("{v:?}"))),
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn state([count, remaining, retry, reset]: [Option<i64>; 4]) -> Option<LimitState> {
    Some(LimitState {
        count: u64::try_from(count?).ok()?,
        remaining: u64::try_from(remaining?).ok()?,
        retry_after: RetryAfter::from_reply(retry?)?,
        reset_after_ms: u64::try_from(reset?).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|&n| Value::Int(n)).collect())
    }

    const ONE: Shape = Shape {
        limits: 1,
        sixth: false,
        detail: false,
    };
    const TWO: Shape = Shape {
        limits: 2,
        sixth: true,
        detail: false,
    };

    #[test]
    fn five_and_six_integers() {
        let r = ONE.parse(&ints(&[1, 3, 7, 0, 1000])).unwrap();
        assert_eq!(
            r,
            Reply {
                allowed: true,
                count: 3,
                remaining: 7,
                retry_after: RetryAfter::Ms(0),
                reset_after_ms: 1000,
                limit: 0,
                detail: None,
            }
        );
        let r = TWO.parse(&ints(&[0, 5, 0, 59_000, 60_000, 1])).unwrap();
        assert_eq!(
            (r.allowed, r.remaining, r.retry_after, r.limit),
            (false, 0, RetryAfter::Ms(59_000), 1)
        );
        let never = TWO.parse(&ints(&[0, 0, 10, -1, 0, 0])).unwrap();
        assert_eq!(never.retry_after, RetryAfter::Never);
        assert_eq!(
            (never.retry_after.ms(), never.retry_after.as_i64()),
            (None, -1)
        );
    }

    #[test]
    fn shapes_the_contract_does_not_allow_are_errors() {
        let cases: [(Shape, Value); 12] = [
            (ONE, ints(&[])),
            (ONE, ints(&[1, 2, 3, 4])),
            (ONE, ints(&[1, 2, 3, 4, 5, 0])),
            (TWO, ints(&[1, 2, 3, 4, 5])),
            (TWO, ints(&[1, 2, 3, 4, 5, -1])),
            (TWO, ints(&[1, 2, 3, 4, 5, 2])),
            (TWO, ints(&[1, 2, 3, 4, 5, 6, 7])),
            (ONE, ints(&[2, 2, 3, 4, 5])),
            (ONE, ints(&[1, -2, 3, 4, 5])),
            (ONE, ints(&[1, 2, 3, -2, 5])),
            (ONE, Value::Int(1)),
            (
                ONE,
                Value::Array(vec![
                    Value::Int(1),
                    Value::BulkString(b"2".to_vec()),
                    Value::Int(3),
                    Value::Int(0),
                    Value::Int(5),
                ]),
            ),
        ];
        for (shape, v) in cases {
            assert!(matches!(shape.parse(&v), Err(Error::Reply(_))), "{v:?}");
        }
    }

    #[test]
    fn detail() {
        let shape = Shape {
            limits: 2,
            sixth: true,
            detail: true,
        };
        // The six integers, the states, then `now`.
        let detailed = |states: Vec<Value>, now: i64| {
            let mut items: Vec<Value> = [1, 4, 6, 0, 60_100, 1].map(Value::Int).to_vec();
            items.push(Value::Array(states));
            items.push(Value::Int(now));
            Value::Array(items)
        };
        let v = detailed(
            vec![ints(&[1, 9, 0, 1100]), ints(&[4, 6, 0, 60_100])],
            1_700_000_000_000,
        );
        let r = shape.parse(&v).unwrap();
        assert_eq!((r.count, r.remaining, r.limit), (4, 6, 1));
        let d = r.detail.unwrap();
        assert_eq!(d.now_ms, 1_700_000_000_000);
        assert_eq!(
            d.limits,
            [
                LimitState {
                    count: 1,
                    remaining: 9,
                    retry_after: RetryAfter::Ms(0),
                    reset_after_ms: 1100
                },
                LimitState {
                    count: 4,
                    remaining: 6,
                    retry_after: RetryAfter::Ms(0),
                    reset_after_ms: 60_100
                }
            ]
        );
        // One state per limit sent, four integers each, and a `now`.
        let short = detailed(vec![ints(&[1, 9, 0, 1100])], 5);
        assert!(matches!(shape.parse(&short), Err(Error::Reply(_))));
        assert!(matches!(
            Shape {
                detail: false,
                ..shape
            }
            .parse(&v),
            Err(Error::Reply(_))
        ));
    }

    #[test]
    fn error_replies_are_kept_as_text() {
        let e = redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n").unwrap();
        let got = ONE.parse(&e).err().map(|e| e.to_string());
        assert_eq!(got.as_deref(), Some("WRONGTYPE Operation against a key"));
        assert_eq!(removed(&Value::Int(3)).ok(), Some(3));
        assert!(matches!(removed(&Value::Int(-1)), Err(Error::Reply(_))));
        assert!(matches!(removed(&Value::Nil), Err(Error::Reply(_))));
    }
}
