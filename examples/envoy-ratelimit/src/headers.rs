//! `--response-headers`: `RateLimit-Policy` and `RateLimit` (IETF httpapi RateLimit draft
//! syntax, as the HTTP gateway sends them) and `Retry-After` on a refusal.

use crate::response::Row;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;

/// Every enforced limit in the policy; the binding one in `RateLimit`. A limit is named by its
/// `rate_limit.name`, else `d<i>` for the descriptor's position in the request.
pub fn headers(rows: &[Row<'_>]) -> Vec<HeaderValue> {
    let enforced: Vec<(usize, &Row<'_>)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.enforced && r.limit.is_some())
        .collect();
    let policy: Vec<String> = enforced
        .iter()
        .filter_map(|&(i, r)| {
            let l = r.limit?;
            Some(format!(
                "{};q={};w={}",
                name(i, &l.name),
                l.requests_per_unit,
                l.unit.seconds()
            ))
        })
        .collect();
    let Some((i, b)) = binding(&enforced) else {
        return Vec::new();
    };
    let mut out = vec![
        header("RateLimit-Policy", policy.join(",")),
        header(
            "RateLimit",
            format!(
                "{};r={};t={}",
                name(i, b.limit.map_or("", |l| l.name.as_str())),
                b.remaining,
                seconds_up(b.reset_ms)
            ),
        ),
    ];
    if b.over
        && let Some(ms) = b.duration_ms
    {
        out.push(header("Retry-After", seconds_up(ms).to_string()));
    }
    out
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

/// A structured-field string: printable ASCII, `"` and `\` escaped.
fn name(i: usize, configured: &str) -> String {
    if configured.is_empty() {
        return format!("\"d{i}\"");
    }
    let mut s = String::from("\"");
    for c in configured.chars() {
        match c {
            '"' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            ' '..='~' => s.push(c),
            _ => s.push('_'),
        }
    }
    s.push('"');
    s
}

/// ms to whole seconds, rounded up (a client that waits that long is admitted).
fn seconds_up(ms: i64) -> i64 {
    if ms <= 0 {
        0
    } else {
        ms / 1000 + i64::from(ms % 1000 != 0)
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

    #[test]
    fn names_the_binding_limit() {
        let l = |n: &str, unit| Limit {
            requests_per_unit: 10,
            unit,
            name: n.into(),
            shadow: false,
        };
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
        let text: Vec<(String, String)> = headers(&rows)
            .into_iter()
            .map(|h| (h.key, h.value))
            .collect();
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
        assert_eq!(name(0, "a\"b\\c\u{e9}"), "\"a\\\"b\\\\c_\"");
        assert!(headers(&[]).is_empty());
    }
}
