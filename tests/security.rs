//! Security and resources: ACL key patterns, maxmemory (refusal and eviction), and WATCH and
//! keyspace events seen from the fault side (what must and must not count as a change).

use testkit::client;
use testkit::harness;

use client::{Events, client_as, error_code, five, info_u64, ok, q, snapshot, sw5_with};
use harness::{Server, call, error_line, wait_until};
use redis::{Connection, Value};
use std::time::Duration;

const W: i64 = 3_600_000;

#[test]
fn acl_key_pattern_limits_both_commands_to_their_keys() {
    let s = Server::start();
    let mut admin = s.client();
    let users = [
        ("cmds", "+slidingwindow.allow +slidingwindow.peek"),
        ("everything", "+@all"),
    ];
    for (user, cmds) in users {
        let mut rule = vec!["ACL", "SETUSER", user, "reset", "on", ">pw", "~rate:*"];
        rule.extend(cmds.split(' '));
        ok(&mut admin, &rule);
    }
    for (n, (user, _)) in users.iter().enumerate() {
        let mut con = client_as(&s, user);
        let got = sw5_with(&mut con, "ALLOW", "rate:x", 3600, 10, 1000, 1);
        assert_eq!(
            got,
            [1, n as i64 + 1, 9 - n as i64, 0, W],
            "{user}: ALLOW rate:x"
        );
        sw5_with(&mut con, "PEEK", "rate:x", 3600, 10, 1000, 1);
        for cmd in ["SLIDINGWINDOW.ALLOW", "SLIDINGWINDOW.PEEK"] {
            for key in ["other:x", "rate", "RATE:x"] {
                let v = call(&mut con, &[cmd, key, "3600", "10", "1000"]);
                assert_eq!(error_code(&v), "NOPERM", "{user}: {cmd} {key}: {v:?}");
            }
        }
    }
    // The first user really is limited to the two commands.
    let v = call(&mut client_as(&s, "cmds"), &["ZCARD", "rate:x"]);
    assert_eq!(error_code(&v), "NOPERM");
    let exists: i64 = q(&mut admin, &["EXISTS", "other:x", "rate", "RATE:x"]);
    assert_eq!(exists, 0, "a refused call wrote a key");
    for cmd in ["SLIDINGWINDOW.ALLOW", "SLIDINGWINDOW.PEEK"] {
        for tail in [&[][..], &["COST", "2"][..]] {
            let mut args = vec!["COMMAND", "GETKEYS", cmd, "rate:x", "3600", "10", "1000"];
            args.extend(tail);
            let keys: Vec<String> = q(&mut admin, &args);
            assert_eq!(keys, ["rate:x"], "{args:?}");
        }
    }
}

/// PEEK never writes, so a user allowed only to read `rate:*` (`%R~`) may PEEK but not ALLOW, like
/// ZCARD versus ZADD. This needs the commands' key specs to say so (PEEK: read-only access).
#[test]
fn acl_read_only_key_pattern_allows_peek_but_not_allow() {
    let s = Server::start();
    let mut admin = s.client();
    ok(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "reader",
            "reset",
            "on",
            ">pw",
            "%R~rate:*",
            "+@all",
        ],
    );
    sw5_with(&mut admin, "ALLOW", "rate:x", 3600, 10, 1000, 1);
    let mut con = client_as(&s, "reader");
    let zcard: i64 = q(&mut con, &["ZCARD", "rate:x"]);
    assert_eq!(zcard, 1, "the user can read the key with plain commands");
    let allow = call(
        &mut con,
        &["SLIDINGWINDOW.ALLOW", "rate:x", "3600", "10", "1000"],
    );
    assert_eq!(error_code(&allow), "NOPERM", "ALLOW writes: {allow:?}");
    let peek = call(
        &mut con,
        &["SLIDINGWINDOW.PEEK", "rate:x", "3600", "10", "1000"],
    );
    assert_eq!(
        five(&peek),
        Some([1, 2, 8, 0, W]),
        "SLIDINGWINDOW.PEEK rate:x 3600 10 1000 as a %R~rate:* user answered {peek:?}"
    );
}

/// Sets maxmemory a little above what is used now, then fills past it with DEBUG POPULATE.
fn overfill(s: &Server, con: &mut Connection, policy: &str, filler_keys: u64) {
    let used = info_u64(s, "memory", "used_memory");
    client::config_set(con, "maxmemory-policy", policy);
    let limit = (used + 2_000_000).to_string();
    client::config_set(con, "maxmemory", limit);
    ok(
        con,
        &[
            "DEBUG",
            "POPULATE",
            &filler_keys.to_string(),
            "filler",
            "100",
        ],
    );
}

#[test]
fn noeviction_refuses_allow_with_oom_and_changes_nothing_while_peek_answers() {
    let s = Server::start();
    let mut con = s.client();
    for now in [1000, 1001, 1002] {
        sw5_with(&mut con, "ALLOW", "rate:a", 3600, 10, now, 1);
    }
    overfill(&s, &mut con, "noeviction", 50_000);
    assert!(
        info_u64(&s, "memory", "used_memory") > info_u64(&s, "memory", "maxmemory"),
        "the filler did not exceed maxmemory"
    );
    let digest = s.digest();
    let before = snapshot(&mut con, "rate:a");
    let refused: [&[&str]; 4] = [
        &["SLIDINGWINDOW.ALLOW", "rate:a", "3600", "10", "1003"],
        &["SLIDINGWINDOW.ALLOW", "rate:new", "3600", "10", "1003"],
        // Would be rejected anyway, and would trim: still refused before it runs.
        &["SLIDINGWINDOW.ALLOW", "rate:a", "1", "1", "5000"],
        &[
            "EVAL",
            "return redis.call('SLIDINGWINDOW.ALLOW', KEYS[1], 3600, 10, 1003)",
            "1",
            "rate:a",
        ],
    ];
    for c in refused {
        let v = call(&mut con, c);
        let err = error_line(&v).unwrap_or_else(|| panic!("{c:?} answered {v:?} under OOM"));
        assert!(err.starts_with("OOM"), "{c:?}: {err}");
    }
    // In a transaction the refusal comes at queue time and EXEC aborts.
    let tx = client::pipeline(
        &mut con,
        &[
            vec!["MULTI"],
            vec!["SLIDINGWINDOW.ALLOW", "rate:a", "3600", "10", "1003"],
            vec!["EXEC"],
        ],
    );
    assert_eq!(error_code(&tx[1]), "OOM", "{tx:?}");
    assert_eq!(error_code(&tx[2]), "EXECABORT", "{tx:?}");
    assert_eq!(
        sw5_with(&mut con, "PEEK", "rate:a", 3600, 10, 1003, 1),
        [1, 4, 6, 0, W],
        "PEEK under OOM"
    );
    assert_eq!(
        snapshot(&mut con, "rate:a"),
        before,
        "a refused ALLOW changed the key"
    );
    assert_eq!(s.digest(), digest, "a refused ALLOW changed data");
    client::config_set(&mut con, "maxmemory", "0");
    assert_eq!(
        sw5_with(&mut con, "ALLOW", "rate:a", 3600, 10, 1003, 1),
        [1, 4, 6, 0, W]
    );
}

#[test]
fn allkeys_lru_eviction_leaves_an_evicted_window_simply_empty() {
    let s = Server::start();
    let mut con = s.client();
    let keys = 200;
    let setup: Vec<Vec<String>> = (0..keys)
        .flat_map(|i| {
            [1000, 1001].map(|now| client::sw_line("ALLOW", &format!("rl:{i}"), 3600, 5, now, 1))
        })
        .collect();
    for r in client::pipeline(&mut con, &setup) {
        assert_eq!(five(&r).map(|f| f[0]), Some(1), "{r:?}");
    }
    overfill(&s, &mut con, "allkeys-lru", 30_000);
    // Every command evicts some more until the data fits again.
    wait_until(
        Duration::from_secs(30),
        "eviction to get under maxmemory",
        || info_u64(&s, "memory", "used_memory") <= info_u64(&s, "memory", "maxmemory"),
    );
    assert!(info_u64(&s, "stats", "evicted_keys") > 0);
    // Stop evicting so what we read stays true for the call that follows.
    client::config_set(&mut con, "maxmemory", "0");
    let mut evicted = 0;
    for i in 0..keys {
        let key = format!("rl:{i}");
        let exists: i64 = q(&mut con, &["EXISTS", &key]);
        let got = sw5_with(&mut con, "ALLOW", &key, 3600, 5, 1002, 1);
        if exists == 0 {
            evicted += 1;
            assert_eq!(
                got,
                [1, 1, 4, 0, W],
                "{key} was evicted: it must start empty"
            );
        } else {
            assert_eq!(
                got,
                [1, 3, 2, 0, W],
                "{key} survived: it must keep its two requests"
            );
        }
    }
    assert!(
        evicted > 0,
        "no window key was evicted; the test proved nothing"
    );
}

/// What a call answers: `Ok([allowed, count])` of its reply, or the start of its error.
type Want = Result<[i64; 2], &'static str>;

fn assert_answers(v: &Value, want: Want, what: &str) {
    match want {
        Ok(head) => assert_eq!(five(v).map(|r| [r[0], r[1]]), Some(head), "{what}: {v:?}"),
        Err(prefix) => assert!(
            error_line(v).is_some_and(|e| e.starts_with(prefix)),
            "{what}: {v:?}"
        ),
    }
}

/// Runs `other` from a second connection between WATCH and EXEC (checking that it answers
/// `want`); true if EXEC aborted.
fn aborts(s: &Server, key: &str, other: &[&str], want: Want) -> bool {
    let mut con = s.client();
    ok(&mut con, &["WATCH", key]);
    assert_answers(&call(&mut s.client(), other), want, &other.join(" "));
    let r = client::pipeline(&mut con, &[vec!["MULTI"], vec!["PING"], vec!["EXEC"]]);
    match &r[2] {
        Value::Nil => true,
        Value::Array(_) => false,
        other => panic!("EXEC answered {other:?}"),
    }
}

/// `key` holding three requests at 1000, 1001, 1002 in a 10 s window with max 3.
fn full_window(con: &mut Connection, key: &str) {
    let _: i64 = q(con, &["DEL", key]);
    for (now, left) in [(1000, 2), (1001, 1), (1002, 0)] {
        let v = sw5_with(con, "ALLOW", key, 10, 3, now, 1);
        assert_eq!(v[..3], [1, 3 - left, left], "ALLOW {key} at {now}");
    }
}

#[test]
fn watch_aborts_only_when_the_key_really_changed() {
    let s = Server::start();
    let mut con = s.client();
    let unchanged: [(&[&str], Want); 6] = [
        (&["SLIDINGWINDOW.PEEK", "w", "10", "3", "1003"], Ok([0, 3])),
        (&["SLIDINGWINDOW.PEEK", "w", "10", "3", "99999"], Ok([1, 1])),
        (&["SLIDINGWINDOW.ALLOW", "w", "10", "3", "1003"], Ok([0, 3])),
        (
            &["SLIDINGWINDOW.ALLOW", "w", "10", "3", "1003", "COST", "9"],
            Ok([0, 3]),
        ),
        (
            &["SLIDINGWINDOW.ALLOW", "w", "10", "x", "1003"],
            Err("ERR max must be"),
        ),
        (
            &["SLIDINGWINDOW.ALLOW", "w"],
            Err("ERR wrong number of arguments"),
        ),
    ];
    for (c, want) in unchanged {
        full_window(&mut con, "w");
        assert!(
            !aborts(&s, "w", c, want),
            "{c:?} changed nothing but aborted the transaction"
        );
    }
    let changed: [(&[&str], Want); 3] = [
        // Rejected, but trimmed 1000 and 1001 first.
        (
            &["SLIDINGWINDOW.ALLOW", "w", "10", "1", "11001"],
            Ok([0, 1]),
        ),
        // Rejected (cost above max) after trimming everything: the key is gone.
        (
            &["SLIDINGWINDOW.ALLOW", "w", "10", "3", "99999", "COST", "4"],
            Ok([0, 0]),
        ),
        (&["SLIDINGWINDOW.ALLOW", "w", "10", "9", "1003"], Ok([1, 4])),
    ];
    for (c, want) in changed {
        full_window(&mut con, "w");
        assert!(
            aborts(&s, "w", c, want),
            "{c:?} changed the key but EXEC went through"
        );
    }
}

#[test]
fn keyspace_events_only_for_real_changes() {
    let s = Server::start();
    let mut con = s.client();
    full_window(&mut con, "ev");
    let mut events = Events::watch(&s, "ev");
    // (call, its answer, its events)
    let steps: [(&[&str], Want, &[&str]); 7] = [
        (
            &["SLIDINGWINDOW.PEEK", "ev", "10", "3", "99999"],
            Ok([1, 1]),
            &[],
        ),
        (
            &["SLIDINGWINDOW.ALLOW", "ev", "10", "3", "1003"],
            Ok([0, 3]),
            &[],
        ),
        (
            &["SLIDINGWINDOW.ALLOW", "ev", "10", "2", "1003", "COST", "3"],
            Ok([0, 3]),
            &[],
        ),
        (
            &["SLIDINGWINDOW.ALLOW", "ev", "10", "3", "x"],
            Err("ERR now must be"),
            &[],
        ),
        (
            &["SLIDINGWINDOW.ALLOW", "ev", "10", "1", "11001"],
            Ok([0, 1]),
            &["zremrangebyscore"],
        ),
        (
            &["SLIDINGWINDOW.ALLOW", "ev", "10", "3", "20000", "COST", "4"],
            Ok([0, 0]),
            &["zremrangebyscore", "del"],
        ),
        (
            &["SLIDINGWINDOW.ALLOW", "ev", "10", "3", "20000"],
            Ok([1, 1]),
            &["zadd", "expire"],
        ),
    ];
    for (n, (c, answer, want)) in steps.iter().enumerate() {
        assert_answers(&call(&mut con, c), *answer, &c.join(" "));
        let marker = n.to_string();
        assert_eq!(
            q::<i64>(&mut con, &["PUBLISH", "marker", &marker]),
            1,
            "PUBLISH marker: its one subscriber"
        );
        assert_eq!(events.until(&marker), *want, "keyspace events of {c:?}");
    }
}
