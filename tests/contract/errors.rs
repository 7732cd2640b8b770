//! Refused calls: each bad argument named in the error, WRONGTYPE, a cost over the per-call
//! limit; none changes anything.

use super::*;

/// A malformed call with the words to look for in its error (any one of them, lower case).
struct Bad {
    args: Vec<Vec<u8>>,
    wants: &'static [&'static str],
}

fn bad_calls(cmd: &str) -> Vec<Bad> {
    // Valid values for every position; `now` far ahead so that a call which trimmed before
    // validating everything would show up as a change.
    let base = ["k", "10", "5", "100000000"];
    let mut out = Vec::new();
    let line = |parts: &[&[u8]], wants| Bad {
        args: std::iter::once(cmd.as_bytes())
            .chain(parts.iter().copied())
            .map(<[u8]>::to_vec)
            .collect(),
        wants,
    };
    let arity: &[&str] = &["wrong number of arguments"];
    out.push(line(&[], arity));
    out.push(line(&[b"k"], arity));
    out.push(line(&[b"k", b"10"], arity));
    out.push(line(&[b"k", b"10", b"5"], arity));
    let numbers: &[&[u8]] = &[
        b"",
        b"abc",
        b"inf",
        b"-inf",
        b"+inf",
        b"nan",
        b"1.5",
        b"1e3",
        b"0x10",
        b"-1",
        b"9007199254740993",
        b"18446744073709551616",
        b"99999999999999999999999999999",
        b"-9223372036854775808",
        b"\xff\xfe",
        b"1\x00",
    ];
    for (pos, name) in [(1, "window"), (2, "max"), (3, "now")] {
        let mut values: Vec<&[u8]> = numbers.to_vec();
        match name {
            "window" => values.extend([&b"0"[..], b"9007199254741"]),
            "max" => values.push(b"0"),
            _ => values.extend([&b"**"[..], b"now"]),
        }
        let wants: &'static [&'static str] = match name {
            "window" => &["window"],
            "max" => &["max"],
            _ => &["now"],
        };
        for v in values {
            let mut parts: Vec<&[u8]> = base.iter().map(|s| s.as_bytes()).collect();
            parts[pos] = v;
            out.push(line(&parts, wants));
        }
    }
    let mut costs: Vec<&[u8]> = numbers.to_vec();
    costs.push(b"0");
    for v in costs {
        let mut parts: Vec<&[u8]> = base.iter().map(|s| s.as_bytes()).collect();
        parts.extend([&b"COST"[..], v]);
        out.push(line(&parts, &["cost"]));
    }
    let with = |extra: &[&'static str]| -> Vec<&[u8]> {
        base.iter()
            .chain(extra.iter())
            .map(|s| s.as_bytes())
            .collect()
    };
    out.push(line(&with(&["FOO", "1"]), &["syntax error"]));
    out.push(line(&with(&["COST", "1", "EXTRA"]), &["syntax error"]));
    out.push(line(&with(&["COSTS", "1"]), &["syntax error"]));
    out.push(line(&with(&["COST", "1", "COST", "1"]), &["syntax error"]));
    out.push(line(&with(&["COST", "1", "cost", "2"]), &["syntax error"]));
    // A dangling COST may be reported as a syntax error or as an arity error; it must name it.
    out.push(line(
        &with(&["COST"]),
        &["cost", "wrong number of arguments"],
    ));
    out
}

#[test]
fn invalid_calls_reply_err_naming_the_argument_and_change_nothing() {
    let (s, mut c) = started();
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 1000")[0], 1);
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 2000")[0], 1);
    let before = state(&s, &mut c, "k");
    let mut checked = 0;
    for cmd in ["SLIDINGWINDOW.ALLOW", "SLIDINGWINDOW.PEEK"] {
        for bad in bad_calls(cmd) {
            let argv: Vec<&[u8]> = bad.args.iter().map(Vec::as_slice).collect();
            let shown: Vec<String> = argv
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let reply = call_bytes(&mut c, &argv);
            let err = error_line(&reply)
                .unwrap_or_else(|| panic!("{shown:?}: expected an error, got {reply:?}"));
            assert!(err.starts_with("ERR "), "{shown:?}: {err}");
            assert!(
                !err.contains('\n') && !err.contains('\r'),
                "{shown:?}: {err:?}"
            );
            let lower = err.to_lowercase();
            assert!(
                bad.wants.iter().any(|w| lower.contains(w)),
                "{shown:?}: error {err:?} should mention one of {:?}",
                bad.wants
            );
            if bad.wants == ["syntax error"] {
                // It names the offending token.
                let token = shown[5..]
                    .iter()
                    .find(|t| !t.eq_ignore_ascii_case("cost") && t.parse::<u64>().is_err())
                    .map(|t| t.to_lowercase())
                    .unwrap_or_else(|| "cost".to_string());
                assert!(
                    lower.contains(&token),
                    "{shown:?}: {err:?} should name {token}"
                );
            }
            if bad.wants.len() == 1 && ["window", "max", "now", "cost"].contains(&bad.wants[0]) {
                // The message names the valid range, whose top is 2^53 (or 2^53 / 1000).
                assert!(
                    err.contains("9007199254740") || err.contains("2^53"),
                    "{shown:?}: {err:?} should name the valid range"
                );
            }
            if bad.wants == ["wrong number of arguments"] {
                assert!(
                    lower.starts_with(&format!(
                        "err wrong number of arguments for '{}' command",
                        cmd.to_lowercase()
                    )),
                    "{shown:?}: {err:?}"
                );
            }
            assert_eq!(state(&s, &mut c, "k"), before, "{shown:?} changed the data");
            checked += 1;
        }
    }
    assert!(checked > 100);
    assert_eq!(q::<String>(&mut c, &["PING"]), "PONG");
}

#[test]
fn wrongtype_on_other_types_leaves_the_key_alone() {
    let (s, mut c) = started();
    ok(&mut c, &["SET", "s", "v", "PX", "100000000"]);
    assert_eq!(q::<i64>(&mut c, &["RPUSH", "l", "x"]), 1, "RPUSH l");
    assert_eq!(q::<i64>(&mut c, &["HSET", "h", "f", "v"]), 1, "HSET h");
    let digest = s.digest();
    let at = pexpiretime(&mut c, "s");
    for key in ["s", "l", "h"] {
        for cmd in ["ALLOW", "PEEK"] {
            // now far ahead: a trim must not be attempted either.
            let r = sw(&mut c, &format!("{cmd} {key} 10 5 100000000"));
            let err = error_line(&r).unwrap_or_else(|| panic!("{cmd} {key}: got {r:?}"));
            assert!(err.starts_with("WRONGTYPE "), "{cmd} {key}: {err}");
            let r = sw(&mut c, &format!("{cmd} {key} 10 5 * COST 2"));
            assert!(error_line(&r).is_some_and(|e| e.starts_with("WRONGTYPE ")));
        }
    }
    assert_eq!(q::<String>(&mut c, &["GET", "s"]), "v");
    assert_eq!(pexpiretime(&mut c, "s"), at);
    assert_eq!(s.digest(), digest);
}

#[test]
fn admitted_cost_above_the_per_call_limit_is_an_error_and_changes_nothing() {
    let (s, mut c) = started();
    // Empty key.
    let digest = s.digest();
    let r = sw(&mut c, "ALLOW e 10 2000000 1000 COST 100001");
    let err = error_line(&r).unwrap_or_else(|| panic!("got {r:?}"));
    assert!(err.starts_with("ERR "), "{err}");
    assert!(!exists(&mut c, "e"));
    assert_eq!(s.digest(), digest);
    // A key whose members would all be trimmed by this call: still nothing changes.
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 1000")[0], 1);
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 2000")[0], 1);
    let before = state(&s, &mut c, "k");
    let r = sw(&mut c, &format!("ALLOW k 10 {TWO_53} 100000 COST 100001"));
    assert!(
        error_line(&r).is_some_and(|e| e.starts_with("ERR ")),
        "got {r:?}"
    );
    assert_eq!(state(&s, &mut c, "k"), before);
    // Rejected huge costs reply normally.
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 5 3000 COST 100001"),
        [0, 2, 3, -1, 9000]
    );
    assert_eq!(
        sw5(&mut c, &format!("ALLOW k 10 5 3000 COST {TWO_53}")),
        [0, 2, 3, -1, 9000]
    );
    assert_eq!(
        sw5(&mut c, &format!("PEEK k 10 5 3000 COST {TWO_53}")),
        [0, 2, 3, -1, 9000]
    );
    assert_eq!(state(&s, &mut c, "k"), before);
}

#[test]
fn peek_of_an_oversized_admission_replies_the_same_error_as_allow() {
    let (s, mut c) = started();
    let digest = s.digest();
    let peek = sw(&mut c, "PEEK k 10 2000000 1000 COST 100001");
    let allow = sw(&mut c, "ALLOW k 10 2000000 1000 COST 100001");
    assert!(
        error_line(&allow).is_some_and(|e| e.starts_with("ERR ")),
        "{allow:?}"
    );
    assert_eq!(
        peek, allow,
        "PEEK replied {peek:?}, ALLOW replied {allow:?}"
    );
    assert_eq!(s.digest(), digest);
}
