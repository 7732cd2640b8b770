//! Every line of /work/shared/CONTRACT.md, checked through the `redis` crate against a real
//! `redis-server` with the module loaded.

use model::Model;
use rng::Rng;
use testkit::common;
use testkit::kit;
use testkit::model;
use testkit::rng;

use std::collections::HashSet;
use std::time::Duration;

use common::{
    Server, call, call_bytes, error_line, ints, server_time_ms, start_replica, wait_in_sync,
};
use kit::{exists, members, pexpiretime, q, scores, snapshot, sw, sw5};
use redis::{Connection, Value};

const TWO_53: i64 = 1 << 53;

/// Everything a call could change that the tests look at: the whole dataset's digest, and the
/// key's value and expiry.
fn state(s: &Server, con: &mut Connection, key: &str) -> (String, (Option<Vec<u8>>, i64)) {
    (s.digest(), snapshot(con, key))
}

#[test]
fn replies_admit_then_reject_then_slide() {
    let s = Server::start();
    let mut c = s.client();
    // window 10 s, max 3
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 100000"), [1, 1, 2, 0, 10000]);
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 101000"), [1, 2, 1, 0, 10000]);
    // full now: the next request waits for the oldest (100000) to leave.
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 102000"), [1, 3, 0, 8000, 10000]);
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 103000"), [0, 3, 0, 7000, 9000]);
    assert_eq!(scores(&mut c, "k"), [100000, 101000, 102000]);
    // At 110000 the cutoff is 100000: that member goes, a new one comes in.
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 110000"), [1, 3, 0, 1000, 10000]);
    assert_eq!(scores(&mut c, "k"), [101000, 102000, 110000]);
}

#[test]
fn trim_boundary_is_score_at_most_now_minus_window() {
    let s = Server::start();
    let mut c = s.client();
    let _: i64 = q(
        &mut c,
        &["ZADD", "k", "4999", "a", "5000", "b", "5001", "c"],
    );
    // PEEK at 15000 (cutoff 5000) counts c only, plus the would-be request, and removes nothing.
    assert_eq!(sw5(&mut c, "PEEK k 10 10 15000"), [1, 2, 8, 0, 10000]);
    assert_eq!(scores(&mut c, "k"), [4999, 5000, 5001]);
    // At 14999 (cutoff 4999) only a, exactly at the cutoff, goes; b at cutoff+1 stays.
    assert_eq!(sw5(&mut c, "ALLOW k 10 10 14999"), [1, 3, 7, 0, 10000]);
    let m = members(&mut c, "k");
    assert_eq!(m[0], ("b".to_string(), 5000));
    assert_eq!(m[1], ("c".to_string(), 5001));
    assert_eq!(m[2].1, 14999);
    // At 15000 (cutoff 5000) b goes too.
    assert_eq!(sw5(&mut c, "ALLOW k 10 10 15000"), [1, 3, 7, 0, 10000]);
    assert_eq!(scores(&mut c, "k"), [5001, 14999, 15000]);
}

#[test]
fn cost_adds_n_members_all_scored_now() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 5 1000 COST 3"),
        [1, 3, 2, 10000, 10000]
    );
    assert_eq!(scores(&mut c, "k"), [1000, 1000, 1000]);
    // 3 + 3 > 5: rejected, nothing added.
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 5 2000 COST 3"),
        [0, 3, 2, 9000, 9000]
    );
    assert_eq!(scores(&mut c, "k"), [1000, 1000, 1000]);
    // 3 + 2 <= 5: admitted, both new members at 2000.
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 5 2000 COST 2"),
        [1, 5, 0, 9000, 10000]
    );
    assert_eq!(scores(&mut c, "k"), [1000, 1000, 1000, 2000, 2000]);
    let m = members(&mut c, "k");
    let names: HashSet<&String> = m.iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 5, "members must be distinct: {m:?}");
}

#[test]
fn retry_after_waits_for_the_need_th_oldest_member() {
    let s = Server::start();
    let mut c = s.client();
    for now in [1000, 2000, 3000, 4000, 5000] {
        assert_eq!(sw5(&mut c, &format!("ALLOW k 10 5 {now}"))[0], 1);
    }
    // count 5, max 5: a request of cost n needs n members gone; the n-th oldest decides.
    assert_eq!(sw5(&mut c, "PEEK k 10 5 6000"), [0, 5, 0, 5000, 9000]);
    assert_eq!(
        sw5(&mut c, "PEEK k 10 5 6000 COST 3"),
        [0, 5, 0, 7000, 9000]
    );
    assert_eq!(
        sw5(&mut c, "PEEK k 10 5 6000 COST 5"),
        [0, 5, 0, 9000, 9000]
    );
    // cost > max can never be admitted.
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 6000 COST 6"), [0, 5, 0, -1, 9000]);
    // With room for some: count 3 after trimming 1000 and 2000 at 12000; cost 4 needs 2 gone.
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 5 12000 COST 4"),
        [0, 3, 2, 2000, 3000]
    );
    assert_eq!(scores(&mut c, "k"), [3000, 4000, 5000]);
}

#[test]
fn cost_above_max_on_empty_key_replies_minus_one_and_zero() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(sw5(&mut c, "ALLOW k 10 1 1000 COST 2"), [0, 0, 1, -1, 0]);
    assert_eq!(sw5(&mut c, "PEEK k 10 1 1000 COST 2"), [0, 0, 1, -1, 0]);
    assert!(!exists(&mut c, "k"));
}

#[test]
fn members_in_the_future_count_and_set_reset_after() {
    let s = Server::start();
    let mut c = s.client();
    let _: i64 = q(&mut c, &["ZADD", "k", "50000", "future"]);
    assert_eq!(sw5(&mut c, "ALLOW k 10 2 10000"), [1, 2, 0, 10000, 50000]);
    assert_eq!(sw5(&mut c, "ALLOW k 10 2 10001"), [0, 2, 0, 9999, 49999]);
    assert_eq!(scores(&mut c, "k"), [10000, 50000]);
}

/// 200 members, 71 of them expired at the PEEK's `now`: the PEEK counts past 64 members and
/// looks up the 101st oldest, both through the set's own commands, run in place.
fn deep_peek(c: &mut Connection) {
    let _: () = q(c, &["DEL", "big"]);
    for i in 0..200 {
        let now = (1_000 + i * 10).to_string();
        assert_eq!(sw5(c, &format!("ALLOW big 600 1000 {now}"))[0], 1);
    }
    deep_peek_only(c);
}

/// PEEK leaves the key's LRU clock alone, even where it reads through the set's own commands.
#[test]
fn peek_leaves_the_lru_clock_alone() {
    let s = Server::start();
    let mut c = s.client();
    deep_peek(&mut c);
    let idle = |c: &mut Connection| q::<i64>(c, &["OBJECT", "IDLETIME", "big"]);
    common::wait_until(Duration::from_secs(10), "OBJECT IDLETIME big >= 2", || {
        idle(&mut c) >= 2
    });
    let before = idle(&mut c);
    deep_peek_only(&mut c);
    assert!(idle(&mut c) >= before, "PEEK reset the idle time");
    // The check can fail: a read that touches the key resets it.
    let _: i64 = q(&mut c, &["ZCARD", "big"]);
    // 0, or 1 if Redis's LRU clock ticked between the two commands; `before` was at least 2.
    assert!(idle(&mut c) <= 1, "ZCARD did not reset the idle time");
}

/// Under an LFU policy PEEK leaves the access counter alone (with log factor 0 and no decay, any
/// touch would add exactly one).
#[test]
fn peek_leaves_the_lfu_counter_alone() {
    let s = Server::builder()
        .args(["--maxmemory-policy", "allkeys-lfu"])
        .args(["--lfu-log-factor", "0", "--lfu-decay-time", "0"])
        .start();
    let mut c = s.client();
    deep_peek(&mut c);
    let freq = |c: &mut Connection| q::<i64>(c, &["OBJECT", "FREQ", "big"]);
    let before = freq(&mut c);
    deep_peek_only(&mut c);
    assert_eq!(freq(&mut c), before, "PEEK counted as an access");
    let _: i64 = q(&mut c, &["ZCARD", "big"]);
    assert_eq!(freq(&mut c), before + 1);
}

fn deep_peek_only(c: &mut Connection) {
    // Cutoff 1700: 1000..=1700 have left, 129 remain; max 100 needs the 30th (2000) to leave.
    assert_eq!(sw5(c, "PEEK big 600 100 601700"), [0, 129, 0, 300, 1290]);
}

#[test]
fn missing_key_is_an_empty_window() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(sw5(&mut c, "PEEK nokey 10 3 1000"), [1, 1, 2, 0, 10000]);
    assert!(!exists(&mut c, "nokey"));
    assert_eq!(sw5(&mut c, "ALLOW nokey 10 3 1000"), [1, 1, 2, 0, 10000]);
    assert!(exists(&mut c, "nokey"));
}

#[test]
fn key_disappears_when_the_window_empties() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(sw5(&mut c, "ALLOW k 10 1 1000"), [1, 1, 0, 10000, 10000]);
    assert!(exists(&mut c, "k"));
    // Everything trimmed and nothing added (cost > max): the key must be gone.
    assert_eq!(sw5(&mut c, "ALLOW k 10 1 50000 COST 2"), [0, 0, 1, -1, 0]);
    assert!(!exists(&mut c, "k"));
    assert_eq!(q::<String>(&mut c, &["TYPE", "k"]), "none");
}

#[test]
fn ttl_is_window_from_server_clock_only_when_admitted() {
    let s = Server::start();
    let mut c = s.client();
    // Admitted: expiry = server clock + W, whatever `now` says.
    let t0 = server_time_ms(&mut c);
    assert_eq!(sw5(&mut c, "ALLOW k 10 2 1000")[0], 1);
    let t1 = server_time_ms(&mut c);
    let at = pexpiretime(&mut c, "k");
    assert!(t0 + 10000 <= at && at <= t1 + 10000, "{t0} {at} {t1}");
    let pttl: i64 = q(&mut c, &["PTTL", "k"]);
    assert!(0 < pttl && pttl <= 10000, "PTTL {pttl}");

    // Rejected: TTL left alone (both without and with a trim).
    let far = (t1 + 3_600_000).to_string();
    assert_eq!(sw5(&mut c, "ALLOW k 10 2 1000")[0], 1);
    let set: i64 = q(&mut c, &["PEXPIREAT", "k", &far]);
    assert_eq!(set, 1, "PEXPIREAT");
    assert_eq!(sw5(&mut c, "ALLOW k 10 2 2000")[0], 0);
    assert_eq!(pexpiretime(&mut c, "k").to_string(), far);
    let _: i64 = q(&mut c, &["ZADD", "k", "5000", "x"]);
    // At 11000 the two members at 1000 go, 2 remain, max 1: rejected after a trim.
    assert_eq!(sw5(&mut c, "ALLOW k 10 1 11000"), [0, 1, 0, 4000, 4000]);
    assert_eq!(pexpiretime(&mut c, "k").to_string(), far);

    // Admitted on a key that expires later: its expiry stays (contract, "Expiry").
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 11000")[0], 1);
    assert_eq!(pexpiretime(&mut c, "k").to_string(), far);
    // Admitted on a key with an earlier expiry, or none: W from the server's clock.
    let set: i64 = q(&mut c, &["PEXPIREAT", "k", &(t1 + 5000).to_string()]);
    assert_eq!(set, 1, "PEXPIREAT");
    let t2 = server_time_ms(&mut c);
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 11000")[0], 1);
    let t3 = server_time_ms(&mut c);
    let at = pexpiretime(&mut c, "k");
    assert!(t2 + 10000 <= at && at <= t3 + 10000, "{t2} {at} {t3}");
    let _: i64 = q(&mut c, &["PERSIST", "k"]);
    assert_eq!(sw5(&mut c, "ALLOW k 30 5 11000")[0], 1);
    let t4 = server_time_ms(&mut c);
    let at = pexpiretime(&mut c, "k");
    assert!(t3 + 30000 <= at && at <= t4 + 30000, "{t3} {at} {t4}");
}

#[test]
fn members_are_unique_crockford_ulids_scored_now() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(sw5(&mut c, "ALLOW k 10 1000 5000 COST 200")[..2], [1, 200]);
    for i in 0..50 {
        assert_eq!(sw5(&mut c, "ALLOW k 10 1000 5000")[..2], [1, 201 + i]);
    }
    let m = members(&mut c, "k");
    assert_eq!(m.len(), 250);
    let mut seen = HashSet::new();
    for (name, score) in &m {
        assert_eq!(*score, 5000, "member {name} not scored now");
        assert_eq!(name.len(), 26, "member {name:?} is not 26 characters");
        assert!(
            name.bytes()
                .all(|b| b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(&b)),
            "member {name:?} is not Crockford base32"
        );
        // A ULID's first character encodes the top 3 bits of a 48-bit timestamp: at most '7'.
        assert!(
            name.as_bytes()[0] <= b'7',
            "member {name:?} overflows 128 bits"
        );
        assert!(seen.insert(name.clone()), "member {name} repeated");
    }
}

#[test]
fn now_star_scores_with_the_server_clock() {
    let s = Server::start();
    let mut c = s.client();
    let t0 = server_time_ms(&mut c);
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 *"), [1, 1, 4, 0, 10000]);
    let t1 = server_time_ms(&mut c);
    let sc: Vec<i64> = scores(&mut c, "k").into_iter().map(|s| s as i64).collect();
    assert_eq!(sc.len(), 1);
    assert!(
        t0 <= sc[0] && sc[0] <= t1,
        "score {} not within TIME [{t0}, {t1}]",
        sc[0]
    );
    // max 1: rejected, so both waits are score + W - now, with now somewhere in [t1, t2].
    let r = sw5(&mut c, "PEEK k 10 1 *");
    let t2 = server_time_ms(&mut c);
    assert_eq!(r[..3], [0, 1, 0]);
    assert_eq!(r[3], r[4]);
    assert!(
        sc[0] + 10000 - t2 <= r[4] && r[4] <= sc[0] + 10000 - t1,
        "reset {} with score {} and TIME in [{t1}, {t2}]",
        r[4],
        sc[0]
    );
}

#[test]
fn now_star_and_the_ttl_read_the_clock_once() {
    let s = Server::start();
    let mut c = s.client();
    // A large COST keeps the call busy long enough for a second clock reading to differ.
    let cost = "400000";
    let ok: String = q(
        &mut c,
        &["CONFIG", "SET", "slidingwindow.max-members-per-call", cost],
    );
    assert_eq!(ok, "OK");
    assert_eq!(
        sw5(&mut c, &format!("ALLOW k 3600 {cost} * COST {cost}"))[..3],
        [1, 400000, 0]
    );
    let sc = scores(&mut c, "k");
    assert_eq!(sc.len(), 400000);
    assert!(sc.iter().all(|t| *t == sc[0]), "one score for one call");
    assert_eq!(pexpiretime(&mut c, "k"), sc[0] as i64 + 3_600_000);
}

#[test]
fn largest_valid_arguments_are_accepted() {
    let s = Server::start();
    let mut c = s.client();
    let w: i64 = 9007199254740 * 1000;
    assert_eq!(
        sw5(&mut c, &format!("ALLOW k 9007199254740 {TWO_53} {TWO_53}")),
        [1, 1, TWO_53 - 1, 0, w]
    );
    let pttl: i64 = q(&mut c, &["PTTL", "k"]);
    assert!(0 < pttl && pttl <= w, "PTTL {pttl}");
    // A cost of 2^53 with one member in the window is rejected and nothing overflows.
    assert_eq!(
        sw5(
            &mut c,
            &format!("ALLOW k 9007199254740 {TWO_53} {TWO_53} COST {TWO_53}")
        ),
        [0, 1, TWO_53 - 1, w, w]
    );
    assert_eq!(sw5(&mut c, "ALLOW z 10 1 0"), [1, 1, 0, 10000, 10000]);
    assert_eq!(scores(&mut c, "z"), [0]);
}

#[test]
fn option_name_is_case_insensitive() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(sw5(&mut c, "ALLOW a 10 5 1000 cost 2")[..2], [1, 2]);
    assert_eq!(sw5(&mut c, "ALLOW a 10 5 1000 CoSt 2")[..2], [1, 4]);
    assert_eq!(sw5(&mut c, "PEEK a 10 5 1000 cOST 1")[..2], [1, 5]);
    assert_eq!(sw5(&mut c, "allow a 10 5 1000 COST 1")[..2], [1, 5]);
}

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
    let s = Server::start();
    let mut c = s.client();
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
    let s = Server::start();
    let mut c = s.client();
    let _: () = q(&mut c, &["SET", "s", "v", "PX", "100000000"]);
    let _: i64 = q(&mut c, &["RPUSH", "l", "x"]);
    let _: i64 = q(&mut c, &["HSET", "h", "f", "v"]);
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
    let s = Server::start();
    let mut c = s.client();
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
    let s = Server::start();
    let mut c = s.client();
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

#[test]
fn peek_equals_allow_and_both_follow_the_contract_model() {
    let s = Server::start();
    let mut c = s.client();
    let mut rng = Rng::new(0x5EED_0001);
    let mut model = Model::default();
    let mut now: i64 = 1_000_000;
    let mut outcomes = [0; 2];
    // Windows of a minute or more, so the key's real TTL never fires during the test.
    for step in 0..600 {
        let window = [60, 61, 120][rng.between(0, 2) as usize];
        let w = window * 1000;
        let max = rng.between(1, 6);
        let cost = if rng.between(0, 2) == 0 {
            None
        } else {
            Some(rng.between(1, 8))
        };
        now = match rng.between(0, 9) {
            0 => now + rng.between(w / 2, 2 * w),
            1 => (now - rng.between(0, w / 4)).max(0),
            _ => now + rng.between(0, w / 8),
        };
        let args = match cost {
            Some(n) => format!("k {window} {max} {now} COST {n}"),
            None => format!("k {window} {max} {now}"),
        };
        let n = cost.unwrap_or(1);
        let before = state(&s, &mut c, "k");
        let peek = sw5(&mut c, &format!("PEEK {args}"));
        assert_eq!(
            state(&s, &mut c, "k"),
            before,
            "step {step}: PEEK {args} changed data"
        );
        let allow = sw5(&mut c, &format!("ALLOW {args}"));
        assert_eq!(peek, allow, "step {step}: PEEK vs ALLOW {args}");
        let u = |v: i64| u64::try_from(v).expect("test values are not negative");
        let want = model.allow(u(window), u(max), u(now), u(n));
        assert_eq!(allow, want, "step {step}: ALLOW {args} vs contract");
        outcomes[allow[0] as usize] += 1;
        assert_eq!(
            scores(&mut c, "k"),
            model.scores,
            "step {step}: stored scores"
        );
        assert_eq!(exists(&mut c, "k"), !model.scores.is_empty(), "step {step}");
    }
    assert!(outcomes[0] > 100 && outcomes[1] > 100, "{outcomes:?}");
}

#[test]
fn calls_that_change_nothing_propagate_nothing() {
    // No periodic PING to the replica, so the master's offset moves only for our commands.
    let s = Server::builder()
        .args(["--repl-ping-replica-period", "3600"])
        .start();
    let replica = start_replica(&s, &[]);
    let mut c = s.client();
    let offset = || s.info_field("replication", "master_repl_offset").unwrap();
    let dirty = || {
        s.info_field("persistence", "rdb_changes_since_last_save")
            .unwrap()
            .parse::<i64>()
            .unwrap()
    };
    assert_eq!(sw5(&mut c, "ALLOW k 10 1 1000")[0], 1);
    wait_in_sync(&s, &replica);
    let (o0, d0) = (offset(), dirty());
    let before = state(&s, &mut c, "k");
    // Each with what it answers (`Ok(allowed)` or the error's start), so that a call changing
    // nothing because it failed for the wrong reason fails the test too.
    for (line, want) in [
        ("PEEK k 10 1 1000", Ok(0)),
        ("PEEK k 10 1 50000", Ok(1)),
        ("PEEK k 10 5 50000 COST 3", Ok(1)),
        ("PEEK missing 10 5 1000", Ok(1)),
        ("ALLOW k 10 1 2000", Ok(0)),
        ("ALLOW k 10 1 2000 COST 5", Ok(0)),
        ("ALLOW missing 10 1 2000 COST 5", Ok(0)),
        ("ALLOW k x 1 2000", Err("ERR window must be")),
        ("PEEK k 10 1 *", Ok(1)),
    ] {
        let reply = sw(&mut c, line);
        match want {
            Ok(allowed) => assert_eq!(ints(&reply)[0], allowed, "{line}: {reply:?}"),
            Err(prefix) => assert!(
                error_line(&reply).is_some_and(|e| e.starts_with(prefix)),
                "{line}: {reply:?}"
            ),
        }
        assert_eq!(offset(), o0, "{line} propagated something");
        assert_eq!(state(&s, &mut c, "k"), before, "{line} changed data");
    }
    assert!(!exists(&mut c, "missing"));
    assert_eq!(
        dirty(),
        d0,
        "a read-only or rejected call counted as a change"
    );
    // An admitted call is a change: it propagates and counts for `save` rules.
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 3000")[0], 1);
    assert_ne!(offset(), o0);
    assert!(dirty() > d0, "rdb_changes_since_last_save did not rise");
    wait_in_sync(&s, &replica);
    assert_eq!(replica.digest(), s.digest());
}

const SEED_LUA: &str = include_str!("fixtures/seed.lua");

/// Runs the same scenario through the module on key `m` and through the seed's Lua script on
/// key `l`, and checks that each step emits the same keyspace events on both keys.
#[test]
fn keyspace_events_match_the_seed_script() {
    let s = Server::start();
    let mut c = s.client();
    let _: () = q(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
    let sha: String = q(&mut c, &["SCRIPT", "LOAD", SEED_LUA]);
    let mut sub_con = s.client();
    sub_con
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut sub = sub_con.as_pubsub();
    sub.psubscribe("__keyspace@0__:*").unwrap();

    // (module args after the key, Lua ARGV before the member; None = module only).
    // Window 10 s keeps the real TTLs from firing `expired` during the test.
    let steps: &[(&str, Option<&str>)] = &[
        ("10 2 1000", Some("10 2 1000")),     // admit into an empty key
        ("10 2 2000", Some("10 2 2000")),     // admit
        ("10 2 3000", Some("10 2 3000")),     // reject, nothing trimmed
        ("10 2 11000", Some("10 2 11000")),   // trim one, admit
        ("10 1 12000", Some("10 1 12000")),   // trim one, reject
        ("10 1 100000", Some("10 1 100000")), // trim all (key deleted), admit
        ("10 1 200000 COST 2", Some("10 0 200000")), // trim all, reject: key gone
        ("10 1 200001 COST 2", Some("10 0 200001")), // missing key, reject: nothing
    ];
    let mut sync = 0;
    let mut collect = |c: &mut Connection, sub: &mut redis::PubSub| {
        // Events reach the subscriber in order, so one on a marker key closes the step.
        sync += 1;
        let _: () = q(c, &["SET", "sync", &sync.to_string()]);
        let (mut m, mut l) = (Vec::new(), Vec::new());
        loop {
            let msg = sub.get_message().expect("keyspace event (timed out?)");
            let event: String = msg.get_payload().unwrap();
            match msg.get_channel_name() {
                "__keyspace@0__:sync" => break,
                "__keyspace@0__:m" => m.push(event),
                "__keyspace@0__:l" => l.push(event),
                other => panic!("unexpected event {event} on {other}"),
            }
        }
        (m, l)
    };
    for (i, (module_args, lua_args)) in steps.iter().enumerate() {
        next_ms(&mut c);
        let _ = sw(&mut c, &format!("ALLOW m {module_args}"));
        // PEEK never emits anything.
        let _ = sw(&mut c, &format!("PEEK m {module_args}"));
        let _ = sw(&mut c, "PEEK m 10 1 999999999");
        if let Some(lua) = lua_args {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&sha).arg(1).arg("l");
            for a in lua.split(' ') {
                cmd.arg(a);
            }
            cmd.arg(format!("lua-member-{i}"));
            let _: i64 = cmd.query(&mut c).unwrap();
        }
        let (m, l) = collect(&mut c, &mut sub);
        assert_eq!(m, l, "step {i} (module {module_args:?}, Lua {lua_args:?})");
        assert_eq!(scores(&mut c, "m"), scores(&mut c, "l"), "step {i}");
    }
    // The scenario did exercise every event kind.
    let _ = sw(&mut c, "ALLOW m 10 2 300000");
    let _ = sw(&mut c, "ALLOW m 10 2 400000");
    let (m, _) = collect(&mut c, &mut sub);
    assert_eq!(
        m,
        [
            "zadd",
            "expire",
            "zremrangebyscore",
            "del",
            "zadd",
            "expire"
        ]
    );
}

/// Polls until the server's clock has moved past its current ms, so that an admission made next
/// computes a later expiry than any made before (the seed's script sets one at every admission;
/// the module announces `expire` only when the expiry moves).
fn next_ms(c: &mut Connection) {
    let t = server_time_ms(c);
    common::wait_until(Duration::from_secs(5), "the server's clock to move", || {
        server_time_ms(c) > t
    });
}

fn exec_after(s: &Server, other_call: &str) -> Value {
    let mut a = s.client();
    let mut b = s.client();
    let _: () = q(&mut a, &["WATCH", "k"]);
    let _ = sw(&mut b, other_call);
    let _: () = q(&mut a, &["MULTI"]);
    let _: String = q(&mut a, &["SET", "x", "1"]);
    call(&mut a, &["EXEC"])
}

#[test]
fn watch_sees_writes_and_only_writes() {
    let s = Server::start();
    let mut c = s.client();
    let _: i64 = q(
        &mut c,
        &["ZADD", "k", "1000", "a", "5000", "b", "6000", "c"],
    );
    let ran = |v: &Value| matches!(v, Value::Array(_));
    assert!(
        ran(&exec_after(&s, "PEEK k 10 2 11000")),
        "PEEK aborted a WATCH"
    );
    assert!(
        ran(&exec_after(&s, "ALLOW k 10 3 7000")),
        "a rejected ALLOW that trimmed nothing aborted a WATCH"
    );
    assert!(
        ran(&exec_after(&s, "ALLOW k x 3 7000")),
        "an error aborted a WATCH"
    );
    // Rejected, but trimming `a` is a write.
    let v = exec_after(&s, "ALLOW k 10 2 11000");
    assert_eq!(v, Value::Nil, "a trimming ALLOW did not abort the WATCH");
    assert_eq!(scores(&mut c, "k"), [5000, 6000]);
    let v = exec_after(&s, "ALLOW k 10 5 11000");
    assert_eq!(v, Value::Nil, "an admitted ALLOW did not abort the WATCH");
    assert_eq!(scores(&mut c, "k"), [5000, 6000, 11000]);
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                Value::Okay => "OK".into(),
                other => format!("{other:?}"),
            })
            .collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

#[test]
fn the_key_is_declared_for_getkeys_flags_and_acl() {
    let s = Server::start();
    let mut c = s.client();
    for cmd in ["SLIDINGWINDOW.ALLOW", "SLIDINGWINDOW.PEEK"] {
        let keys: Vec<String> = q(&mut c, &["COMMAND", "GETKEYS", cmd, "k", "1", "1", "1"]);
        assert_eq!(keys, ["k"], "{cmd}");
        let keys: Vec<String> = q(
            &mut c,
            &["COMMAND", "GETKEYS", cmd, "kk", "1", "1", "*", "COST", "2"],
        );
        assert_eq!(keys, ["kk"], "{cmd} with COST");
    }
    // ALLOW writes; PEEK is read-only (so replicas and ACL read rules accept it).
    let info = call(
        &mut c,
        &[
            "COMMAND",
            "INFO",
            "SLIDINGWINDOW.ALLOW",
            "SLIDINGWINDOW.PEEK",
        ],
    );
    let Value::Array(entries) = info else {
        panic!("COMMAND INFO: {info:?}")
    };
    let flags = |e: &Value| match e {
        Value::Array(f) => strings(&f[2]),
        other => panic!("COMMAND INFO entry: {other:?}"),
    };
    let (allow, peek) = (flags(&entries[0]), flags(&entries[1]));
    assert!(allow.iter().any(|f| f == "write"), "ALLOW flags {allow:?}");
    assert!(peek.iter().any(|f| f == "readonly"), "PEEK flags {peek:?}");
    assert!(!peek.iter().any(|f| f == "write"), "PEEK flags {peek:?}");

    let _: () = q(
        &mut c,
        &["ACL", "SETUSER", "alice", "on", "nopass", "~a*", "+@all"],
    );
    let mut alice = s.client();
    let _: () = q(&mut alice, &["AUTH", "alice", "x"]);
    for cmd in ["ALLOW", "PEEK"] {
        let r = sw(&mut alice, &format!("{cmd} b 10 5 1000"));
        assert!(
            error_line(&r).is_some_and(|e| e.starts_with("NOPERM")),
            "{cmd} on a key outside alice's pattern: {r:?}"
        );
        assert_eq!(sw5(&mut alice, &format!("{cmd} a1 10 5 1000"))[0], 1);
    }
    assert!(!exists(&mut c, "b"));
}

#[test]
fn binary_key_names_work() {
    let s = Server::start();
    let mut c = s.client();
    let key: &[u8] = b"rate:\x00\xff \r\n:key";
    let argv: [&[u8]; 5] = [b"SLIDINGWINDOW.ALLOW", key, b"10", b"2", b"1000"];
    assert_eq!(ints(&call_bytes(&mut c, &argv)), [1, 1, 1, 0, 10000]);
    let n: i64 = redis::cmd("ZCARD").arg(key).query(&mut c).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn a_fully_expired_window_is_freed_in_the_background() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 1000000 1000 COST 100000")[..2],
        [1, 100000]
    );
    let lazy = |name| -> i64 {
        s.info_field("memory", name)
            .or_else(|| s.info_field("stats", name))
            .unwrap_or_else(|| panic!("INFO has no {name}"))
            .parse()
            .unwrap()
    };
    let before = lazy("lazyfree_pending_objects") + lazy("lazyfreed_objects");
    // Every member is past the window: the old set goes to the lazy-free thread.
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 1000000 20000"),
        [1, 1, 999999, 0, 10000]
    );
    let after = lazy("lazyfree_pending_objects") + lazy("lazyfreed_objects");
    assert!(
        after > before,
        "the expired set was freed on the main thread"
    );
    assert_eq!(scores(&mut c, "k"), [20000]);
}

/// Ranks and trims beyond a short walk (more than 64 members) answer exactly, PEEK included,
/// also with a member scored in the future and admissions PEEK only plays virtually.
#[test]
fn deep_ranks_and_large_trims_answer_exactly() {
    let s = Server::start();
    let mut c = s.client();
    let t0: i64 = 1_700_000_000_000;
    let fill = |c: &mut Connection, key: &str| {
        for i in 0..200 {
            assert_eq!(sw5(c, &format!("ALLOW {key} 10 1000 {}", t0 + i))[0], 1);
        }
    };
    // The 100th oldest (t0 + 99) must leave before a cost of 900 fits.
    fill(&mut c, "a");
    let line = format!("a 10 1000 {} COST 900", t0 + 500);
    let want = [0, 200, 800, 99 + 10_000 - 500, 199 + 10_000 - 500];
    assert_eq!(sw5(&mut c, &format!("PEEK {line}")), want);
    assert_eq!(sw5(&mut c, &format!("ALLOW {line}")), want);

    // One member from a clock ahead; 799 more fit exactly, and the 799th oldest is one of them.
    fill(&mut c, "b");
    assert_eq!(
        sw5(&mut c, &format!("ALLOW b 10 1000 {}", t0 + 5000))[1],
        201
    );
    let line = format!("b 10 1000 {} COST 799", t0 + 600);
    let want = [1, 1000, 0, 10_000, 5000 + 10_000 - 600];
    let digest = s.digest();
    assert_eq!(sw5(&mut c, &format!("PEEK {line}")), want);
    assert_eq!(s.digest(), digest, "PEEK changed the data");
    assert_eq!(sw5(&mut c, &format!("ALLOW {line}")), want);

    // 151 members leave at once; the rest stay, in order.
    fill(&mut c, "c");
    let now = t0 + 10_150;
    assert_eq!(
        sw5(&mut c, &format!("PEEK c 10 1000 {now}")),
        [1, 50, 950, 0, 10_000]
    );
    assert_eq!(
        sw5(&mut c, &format!("ALLOW c 10 1000 {now}")),
        [1, 50, 950, 0, 10_000]
    );
    let first: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("c")
        .arg(0)
        .arg(0)
        .arg("WITHSCORES")
        .query(&mut c)
        .unwrap();
    assert_eq!(first[0].1, (t0 + 151) as f64);
}

/// Trims of more than 64 members emit the seed's events too: `zremrangebyscore` once, then `del`
/// when the set empties.
#[test]
fn large_trims_emit_the_seed_events() {
    let s = Server::start();
    let mut c = s.client();
    let _: () = q(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
    let mut sub_con = s.client();
    sub_con
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut sub = sub_con.as_pubsub();
    sub.psubscribe("__keyspace@0__:big").unwrap();
    sub.psubscribe("__keyspace@0__:sync").unwrap();
    let mut sync = 0;
    let mut events = |c: &mut Connection, line: &str| -> Vec<String> {
        next_ms(c);
        let _ = sw5(c, line);
        sync += 1;
        let _: () = q(c, &["SET", "sync", &sync.to_string()]);
        let mut out = Vec::new();
        loop {
            let msg = sub.get_message().expect("keyspace event (timed out?)");
            if msg.get_channel_name() == "__keyspace@0__:sync" {
                return out;
            }
            out.push(msg.get_payload().unwrap());
        }
    };
    assert_eq!(
        events(&mut c, "ALLOW big 10 500 1000 COST 100"),
        ["zadd", "expire"]
    );
    assert_eq!(
        events(&mut c, "ALLOW big 10 500 2000 COST 100"),
        ["zadd", "expire"]
    );
    // 100 leave, the call is admitted.
    assert_eq!(
        events(&mut c, "ALLOW big 10 500 11000"),
        ["zremrangebyscore", "zadd", "expire"]
    );
    // 100 more leave, the call is refused.
    assert_eq!(
        events(&mut c, "ALLOW big 10 1 12000 COST 2"),
        ["zremrangebyscore"]
    );
    // The whole set has left.
    assert_eq!(
        events(&mut c, "ALLOW big 10 1 99000 COST 2"),
        ["zremrangebyscore", "del"]
    );
}
