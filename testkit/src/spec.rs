//! The shared spec (`spec/cases.json`): calls and the replies they must get, made from the
//! contract's model (`model.rs`, never from the module) and the contract's error texts, for every
//! client to replay: the module's tests, the Rust crate, the Python, Node and Go helpers on both
//! their paths (module and script).
//!
//! A case is a list of calls on keys of one hash tag, written `{t}:a`, `{t}:b`, `{t}:c`: a replayer
//! replaces `{t}` with a tag of its own (`{...}`), so cases run side by side on one server or a
//! cluster. Every call passes its own `now` (ms), so the replies depend on nothing else; windows
//! are at most 60 s, and a case's keys live that long from the server's clock. Regenerate with
//! `cargo run -p testkit --bin spec > spec/cases.json` (a test holds the file equal to it).

use crate::model::{Model, Options};
use crate::rng::Rng;
use std::fmt::Write;

/// One call: its words (command name first, without the `SLIDINGWINDOW.` prefix) and what it
/// must answer.
pub struct Call {
    pub argv: Vec<String>,
    pub answer: Expect,
}

pub enum Expect {
    /// An integer or a (nested) array of integers.
    Reply(Json),
    /// The error line, exactly.
    Error(String),
}

pub enum Json {
    Int(i64),
    List(Vec<Json>),
}

pub struct Case {
    pub name: String,
    pub calls: Vec<Call>,
}

const KEYS: [&str; 3] = ["{t}:a", "{t}:b", "{t}:c"];
/// The first `now` of every case: any fixed time works, the replies only depend on differences.
const T0: u64 = 1_700_000_000_000;
const SEED: u64 = 20_261_204;

/// Every case: random streams through the model, then the contract's errors.
pub fn cases() -> Vec<Case> {
    let mut rng = Rng::new(SEED);
    let mut out: Vec<Case> = (0..40).map(|i| stream(&mut rng, i)).collect();
    out.push(errors());
    out
}

fn words(parts: &[&dyn std::fmt::Display]) -> Vec<String> {
    parts.iter().map(|p| p.to_string()).collect()
}

/// A random stream of ALLOW, PEEK, ALLOWALL, PEEKALL and REFUND on up to three keys.
fn stream(rng: &mut Rng, i: usize) -> Case {
    let mut logs = vec![Model::default(); KEYS.len()];
    let mut now = T0;
    let mut calls = Vec::new();
    let windows = [1u64, 2, 5, 10, 60];
    for _ in 0..rng.range(8, 24) {
        now += rng.pick(&[0u64, 1, 7, 100, 450, 1000, 2500]);
        let cost = if rng.chance(70) { 1 } else { rng.range(2, 4) };
        let mut options = Options::default();
        let mut extra: Vec<String> = Vec::new();
        if cost != 1 {
            extra.extend(words(&[&"COST", &cost]));
        }
        let kind = rng.range(0, 9);
        if kind <= 6 {
            let n_limits = if rng.chance(60) { 1 } else { rng.range(2, 3) };
            let limits: Vec<(u64, u64)> = (0..n_limits)
                .map(|_| (rng.pick(&windows), rng.range(1, 8)))
                .collect();
            // ALLOWALL over 1 to 3 keys, each with at least one limit, or one key.
            if kind >= 5 {
                let n_keys = rng.range(1, 3) as usize;
                let mut keyed: Vec<(usize, u64, u64)> = (0..n_keys)
                    .map(|k| (k, rng.pick(&windows), rng.range(1, 8)))
                    .collect();
                if rng.chance(40) {
                    keyed.push((
                        rng.range(0, n_keys as u64 - 1) as usize,
                        rng.pick(&windows),
                        rng.range(1, 8),
                    ));
                }
                let detail = option_words(rng, &mut options, &mut extra);
                let peek = rng.chance(30);
                let mut argv = words(&[&if peek { "PEEKALL" } else { "ALLOWALL" }, &n_keys]);
                argv.extend(KEYS[..n_keys].iter().map(|k| k.to_string()));
                argv.push(now.to_string());
                if cost != 1 {
                    argv.extend(words(&[&"COST", &cost]));
                }
                for &(k, w, m) in &keyed {
                    argv.extend(words(&[&"LIMIT", &(k + 1), &w, &m]));
                }
                argv.extend(extra.into_iter().skip(if cost != 1 { 2 } else { 0 }));
                let keys = &mut logs[..n_keys];
                let answer = if peek {
                    Model::peek_all_with(keys, &keyed, now, cost, options)
                } else {
                    Model::call_all(keys, &keyed, now, cost, options)
                };
                calls.push(Call {
                    argv,
                    answer: Expect::Reply(reply(&answer, true, detail, now)),
                });
            } else {
                let k = rng.range(0, 2) as usize;
                let detail = option_words(rng, &mut options, &mut extra);
                let peek = rng.chance(30);
                let (w0, m0) = limits[0];
                let mut argv = words(&[
                    &if peek { "PEEK" } else { "ALLOW" },
                    &KEYS[k],
                    &w0,
                    &m0,
                    &now,
                ]);
                let cost_words: Vec<String> = extra
                    .iter()
                    .take(if cost != 1 { 2 } else { 0 })
                    .cloned()
                    .collect();
                argv.extend(cost_words);
                for &(w, m) in &limits[1..] {
                    argv.extend(words(&[&"LIMIT", &w, &m]));
                }
                argv.extend(extra.into_iter().skip(if cost != 1 { 2 } else { 0 }));
                let answer = if peek {
                    logs[k].peek_with(&limits, now, cost, options)
                } else {
                    logs[k].allow_with(&limits, now, cost, options)
                };
                calls.push(Call {
                    argv,
                    answer: Expect::Reply(reply(&answer, limits.len() > 1, detail, now)),
                });
            }
        } else {
            let k = rng.range(0, 2) as usize;
            let n = rng.range(1, 3);
            let mut argv = words(&[&"REFUND", &KEYS[k], &n]);
            let at = if rng.chance(60) {
                let ts = now - rng.range(0, 1500);
                argv.extend(words(&[&"AT", &ts]));
                Some(ts)
            } else {
                None
            };
            let removed = logs[k].refund(n, at);
            calls.push(Call {
                argv,
                answer: Expect::Reply(Json::Int(removed as i64)),
            });
        }
    }
    Case {
        name: format!("stream {i}"),
        calls,
    }
}

/// Adds `LEASE`, `PRECISION` and `DETAIL` at random (in that order) after `COST` in `extra`;
/// whether `DETAIL` was given.
fn option_words(rng: &mut Rng, options: &mut Options, extra: &mut Vec<String>) -> bool {
    if rng.chance(20) {
        options.lease = rng.pick(&[50u64, 500, 3000]);
        extra.extend(words(&[&"LEASE", &options.lease]));
    }
    if rng.chance(20) {
        options.precision = rng.pick(&[10u64, 1000]);
        extra.extend(words(&[&"PRECISION", &options.precision]));
    }
    let detail = rng.chance(30);
    if detail {
        extra.push("DETAIL".into());
    }
    detail
}

/// The reply the contract gives for `answer`: five integers, six with `named`, eight elements
/// with `DETAIL`.
fn reply(answer: &crate::model::Answer, named: bool, detail: bool, now: u64) -> Json {
    let ints = |v: &[i64]| Json::List(v.iter().map(|&i| Json::Int(i)).collect());
    if !detail {
        return ints(&answer.plain(named));
    }
    let mut head: Vec<Json> = answer.head.iter().map(|&i| Json::Int(i)).collect();
    head.push(Json::List(answer.limits.iter().map(|l| ints(l)).collect()));
    head.push(Json::Int(now as i64));
    Json::List(head)
}

/// The contract's errors ("Errors"), one call each, on keys that hold nothing.
fn errors() -> Case {
    let max = "9007199254740992";
    let window = "window must be an integer between 1 and 9007199254740 (window * 1000 <= 2^53)";
    let table: Vec<(&str, String)> = vec![
        ("ALLOW {t}:a 0 3 1000", format!("ERR {window}")),
        (
            "ALLOW {t}:a 10 0 1000",
            format!("ERR max must be an integer between 1 and {max}"),
        ),
        (
            "PEEK {t}:a 10 3 x",
            format!("ERR now must be an integer between 0 and {max}, or *"),
        ),
        (
            "ALLOW {t}:a 10 3 1000 COST 0",
            format!("ERR cost must be an integer between 1 and {max}"),
        ),
        (
            "PEEK {t}:a 10 3 1000 FOO",
            "ERR syntax error, unknown option 'FOO'".into(),
        ),
        (
            "ALLOW {t}:a 10 3 1000 COST 1 COST 2",
            "ERR syntax error, option 'COST' given twice".into(),
        ),
        (
            "ALLOW {t}:a 10 3 1000 DETAIL DETAIL",
            "ERR syntax error, option 'DETAIL' given twice".into(),
        ),
        (
            "ALLOW {t}:a 10 3 1000 COST",
            "ERR syntax error, option 'COST' needs a value".into(),
        ),
        (
            "ALLOW {t}:a 10 3 1000 LIMIT 5",
            "ERR syntax error, option 'LIMIT' needs two values".into(),
        ),
        (
            "ALLOW {t}:a 10 3 1000 LIMIT 0 5",
            format!("ERR LIMIT {window}"),
        ),
        (
            "PEEK {t}:a 10 3 1000 LIMIT 5 0",
            format!("ERR LIMIT max must be an integer between 1 and {max}"),
        ),
        (
            "ALLOW {t}:a 10 3 1000 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1 LIMIT 1 1",
            "ERR syntax error, at most 16 limits in one call".into(),
        ),
        (
            "ALLOW {t}:a 10 3 1000 LEASE 0",
            format!("ERR LEASE must be an integer between 1 and {max} - now (now + LEASE <= 2^53)"),
        ),
        (
            "ALLOW {t}:a 10 3 1000 PRECISION 0",
            format!(
                "ERR PRECISION must be an integer between 1 and {max} (now + LEASE rounded up to a multiple of PRECISION <= 2^53)"
            ),
        ),
        (
            "ALLOW {t}:a 10 1000000 1000 COST 200000",
            "ERR cost 200000 would add more than 100000 members in one call".into(),
        ),
        (
            "ALLOWALL 0 {t}:a 1000 LIMIT 1 10 3",
            "ERR numkeys must be an integer between 1 and 16, followed by that many keys and now"
                .into(),
        ),
        (
            "ALLOWALL 2 {t}:a {t}:a 1000 LIMIT 1 10 3 LIMIT 2 10 3",
            "ERR key 2 is key 1 again: the keys of one call must be distinct".into(),
        ),
        (
            "PEEKALL 2 {t}:a {t}:b 1000 LIMIT 1 10 3",
            "ERR key 2 has no LIMIT: every key needs at least one".into(),
        ),
        (
            "ALLOWALL 2 {t}:a {t}:b 1000 LIMIT 3 10 3",
            "ERR LIMIT keyno must be an integer between 1 and numkeys (2)".into(),
        ),
        (
            "ALLOWALL 2 {t}:a {t}:b 1000 LIMIT 1 10",
            "ERR syntax error, option 'LIMIT' needs three values (keyno window max)".into(),
        ),
        (
            "ALLOWALL 2 {t}:a {t}:b 1000 COST 60000 LIMIT 1 10 1000000 LIMIT 2 10 1000000",
            "ERR cost 60000 times 2 keys would add more than 100000 members in one call".into(),
        ),
        (
            "REFUND {t}:a 0",
            format!("ERR n must be an integer between 1 and {max}"),
        ),
        (
            "REFUND {t}:a 1 AT x",
            format!("ERR AT must be an integer between 0 and {max}, or *"),
        ),
    ];
    let mut calls: Vec<Call> = table
        .into_iter()
        .map(|(line, error)| Call {
            argv: line.split(' ').map(String::from).collect(),
            answer: Expect::Error(error),
        })
        .collect();
    // An error changes nothing: the keys are still empty.
    calls.push(Call {
        argv: "PEEK {t}:a 10 3 1000"
            .split(' ')
            .map(String::from)
            .collect(),
        answer: Expect::Reply(Json::List([1, 1, 2, 0, 10_000].map(Json::Int).into())),
    });
    Case {
        name: "errors".into(),
        calls,
    }
}

/// The cases as JSON, one call a line: `{"cases": [{"name", "calls": [{"argv", "reply" | "error"}]}]}`.
pub fn render(cases: &[Case]) -> String {
    let mut out = String::from("{\n  \"cases\": [\n");
    for (i, case) in cases.iter().enumerate() {
        let _ = writeln!(out, "    {{\"name\": {}, \"calls\": [", quoted(&case.name));
        for (j, call) in case.calls.iter().enumerate() {
            let argv: Vec<String> = call.argv.iter().map(|w| quoted(w)).collect();
            let answer = match &call.answer {
                Expect::Reply(json) => format!("\"reply\": {}", json_text(json)),
                Expect::Error(e) => format!("\"error\": {}", quoted(e)),
            };
            let comma = if j + 1 < case.calls.len() { "," } else { "" };
            let _ = writeln!(
                out,
                "      {{\"argv\": [{}], {answer}}}{comma}",
                argv.join(", ")
            );
        }
        let comma = if i + 1 < cases.len() { "," } else { "" };
        let _ = writeln!(out, "    ]}}{comma}");
    }
    out.push_str("  ]\n}\n");
    out
}

fn json_text(j: &Json) -> String {
    match j {
        Json::Int(i) => i.to_string(),
        Json::List(items) => {
            let parts: Vec<String> = items.iter().map(json_text).collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

/// A JSON string of printable ASCII (the only text the cases hold).
fn quoted(s: &str) -> String {
    assert!(
        s.bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    );
    format!("\"{s}\"")
}

/// Fails unless `spec/<file>` holds `made`: it must be regenerated with the `spec` bin and
/// `args`.
#[cfg(test)]
pub(crate) fn assert_checked_in(file: &str, args: &str, made: &str) {
    let path = format!("{}/../spec/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        text == made,
        "spec/{file} is stale: cargo run -p testkit --bin spec {args}> spec/{file}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `spec/cases.json` is what the generator makes: regenerate it after changing the model or
    /// this file.
    #[test]
    fn the_checked_in_spec_is_current() {
        assert_checked_in("cases.json", "", &render(&cases()));
    }

    #[test]
    fn cases_cover_every_command_and_option() {
        let text = render(&cases());
        for word in [
            "\"ALLOW\"",
            "\"PEEK\"",
            "\"ALLOWALL\"",
            "\"PEEKALL\"",
            "\"REFUND\"",
            "\"LIMIT\"",
            "\"COST\"",
            "\"LEASE\"",
            "\"PRECISION\"",
            "\"DETAIL\"",
            "\"AT\"",
            "\"reply\": [0,",
        ] {
            assert!(text.contains(word), "no {word}");
        }
    }
}
