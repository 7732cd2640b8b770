//! The shared header spec (`spec/headers.json`): replies and the rate-limit headers they must
//! render, for every renderer to replay: the HTTP gateway, the Envoy service, and the Go, Python
//! and Node.js helpers' header functions.
//!
//! The replies come from the contract's model (`model.rs`): scenarios of calls on fresh keys,
//! each call's six integers a case. The headers come from the rules of docs/clients.md ("Mapping
//! the reply to HTTP") and of the Envoy service's README ("Headers"), written once here:
//! `RateLimit-Policy` every limit `"<name>";q=<max>;w=<window s>`, `RateLimit` the binding limit
//! `"<name>";r=<remaining>;t=<reset s>`, `Retry-After` in seconds, each rounded up, names as
//! structured-field strings. Regenerate with
//! `cargo run -p testkit --bin spec -- headers > spec/headers.json` (a test holds the file equal
//! to it).

use crate::model::{Answer, Model, Options};
use crate::rng::Rng;

/// One limit of a case: its name in the headers, `max` requests per `window` seconds, on the
/// call's key `key` (ALLOWALL's keys; 0 for ALLOW).
#[derive(Debug, Clone)]
pub struct Limit {
    pub name: String,
    pub key: usize,
    pub max: u64,
    pub window: u64,
}

/// A reply's six integers: allowed, count, remaining, retry_after_ms, reset_after_ms and the
/// binding limit's index.
#[derive(Debug, Clone, Copy)]
pub struct Reply {
    pub allowed: bool,
    pub count: i64,
    pub remaining: i64,
    pub retry_after_ms: i64,
    pub reset_after_ms: i64,
    pub limit: usize,
}

impl From<&Answer> for Reply {
    fn from(a: &Answer) -> Reply {
        let h = a.head;
        Reply {
            allowed: h[0] == 1,
            count: h[1],
            remaining: h[2],
            retry_after_ms: h[3],
            reset_after_ms: h[4],
            limit: usize::try_from(h[5]).expect("binding index"),
        }
    }
}

pub struct Case {
    pub name: String,
    pub limits: Vec<Limit>,
    pub reply: Reply,
}

/// The forms the renderers send: each replayer reads its own.
pub const VARIANTS: [(&str, &str); 3] = [
    (
        "gateway",
        "services/gateway's responses, and the helpers' headers (Go httplimit, Python, Node.js): RateLimit-Policy and RateLimit, Retry-After on a refusal unless retry_after_ms is -1",
    ),
    (
        "envoy",
        "the Envoy service's --response-headers, one descriptor per limit (the binding one the reply, the others unconstrained): as gateway, but r=0 and Retry-After on every refusal, from retry_after_ms when above 0, else reset_after_ms",
    ),
    (
        "envoy-reference",
        "the Envoy service's --limit-response-headers (the reference's form), for the same descriptors: RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset of the binding limit",
    ),
];

/// ms in whole seconds, rounded up (a client that waits that long is admitted); 0 for ms <= 0.
pub fn seconds_up(ms: i64) -> i64 {
    if ms <= 0 { 0 } else { (ms - 1) / 1000 + 1 }
}

/// `name` as a structured-field string: printable ASCII, `"` and `\` escaped, any other
/// character as `_`.
pub fn quoted_name(name: &str) -> String {
    escaped(name, |_| "_".into())
}

/// `s` between double quotes, `"` and `\` escaped, printable ASCII as is, any other character
/// as `other` writes it.
fn escaped(s: &str, other: fn(char) -> String) -> String {
    let body: String = s
        .chars()
        .map(|c| match c {
            '"' | '\\' => format!("\\{c}"),
            ' '..='~' => c.to_string(),
            _ => other(c),
        })
        .collect();
    format!("\"{body}\"")
}

/// The headers `variant` renders for `case`, in order.
pub fn headers(case: &Case, variant: &str) -> Vec<(String, String)> {
    let r = &case.reply;
    let binding = &case.limits[r.limit];
    let refused = !r.allowed;
    // The Envoy service's duration_until_reset: the wait until the call fits, else the reset.
    let duration = if r.retry_after_ms > 0 {
        r.retry_after_ms
    } else {
        r.reset_after_ms
    };
    let remaining = if refused && variant != "gateway" {
        0
    } else {
        r.remaining
    };
    let pair = |k: &str, v: String| (k.to_string(), v);
    if variant == "envoy-reference" {
        return vec![
            pair("RateLimit-Limit", binding.max.to_string()),
            pair("RateLimit-Remaining", remaining.to_string()),
            pair("RateLimit-Reset", seconds_up(duration).to_string()),
        ];
    }
    let policy: Vec<String> = case
        .limits
        .iter()
        .map(|l| format!("{};q={};w={}", quoted_name(&l.name), l.max, l.window))
        .collect();
    let mut out = vec![
        pair("RateLimit-Policy", policy.join(",")),
        pair(
            "RateLimit",
            format!(
                "{};r={remaining};t={}",
                quoted_name(&binding.name),
                seconds_up(r.reset_after_ms)
            ),
        ),
    ];
    let retry = match variant {
        "gateway" => (refused && r.retry_after_ms >= 0).then_some(r.retry_after_ms),
        _ => refused.then_some(duration),
    };
    if let Some(ms) = retry {
        out.push(pair("Retry-After", seconds_up(ms).to_string()));
    }
    out
}

const T0: u64 = 1_700_000_000_000;
const SEED: u64 = 20_261_206;

/// Calls on fresh keys through the model: `(ms after the previous call, cost)` each, every
/// reply a case.
fn scenario(name: &str, limits: &[(&str, usize, u64, u64)], calls: &[(u64, u64)]) -> Vec<Case> {
    let limits: Vec<Limit> = limits
        .iter()
        .map(|&(n, key, window, max)| Limit {
            name: n.into(),
            key,
            max,
            window,
        })
        .collect();
    let keyed: Vec<(usize, u64, u64)> = limits.iter().map(|l| (l.key, l.window, l.max)).collect();
    let mut keys = vec![Model::default(); limits.iter().map(|l| l.key + 1).max().unwrap_or(1)];
    let mut now = T0;
    calls
        .iter()
        .enumerate()
        .map(|(i, &(dt, cost))| {
            now += dt;
            let answer = Model::call_all(&mut keys, &keyed, now, cost, Options::default());
            Case {
                name: format!("{name} {i}"),
                limits: limits.clone(),
                reply: Reply::from(&answer),
            }
        })
        .collect()
}

/// Every case: fixed scenarios for the rules' edges, then a seeded random one; every window is
/// 1, 60 or 3600 s, a unit the Envoy service has.
pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    out.extend(scenario(
        "one limit",
        &[("l0", 0, 60, 3)],
        &[(0, 1), (1000, 1), (1000, 1), (500, 1), (57_501, 1)],
    ));
    out.extend(scenario(
        "burst and minute",
        &[("l0", 0, 1, 10), ("l1", 0, 60, 100)],
        &[(0, 10), (0, 1), (999, 1), (1, 1)],
    ));
    out.extend(scenario(
        "user and tenant keys",
        &[("user-1s", 0, 1, 10), ("tenant-1m", 1, 60, 12)],
        &[(0, 10), (1000, 3), (0, 2)],
    ));
    out.extend(scenario(
        "a cost that never fits",
        &[("l0", 0, 60, 3)],
        &[(0, 5), (0, 1), (10, 4)],
    ));
    out.extend(scenario(
        "quoted names",
        &[("a\"b\\c\u{e9}", 0, 3600, 2), ("per-user", 0, 60, 1)],
        &[(0, 1), (58_999, 1), (1001, 1)],
    ));
    let mut rng = Rng::new(SEED);
    let limits = [
        ("l0", 0, 1, rng.range(2, 6)),
        ("l1", 0, 60, rng.range(6, 12)),
    ];
    let calls: Vec<(u64, u64)> = (0..20)
        .map(|_| {
            let dt = rng.pick(&[0u64, 1, 7, 100, 450, 999, 1000, 1001, 2500]);
            (dt, if rng.chance(70) { 1 } else { rng.range(2, 3) })
        })
        .collect();
    out.extend(scenario("random", &limits, &calls));
    out
}

/// The cases as JSON: `{"variants": {name: what}, "cases": [{"name", "limits": [{"name", "key",
/// "max", "window"}], "reply": {...}, "headers": {variant: [[name, value]]}}]}`.
pub fn render(cases: &[Case]) -> String {
    let variants: Vec<String> = VARIANTS
        .iter()
        .map(|(name, what)| format!("    {}: {}", json_string(name), json_string(what)))
        .collect();
    let cases: Vec<String> = cases.iter().map(case_json).collect();
    format!(
        "{{\n  \"variants\": {{\n{}\n  }},\n  \"cases\": [\n{}\n  ]\n}}\n",
        variants.join(",\n"),
        cases.join(",\n")
    )
}

/// One case, on three lines and one more per variant.
fn case_json(case: &Case) -> String {
    let limits: Vec<String> = case
        .limits
        .iter()
        .map(|l| {
            format!(
                "{{\"name\": {}, \"key\": {}, \"max\": {}, \"window\": {}}}",
                json_string(&l.name),
                l.key,
                l.max,
                l.window
            )
        })
        .collect();
    let r = &case.reply;
    let headers: Vec<String> = VARIANTS
        .iter()
        .map(|(variant, _)| {
            let pairs: Vec<String> = headers(case, variant)
                .iter()
                .map(|(k, v)| format!("[{}, {}]", json_string(k), json_string(v)))
                .collect();
            format!("       {}: [{}]", json_string(variant), pairs.join(", "))
        })
        .collect();
    format!(
        "    {{\"name\": {}, \"limits\": [{}],\n     \"reply\": {{\"allowed\": {}, \"count\": {}, \"remaining\": {}, \"retry_after_ms\": {}, \"reset_after_ms\": {}, \"limit\": {}}},\n     \"headers\": {{\n{}\n     }}}}",
        json_string(&case.name),
        limits.join(", "),
        r.allowed,
        r.count,
        r.remaining,
        r.retry_after_ms,
        r.reset_after_ms,
        r.limit,
        headers.join(",\n")
    )
}

/// A JSON string: `"` and `\` escaped, anything outside printable ASCII as `\uXXXX`.
fn json_string(s: &str) -> String {
    escaped(s, |c| {
        let mut units = [0u16; 2];
        c.encode_utf16(&mut units)
            .iter()
            .map(|u| format!("\\u{u:04x}"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `spec/headers.json` is what the generator makes: regenerate it after changing the model
    /// or this file.
    #[test]
    fn the_checked_in_header_spec_is_current() {
        crate::spec::assert_checked_in("headers.json", "-- headers ", &render(&cases()));
    }

    #[test]
    fn cases_cover_the_rules_edges() {
        let all = cases();
        let gateway = |c: &Case| headers(c, "gateway");
        // Admitted, refused with a wait, refused for ever; the binding limit not the first.
        assert!(all.iter().any(|c| c.reply.allowed));
        assert!(all.iter().any(|c| gateway(c).len() == 3));
        assert!(
            all.iter()
                .any(|c| !c.reply.allowed && c.reply.retry_after_ms == -1)
        );
        assert!(all.iter().any(|c| c.reply.limit > 0));
        assert!(all.iter().any(|c| c.limits.iter().any(|l| l.key > 0)));
        assert_eq!(
            gateway(&all[3]),
            [
                ("RateLimit-Policy".into(), "\"l0\";q=3;w=60".into()),
                ("RateLimit".into(), "\"l0\";r=0;t=60".into()),
                ("Retry-After".into(), "58".into()),
            ]
        );
        assert_eq!(quoted_name("a\"b\\c\u{e9}"), "\"a\\\"b\\\\c_\"");
        assert_eq!(json_string("a\"\\\u{e9}"), "\"a\\\"\\\\\\u00e9\"");
        assert_eq!(
            [-5, 0, 1, 999, 1000, 1001].map(seconds_up),
            [0, 0, 1, 1, 1, 2]
        );
    }
}
