//! Hostile input: a seeded fuzz run against a live server, contained panics, and clock edge cases.
//! Nothing may crash the server, touch other keys, or answer anything but an error or five integers;
//! only a panic while a save is being written stops it (rather than write a truncated value).

use testkit::common;
use testkit::kit;
use testkit::rng;

use common::{Server, call, error_line};
use kit::{STORAGES, five, q, snapshot, sw5, sw5_with};
use redis::{Connection, Value};
use rng::Rng;
use std::path::{Path, PathBuf};

const MAX_EXACT: u64 = 1 << 53;
const MAX_WINDOW: u64 = MAX_EXACT / 1000;
const MAX_ADD_PER_CALL: u64 = 100_000;

/// The contract's messages, word for word.
const BAD_WINDOW: &str =
    "ERR window must be an integer between 1 and 9007199254740 (window * 1000 <= 2^53)";
const BAD_MAX: &str = "ERR max must be an integer between 1 and 9007199254740992";
const BAD_NOW: &str = "ERR now must be an integer between 0 and 9007199254740992, or *";
const BAD_COST: &str = "ERR cost must be an integer between 1 and 9007199254740992";

/// A token as an error line quotes it: printable ASCII kept, other bytes as `\xNN`, cut at 64.
fn quoted(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes.iter().take(64) {
        if b.is_ascii_graphic() || b == b' ' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > 64 {
        out.push_str("...");
    }
    out
}

/// Keys of every type that the fuzz and panic runs must leave exactly as they were.
const SENTINELS: [&str; 7] = [
    "sentinel:str",
    "sentinel:hash",
    "sentinel:list",
    "sentinel:set",
    "sentinel:zset",
    "sentinel:stream",
    "sentinel:window",
];

fn make_sentinels(con: &mut Connection) -> Vec<(Option<Vec<u8>>, i64)> {
    let setup: [&[&str]; 7] = [
        &["SET", "sentinel:str", "value", "PX", "100000000"],
        &["HSET", "sentinel:hash", "f", "v", "g", "w"],
        &["RPUSH", "sentinel:list", "a", "b", "c"],
        &["SADD", "sentinel:set", "a", "b"],
        &[
            "ZADD",
            "sentinel:zset",
            "-inf",
            "a",
            "1.5",
            "b",
            "+inf",
            "c",
        ],
        &["XADD", "sentinel:stream", "1-1", "f", "v"],
        &[
            "SLIDINGWINDOW.ALLOW",
            "sentinel:window",
            "3600",
            "5",
            "1000",
        ],
    ];
    for c in setup {
        let v = call(con, c);
        assert!(error_line(&v).is_none(), "{c:?}: {v:?}");
    }
    sentinel_state(con)
}

fn sentinel_state(con: &mut Connection) -> Vec<(Option<Vec<u8>>, i64)> {
    SENTINELS.iter().map(|k| snapshot(con, k)).collect()
}

/// What the fuzzer knows about a token it generated.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok {
    /// A plain decimal integer with this value.
    Num(u64),
    /// `*`.
    Star,
    /// Not an integer by any reading.
    Junk,
    /// Readable either way (e.g. leading zeros): the call is not judged on its validity.
    Unsure,
}

/// A numeric argument: from anywhere when `wild`, else almost always a plausible value.
fn number(rng: &mut Rng, wild: bool) -> (Vec<u8>, Tok) {
    let exact = |n: u64| (n.to_string().into_bytes(), Tok::Num(n));
    let junk = |s: &str| (s.as_bytes().to_vec(), Tok::Junk);
    if !wild {
        return match rng.next() % 20 {
            0..12 => exact(rng.range(1, 20)),
            12..17 => exact(rng.range(1, 5000)),
            17..19 => exact(rng.range(1_700_000_000_000, 1_700_000_100_000)),
            // `*` is only valid as `now`; elsewhere it is one more error.
            _ => (b"*".to_vec(), Tok::Star),
        };
    }
    match rng.next() % 40 {
        0..12 => exact(rng.range(1, 20)),
        12..15 => exact(rng.range(0, 5000)),
        15 => exact(0),
        16 => exact(MAX_EXACT),
        17 => exact(MAX_EXACT + 1),
        18 => exact(MAX_EXACT - 1),
        19 => exact(MAX_WINDOW),
        20 => exact(MAX_WINDOW + 1),
        21 => exact(u64::MAX),
        22 => exact(rng.range(1_700_000_000_000, 1_700_000_100_000)),
        23 => junk("18446744073709551616"),
        24 => junk(&"9".repeat(rng.range(20, 300) as usize)),
        25 => junk(rng.pick(&["-1", "-0", "+5", " 5", "5 ", "-9007199254740992"])),
        26 => junk(rng.pick(&["1e3", "1.5", "0.0", "1.", ".5", "1E2", "0x10"])),
        27 => junk(rng.pick(&["inf", "-inf", "+inf", "nan", "NaN", "infinity", "Infinity"])),
        28 => junk(rng.pick(&["", "**", "*1", "x", "COST", "\u{ff15}", "1\u{0}", "1\r\n2"])),
        29 => (b"*".to_vec(), Tok::Star),
        30 => (format!("00{}", rng.range(0, 50)).into_bytes(), Tok::Unsure),
        31 => {
            let len = rng.range(0, 24) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let all_digits = !bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit);
            let tok = if all_digits || bytes == b"*" {
                Tok::Unsure
            } else {
                Tok::Junk
            };
            (bytes, tok)
        }
        _ => exact(rng.range(1, 100)),
    }
}

/// A generated call and the errors it must be refused with, in the order the arguments are
/// checked (empty: it must succeed).
struct Case {
    args: Vec<Vec<u8>>,
    problems: Vec<String>,
    unsure: bool,
    wrong_type: bool,
    max: Option<u64>,
    cost: u64,
}

fn case(rng: &mut Rng) -> Case {
    let name = rng.pick(&[
        "SLIDINGWINDOW.ALLOW",
        "SLIDINGWINDOW.PEEK",
        "slidingwindow.allow",
        "SlidingWindow.Peek",
    ]);
    let key: Vec<u8> = match rng.next() % 20 {
        0 => b"fz:str".to_vec(),
        1 => b"fz:hash".to_vec(),
        2..4 => {
            let mut k = b"fz:".to_vec();
            k.extend((0..rng.range(0, 12)).map(|_| rng.next() as u8));
            k
        }
        _ => format!("fz:{}", rng.range(0, 7)).into_bytes(),
    };
    let wrong_type = key == b"fz:str" || key == b"fz:hash";
    let wild = rng.chance(50);
    let mut args = vec![name.as_bytes().to_vec(), key];
    let mut toks = Vec::new();
    for _ in 0..3 {
        let (bytes, tok) = number(rng, wild);
        args.push(bytes);
        toks.push(tok);
    }
    let mut problems = Vec::new();
    let mut unsure = false;
    // Random arity: sometimes cut short, sometimes followed by options in any order.
    let truncated = rng.chance(8);
    if truncated {
        args.truncate(rng.range(1, 4) as usize);
        problems.push(format!(
            "ERR wrong number of arguments for '{}' command",
            name.to_ascii_lowercase()
        ));
    } else {
        let checks: [(&str, u64, u64, bool); 3] = [
            (BAD_WINDOW, 1, MAX_WINDOW, false),
            (BAD_MAX, 1, MAX_EXACT, false),
            (BAD_NOW, 0, MAX_EXACT, true),
        ];
        for ((what, lo, hi, star), tok) in checks.iter().zip(&toks) {
            match *tok {
                Tok::Num(n) if (*lo..=*hi).contains(&n) => {}
                Tok::Star if *star => {}
                Tok::Unsure => unsure = true,
                _ => problems.push(what.to_string()),
            }
        }
    }
    let mut cost = 1;
    if !wild && !truncated {
        if rng.chance(30) {
            cost = rng.range(1, 10);
            let name = rng.pick(&["COST", "cost", "CoSt"]);
            args.extend([name.as_bytes().to_vec(), cost.to_string().into_bytes()]);
        }
    } else if !truncated && (problems.is_empty() || rng.chance(50)) {
        let mut seen_cost = false;
        for _ in 0..rng.pick(&[0, 0, 0, 1, 1, 1, 2, 3]) {
            match rng.next() % 10 {
                0..6 => {
                    let word = rng.pick(&["COST", "cost", "CoSt"]);
                    args.push(word.as_bytes().to_vec());
                    if seen_cost {
                        problems.push(format!("ERR syntax error, option '{word}' given twice"));
                    }
                    seen_cost = true;
                    // A missing value, only possible as the last word.
                    if rng.chance(5) {
                        problems.push(format!("ERR syntax error, option '{word}' needs a value"));
                        break;
                    }
                    let (mut bytes, mut tok) = number(rng, wild);
                    // Keep admitted batches small so the run stays fast; huge costs stay huge.
                    if let Tok::Num(n @ 21..=MAX_ADD_PER_CALL) = tok {
                        tok = Tok::Num(n % 20 + 1);
                        bytes = (n % 20 + 1).to_string().into_bytes();
                    }
                    args.push(bytes);
                    match tok {
                        Tok::Num(n) if (1..=MAX_EXACT).contains(&n) => cost = n,
                        Tok::Unsure => unsure = true,
                        _ => problems.push(BAD_COST.to_string()),
                    }
                }
                6..8 => {
                    let (bytes, _) = number(rng, wild);
                    // A stray word that happens to read COST is the option, not junk.
                    let stray = if bytes.eq_ignore_ascii_case(b"COST") {
                        b"x".to_vec()
                    } else {
                        bytes
                    };
                    problems.push(format!(
                        "ERR syntax error, unknown option '{}'",
                        quoted(&stray)
                    ));
                    args.push(stray);
                }
                _ => {
                    let word = rng.pick(&["EX", "NX", "COSTS", ""]);
                    args.push(word.as_bytes().to_vec());
                    problems.push(format!("ERR syntax error, unknown option '{word}'"));
                }
            }
        }
    }
    let max = match toks[1] {
        Tok::Num(n) => Some(n),
        _ => None,
    };
    Case {
        args,
        problems,
        unsure,
        wrong_type,
        max,
        cost,
    }
}

/// Judges one reply against what the contract allows for `c`.
fn judge(c: &Case, reply: &Value) -> Result<(), String> {
    if let Some(err) = error_line(reply) {
        let code = err.split(' ').next().unwrap_or("");
        if code != "ERR" && code != "WRONGTYPE" {
            return Err(format!("error code {code}: {err}"));
        }
        if err.contains("internal error") || err.contains("refused") {
            return Err(format!("a module failure leaked out: {err}"));
        }
        if c.unsure {
            return Ok(());
        }
        // Arguments are checked in order, then the key's type, then the per-call cap.
        let want = match c.problems.first() {
            Some(first) => first.clone(),
            None if c.wrong_type => {
                "WRONGTYPE Operation against a key holding the wrong kind of value".to_string()
            }
            None if c.cost > MAX_ADD_PER_CALL => format!(
                "ERR cost {} would add more than {MAX_ADD_PER_CALL} members in one call",
                c.cost
            ),
            None => String::new(),
        };
        if err == want {
            return Ok(());
        }
        return Err(format!("error {err:?}, want {want:?}"));
    }
    let Some([allowed, count, remaining, retry, reset]) = five(reply) else {
        return Err(format!("not an error nor five integers: {reply:?}"));
    };
    if !c.unsure && (!c.problems.is_empty() || c.wrong_type) {
        return Err(format!(
            "accepted a call that had to fail ({:?})",
            c.problems
        ));
    }
    let sane = (allowed == 0 || allowed == 1)
        && count >= 0
        && remaining >= 0
        && retry >= -1
        && reset >= 0
        && (reset == 0) == (count == 0);
    if !sane {
        return Err(format!(
            "impossible reply {:?}",
            [allowed, count, remaining, retry, reset]
        ));
    }
    if let (Some(max), false) = (c.max, c.unsure) {
        let max = max as i64;
        let cost = c.cost as i64;
        if remaining != (max - count).max(0)
            || (retry == -1) != (cost > max)
            || (allowed == 1 && count < cost)
            || (allowed == 0 && cost <= max && count + cost <= max)
        {
            return Err(format!(
                "reply {:?} contradicts max {max} cost {cost}",
                [allowed, count, remaining, retry, reset]
            ));
        }
    }
    Ok(())
}

#[test]
fn fuzz_replies_are_errors_or_five_integers_and_touch_nothing_else() {
    for storage in STORAGES {
        let mut s = Server::builder().storage(storage).start();
        let mut con = s.client();
        let before = make_sentinels(&mut con);
        let _: () = q(&mut con, &["SET", "fz:str", "text"]);
        let _: () = q(&mut con, &["HSET", "fz:hash", "f", "v"]);
        let mut rng = Rng::new(0x5EED);
        let (mut errors, mut arrays) = (0, 0);
        for batch in 0..100 {
            let cases: Vec<Case> = (0..500).map(|_| case(&mut rng)).collect();
            let cmds: Vec<Vec<Vec<u8>>> = cases.iter().map(|c| c.args.clone()).collect();
            let replies = kit::pipeline(&mut con, &cmds);
            for (c, r) in cases.iter().zip(&replies) {
                if let Err(why) = judge(c, r) {
                    let shown: Vec<String> = c
                        .args
                        .iter()
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect();
                    panic!("batch {batch}: {shown:?}: {why}");
                }
                if error_line(r).is_some() {
                    errors += 1;
                } else {
                    arrays += 1;
                }
            }
        }
        assert!(
            errors > 15_000 && arrays > 15_000,
            "poor mix: {errors} errors, {arrays} arrays"
        );
        // Extremes: a 1 MiB key, and thousands of option words.
        let big_key = vec![b'k'; 1 << 20];
        let call_big: Vec<&[u8]> = vec![b"SLIDINGWINDOW.ALLOW", &big_key, b"10", b"5", b"1000"];
        assert_eq!(
            five(&common::call_bytes(&mut con, &call_big)),
            Some([1, 1, 4, 0, 10_000])
        );
        let del = common::call_bytes(&mut con, &[b"DEL", &big_key]);
        assert_eq!(del, Value::Int(1));
        let mut many = vec!["SLIDINGWINDOW.PEEK", "fz:0", "10", "5", "1000"];
        many.extend(std::iter::repeat_n("COST", 10_001));
        let v = call(&mut con, &many);
        assert_eq!(
            error_line(&v).as_deref(),
            Some(BAD_COST),
            "10,001 COST words"
        );
        many.truncate(5);
        many.extend(["COST", "1"].repeat(5000));
        let v = call(&mut con, &many);
        assert_eq!(
            error_line(&v).as_deref(),
            Some("ERR syntax error, option 'COST' given twice"),
            "COST given 5,000 times"
        );

        assert!(s.is_running(), "the server died");
        let pong: String = q(&mut s.client(), &["PING"]);
        assert_eq!(pong, "PONG");
        assert_eq!(
            sentinel_state(&mut con),
            before,
            "the fuzz run changed another key"
        );
        let t: String = q(&mut con, &["TYPE", "fz:str"]);
        assert_eq!(t, "string");
        for i in 0..8 {
            let t: String = q(&mut con, &["TYPE", &format!("fz:{i}")]);
            let stored = if storage == "zset" {
                "zset"
            } else {
                "swcompact"
            };
            assert!(t == stored || t == "none", "fz:{i} became a {t}");
        }
    }
}

fn panic_module() -> PathBuf {
    let path = match std::env::var_os("SLIDINGWINDOW_PANIC_MODULE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/panic-test/libslidingwindow.so"),
    };
    assert!(
        path.is_file(),
        "panic-test module {} not found: run `make panic-module` (make test does) or set \
         SLIDINGWINDOW_PANIC_MODULE",
        path.display()
    );
    std::fs::canonicalize(&path).unwrap_or(path)
}

/// A server loading the panic-test build instead of the module under test.
fn panic_server() -> common::Builder {
    Server::builder()
        .without_module()
        .arg("--loadmodule")
        .arg(panic_module().display().to_string())
}

fn assert_internal_error(v: &Value, how: &str) {
    let err = error_line(v).unwrap_or_else(|| panic!("{how}: DEBUGPANIC answered {v:?}"));
    assert!(
        err.starts_with("ERR slidingwindow: internal error"),
        "{how}: DEBUGPANIC answered {err}"
    );
}

/// A panic after the call changed the key (after the trim, after the add) still sends those
/// changes to replicas and the AOF: the replica and a restarted server hold the master's data.
#[test]
fn a_panic_after_a_change_still_reaches_replicas_and_the_aof() {
    let mut s = panic_server()
        .args(["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let replica = common::start_replica(&s, &[]);
    let mut con = s.client();
    assert_eq!(sw5(&mut con, "ALLOW k 10 100 1000 COST 3")[0], 1);
    assert_eq!(sw5(&mut con, "ALLOW k 10 100 2000")[0], 1);
    for (point, line, left) in [
        // Trims the three members at 1000, then panics before counting.
        ("AFTER-TRIM", "ALLOW k 10 100 11500", vec![2000]),
        // Trims 2000, adds two members at 12000, then panics before setting the TTL.
        (
            "AFTER-ADD",
            "ALLOW k 10 100 12000 COST 2",
            vec![12000, 12000],
        ),
    ] {
        let armed = call(&mut con, &["SLIDINGWINDOW.DEBUGPANIC", "ARM", point]);
        assert_eq!(armed, Value::Int(1), "arming {point}");
        assert_internal_error(&kit::sw(&mut con, line), point);
        assert_eq!(
            kit::scores(&mut con, "k"),
            left,
            "{point}: the master's data"
        );
        common::wait_in_sync(&s, &replica);
        assert_eq!(replica.digest(), s.digest(), "{point}: the replica differs");
        assert_eq!(kit::scores(&mut replica.client(), "k"), left);
    }
    let digest = s.digest();
    s.restart();
    assert_eq!(s.digest(), digest, "the AOF differs from the master's data");
    assert!(s.is_running());
}

/// The same inside an ALLOWALL over a sorted set and a compact log: a panic after the first
/// key's trim, or after its add (every key is trimmed before any is added to), still sends what
/// the call did to replicas and the AOF.
#[test]
fn a_panic_inside_allowall_still_reaches_replicas_and_the_aof() {
    let mut s = Server::builder()
        .without_module()
        .arg("--loadmodule")
        .arg(panic_module().display().to_string())
        .args(["--appendonly", "yes", "--appendfsync", "always"])
        .start();
    let replica = common::start_replica(&s, &[]);
    let mut con = s.client();
    assert_eq!(sw5(&mut con, "ALLOW a 10 100 1000 COST 3")[0], 1);
    kit::ok(
        &mut con,
        &["CONFIG", "SET", "slidingwindow.storage", "compact"],
    );
    assert_eq!(sw5(&mut con, "ALLOW b 10 100 1000 COST 3")[0], 1);
    let limits = "LIMIT 1 10 100 LIMIT 2 10 100";
    for (point, now, left) in [
        // Key a trimmed whole, then the panic: b untouched.
        ("AFTER-TRIM", "11500", [vec![], vec![1000, 1000, 1000]]),
        // Key b trimmed whole, then a gets its two members, then the panic.
        ("AFTER-ADD", "12000", [vec![12000, 12000], vec![]]),
    ] {
        let armed = call(&mut con, &["SLIDINGWINDOW.DEBUGPANIC", "ARM", point]);
        assert_eq!(armed, Value::Int(1), "arming {point}");
        let line = format!("SLIDINGWINDOW.ALLOWALL 2 a b {now} COST 2 {limits}");
        let args: Vec<&str> = line.split(' ').collect();
        assert_internal_error(&call(&mut con, &args), point);
        for (key, want) in ["a", "b"].iter().zip(&left) {
            assert_eq!(&kit::scores(&mut con, key), want, "{point}: {key}");
        }
        common::wait_in_sync(&s, &replica);
        assert_eq!(replica.digest(), s.digest(), "{point}: the replica differs");
    }
    let digest = s.digest();
    s.restart();
    assert_eq!(s.digest(), digest, "the AOF differs from the master's data");
}

#[test]
fn a_panic_inside_a_command_answers_an_error_and_the_server_carries_on() {
    let mut s = panic_server().start();
    let mut con = s.client();
    let before = make_sentinels(&mut con);
    assert_eq!(
        sw5_with(&mut con, "ALLOW", "rate", 3600, 5, 1000, 1),
        [1, 1, 4, 0, 3_600_000]
    );
    let digest = s.digest();

    for args in [
        vec!["SLIDINGWINDOW.DEBUGPANIC"],
        vec!["SLIDINGWINDOW.DEBUGPANIC", "rate"],
        vec![
            "SLIDINGWINDOW.DEBUGPANIC",
            "rate",
            "3600",
            "5",
            "1000",
            "COST",
            "2",
        ],
    ] {
        assert_internal_error(&call(&mut con, &args), &args.join(" "));
    }
    // Many in a row: nothing accumulates or stays poisoned.
    let many = vec![vec!["SLIDINGWINDOW.DEBUGPANIC", "x"]; 500];
    for r in kit::pipeline(&mut con, &many) {
        assert_internal_error(&r, "pipelined");
    }
    // Inside a transaction and a script the panic is an error reply like any other.
    let tx = kit::pipeline(
        &mut con,
        &[
            vec!["MULTI"],
            vec!["SLIDINGWINDOW.DEBUGPANIC"],
            vec!["SLIDINGWINDOW.PEEK", "rate", "3600", "5", "1000"],
            vec!["EXEC"],
        ],
    );
    let Value::Array(items) = &tx[3] else {
        panic!("EXEC answered {:?}", tx[3]);
    };
    assert_internal_error(&items[0], "in MULTI");
    assert_eq!(five(&items[1]), Some([1, 2, 3, 0, 3_600_000]));
    let lua = call(
        &mut con,
        &[
            "EVAL",
            "return redis.pcall('SLIDINGWINDOW.DEBUGPANIC')",
            "0",
        ],
    );
    assert_internal_error(&lua, "in EVAL");

    assert!(s.is_running(), "the server died");
    assert_eq!(s.digest(), digest, "a contained panic changed data");
    assert_eq!(sentinel_state(&mut con), before);
    // ALLOW carries on from where it was.
    assert_eq!(
        sw5_with(&mut con, "ALLOW", "rate", 3600, 5, 1000, 1),
        [1, 2, 3, 0, 3_600_000]
    );
    // INFO counts each contained panic as an error (3 + 500 + MULTI + EVAL), and the calls
    // around them as usual (the sentinel's ALLOW and two on `rate`; the PEEK in MULTI).
    let field = |name: &str| kit::info_u64(&s, "slidingwindow", &format!("slidingwindow_{name}"));
    assert_eq!(field("errors"), 505);
    assert_eq!((field("allow_calls"), field("peek_calls")), (3, 1));
}

#[test]
fn clock_edge_cases_follow_the_contract() {
    let s = Server::start();
    let mut con = s.client();
    let m = MAX_EXACT;
    let mi = m as i64;
    let wmax = MAX_WINDOW;
    let wmax_ms = (MAX_WINDOW * 1000) as i64;
    let mut check =
        |cmd: &str, key: &str, w: u64, max: u64, now: u64, cost: u64, want: [i64; 5]| {
            let got = sw5_with(&mut con, cmd, key, w, max, now, cost);
            assert_eq!(got, want, "{cmd} {key} {w} {max} {now} COST {cost}");
        };

    // now = 0: members at 0 leave exactly when now - W reaches 0.
    check("ALLOW", "zero", 1, 2, 0, 1, [1, 1, 1, 0, 1000]);
    check("ALLOW", "zero", 1, 2, 0, 1, [1, 2, 0, 1000, 1000]);
    check("ALLOW", "zero", 1, 2, 0, 1, [0, 2, 0, 1000, 1000]);
    check("ALLOW", "zero", 1, 2, 999, 1, [0, 2, 0, 1, 1]);
    check("ALLOW", "zero", 1, 2, 1000, 1, [1, 1, 1, 0, 1000]);

    // now = 2^53 with the longest window and the largest max; the score is stored exactly.
    check("ALLOW", "top", wmax, m, m, 1, [1, 1, mi - 1, 0, wmax_ms]);
    let pair: Vec<String> = q(&mut s.client(), &["ZRANGE", "top", "0", "0", "WITHSCORES"]);
    assert_eq!(pair[1], "9007199254740992", "2^53 not stored exactly");
    // Far behind the stored member: it is in the future and still counts; the reset wait is
    // 2^53 + W - 0, larger than 2^53 but far from overflowing.
    check(
        "ALLOW",
        "top",
        wmax,
        m,
        0,
        1,
        [1, 2, mi - 2, 0, mi + wmax_ms],
    );
    // Back at 2^53 the cutoff is 2^53 - W = 992, so the member at 0 has left the window.
    check(
        "PEEK",
        "top",
        wmax,
        m,
        m,
        m,
        [0, 1, mi - 1, wmax_ms, wmax_ms],
    );
    check("PEEK", "top", wmax, m, m, 1, [1, 2, mi - 2, 0, wmax_ms]);

    // Far ahead of the stored members: they all expire at once.
    check("ALLOW", "ahead", 10, 5, 1000, 1, [1, 1, 4, 0, 10_000]);
    check("ALLOW", "ahead", 10, 5, 1001, 1, [1, 2, 3, 0, 10_000]);
    check("ALLOW", "ahead", 10, 5, 1002, 1, [1, 3, 2, 0, 10_000]);
    check("ALLOW", "ahead", 10, 5, m, 1, [1, 1, 4, 0, 10_000]);
    assert_eq!(kit::scores(&mut s.client(), "ahead"), vec![m]);

    // Behind a member at 2^53 with a one-second window.
    check("ALLOW", "behind", 1, 3, m, 1, [1, 1, 2, 0, 1000]);
    check("ALLOW", "behind", 1, 3, 0, 1, [1, 2, 1, 0, mi + 1000]);
    check("ALLOW", "behind", 1, 3, 0, 2, [0, 2, 1, 1000, mi + 1000]);

    // A window longer than now: the cutoff is negative and a member at 0 stays.
    check("ALLOW", "long", 3600, 2, 5000, 1, [1, 1, 1, 0, 3_600_000]);
    check(
        "ALLOW",
        "long",
        3600,
        2,
        0,
        1,
        [1, 2, 0, 3_600_000, 3_605_000],
    );
    check(
        "ALLOW",
        "long",
        3600,
        2,
        0,
        1,
        [0, 2, 0, 3_600_000, 3_605_000],
    );

    // The TTL of the longest window: W ms from the server's clock, no overflow.
    let t0 = common::server_time_ms(&mut s.client());
    check("ALLOW", "ttl", wmax, 1, 1, 1, [1, 1, 0, wmax_ms, wmax_ms]);
    let t1 = common::server_time_ms(&mut s.client());
    let at: i64 = q(&mut s.client(), &["PEXPIRETIME", "ttl"]);
    assert!(
        (t0 + wmax_ms..=t1 + wmax_ms).contains(&at),
        "PEXPIRETIME {at} is not W after the call ({t0}..{t1})"
    );

    // Scores written by someone else: -inf leaves, +inf stays forever and saturates the wait.
    let _: i64 = q(
        &mut s.client(),
        &[
            "ZADD", "foreign", "-inf", "a", "-5", "b", "100", "c", "+inf", "d",
        ],
    );
    check("PEEK", "foreign", 10, 10, 1000, 1, [1, 4, 6, 0, i64::MAX]);
    check("ALLOW", "foreign", 10, 10, 1000, 1, [1, 4, 6, 0, i64::MAX]);
    check(
        "ALLOW",
        "foreign",
        10,
        4,
        1000,
        1,
        [0, 4, 0, 8995, i64::MAX],
    );
    let n: u64 = q(&mut s.client(), &["ZCARD", "foreign"]);
    assert_eq!(n, 4);

    // One past each limit is an error naming the argument, and changes nothing.
    let digest = s.digest();
    let past = (m + 1).to_string();
    let wpast = (wmax + 1).to_string();
    for (args, name) in [
        (
            vec!["SLIDINGWINDOW.ALLOW", "top", "10", "5", past.as_str()],
            "now",
        ),
        (
            vec!["SLIDINGWINDOW.ALLOW", "top", wpast.as_str(), "5", "1"],
            "window",
        ),
        (
            vec!["SLIDINGWINDOW.ALLOW", "top", "10", past.as_str(), "1"],
            "max",
        ),
        (
            vec![
                "SLIDINGWINDOW.ALLOW",
                "top",
                "10",
                "5",
                "1",
                "COST",
                past.as_str(),
            ],
            "cost",
        ),
    ] {
        let v = call(&mut s.client(), &args);
        let err = error_line(&v).unwrap_or_else(|| panic!("{args:?} answered {v:?}"));
        assert!(
            err.starts_with("ERR") && err.contains(name),
            "{args:?}: {err}"
        );
    }
    assert_eq!(s.digest(), digest);
}

/// The log line a panic inside the compact type's `rdb_save` leaves before it aborts.
const SAVE_PANIC_LINE: &str = "slidingwindow: a deliberate panic at RdbSave, in rdb_save of a \
                               swcompact value: aborting rather than writing a truncated value";

/// A panic half-way through writing a compact log into an RDB stops the process writing it,
/// with a log line, and never leaves a truncated value behind: BGSAVE's child dies (the server
/// carries on and reports the save failed), SAVE stops the server itself; both times the last
/// RDB file stays byte for byte what it was.
#[test]
fn a_panic_while_saving_aborts_and_keeps_the_last_rdb() {
    let mut s = panic_server().storage("compact").start();
    let mut con = s.client();
    assert_eq!(
        sw5(&mut con, "ALLOW k 10 100 1000 COST 3"),
        [1, 3, 97, 0, 10000]
    );
    let ok: String = q(&mut con, &["SAVE"]);
    assert_eq!(ok, "OK");
    let rdb = s.dir().join("dump.rdb");
    let saved = std::fs::read(&rdb).unwrap();
    // Data a new save would write: only the old file may be on disk at the end.
    assert_eq!(
        sw5(&mut con, "ALLOW j 10 100 2000 COST 5"),
        [1, 5, 95, 0, 10000]
    );
    let count = |s: &Server| {
        let log = std::fs::read_to_string(s.log_path()).unwrap_or_default();
        log.matches(SAVE_PANIC_LINE).count()
    };

    let armed = call(&mut con, &["SLIDINGWINDOW.DEBUGPANIC", "ARM", "RDB-SAVE"]);
    assert_eq!(armed, Value::Int(1));
    // The fork child inherits the armed panic and dies of it; the server does not.
    let started: String = q(&mut con, &["BGSAVE"]);
    assert_eq!(started, "Background saving started");
    kit::wait_persistence_idle(&s, "rdb_bgsave_in_progress");
    assert_eq!(
        s.info_field("persistence", "rdb_last_bgsave_status")
            .as_deref(),
        Some("err")
    );
    assert_eq!(count(&s), 1, "{}", s.log_tail());
    assert!(s.is_running());
    assert_eq!(std::fs::read(&rdb).unwrap(), saved, "dump.rdb after BGSAVE");

    // The server itself is still armed: SAVE runs in it, and stops it.
    let v = redis::cmd("SAVE").query::<Value>(&mut con);
    assert!(v.is_err(), "SAVE answered {v:?}");
    common::wait_until(common::STARTUP_DEADLINE, "the server to stop", || {
        !s.is_running()
    });
    assert_eq!(count(&s), 2, "{}", s.log_tail());
    assert_eq!(std::fs::read(&rdb).unwrap(), saved, "dump.rdb after SAVE");
}
