//! The RateLimitResponse: one status per descriptor in request order, the overall code, and
//! optionally the headers.

use crate::cli::OnRedisError;
use crate::config::Unit;
use crate::headers::{self, HeaderNames};
use crate::plan::{Action, Mode};
use crate::row::Row;
use crate::store::Outcome;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::Duration;

/// The verdicts and whether the request is refused. `outcome` None: Redis failed, and
/// `on_error` decides for the enforced limits.
pub fn rows<'a>(
    actions: &'a [Action],
    outcome: Option<&Outcome>,
    on_error: OnRedisError,
) -> (Vec<Row<'a>>, bool) {
    let closed = on_error == OnRedisError::Closed;
    let rows: Vec<Row<'a>> = actions
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut row = Row {
                over: false,
                limit: a.limit(),
                enforced: false,
                remaining: 0,
                duration_ms: None,
                reset_ms: 0,
            };
            match a {
                Action::Unknown => {}
                Action::Unlimited => row.remaining = u32::MAX,
                Action::Zero { limit, .. } => {
                    row.enforced = !limit.shadow;
                    row.over = !limit.shadow;
                    // Nothing is ever logged: the window is empty.
                    row.duration_ms = Some(0);
                }
                Action::Count { limit, mode, .. } => {
                    row.enforced = !limit.shadow && *mode != Mode::Refund;
                    match outcome.and_then(|o| o.seen.get(i).copied().flatten()) {
                        Some(seen) => {
                            let over = seen.over && *mode != Mode::Refund;
                            row.over = over && !limit.shadow;
                            row.remaining = if over {
                                0
                            } else {
                                u32::try_from(seen.remaining).unwrap_or(u32::MAX)
                            };
                            let reset = i64::try_from(seen.reset_ms).unwrap_or(i64::MAX);
                            row.duration_ms = Some(if seen.retry_ms > 0 {
                                seen.retry_ms
                            } else {
                                reset
                            });
                            row.reset_ms = reset;
                        }
                        None => row.over = row.enforced && closed && outcome.is_none(),
                    }
                }
            }
            row
        })
        .collect();
    let refused = match outcome {
        Some(o) => o.refused,
        None => actions.iter().any(Action::refuses_all) || rows.iter().any(|r| r.over),
    };
    (rows, refused)
}

/// Which headers to add (Redis must have answered).
#[derive(Debug, Clone, Default)]
pub struct HeaderForms {
    /// `RateLimit-Policy` and `RateLimit` (IETF draft), `Retry-After`.
    pub draft: bool,
    /// The reference's `RateLimit-Limit`, `-Remaining`, `-Reset` (names configurable).
    pub reference: Option<HeaderNames>,
}

pub fn response(rows: &[Row<'_>], refused: bool, forms: &HeaderForms) -> RateLimitResponse {
    let code = |over: bool| if over { Code::OverLimit } else { Code::Ok } as i32;
    let mut headers = Vec::new();
    if forms.draft {
        headers.extend(headers::draft(rows));
    }
    if let Some(names) = &forms.reference {
        headers.extend(headers::reference(rows, names));
    }
    RateLimitResponse {
        overall_code: code(refused),
        statuses: rows
            .iter()
            .map(|r| DescriptorStatus {
                code: code(r.over),
                current_limit: r.limit.map(|l| RateLimit {
                    name: l.name.clone(),
                    requests_per_unit: l.requests_per_unit,
                    unit: pb_unit(l.unit) as i32,
                }),
                limit_remaining: r.remaining,
                duration_until_reset: r.duration_ms.map(duration),
                quota: None,
            })
            .collect(),
        response_headers_to_add: headers,
        ..Default::default()
    }
}

pub fn pb_unit(u: Unit) -> PbUnit {
    match u {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }
}

fn duration(ms: i64) -> Duration {
    Duration {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limit;
    use crate::stat::{Counters, StatKey};
    use crate::store::Seen;
    use std::sync::Arc;

    fn limit(shadow: bool) -> Arc<Limit> {
        let mut l = Limit::overriding(
            3,
            Unit::Minute,
            StatKey {
                domain: "d".into(),
                parts: vec![],
            },
        );
        l.shadow = shadow;
        Arc::new(l)
    }

    fn count(mode: Mode, shadow: bool) -> Action {
        Action::Count {
            key: b"k".to_vec(),
            limit: limit(shadow),
            counters: Arc::new(Counters::default()),
            cost: 1,
            mode,
        }
    }

    const FULL: Seen = Seen {
        remaining: 1,
        retry_ms: 1500,
        reset_ms: 59_000,
        over: true,
        before: 2,
    };
    const ROOM: Seen = Seen {
        remaining: 2,
        retry_ms: 0,
        reset_ms: 60_000,
        over: false,
        before: 0,
    };

    #[test]
    fn refused_request() {
        let acts = [
            count(Mode::Charge, false),
            count(Mode::Charge, false),
            count(Mode::Charge, true),
            Action::Unknown,
            Action::Unlimited,
        ];
        let o = Outcome {
            refused: true,
            seen: vec![Some(ROOM), Some(FULL), Some(FULL), None, None],
            round_trips: 1,
        };
        let (rows, refused) = rows(&acts, Some(&o), OnRedisError::Open);
        let overs: Vec<bool> = rows.iter().map(|r| r.over).collect();
        assert_eq!(overs, [false, true, false, false, false]);
        assert_eq!(rows[0].duration_ms, Some(60_000));
        assert_eq!(rows[1].duration_ms, Some(1500));
        // Over its limit: nothing remains for this request, shadow or not.
        assert_eq!((rows[1].remaining, rows[2].remaining), (0, 0));
        assert_eq!(rows[4].remaining, u32::MAX);
        let resp = response(&rows, refused, &HeaderForms::default());
        assert_eq!(resp.overall_code, Code::OverLimit as i32);
        let d = resp.statuses[1].duration_until_reset.unwrap();
        assert_eq!((d.seconds, d.nanos), (1, 500_000_000));
        assert_eq!(resp.statuses[3].current_limit, None);
        assert_eq!(
            resp.statuses[0].current_limit.as_ref().unwrap().unit,
            PbUnit::Minute as i32
        );
    }

    #[test]
    fn a_cost_that_never_fits_reports_the_reset() {
        let acts = [count(Mode::Charge, false)];
        let never = Seen {
            remaining: 3,
            retry_ms: -1,
            reset_ms: 0,
            over: true,
            before: 0,
        };
        let o = Outcome {
            refused: true,
            seen: vec![Some(never)],
            round_trips: 1,
        };
        let (rows, _) = rows(&acts, Some(&o), OnRedisError::Open);
        assert_eq!(
            (rows[0].over, rows[0].remaining, rows[0].duration_ms),
            (true, 0, Some(0))
        );
    }

    #[test]
    fn redis_failure() {
        let acts = [count(Mode::Charge, false), count(Mode::Charge, true)];
        let (closed, refused) = rows(&acts, None, OnRedisError::Closed);
        assert_eq!(
            (closed[0].over, closed[1].over, refused),
            (true, false, true)
        );
        let (open, refused) = rows(&acts, None, OnRedisError::Open);
        assert!(open.iter().all(|r| !r.over) && !refused);
        let (_, refused) = rows(&acts[1..], None, OnRedisError::Closed);
        assert!(!refused);
    }

    #[test]
    fn zero_limits() {
        let z = |shadow| Action::Zero {
            limit: limit(shadow),
            counters: Arc::new(Counters::default()),
            cost: 1,
        };
        let acts = [z(false), z(true)];
        let (rows, refused) = rows(&acts, None, OnRedisError::Open);
        assert_eq!((rows[0].over, rows[1].over, refused), (true, false, true));
    }
}
