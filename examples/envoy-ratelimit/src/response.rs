//! The RateLimitResponse: one status per descriptor in request order, the overall code, and
//! optionally the RateLimit headers.

use crate::cli::OnRedisError;
use crate::config::Limit;
use crate::headers;
use crate::plan::{Action, How};
use crate::store::Outcome;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::Duration;

/// One descriptor's verdict, before it becomes a DescriptorStatus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<'a> {
    pub over: bool,
    pub limit: Option<&'a Limit>,
    /// Counts against the request (not shadow, not a refund or a zero-hit look).
    pub enforced: bool,
    pub remaining: u32,
    /// `duration_until_reset` in ms: while a request of this cost would be refused, the wait
    /// until it would fit (none if it never can); otherwise the wait until the window is empty.
    pub duration_ms: Option<i64>,
    pub reset_ms: i64,
}

/// The verdicts. `outcome` None: Redis failed, and `on_error` decides for enforced limits.
pub fn rows<'a>(
    actions: &'a [Action],
    outcome: Option<&Outcome>,
    on_error: OnRedisError,
) -> Vec<Row<'a>> {
    let refused = actions.iter().any(Action::refuses_all) || outcome.is_some_and(|o| !o.admitted);
    actions
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
                Action::Zero(l) => {
                    row.enforced = !l.shadow;
                    row.over = !l.shadow;
                }
                Action::Count { how, .. } => {
                    row.enforced = *how == How::Charge;
                    let look = outcome.and_then(|o| o.looks.get(i).copied().flatten());
                    match look {
                        Some(look) => {
                            let binds = outcome.is_some_and(|o| o.binding.contains(&i));
                            row.over = row.enforced && refused && (!look.fits || binds);
                            row.remaining =
                                u32::try_from(look.remaining.max(0)).unwrap_or(u32::MAX);
                            row.duration_ms = if look.fits {
                                Some(look.reset_ms)
                            } else {
                                (look.retry_ms >= 0).then_some(look.retry_ms)
                            };
                            row.reset_ms = look.reset_ms;
                        }
                        None => row.over = row.enforced && on_error == OnRedisError::Closed,
                    }
                }
            }
            row
        })
        .collect()
}

/// The response; headers only when asked for and Redis answered.
pub fn response(rows: &[Row<'_>], with_headers: bool) -> RateLimitResponse {
    let code = |over: bool| if over { Code::OverLimit } else { Code::Ok } as i32;
    let over = rows.iter().any(|r| r.over);
    RateLimitResponse {
        overall_code: code(over),
        statuses: rows
            .iter()
            .map(|r| DescriptorStatus {
                code: code(r.over),
                current_limit: r.limit.map(|l| RateLimit {
                    name: l.name.clone(),
                    requests_per_unit: l.requests_per_unit,
                    unit: pb_unit(l) as i32,
                }),
                limit_remaining: r.remaining,
                duration_until_reset: r.duration_ms.map(duration),
                quota: None,
            })
            .collect(),
        response_headers_to_add: if with_headers {
            headers::headers(rows)
        } else {
            Vec::new()
        },
        ..Default::default()
    }
}

fn pb_unit(l: &Limit) -> PbUnit {
    use crate::config::Unit;
    match l.unit {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
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
    use crate::config::Unit;
    use crate::store::Look;

    fn limit(shadow: bool) -> Limit {
        Limit {
            requests_per_unit: 3,
            unit: Unit::Minute,
            name: String::new(),
            shadow,
        }
    }

    fn count(how: How, shadow: bool) -> Action {
        Action::Count {
            key: b"k".to_vec(),
            limit: limit(shadow),
            cost: 1,
            how,
        }
    }

    const FULL: Look = Look {
        fits: false,
        remaining: 0,
        retry_ms: 1500,
        reset_ms: 59_000,
    };
    const ROOM: Look = Look {
        fits: true,
        remaining: 2,
        retry_ms: 0,
        reset_ms: 60_000,
    };

    #[test]
    fn refused_request() {
        let acts = [
            count(How::Charge, false),
            count(How::Charge, false),
            count(How::Shadow, true),
            Action::Unknown,
            Action::Unlimited,
        ];
        let o = Outcome {
            admitted: false,
            binding: vec![1],
            looks: vec![Some(ROOM), Some(FULL), Some(FULL), None, None],
        };
        let rows = rows(&acts, Some(&o), OnRedisError::Open);
        let overs: Vec<bool> = rows.iter().map(|r| r.over).collect();
        assert_eq!(overs, [false, true, false, false, false]);
        assert_eq!(rows[0].duration_ms, Some(60_000));
        assert_eq!(rows[1].duration_ms, Some(1500));
        assert_eq!(rows[4].remaining, u32::MAX);
        let resp = response(&rows, false);
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
    fn admitted_request_at_its_last_slot_is_ok() {
        let acts = [count(How::Charge, false)];
        let o = Outcome {
            admitted: true,
            binding: vec![],
            looks: vec![Some(FULL)],
        };
        let rows = rows(&acts, Some(&o), OnRedisError::Closed);
        assert!(!rows[0].over);
        assert_eq!(response(&rows, false).overall_code, Code::Ok as i32);
    }

    #[test]
    fn redis_failure() {
        let acts = [count(How::Charge, false), count(How::Shadow, true)];
        let closed = rows(&acts, None, OnRedisError::Closed);
        assert_eq!((closed[0].over, closed[1].over), (true, false));
        let open = rows(&acts, None, OnRedisError::Open);
        assert!(open.iter().all(|r| !r.over));
        let shadow_only = rows(&acts[1..], None, OnRedisError::Closed);
        assert_eq!(response(&shadow_only, false).overall_code, Code::Ok as i32);
    }

    #[test]
    fn zero_limits() {
        let acts = [Action::Zero(limit(false)), Action::Zero(limit(true))];
        let rows = rows(&acts, None, OnRedisError::Open);
        assert_eq!((rows[0].over, rows[1].over), (true, false));
    }
}
