//! The rate-limit headers (IETF httpapi RateLimit draft syntax) and the 429 body.

use crate::limiter::{Decision, Named};
use axum::http::HeaderValue;
use slidingwindow_service::headers::{policy_item, quote, remaining_and_reset, seconds_up};
use std::fmt::Write;

/// `"l0";q=10;w=1,"l1";q=100;w=60`: every limit, by name.
pub fn policy(limits: &[Named]) -> HeaderValue {
    let mut out = String::with_capacity(24 * limits.len());
    for (i, l) in limits.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        policy_item(&mut out, &l.name, l.limit.max, l.limit.window_s);
    }
    value(out)
}

/// Appends the binding limit's name.
fn name(out: &mut String, limits: &[Named], d: &Decision) {
    match limits.get(d.limit) {
        Some(l) => out.push_str(&l.name),
        None => {
            let _ = write!(out, "l{}", d.limit);
        }
    }
}

/// `"l1";r=<remaining>;t=<seconds until its window is empty>` for the binding limit: written
/// into one buffer that becomes the header value without a copy.
pub fn ratelimit(limits: &[Named], d: &Decision) -> HeaderValue {
    let mut out = String::with_capacity(64);
    match limits.get(d.limit) {
        Some(l) => quote(&mut out, &l.name),
        None => quote(&mut out, &format!("l{}", d.limit)),
    }
    remaining_and_reset(&mut out, d.remaining, d.reset_after_ms);
    value(out)
}

/// `Retry-After` in whole seconds, rounded up; none when the request can never pass (-1).
pub fn retry_after(d: &Decision) -> Option<HeaderValue> {
    (d.retry_after_ms >= 0).then(|| HeaderValue::from(seconds_up(d.retry_after_ms)))
}

/// The short JSON body of a 429.
pub fn refused_body(limits: &[Named], d: &Decision) -> String {
    let mut out = String::with_capacity(96);
    out.push_str("{\"error\":\"rate limited\",\"limit\":\"");
    name(&mut out, limits, d);
    let _ = writeln!(out, "\",\"retry_after_ms\":{}}}", d.retry_after_ms);
    out
}

fn value(text: String) -> HeaderValue {
    // Only digits, letters and ";=,\"" go in: always a valid header value. (From the `String`
    // itself: no copy.)
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limit;

    /// Every case of `spec/headers.json` (testkit's), variant `gateway`: the headers a response
    /// gets, `Retry-After` only on a refusal as the layer sends them.
    #[test]
    fn replays_the_header_spec() {
        let spec: serde_json::Value =
            serde_json::from_str(include_str!("../../../spec/headers.json")).expect("JSON");
        let cases = spec["cases"].as_array().expect("cases");
        for case in cases {
            let int = |v: &serde_json::Value| v.as_i64().expect("integer");
            let limits: Vec<Named> = case["limits"]
                .as_array()
                .expect("limits")
                .iter()
                .map(|l| Named {
                    name: l["name"].as_str().expect("name").to_string(),
                    limit: Limit {
                        max: l["max"].as_u64().expect("max"),
                        window_s: l["window"].as_u64().expect("window"),
                    },
                })
                .collect();
            let r = &case["reply"];
            let d = Decision {
                allowed: r["allowed"].as_bool().expect("allowed"),
                remaining: int(&r["remaining"]),
                retry_after_ms: int(&r["retry_after_ms"]),
                reset_after_ms: int(&r["reset_after_ms"]),
                limit: r["limit"].as_u64().expect("limit") as usize,
            };
            let mut got = vec![
                ["RateLimit-Policy".to_string(), text(policy(&limits))],
                ["RateLimit".to_string(), text(ratelimit(&limits, &d))],
            ];
            if !d.allowed
                && let Some(v) = retry_after(&d)
            {
                got.push(["Retry-After".to_string(), text(v)]);
            }
            let want: Vec<[String; 2]> =
                serde_json::from_value(case["headers"]["gateway"].clone()).expect("headers");
            assert_eq!(got, want, "{}", case["name"]);
        }
        assert!(cases.len() > 30);
    }

    fn text(v: HeaderValue) -> String {
        v.to_str().expect("ASCII").to_string()
    }

    /// What the spec cannot say: a name the limits do not hold, the 429's body.
    #[test]
    fn renders() {
        let named = |name: &str, max, window_s| Named {
            name: name.to_string(),
            limit: Limit { max, window_s },
        };
        let limits = [named("l0", 10, 1), named("t0", 100, 60)];
        let d = Decision {
            allowed: false,
            remaining: 0,
            retry_after_ms: 1001,
            reset_after_ms: 59_000,
            limit: 1,
        };
        assert_eq!(
            ratelimit(&limits, &Decision { limit: 2, ..d }),
            "\"l2\";r=0;t=59"
        );
        assert_eq!(
            refused_body(&limits, &d),
            "{\"error\":\"rate limited\",\"limit\":\"t0\",\"retry_after_ms\":1001}\n"
        );
    }

    #[test]
    fn rounding_up() {
        for (ms, s) in [
            (-1, 0),
            (0, 0),
            (1, 1),
            (999, 1),
            (1000, 1),
            (1001, 2),
            (60_000, 60),
            (i64::MAX, i64::MAX / 1000 + 1),
        ] {
            assert_eq!(seconds_up(ms), s, "{ms}");
        }
    }
}
