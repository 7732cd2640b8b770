//! The headers a response may ask Envoy to add: `--response-headers`, `RateLimit-Policy` and
//! `RateLimit` (IETF httpapi RateLimit draft syntax, as the HTTP gateway sends them) and
//! `Retry-After` on a refusal; `--limit-response-headers`, the reference's `RateLimit-Limit`,
//! `RateLimit-Remaining` and `RateLimit-Reset` (LIMIT_RESPONSE_HEADERS_ENABLED).

use crate::row::Row;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use slidingwindow_service::headers::{policy_item, quote, remaining_and_reset, seconds_up};

/// Every enforced limit in the policy; the binding one in `RateLimit`. A limit is named by its
/// `rate_limit.name`, else `d<i>` for the descriptor's position in the request.
pub fn draft(rows: &[Row<'_>]) -> Vec<HeaderValue> {
    let enforced: Vec<(usize, &Row<'_>)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.enforced && r.limit.is_some())
        .collect();
    let mut policy = String::new();
    for &(i, r) in &enforced {
        let Some(l) = r.limit else { continue };
        if !policy.is_empty() {
            policy.push(',');
        }
        policy_item(
            &mut policy,
            &name(i, &l.name),
            u64::from(l.requests_per_unit),
            l.unit.seconds(),
        );
    }
    let Some((i, b)) = binding(&enforced) else {
        return Vec::new();
    };
    let mut binding = String::new();
    quote(
        &mut binding,
        &name(i, b.limit.map_or("", |l| l.name.as_str())),
    );
    remaining_and_reset(&mut binding, i64::from(b.remaining), b.reset_ms);
    let mut out = vec![
        header("RateLimit-Policy", policy),
        header("RateLimit", binding),
    ];
    if b.over
        && let Some(ms) = b.duration_ms
    {
        out.push(header("Retry-After", seconds_up(ms).to_string()));
    }
    out
}

/// The reference's header names (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    pub limit: String,
    pub remaining: String,
    pub reset: String,
}

/// The reference's three headers for the descriptor closest to its limit: the least remaining
/// among those with a limit, or the last one over its limit; the reset is its
/// `duration_until_reset` in whole seconds, rounded up.
pub fn reference(rows: &[Row<'_>], names: &HeaderNames) -> Vec<HeaderValue> {
    let mut chosen: Option<&Row<'_>> = None;
    let mut least = u32::MAX;
    for r in rows {
        let Some(limit) = r.limit else { continue };
        if r.remaining < least {
            chosen = Some(r);
            least = r.remaining;
        }
        if r.over && !limit.quota {
            chosen = Some(r);
            least = 0;
        }
    }
    let Some(r) = chosen else {
        return Vec::new();
    };
    let Some(limit) = r.limit else {
        return Vec::new();
    };
    vec![
        header(&names.limit, limit.requests_per_unit.to_string()),
        header(&names.remaining, r.remaining.to_string()),
        header(
            &names.reset,
            seconds_up(r.duration_ms.unwrap_or(0)).to_string(),
        ),
    ]
}

/// The refusing limits if the request was refused, else all; the least remaining, then the
/// longest wait (none counting as forever), then the longest window, then the first.
fn binding<'r, 'a>(enforced: &[(usize, &'r Row<'a>)]) -> Option<(usize, &'r Row<'a>)> {
    let refused = enforced.iter().any(|(_, r)| r.over);
    enforced
        .iter()
        .filter(|(_, r)| r.over || !refused)
        .min_by_key(|(i, r)| {
            (
                r.remaining,
                std::cmp::Reverse(r.duration_ms.unwrap_or(i64::MAX)),
                std::cmp::Reverse(r.limit.map_or(0, |l| l.unit.seconds())),
                *i,
            )
        })
        .copied()
}

/// A limit's name in the headers (quoted there): its `rate_limit.name`, else `d<i>`.
fn name(i: usize, configured: &str) -> std::borrow::Cow<'_, str> {
    if configured.is_empty() {
        format!("d{i}").into()
    } else {
        configured.into()
    }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.into(),
        value,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Limit, Unit};
    use crate::stat::StatKey;

    fn lim(n: &str, unit: Unit) -> Limit {
        let mut l = Limit::overriding(
            10,
            unit,
            StatKey {
                domain: "d".into(),
                parts: vec![],
            },
        );
        l.name = n.into();
        l
    }

    /// Every case of `spec/headers.json` (testkit's) through `rows` and `response`, one
    /// descriptor per limit: the binding one with the reply, the others unconstrained; variants
    /// `envoy` (`--response-headers`) and `envoy-reference` (`--limit-response-headers`).
    #[test]
    fn replays_the_header_spec() {
        use crate::cli::OnRedisError;
        use crate::plan::{Action, Mode};
        use crate::response::{HeaderForms, response, rows};
        use crate::stat::Counters;
        use crate::store::{Outcome, Seen};
        use std::sync::Arc;

        let spec: serde_json::Value =
            serde_json::from_str(include_str!("../../../spec/headers.json")).expect("JSON");
        let names = HeaderNames {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        };
        let forms = HeaderForms {
            draft: true,
            reference: Some(names),
        };
        let cases = spec["cases"].as_array().expect("cases");
        for case in cases {
            let r = &case["reply"];
            let int = |field: &str| r[field].as_i64().expect("integer");
            let binding = r["limit"].as_u64().expect("limit") as usize;
            let refused = !r["allowed"].as_bool().expect("allowed");
            let mut seen = Vec::new();
            let actions: Vec<Action> = case["limits"]
                .as_array()
                .expect("limits")
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let unit = match l["window"].as_u64() {
                        Some(1) => Unit::Second,
                        Some(60) => Unit::Minute,
                        Some(3600) => Unit::Hour,
                        other => panic!("no unit of {other:?} s"),
                    };
                    let max = l["max"].as_u64().expect("max");
                    let mut limit = lim(l["name"].as_str().expect("name"), unit);
                    limit.requests_per_unit = u32::try_from(max).expect("u32");
                    seen.push(Some(if i == binding {
                        Seen {
                            remaining: int("remaining") as u64,
                            retry_ms: int("retry_after_ms"),
                            reset_ms: int("reset_after_ms") as u64,
                            over: refused,
                            before: int("count") as u64,
                        }
                    } else {
                        Seen {
                            remaining: u64::MAX,
                            retry_ms: 0,
                            reset_ms: 0,
                            over: false,
                            before: 0,
                        }
                    }));
                    Action::Count {
                        key: vec![b'k', i as u8],
                        limit: Arc::new(limit),
                        counters: Arc::new(Counters::default()),
                        cost: 1,
                        mode: Mode::Charge,
                    }
                })
                .collect();
            let outcome = Outcome {
                refused,
                seen,
                round_trips: 1,
            };
            let (rows, refused) = rows(&actions, Some(&outcome), OnRedisError::Open);
            let got: Vec<[String; 2]> = response(&rows, refused, &forms)
                .response_headers_to_add
                .into_iter()
                .map(|h| [h.key, h.value])
                .collect();
            let want = |variant: &str| -> Vec<[String; 2]> {
                serde_json::from_value(case["headers"][variant].clone()).expect("headers")
            };
            let (draft, reference) = got.split_at(got.len() - 3);
            assert_eq!(draft, want("envoy"), "{}", case["name"]);
            assert_eq!(reference, want("envoy-reference"), "{}", case["name"]);
        }
        assert!(cases.len() > 30);
    }

    #[test]
    fn names_the_binding_limit() {
        let l = lim;
        let (a, b) = (l("per-user", Unit::Second), l("", Unit::Minute));
        let row = |limit, over, remaining, duration_ms| Row {
            over,
            limit: Some(limit),
            enforced: true,
            remaining,
            duration_ms,
            reset_ms: 1001,
        };
        let rows = [row(&a, false, 4, Some(1001)), row(&b, true, 0, Some(2500))];
        let text: Vec<(String, String)> =
            draft(&rows).into_iter().map(|h| (h.key, h.value)).collect();
        assert_eq!(
            text,
            [
                (
                    "RateLimit-Policy".into(),
                    "\"per-user\";q=10;w=1,\"d1\";q=10;w=60".into()
                ),
                ("RateLimit".into(), "\"d1\";r=0;t=2".into()),
                ("Retry-After".into(), "3".into()),
            ]
        );
        assert_eq!(name(1, ""), "d1");
        assert!(draft(&[]).is_empty());
        let names = HeaderNames {
            limit: "L".into(),
            remaining: "R".into(),
            reset: "T".into(),
        };
        let text: Vec<(String, String)> = reference(&rows, &names)
            .into_iter()
            .map(|h| (h.key, h.value))
            .collect();
        assert_eq!(
            text,
            [
                ("L".into(), "10".into()),
                ("R".into(), "0".into()),
                ("T".into(), "3".into())
            ]
        );
        assert!(reference(&[], &names).is_empty());
    }
}
