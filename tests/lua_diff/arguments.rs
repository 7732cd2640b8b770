//! The script's configs, the per-call cap and argument lists, malformed or random: the same
//! replies and error texts as the module.

use crate::fallback::{Fallback, module, shown};
use redis::Value;
use testkit::client::{self, scores};
use testkit::harness::{Server, error_line};
use testkit::rng::Rng;

/// The script's own configs in ARGV[1]: an unknown name or a bad value is refused, naming it.
#[test]
fn the_client_script_refuses_configs_it_does_not_know() {
    let s = Server::start();
    let mut c = s.client();
    let lua = Fallback::load(&mut c);
    let words: Vec<String> = "k 10 5 1000".split(' ').map(String::from).collect();
    let cases = [
        (
            "lateness 86400001",
            "ERR slidingwindow.lua: config lateness must be an integer between 0 and 86400000",
        ),
        (
            "lateness",
            "ERR slidingwindow.lua: config lateness must be an integer between 0 and 86400000",
        ),
        (
            "max-members-per-call 0",
            "ERR slidingwindow.lua: config max-members-per-call must be an integer between 1 and 10000000",
        ),
        (
            "storage compact",
            "ERR slidingwindow.lua: unknown config 'storage' in ARGV[1] (configs: lateness, max-members-per-call)",
        ),
    ];
    for (configs, error) in cases {
        let lua = Fallback {
            sha: lua.sha.clone(),
            configs: configs.to_string(),
        };
        assert_eq!(
            shown(&lua.like(&mut c, "ALLOW", &words)),
            error,
            "{configs}"
        );
    }
    assert!(!client::exists(&mut c, "k"));
    let lua = Fallback {
        sha: lua.sha.clone(),
        configs: "LATENESS 5 Max-Members-Per-Call 9".to_string(),
    };
    assert_eq!(
        shown(&lua.like(&mut c, "ALLOW", &words)),
        "[1, 1, 4, 0, 10000]"
    );
}

#[test]
fn malformed_calls_get_the_same_error_from_the_client_script() {
    let s = Server::start();
    let mut c = s.client();
    let lua = Fallback::load(&mut c);
    let cases: &[(&str, &str)] = &[
        ("ALLOWALL", ""),
        ("ALLOWALL", "1"),
        ("ALLOWALL", "x K1 1 LIMIT 1 1 1"),
        ("ALLOWALL", "0 1 LIMIT 1 1 1"),
        (
            "PEEKALL",
            "17 K1 K2 K3 K4 K5 K6 K7 K8 K9 K10 K11 K12 K13 K14 K15 K16 K17 1",
        ),
        ("ALLOWALL", "2 K1 K2"),
        ("ALLOWALL", "3 K1 K2"),
        ("ALLOWALL", "2 K1 K1 1 LIMIT 1 1 1"),
        ("PEEKALL", "1 K1 -1 LIMIT 1 1 1"),
        ("ALLOWALL", "1 K1 1"),
        ("ALLOWALL", "2 K1 K2 1 LIMIT 1 1 1"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1"),
        ("PEEKALL", "2 K1 K2 1 LIMIT 3 1 1 LIMIT 1 1 1"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 0 1"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 0"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 COST 1 cost 2"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 COST 0"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 FOO"),
        ("PEEKALL", "1 K1 1 LIMIT 1 10 200000 COST 100001"),
        ("REFUND", ""),
        ("REFUND", "K1"),
        ("REFUND", "K1 0"),
        ("REFUND", "K1 1.5"),
        ("REFUND", "K1 1 AT"),
        ("REFUND", "K1 1 at -1"),
        ("REFUND", "K1 1 AT 5 at 6"),
        ("REFUND", "K1 1 COST 1"),
        ("REFUND", "K3 1"),
        (
            "ALLOWALL",
            "3 K1 K2 K3 1 LIMIT 1 60 9 LIMIT 2 60 9 LIMIT 3 60 9",
        ),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 LEASE 0"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 LEASE"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 LEASE 5 lease 6"),
        ("PEEKALL", "1 K1 9007199254740992 LIMIT 1 1 1 LEASE 1"),
        ("ALLOWALL", "1 K1 * LIMIT 1 1 1 LEASE 9007199254740992"),
        ("ALLOWALL", "1 K1 1 DETAIL LIMIT 1 1 1 detail"),
        ("ALLOWALL", "2 K1 K2 1 LEASE x LIMIT 1 1 1"),
        (
            "ALLOWALL",
            "2 K1 K2 1 COST 60000 LIMIT 1 10 1000000 LIMIT 2 10 1000000",
        ),
        ("ALLOW", "K1 10 5 1 LEASE x"),
        ("ALLOW", "K1 10 5 1 LEASE 9007199254740993"),
        ("ALLOW", "K1 10 5 * LEASE 9007199254740992"),
        ("ALLOW", "K1 1 1 * LEASE 9007199254740992 FOO"),
        ("ALLOW", "K1 1 1 5 LEASE 9007199254740992 FOO"),
        ("ALLOW", "K1 1 1 * LEASE 9007199254740991 FOO"),
        ("ALLOW", "K1 10 5 1 PRECISION 0"),
        ("ALLOW", "K1 10 5 1 PRECISION x"),
        ("ALLOW", "K1 10 5 1 PRECISION"),
        ("PEEK", "K1 10 5 1 PRECISION 5 precision 5"),
        ("ALLOW", "K1 10 5 1 PRECISION 9007199254740993"),
        ("ALLOW", "K1 10 5 9007199254740991 PRECISION 3 FOO"),
        ("ALLOW", "K1 10 5 9007199254740991 PRECISION 2 FOO"),
        (
            "PEEK",
            "K1 10 5 1000 PRECISION 3 LEASE 9007199254739991 FOO",
        ),
        (
            "ALLOW",
            "K1 10 5 1000 LEASE 9007199254739991 PRECISION 3 FOO",
        ),
        ("ALLOW", "K1 10 5 1000 PRECISION 3 LEASE 9007199254739993"),
        (
            "ALLOW",
            "K1 10 5 * LEASE 4503599627370497 PRECISION 4503599627370497 FOO",
        ),
        ("ALLOW", "K1 10 5 * PRECISION 4503599627370497 FOO"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 PRECISION 0"),
        ("PEEKALL", "1 K1 9007199254740991 LIMIT 1 1 1 PRECISION 3"),
        ("ALLOWALL", "2 K1 K2 1 PRECISION x LIMIT 1 1 1"),
        ("PEEK", "K1 10 5 1 DETAIL DETAIL"),
        ("ALLOW", "K1 10 5 1 DETAIL 5"),
        ("ALLOW", "K1 10 5 1 DETAILS"),
        ("ALLOW", "K1 10 5 1 LIMIT 1 1 LEASE 0"),
        ("ALLOW", "K3 10 5 1 LEASE 5 DETAIL"),
        ("PEEK", "K1 10 1000000 1 COST 100001 DETAIL"),
    ];
    let seventeen = format!("1 K1 1{}", " LIMIT 1 1 1".repeat(17));
    let cases = cases
        .iter()
        .copied()
        .chain([("ALLOWALL", seventeen.as_str())]);
    for (command, line) in cases {
        for side in ["m", "l"] {
            let _: () = redis::cmd("ZADD")
                .arg(format!("{side}:K1"))
                .arg(1)
                .arg("a")
                .query(&mut c)
                .unwrap();
            client::ok(&mut c, &["SET", &format!("{side}:K3"), "x"]);
        }
        let words = |side: &str| -> Vec<String> {
            line.split_whitespace()
                .map(|w| {
                    if w.starts_with('K') {
                        format!("{side}:{w}")
                    } else {
                        w.to_string()
                    }
                })
                .collect()
        };
        let want = module(&mut c, command, &words("m"));
        let got = lua.like(&mut c, command, &words("l"));
        assert!(error_line(&want).is_some(), "{command} {line}: {want:?}");
        assert_eq!(shown(&got), shown(&want), "{command} {line}");
        assert_eq!(
            scores(&mut c, "l:K1"),
            scores(&mut c, "m:K1"),
            "{command} {line}"
        );
        assert_eq!(
            scores(&mut c, "l:K2"),
            scores(&mut c, "m:K2"),
            "{command} {line}"
        );
    }
}

/// Random argument lists, mostly malformed, for each of the five commands: the script answers as
/// the module does (the reply, or the error text with the key's name alike on both sides), and
/// changes the keys only as the module does.
#[test]
fn any_arguments_get_the_same_answer_from_the_client_script() {
    let s = Server::start();
    let mut c = s.client();
    let lua = Fallback::load(&mut c);
    let long = "Z".repeat(70);
    let mut tokens: Vec<&str> = vec![
        "",
        "0",
        "1",
        "01",
        "2",
        "3",
        "7",
        "17",
        "-1",
        "+1",
        "1.5",
        "1e3",
        "inf",
        "nan",
        "*",
        " 1",
        "x",
        "9007199254740",
        "9007199254740992",
        "9007199254740993",
        "99999999999999999999999",
        "COST",
        "cost",
        "LIMIT",
        "limit",
        "LiMiT",
        "LEASE",
        "lease",
        "PRECISION",
        "Precision",
        "1000",
        "9007199254740000",
        "DETAIL",
        "detail",
        "AT",
        "at",
        "FOO",
        "\u{0}\u{ff}",
        "K1",
        "K2",
    ];
    tokens.push(&long);
    let start: i64 = 1_700_000_000_000;
    let mut rng = Rng::new(35);
    let (mut errors, mut calls) = (0, 0);
    for command in ["ALLOW", "PEEK", "ALLOWALL", "PEEKALL", "REFUND"] {
        for i in 0..800 {
            let mut args: Vec<String> = (0..rng.range(0, 12))
                .map(|_| rng.pick(&tokens).to_string())
                .collect();
            let now = start + i;
            // Mostly a valid head, so that the options get parsed too.
            if rng.chance(67) {
                let head: Vec<String> = match command {
                    "ALLOW" | "PEEK" => vec![
                        rng.between(1, 100).to_string(),
                        rng.between(1, 10).to_string(),
                        now.to_string(),
                    ],
                    "REFUND" => vec![rng.between(1, 3).to_string()],
                    _ => {
                        let n = rng.range(1, 3);
                        let mut h = vec![n.to_string()];
                        h.extend((1..=n).map(|j| format!("K{j}")));
                        h.push(now.to_string());
                        if rng.chance(50) {
                            for j in 1..=n {
                                h.extend(["LIMIT".into(), j.to_string(), "60".into(), "5".into()]);
                            }
                        }
                        h
                    }
                };
                let cut = head.len().min(args.len());
                args.splice(0..cut, head);
            }
            let base = |side: &str| format!("{side}:{{{command}-{i}}}");
            let keyed = |side: &str| -> Vec<String> {
                let named = args.iter().map(|a| match a.as_str() {
                    "K1" | "K2" | "K3" => format!("{}:{a}", base(side)),
                    _ => a.clone(),
                });
                if ["ALLOW", "PEEK", "REFUND"].contains(&command) {
                    std::iter::once(base(side)).chain(named).collect()
                } else {
                    named.collect()
                }
            };
            for side in ["m", "l"] {
                for k in ["", ":K1", ":K2"] {
                    let added: i64 = redis::cmd("ZADD")
                        .arg(format!("{}{k}", base(side)))
                        .arg(now - 1)
                        .arg("a")
                        .arg(now - 2)
                        .arg("b")
                        .query(&mut c)
                        .unwrap();
                    assert_eq!(added, 2);
                }
            }
            let what = format!("{command} {}", keyed("l").join(" "));
            let plain = |v: &Value, side: &str| shown(v).replace(&base(side), "KEY");
            let want = plain(&module(&mut c, command, &keyed("m")), "m");
            let got = plain(&lua.like(&mut c, command, &keyed("l")), "l");
            assert_eq!(got, want, "{what}");
            for k in ["", ":K1", ":K2", ":K3"] {
                let (m, l) = (format!("{}{k}", base("m")), format!("{}{k}", base("l")));
                assert_eq!(scores(&mut c, &l), scores(&mut c, &m), "{what}: key{k}");
            }
            errors += i64::from(want.starts_with("ERR") || want.starts_with("WRONGTYPE"));
            calls += 1;
        }
    }
    // Both outcomes: errors and replies.
    assert!(
        0 < errors && errors < calls,
        "{errors} errors in {calls} calls"
    );
}
