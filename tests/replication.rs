//! Replicas, the AOF and the RDB receive the effects of the commands, so after any workload
//! they hold exactly the master's data.

use rng::Rng;
use testkit::client;
use testkit::harness;
use testkit::rng;

use std::fs;
use std::path::Path;

use client::{Events, members, pexpiretime};
use harness::{Server, call, error_line, ints, server_time_ms, start_replica, wait_in_sync};
use redis::Connection;

const KEYS: [&str; 5] = ["rl:a", "rl:b", "rl:c", "rl:{x}d", "rl:e"];

/// A mixed workload: admitted and rejected calls, COST, `*`, trims, whole windows expiring,
/// PEEK and malformed calls. Windows are at least a minute so no key expires for real while
/// the copies are compared.
fn workload(con: &mut Connection, seed: u64, steps: usize) {
    let mut rng = Rng::new(seed);
    let mut now = server_time_ms(con);
    let (mut admitted, mut rejected) = (0, 0);
    for _ in 0..steps {
        let key = KEYS[rng.between(0, KEYS.len() as i64 - 1) as usize];
        let window = [60, 61, 120][rng.between(0, 2) as usize];
        let max = rng.between(1, 8);
        now = match rng.between(0, 99) {
            0..=4 => now + rng.between(1, 2) * window * 1000, // the whole window expires
            5..=9 => now - rng.between(0, 5000),
            _ => now + rng.between(0, 3000),
        };
        let now_arg = if rng.between(0, 9) == 0 {
            "*".to_string()
        } else {
            now.to_string()
        };
        let (w, m) = (window.to_string(), max.to_string());
        let mut args = vec!["SLIDINGWINDOW.ALLOW", key, &w, &m, &now_arg];
        let cost;
        match rng.between(0, 9) {
            0..=2 => {
                cost = rng.between(1, 10).to_string();
                args.extend(["COST", &cost]);
            }
            3 => args[0] = "SLIDINGWINDOW.PEEK",
            4 if rng.between(0, 3) == 0 => args[2] = "0", // malformed: refused, no effect
            _ => {}
        }
        let reply = call(con, &args);
        if let Some(err) = error_line(&reply) {
            assert!(args[2] == "0", "{args:?}: {err}");
            continue;
        }
        let r = ints(&reply);
        if args[0] == "SLIDINGWINDOW.ALLOW" {
            if r[0] == 1 {
                admitted += 1;
            } else {
                rejected += 1;
            }
        }
    }
    assert!(
        admitted > 50 && rejected > 50,
        "{admitted} admitted, {rejected} rejected"
    );
}

/// One key as compared between copies: name, (member, score) pairs, absolute expiry in ms.
type KeyState = (String, Vec<(String, u64)>, i64);

fn keys_state(con: &mut Connection) -> Vec<KeyState> {
    KEYS.iter()
        .map(|k| (k.to_string(), members(con, k), pexpiretime(con, k)))
        .collect()
}

/// All bytes of the AOF (Redis 7 keeps it as several files in `appendonlydir`).
fn aof_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let aof_dir = dir.join("appendonlydir");
    for entry in fs::read_dir(&aof_dir).expect("appendonlydir") {
        out.extend(fs::read(entry.unwrap().path()).unwrap());
    }
    out
}

fn contains_ci(hay: &[u8], needle: &str) -> bool {
    let needle = needle.to_ascii_lowercase();
    hay.to_ascii_lowercase()
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn replica_holds_the_same_data_after_a_random_workload() {
    let master = Server::start();
    let replica = start_replica(&master, &[]);
    let mut c = master.client();
    workload(&mut c, 0xA11CE, 2500);
    wait_in_sync(&master, &replica);
    let mut rc = replica.client();
    assert_eq!(replica.digest(), master.digest());
    assert_eq!(keys_state(&mut rc), keys_state(&mut c));
    assert_ne!(master.digest(), "0".repeat(40), "the workload left no data");

    // PEEK runs on the read-only replica and answers as the master would; ALLOW is refused.
    let now = server_time_ms(&mut c).to_string();
    for key in KEYS {
        let line = ["SLIDINGWINDOW.PEEK", key, "60", "4", &now];
        let (on_master, on_replica) = (call(&mut c, &line), call(&mut rc, &line));
        assert_eq!(ints(&on_replica), ints(&on_master), "{key}");
        let r = call(&mut rc, &["SLIDINGWINDOW.ALLOW", key, "60", "4", "*"]);
        assert!(
            error_line(&r).is_some_and(|e| e.starts_with("READONLY")),
            "ALLOW on a replica: {r:?}"
        );
    }
    assert_eq!(replica.digest(), master.digest());
}

#[test]
fn server_restarted_from_its_aof_has_the_same_data() {
    let mut s = Server::builder().aof_always().start();
    let (digest, state) = worked(&s, 0xB0B);

    let aof = aof_bytes(s.dir());
    assert!(
        !contains_ci(&aof, "slidingwindow"),
        "the AOF holds the command itself, not its effects"
    );
    assert!(
        contains_ci(&aof, "pexpireat"),
        "the expiry is not propagated as PEXPIREAT"
    );

    // SIGKILL: with appendfsync always, everything acknowledged is in the AOF.
    restarts_as(&mut s, &digest, &state);
}

#[test]
fn server_restarted_from_its_rdb_has_the_same_data() {
    let mut s = Server::start();
    let (digest, state) = worked(&s, 0xC0DE);
    client::ok(&mut s.client(), &["SAVE"]);
    restarts_as(&mut s, &digest, &state);
}

/// 2000 steps of `workload` seeded `seed` on `s`: its digest and its keys' state then, which
/// hold data.
fn worked(s: &Server, seed: u64) -> (String, Vec<KeyState>) {
    let mut c = s.client();
    workload(&mut c, seed, 2000);
    let (digest, state) = (s.digest(), keys_state(&mut c));
    assert_ne!(digest, "0".repeat(40), "the workload left no data");
    (digest, state)
}

/// Kills and restarts `s`, which comes back with `digest` and `state`.
fn restarts_as(s: &mut Server, digest: &str, state: &[KeyState]) {
    s.restart();
    assert_eq!(s.digest(), digest);
    assert_eq!(keys_state(&mut s.client()), state);
}

/// Trims of every size reach the replica and the AOF: a few members (removed one by one on the
/// master), more than 64 (removed as a score range), and a whole expired set (unlinked); each
/// replicates as the script's own `ZREMRANGEBYSCORE`, a large whole set as `UNLINK`.
#[test]
fn trims_of_every_size_replicate_exactly() {
    let mut s = Server::builder().aof_always().start();
    let replica = start_replica(&s, &[]);
    let mut c = s.client();
    let t0: i64 = 1_700_000_000_000;
    let allow = |c: &mut Connection, key: &str, now: i64, cost: u64| {
        let (now, cost) = (now.to_string(), cost.to_string());
        let reply = call(
            c,
            &[
                "SLIDINGWINDOW.ALLOW",
                key,
                "10",
                "1000",
                &now,
                "COST",
                &cost,
            ],
        );
        ints(&reply)
    };
    // Batches 1 ms apart, so each later call expires exactly one batch.
    for (i, cost) in [3, 100, 1, 200, 5].into_iter().enumerate() {
        allow(&mut c, "trim:k", t0 + i as i64, cost);
    }
    let expected_counts = [
        (t0 + 10_000, 307), // the batch of 3 leaves, 1 added
        (t0 + 10_001, 208), // 100 leave: a score range
        (t0 + 10_002, 208), // 1 leaves, 1 added
        (t0 + 10_003, 9),   // 200 leave
    ];
    for (now, count) in expected_counts {
        assert_eq!(allow(&mut c, "trim:k", now, 1)[1], count, "count at {now}");
    }
    // The whole set has expired; small enough to empty member by member, then the key goes.
    allow(&mut c, "trim:k", t0 + 30_000, 1);
    assert_eq!(allow(&mut c, "trim:k", t0 + 30_000, 100)[1], 101);
    // A large set expired whole: unlinked, and freed in the background.
    assert_eq!(allow(&mut c, "trim:k", t0 + 50_000, 2)[1], 2);

    wait_in_sync(&s, &replica);
    let on_master = members(&mut c, "trim:k");
    assert_eq!(members(&mut replica.client(), "trim:k"), on_master);
    assert_eq!(replica.digest(), s.digest());
    let aof = aof_bytes(s.dir());
    for command in ["zremrangebyscore", "unlink", "pexpireat"] {
        assert!(
            contains_ci(&aof, &format!("\r\n{command}\r\n")),
            "AOF lacks {command}"
        );
    }
    assert!(
        !contains_ci(&aof, "\r\nzrem\r\n"),
        "a trim was sent as ZREM: replicas would emit other events than the master"
    );
    let digest = s.digest();
    s.restart();
    assert_eq!(s.digest(), digest);
    assert_eq!(members(&mut s.client(), "trim:k"), on_master);
}

/// A replica's subscribers see the same keyspace events as the master's, trims included; the
/// one documented exception is a large set that expired whole, unlinked on both (`del` only on
/// the replica, which frees it in the background too).
#[test]
fn replicas_emit_the_masters_keyspace_events() {
    let s = Server::start();
    let replica = start_replica(&s, &[]);
    let mut on_master = Events::watch(&s, "ev");
    let mut on_replica = Events::watch(&replica, "ev");
    let mut c = s.client();
    let t0: i64 = 1_700_000_000_000;
    // (window s, max, now, cost, the master's events). Windows grow between admitted calls so
    // that each one sets a later TTL, which a replica hears of as PEXPIREAT; a shorter one keeps
    // the key's expiry, and neither server announces it.
    let steps: [(i64, i64, i64, i64, &[&str]); 8] = [
        (100, 1000, t0, 3, &["zadd", "expire"]),
        (102, 1000, t0 + 1, 100, &["zadd", "expire"]),
        // The batch of 3 leaves (walked); then the batch of 100 (a range removal).
        (100, 1000, t0 + 100_000, 1, &["zremrangebyscore", "zadd"]),
        (101, 1000, t0 + 102_001, 1, &["zremrangebyscore", "zadd"]),
        (103, 1000, t0 + 102_002, 1, &["zadd", "expire"]),
        // Every member leaves: the key goes, then comes back.
        (
            10,
            1000,
            t0 + 300_000,
            1,
            &["zremrangebyscore", "del", "zadd", "expire"],
        ),
        (11, 1000, t0 + 300_001, 100, &["zadd", "expire"]),
        // 101 members expire whole, nothing admitted (cost > max): unlinked.
        (10, 1, t0 + 400_000, 2, &["zremrangebyscore", "del"]),
    ];
    for (i, (w, max, now, cost, want)) in steps.into_iter().enumerate() {
        let reply = call(
            &mut c,
            &[
                "SLIDINGWINDOW.ALLOW",
                "ev",
                &w.to_string(),
                &max.to_string(),
                &now.to_string(),
                "COST",
                &cost.to_string(),
            ],
        );
        assert!(error_line(&reply).is_none(), "step {i}: {reply:?}");
        let marker = i.to_string();
        let receivers: i64 = redis::cmd("PUBLISH")
            .arg(&["marker", &marker])
            .query(&mut c)
            .unwrap();
        assert_eq!(receivers, 1, "PUBLISH marker: the master's one subscriber");
        let master = on_master.until(&marker);
        assert_eq!(master, *want, "step {i}: the master's events");
        let replica = on_replica.until(&marker);
        if i == 7 {
            assert_eq!(replica, ["del"], "step {i}: the replica's events");
        } else {
            assert_eq!(replica, master, "step {i}: the replica's events");
        }
    }
    wait_in_sync(&s, &replica);
    assert_eq!(replica.digest(), s.digest());
}

/// Mixed traffic over both storages: ALLOW, ALLOWALL over several keys (some sorted sets, some
/// compact logs in one call), PEEKALL, REFUND with and without AT, and refused calls. A replica
/// and a server restarted from its AOF end with exactly the master's data; one ALLOWALL reaches
/// the AOF as one `MULTI`/`EXEC` unit, a sorted set's refund as `ZREM` of exactly its members.
#[test]
fn several_keys_and_refunds_replicate_exactly() {
    let mut master = Server::builder().aof_always().start();
    let replica = start_replica(&master, &[]);
    let mut c = master.client();
    // One call on two fresh keys: one unit in the AOF.
    let before = aof_bytes(master.dir()).len();
    let line = "SLIDINGWINDOW.ALLOWALL 2 {u}a {u}b 1000 LIMIT 1 60 5 LIMIT 2 60 5";
    let r = call(&mut c, &line.split(' ').collect::<Vec<_>>());
    assert_eq!(ints(&r)[0], 1);
    let unit = String::from_utf8_lossy(&aof_bytes(master.dir())[before..]).to_lowercase();
    let at = |word: &str| {
        unit.find(word)
            .unwrap_or_else(|| panic!("no {word} in {unit:?}"))
    };
    assert!(
        at("multi") < at("zadd") && unit.rfind("zadd") < unit.find("exec"),
        "{unit:?}"
    );
    assert_eq!(unit.matches("zadd").count(), 2, "{unit:?}");
    // A refund: exactly the removed member.
    let member: Vec<String> = redis::cmd("ZRANGE")
        .arg("{u}a")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let before = aof_bytes(master.dir()).len();
    assert_eq!(
        call(&mut c, &["SLIDINGWINDOW.REFUND", "{u}a", "5"]),
        redis::Value::Int(1)
    );
    let unit = String::from_utf8_lossy(&aof_bytes(master.dir())[before..]).into_owned();
    assert!(
        unit.contains("ZREM") && unit.contains(&member[0]),
        "{unit:?}"
    );

    let mut rng = Rng::new(0x4EF);
    let keys: Vec<String> = (0..8).map(|i| format!("{{m}}{i}")).collect();
    let mut now = server_time_ms(&mut c) as u64;
    for step in 0..1500 {
        if step % 100 == 0 {
            let storage = ["zset", "compact"][step / 100 % 2];
            client::config_set(&mut c, "slidingwindow.storage", storage);
        }
        now = match rng.range(0, 19) {
            0 => now + 120_000,
            1 => now - rng.range(0, 4000),
            _ => now + rng.range(0, 900),
        };
        let now_arg = if rng.chance(10) {
            "*".to_string()
        } else {
            now.to_string()
        };
        let n = rng.range(1, 4) as usize;
        let first = rng.range(0, (keys.len() - n) as u64) as usize;
        let mut args: Vec<String> = match rng.range(0, 9) {
            0..=4 => {
                let cmd = if rng.chance(20) {
                    "PEEKALL"
                } else {
                    "ALLOWALL"
                };
                let mut a = vec![format!("SLIDINGWINDOW.{cmd}"), n.to_string()];
                a.extend(keys[first..first + n].iter().cloned());
                a.extend([now_arg.clone(), "COST".into(), rng.range(1, 3).to_string()]);
                for k in 1..=n {
                    a.extend([
                        "LIMIT".into(),
                        k.to_string(),
                        "60".into(),
                        rng.range(2, 9).to_string(),
                    ]);
                    if rng.chance(30) {
                        a.extend(["LIMIT".into(), k.to_string(), "5".into(), "3".into()]);
                    }
                }
                a
            }
            5..=7 => {
                let mut a = vec![
                    "SLIDINGWINDOW.REFUND".to_string(),
                    keys[first].clone(),
                    rng.range(1, 3).to_string(),
                ];
                if rng.chance(60) {
                    a.extend(["AT".into(), now_arg.clone()]);
                }
                a
            }
            _ => ["SLIDINGWINDOW.ALLOW", &keys[first], "61", "6", &now_arg]
                .map(String::from)
                .to_vec(),
        };
        if rng.chance(3) {
            args.push("BOGUS".into()); // malformed: refused, no effect
        }
        let reply = harness::call_words(&mut c, &args);
        if let Some(err) = error_line(&reply) {
            assert!(args.last().is_some_and(|a| a == "BOGUS"), "{args:?}: {err}");
        }
    }
    wait_in_sync(&master, &replica);
    let digest = master.digest();
    assert_ne!(digest, "0".repeat(40), "the traffic left no data");
    assert_eq!(replica.digest(), digest);
    // PEEKALL runs on the read-only replica and answers as the master; the writes are refused.
    let mut rc = replica.client();
    let peek = format!(
        "SLIDINGWINDOW.PEEKALL 3 {{m}}0 {{m}}1 {{m}}2 {now} LIMIT 1 60 5 LIMIT 2 60 5 LIMIT 3 5 3"
    );
    let peek: Vec<&str> = peek.split(' ').collect();
    assert_eq!(ints(&call(&mut rc, &peek)), ints(&call(&mut c, &peek)));
    for line in [
        "SLIDINGWINDOW.ALLOWALL 1 {m}0 * LIMIT 1 60 5",
        "SLIDINGWINDOW.REFUND {m}0 1",
    ] {
        let r = call(&mut rc, &line.split(' ').collect::<Vec<_>>());
        assert!(
            error_line(&r).is_some_and(|e| e.starts_with("READONLY")),
            "{line} on a replica: {r:?}"
        );
    }
    assert_eq!(replica.digest(), digest);
    master.restart();
    assert_eq!(master.digest(), digest, "restarted from the AOF");
}

/// LEASE, PRECISION, DETAIL and lateness on both storages, callers out of order by up to twice the
/// master's lateness: replicas configured with another lateness (none, a day), and the master
/// restarted from its AOF, end with exactly the master's data. What they receive is resolved: a
/// sorted set's trim as `ZREMRANGEBYSCORE key -inf cutoff` with the master's cutoff, a lease's
/// members by `ZADD` at `now + ms`, the absolute expiry; a compact key's `APPLY` with both.
#[test]
fn leases_and_lateness_replicate_exactly_whatever_the_replicas_lateness() {
    let mut master = Server::builder().aof_always().lateness(5000).start();
    let replicas = [
        start_replica(&master, &["--slidingwindow.lateness", "0"]),
        start_replica(&master, &["--slidingwindow.lateness", "86400000"]),
    ];
    let mut c = master.client();
    // A lease's members reach the AOF at the lease's end.
    let before = aof_bytes(master.dir()).len();
    let r = call(
        &mut c,
        &[
            "SLIDINGWINDOW.ALLOW",
            "{o}x",
            "60",
            "5",
            "1000",
            "LEASE",
            "500",
        ],
    );
    assert_eq!(ints(&r), [1, 1, 4, 0, 60_500]);
    let unit = String::from_utf8_lossy(&aof_bytes(master.dir())[before..]).to_lowercase();
    assert!(unit.contains("zadd") && unit.contains("1500"), "{unit:?}");

    let mut rng = Rng::new(0x1EA5E);
    let keys: Vec<String> = (0..6).map(|i| format!("{{o}}{i}")).collect();
    let mut newest = server_time_ms(&mut c) as u64;
    let (mut leases, mut coarse) = (0, 0);
    for step in 0..1200 {
        if step % 100 == 0 {
            let storage = ["zset", "compact"][step / 100 % 2];
            client::config_set(&mut c, "slidingwindow.storage", storage);
        }
        newest += match rng.range(0, 19) {
            0 => 61_000,
            _ => rng.range(0, 900),
        };
        let now = (newest - rng.range(0, 10_000)).to_string();
        let lease = rng.range(1, 4000).to_string();
        let precision = rng.pick(&[1, 7, 1000, 60_000]).to_string();
        let key = &keys[rng.range(0, keys.len() as u64 - 1) as usize];
        let mut args: Vec<&str> = match rng.range(0, 9) {
            0..=4 => vec![
                "SLIDINGWINDOW.ALLOW",
                key,
                "60",
                "6",
                &now,
                "LIMIT",
                "5",
                "3",
            ],
            5..=6 => vec![
                "SLIDINGWINDOW.ALLOWALL",
                "2",
                &keys[0],
                &keys[1],
                &now,
                "LIMIT",
                "1",
                "60",
                "9",
                "LIMIT",
                "2",
                "30",
                "4",
            ],
            7 => vec!["SLIDINGWINDOW.REFUND", key, "1", "AT", &now],
            _ => vec!["SLIDINGWINDOW.PEEK", key, "60", "6", &now],
        };
        if args[0] != "SLIDINGWINDOW.REFUND" {
            if rng.chance(40) {
                args.extend(["LEASE", &lease]);
                leases += 1;
            }
            if rng.chance(30) {
                args.extend(["PRECISION", &precision]);
                coarse += 1;
            }
            if rng.chance(30) {
                args.push("DETAIL");
            }
        }
        let reply = call(&mut c, &args);
        assert!(error_line(&reply).is_none(), "{args:?}: {reply:?}");
    }
    let trimmed = client::info_u64(&master, "slidingwindow", "slidingwindow_trimmed");
    assert!(
        leases > 300 && coarse > 200 && trimmed > 100,
        "{leases} leases, {coarse} with a precision, {trimmed} trimmed"
    );
    for replica in &replicas {
        wait_in_sync(&master, replica);
    }
    let digest = master.digest();
    assert_ne!(digest, "0".repeat(40), "the traffic left no data");
    let mut m = master.client();
    let state = |con: &mut Connection| -> Vec<(Vec<u64>, i64)> {
        keys.iter()
            .map(|k| (client::scores(con, k), pexpiretime(con, k)))
            .collect()
    };
    let want = state(&mut m);
    for replica in &replicas {
        assert_eq!(replica.digest(), digest);
        assert_eq!(state(&mut replica.client()), want);
    }
    master.restart();
    assert_eq!(master.digest(), digest, "restarted from the AOF");
    assert_eq!(state(&mut master.client()), want);
}
