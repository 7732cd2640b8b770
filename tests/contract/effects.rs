//! What a call does beyond its reply: propagation, keyspace events, WATCH, the key
//! specification and ACL, background expiry.

use super::*;

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

const SEED_LUA: &str = include_str!("../fixtures/seed.lua");

/// Runs the same scenario through the module on key `m` and through the seed's Lua script on
/// key `l`, and checks that each step emits the same keyspace events on both keys.
#[test]
fn keyspace_events_match_the_seed_script() {
    let (s, mut c) = started();
    let mut sub_con = keyspace_events(&s);
    let sha: String = q(&mut c, &["SCRIPT", "LOAD", SEED_LUA]);
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
        ok(c, &["SET", "sync", &sync.to_string()]);
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
    harness::wait_until(Duration::from_secs(5), "the server's clock to move", || {
        server_time_ms(c) > t
    });
}

fn exec_after(s: &Server, other_call: &str) -> Value {
    let mut a = s.client();
    let mut b = s.client();
    ok(&mut a, &["WATCH", "k"]);
    let _ = sw(&mut b, other_call);
    ok(&mut a, &["MULTI"]);
    assert_eq!(q::<String>(&mut a, &["SET", "x", "1"]), "QUEUED");
    call(&mut a, &["EXEC"])
}

#[test]
fn watch_sees_writes_and_only_writes() {
    let (s, mut c) = with_members("1000 a 5000 b 6000 c");
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
    let (s, mut c) = started();
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

    ok(
        &mut c,
        &["ACL", "SETUSER", "alice", "on", "nopass", "~a*", "+@all"],
    );
    let mut alice = s.client();
    ok(&mut alice, &["AUTH", "alice", "x"]);
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
fn a_fully_expired_window_is_freed_in_the_background() {
    let (s, mut c) = started();
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

/// Trims of more than 64 members emit the seed's events too: `zremrangebyscore` once, then `del`
/// when the set empties.
#[test]
fn large_trims_emit_the_seed_events() {
    let (s, mut c) = started();
    let mut sub_con = keyspace_events(&s);
    let mut sub = sub_con.as_pubsub();
    sub.psubscribe("__keyspace@0__:big").unwrap();
    sub.psubscribe("__keyspace@0__:sync").unwrap();
    let mut sync = 0;
    let mut events = |c: &mut Connection, line: &str| -> Vec<String> {
        next_ms(c);
        let _ = sw5(c, line);
        sync += 1;
        ok(c, &["SET", "sync", &sync.to_string()]);
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
