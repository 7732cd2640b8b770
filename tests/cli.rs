//! The commands through `redis-cli`, checked exactly as a user sees them printed.

use testkit::harness;

use harness::Server;

/// `redis-cli --no-raw ...`: the formatting of an interactive session, though stdout is a pipe.
fn cli(s: &Server, line: &str) -> String {
    let mut args = vec!["--no-raw"];
    args.extend(line.split(' '));
    s.cli(&args)
}

/// Each line through [`cli`] prints exactly its text.
fn prints(s: &Server, lines: &[(&str, String)]) {
    for (line, want) in lines {
        assert_eq!(&cli(s, line), want, "{line}");
    }
}

fn five(a: i64, b: i64, c: i64, d: i64, e: i64) -> String {
    format!(
        "1) (integer) {a}\n2) (integer) {b}\n3) (integer) {c}\n4) (integer) {d}\n5) (integer) {e}\n"
    )
}

#[test]
fn replies_print_as_five_integers() {
    let s = Server::start();
    prints(
        &s,
        &[
            ("SLIDINGWINDOW.ALLOW k 10 2 100000", "1) (integer) 1\n2) (integer) 1\n3) (integer) 1\n4) (integer) 0\n5) (integer) 10000\n".into()),
            ("SLIDINGWINDOW.ALLOW k 10 2 101000", five(1, 2, 0, 9000, 10000)),
            ("SLIDINGWINDOW.ALLOW k 10 2 102000", five(0, 2, 0, 8000, 9000)),
            ("SLIDINGWINDOW.PEEK k 10 2 110000", five(1, 2, 0, 1000, 10000)),
            // PEEK removed nothing.
            ("ZCARD k", "(integer) 2\n".into()),
            ("slidingwindow.allow k 10 5 110000 cost 3", five(1, 4, 1, 10000, 10000)),
            ("SLIDINGWINDOW.ALLOW k 10 5 110000 COST 6", five(0, 4, 1, -1, 10000)),
            ("SLIDINGWINDOW.PEEK empty 10 1 0 COST 2", five(0, 0, 1, -1, 0)),
            ("EXISTS empty", "(integer) 0\n".into()),
        ],
    );
}

#[test]
fn raw_mode_prints_one_integer_per_line() {
    let s = Server::start();
    let out = s.cli(&["SLIDINGWINDOW.ALLOW", "k", "10", "2", "5000"]);
    assert_eq!(out, "1\n1\n1\n0\n10000\n");
    let out = s.cli(&["SLIDINGWINDOW.ALLOW", "k", "10", "1", "5001"]);
    assert_eq!(out, "0\n1\n0\n9999\n9999\n");
    // `*` reaches the server as is (no shell in between) and means the server clock.
    let out = s.cli(&["SLIDINGWINDOW.PEEK", "other", "10", "1", "*"]);
    assert_eq!(out, "1\n1\n0\n10000\n10000\n");
}

#[test]
fn errors_print_as_one_error_line() {
    let s = Server::start();
    prints(
        &s,
        &[
            (
                "SLIDINGWINDOW.ALLOW k 10 2",
                "(error) ERR wrong number of arguments for 'slidingwindow.allow' command\n".into(),
            ),
            (
                "SLIDINGWINDOW.PEEK k",
                "(error) ERR wrong number of arguments for 'slidingwindow.peek' command\n".into(),
            ),
        ],
    );
    for (line, word) in [
        ("SLIDINGWINDOW.ALLOW k 0 2 1000", "window"),
        ("SLIDINGWINDOW.ALLOW k 10 1.5 1000", "max"),
        ("SLIDINGWINDOW.PEEK k 10 2 -1", "now"),
        ("SLIDINGWINDOW.ALLOW k 10 2 1000 COST nan", "cost"),
        ("SLIDINGWINDOW.ALLOW k 10 2 1000 LIMIT 1", "syntax error"),
    ] {
        let out = cli(&s, line);
        assert!(out.starts_with("(error) ERR "), "{line}: {out:?}");
        assert!(
            out.ends_with('\n') && out.lines().count() == 1,
            "{line}: {out:?}"
        );
        assert!(out.to_lowercase().contains(word), "{line}: {out:?}");
    }
    prints(
        &s,
        &[
            ("SET str v", "OK\n".into()),
            (
                "SLIDINGWINDOW.ALLOW str 10 2 1000",
                "(error) WRONGTYPE Operation against a key holding the wrong kind of value\n"
                    .into(),
            ),
            ("GET str", "\"v\"\n".into()),
            ("DBSIZE", "(integer) 1\n".into()),
        ],
    );
}

#[test]
fn getkeys_and_members_print_as_expected() {
    let s = Server::start();
    assert_eq!(
        cli(&s, "COMMAND GETKEYS SLIDINGWINDOW.ALLOW k 1 1 1"),
        "1) \"k\"\n"
    );
    assert_eq!(
        cli(&s, "SLIDINGWINDOW.ALLOW k 10 5 7000 COST 2")
            .lines()
            .count(),
        5
    );
    let out = cli(&s, "ZRANGE k 0 -1 WITHSCORES");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out:?}");
    for (i, l) in lines.iter().enumerate() {
        if i % 2 == 1 {
            assert_eq!(*l, format!("{}) \"7000\"", i + 1));
        } else {
            // `N) "<26-character ULID>"`
            let quoted = l.split_once(") ").unwrap().1;
            assert_eq!(quoted.len(), 28, "{l}");
        }
    }
}
