//! Faults and restarts lose nothing: replicas attached or cut under load, promotion, kill -9 with
//! an `appendfsync always` AOF, AOF rewrites and RDB saves under traffic, and calls that change
//! nothing propagating nothing.

use testkit::client;
use testkit::harness;
use testkit::traffic;

use client::{STORAGES, info_u64, ok, q, sw5_with, wait_persistence_idle};
use harness::{
    Server, attach_replica, call, error_line, ints, start_replica, wait_in_sync, wait_link_up,
    wait_until,
};
use std::time::Duration;
use traffic::{Outcome, State, Traffic, Workload, assert_keys_match};

/// Enough backlog that a replica cut off for a second or two under full-speed traffic can still
/// continue with a partial resync.
const BIG_BACKLOG: [&str; 2] = ["--repl-backlog-size", "256mb"];

#[test]
fn replica_attached_under_load_matches_and_promotion_forgets_nothing() {
    for storage in STORAGES {
        let mut master = Server::builder().storage(storage).args(BIG_BACKLOG).start();
        let w = Workload::new("load:", 24, 1);
        let mut traffic = Traffic::start(&master, &w);
        traffic.wait_more(300);
        // Full sync while the traffic runs, then the stream keeps flowing.
        let replica = attach_replica(&master, &[]);
        traffic.wait_more(3000);
        let out = traffic.stop();
        wait_in_sync(&master, &replica);
        assert_eq!(info_u64(&master, "stats", "sync_full"), 1);
        assert_eq!(
            master.digest(),
            replica.digest(),
            "replica differs from master after {} calls",
            out.calls
        );
        assert_keys_match(&replica, &w, &out);

        // A replica refuses ALLOW (a write) and changes nothing; PEEK answers from its copy.
        let mut rcon = replica.client();
        let key0 = w.key(0);
        let (max0, now0) = (w.max(0), out.state.clocks[0]);
        let v = call(
            &mut rcon,
            &client::sw_line("ALLOW", &key0, 3600, max0, now0, 1)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert!(
            error_line(&v).is_some_and(|e| e.starts_with("READONLY")),
            "ALLOW on a replica answered {v:?}"
        );
        let peek = sw5_with(&mut rcon, "PEEK", &key0, 3600, max0, now0, 1);
        assert_eq!(
            peek,
            out.state.models[0].peek(3600, max0, now0, 1),
            "PEEK on the replica"
        );
        assert_eq!(master.digest(), replica.digest());

        // Failover: the master dies, the replica takes over; every admitted request must still count.
        master.kill9();
        let mut con = replica.client();
        ok(&mut con, &["REPLICAOF", "NO", "ONE"]);
        assert_eq!(
            replica.info_field("replication", "role").as_deref(),
            Some("master")
        );
        let mut state = out.state.clone();
        for i in 0..w.keys {
            let key = w.key(i);
            let (max, now) = (w.max(i), state.clocks[i]);
            let want = state.models[i].allow(3600, max, now, 1);
            let got = sw5_with(&mut con, "ALLOW", &key, 3600, max, now, 1);
            assert_eq!(got, want, "{key} on the promoted replica");
        }
        // And traffic carries on against the new master, every reply checked against the model.
        carry_on(&replica, &w, state, 1000);
    }
}

#[test]
fn replica_cut_under_load_resyncs_partially_and_matches() {
    for storage in STORAGES {
        let master = Server::builder().storage(storage).args(BIG_BACKLOG).start();
        let replica = start_replica(&master, &[]);
        let w = Workload::new("cut:", 16, 2);
        let mut traffic = Traffic::start(&master, &w);
        traffic.wait_more(300);
        for round in 1..=2u64 {
            let partial = info_u64(&master, "stats", "sync_partial_ok");
            let killed: i64 = q(&mut master.client(), &["CLIENT", "KILL", "TYPE", "replica"]);
            assert_eq!(killed, 1, "round {round}: the replica link was not cut");
            wait_until(
                Duration::from_secs(30),
                "the replica to come back with a partial resync",
                || info_u64(&master, "stats", "sync_partial_ok") > partial,
            );
            wait_link_up(&replica);
            traffic.wait_more(2000);
        }
        let out = traffic.stop();
        wait_in_sync(&master, &replica);
        assert_eq!(
            info_u64(&master, "stats", "sync_full"),
            1,
            "a full resync happened"
        );
        assert_eq!(info_u64(&master, "stats", "sync_partial_ok"), 2);
        assert_eq!(master.digest(), replica.digest());
        assert_keys_match(&replica, &w, &out);
    }
}

#[test]
fn kill9_with_appendfsync_always_keeps_every_admitted_request() {
    for storage in STORAGES {
        let mut s = Server::builder().storage(storage).aof_always().start();
        let w = Workload::new("aof:", 16, 3);
        let mut traffic = Traffic::start(&s, &w);
        traffic.wait_more(1000);
        s.kill9();
        let out = traffic.join();
        assert!(out.died.is_some(), "traffic should end with the server");
        assert!(
            out.admitted > 100,
            "too little was admitted to prove anything"
        );
        s.restart();
        let state = assert_keys_match(&s, &w, &out);
        // The restarted server carries on exactly from what it recovered.
        carry_on(&s, &w, state, 300);
    }
}

#[test]
fn kill9_during_an_aof_rewrite_keeps_every_admitted_request() {
    for storage in STORAGES {
        let mut s = Server::builder().storage(storage).aof_always().start();
        let mut con = s.client();
        // Enough keys, each saved slowly (20 s in all), that the rewrite is surely still running
        // at the kill, even with a slow fsync under every traffic call.
        ok(&mut con, &["DEBUG", "POPULATE", "20000", "filler", "10"]);
        client::config_set(&mut con, "rdb-key-save-delay", "1000");
        let w = Workload::new("aofrw:", 16, 7);
        let mut traffic = Traffic::start(&s, &w);
        traffic.wait_more(300);
        let started: String = q(&mut con, &["BGREWRITEAOF"]);
        assert_eq!(started, "Background append only file rewriting started");
        wait_until(Duration::from_secs(30), "the AOF rewrite to start", || {
            info_u64(&s, "persistence", "aof_rewrite_in_progress") == 1
        });
        traffic.wait_more(500);
        assert_eq!(info_u64(&s, "persistence", "aof_rewrite_in_progress"), 1);
        s.kill9();
        let out = traffic.join();
        assert!(out.died.is_some(), "traffic should end with the server");
        s.restart();
        let state = assert_keys_match(&s, &w, &out);
        carry_on(&s, &w, state, 300);
    }
}

/// Runs `calls` more calls from `state`, each reply checked against the model, then every key.
fn carry_on(s: &Server, w: &Workload, state: State, calls: u64) {
    let mut traffic = Traffic::resume(s, w, state);
    traffic.wait_more(calls);
    let out = traffic.stop();
    assert_keys_match(s, w, &out);
}

/// The two background saves: the command, its completion counter, its busy flag, its status.
enum Save {
    Aof,
    Rdb,
}

/// Runs a background save to completion and checks that it succeeded.
fn background_save(s: &Server, save: Save) {
    let (command, started, done, busy, status) = match save {
        Save::Aof => (
            "BGREWRITEAOF",
            "Background append only file rewriting started",
            "aof_rewrites",
            "aof_rewrite_in_progress",
            "aof_last_bgrewrite_status",
        ),
        Save::Rdb => (
            "BGSAVE",
            "Background saving started",
            "rdb_saves",
            "rdb_bgsave_in_progress",
            "rdb_last_bgsave_status",
        ),
    };
    let before = info_u64(s, "persistence", done);
    assert_eq!(
        q::<String>(&mut s.client(), &[command]),
        started,
        "{command}"
    );
    wait_until(Duration::from_secs(30), command, || {
        info_u64(s, "persistence", done) > before && info_u64(s, "persistence", busy) == 0
    });
    assert_eq!(s.info_field("persistence", status).as_deref(), Some("ok"));
}

fn rewrite_under_traffic_then_restart(storage: &str, preamble: &str, seed: u64) {
    let mut s = Server::builder()
        .storage(storage)
        .aof_always()
        .args(["--aof-use-rdb-preamble", preamble])
        .start();
    let w = Workload::new("rw:", 16, seed);
    let mut traffic = Traffic::start(&s, &w);
    traffic.wait_more(1000);
    background_save(&s, Save::Aof);
    // More traffic lands in the new incremental file after the rewritten base.
    traffic.wait_more(1000);
    let out = traffic.stop();
    let digest = s.digest();
    // appendfsync always: every reply we got was on disk first, so kill -9 loses nothing.
    restart_restores(&mut s, &digest, "the rewritten AOF", &w, &out);
}

/// Kills and restarts `s`, which comes back from `from` with `digest` and the keys as `out` left
/// them.
fn restart_restores(s: &mut Server, digest: &str, from: &str, w: &Workload, out: &Outcome) {
    s.restart();
    assert_eq!(s.digest(), digest, "restart from {from} changed the data");
    assert_keys_match(s, w, out);
}

#[test]
fn bgrewriteaof_under_traffic_then_restart_keeps_the_digest() {
    for storage in STORAGES {
        rewrite_under_traffic_then_restart(storage, "yes", 4);
    }
}

#[test]
fn bgrewriteaof_without_rdb_preamble_then_restart_keeps_the_digest() {
    for storage in STORAGES {
        rewrite_under_traffic_then_restart(storage, "no", 5);
    }
}

#[test]
fn rdb_save_and_bgsave_then_restart_keep_the_digest() {
    for storage in STORAGES {
        let mut s = Server::builder().storage(storage).start();
        let w = Workload::new("rdb:", 16, 6);
        let mut traffic = Traffic::start(&s, &w);
        traffic.wait_more(500);
        let out = traffic.stop();
        let digest = s.digest();
        ok(&mut s.client(), &["SAVE"]);
        assert_eq!(
            info_u64(&s, "persistence", "rdb_changes_since_last_save"),
            0
        );
        restart_restores(&mut s, &digest, "SAVE's RDB", &w, &out);

        // BGSAVE forks while traffic runs; then a last BGSAVE on a quiet server must restore exactly.
        let mut traffic = Traffic::resume(&s, &w, out.state);
        traffic.wait_more(200);
        let saves = info_u64(&s, "persistence", "rdb_saves");
        let started: String = q(&mut s.client(), &["BGSAVE"]);
        assert_eq!(started, "Background saving started");
        wait_until(Duration::from_secs(30), "BGSAVE under traffic", || {
            info_u64(&s, "persistence", "rdb_saves") > saves
        });
        traffic.wait_more(200);
        let out = traffic.stop();
        wait_persistence_idle(&s, "rdb_bgsave_in_progress");
        background_save(&s, Save::Rdb);
        let digest = s.digest();
        restart_restores(&mut s, &digest, "BGSAVE's RDB", &w, &out);
    }
}

#[test]
fn allow_counts_as_a_change_for_save_rules() {
    for storage in STORAGES {
        let s = Server::builder().storage(storage).start();
        let mut con = s.client();
        let changes = |s: &Server| info_u64(s, "persistence", "rdb_changes_since_last_save");
        sw5_with(&mut con, "ALLOW", "full", 3600, 1, 1000, 1);
        ok(&mut con, &["SAVE"]);
        assert_eq!(changes(&s), 0);
        // Nothing changes: PEEK, a rejection with nothing to trim, an error.
        sw5_with(&mut con, "PEEK", "full", 3600, 1, 1000, 1);
        assert_eq!(sw5_with(&mut con, "ALLOW", "full", 3600, 1, 1000, 1)[0], 0);
        assert!(
            error_line(&call(
                &mut con,
                &["SLIDINGWINDOW.ALLOW", "full", "0", "1", "1"]
            ))
            .is_some()
        );
        assert_eq!(
            changes(&s),
            0,
            "a call that changed nothing counted as a change"
        );
        assert_eq!(sw5_with(&mut con, "ALLOW", "other", 3600, 5, 1000, 1)[0], 1);
        assert!(
            changes(&s) >= 1,
            "an admitted ALLOW did not count as a change"
        );

        // And a real save rule fires on it: one change, one second.
        ok(&mut con, &["SAVE"]);
        let saves = info_u64(&s, "persistence", "rdb_saves");
        client::config_set(&mut con, "save", "1 1");
        sw5_with(&mut con, "ALLOW", "other", 3600, 5, 1001, 1);
        wait_until(
            Duration::from_secs(15),
            "the save rule `1 1` to save",
            || info_u64(&s, "persistence", "rdb_saves") > saves,
        );
    }
}

#[test]
fn calls_that_change_nothing_move_neither_replication_offset_nor_aof() {
    for storage in STORAGES {
        let master = Server::builder()
            .storage(storage)
            // `always`: with `everysec` the server may postpone an AOF write by up to 2 s while a
            // background fsync runs, which would let a written no-op pass unseen.
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--repl-ping-replica-period",
                "3600",
            ])
            .start();
        let replica = start_replica(&master, &[]);
        let mut con = master.client();
        for now in [1000, 1001, 1002] {
            sw5_with(&mut con, "ALLOW", "full", 3600, 3, now, 1);
        }
        ok(&mut con, &["SET", "str", "x"]);
        wait_in_sync(&master, &replica);
        wait_persistence_idle(&master, "aof_rewrite_in_progress");
        let offset = |s: &Server| info_u64(s, "replication", "master_repl_offset");
        let aof = |s: &Server| info_u64(s, "persistence", "aof_current_size");
        let (offset0, aof0) = (offset(&master), aof(&master));
        assert!(offset0 > 0, "the master has no replication backlog offset");

        let noop_script = "return redis.call('SLIDINGWINDOW.ALLOW', KEYS[1], 3600, 3, 1003)";
        // Each no-op with what it answers, so that one failing (and so changing nothing) for the
        // wrong reason fails the test too: `Ok(allowed)` for the five integers, else the error.
        let noops: Vec<(Vec<&str>, Result<i64, &str>)> = vec![
            (
                vec!["SLIDINGWINDOW.PEEK", "full", "3600", "3", "5000"],
                Ok(0),
            ),
            (
                vec!["SLIDINGWINDOW.PEEK", "full", "1", "3", "9000000"],
                Ok(1),
            ),
            (
                vec!["SLIDINGWINDOW.PEEK", "missing", "3600", "3", "5000"],
                Ok(1),
            ),
            // Full, nothing old enough to trim.
            (
                vec!["SLIDINGWINDOW.ALLOW", "full", "3600", "3", "1003"],
                Ok(0),
            ),
            (
                vec![
                    "SLIDINGWINDOW.ALLOW",
                    "full",
                    "3600",
                    "2",
                    "1003",
                    "COST",
                    "2",
                ],
                Ok(0),
            ),
            // A missing key and a cost that can never fit: nothing to trim, nothing to add.
            (
                vec![
                    "SLIDINGWINDOW.ALLOW",
                    "missing",
                    "3600",
                    "3",
                    "1003",
                    "COST",
                    "4",
                ],
                Ok(0),
            ),
            (
                vec!["SLIDINGWINDOW.ALLOW", "full", "x", "3", "1003"],
                Err("ERR window must be"),
            ),
            (
                vec!["SLIDINGWINDOW.ALLOW", "full"],
                Err("ERR wrong number of arguments"),
            ),
            (
                vec!["SLIDINGWINDOW.ALLOW", "str", "3600", "3", "1003"],
                Err("WRONGTYPE"),
            ),
            (vec!["EVAL", noop_script, "1", "full"], Ok(0)),
        ];
        for (c, want) in &noops {
            let reply = call(&mut con, c);
            match want {
                Ok(allowed) => assert_eq!(ints(&reply)[0], *allowed, "{c:?}: {reply:?}"),
                Err(prefix) => assert!(
                    error_line(&reply).is_some_and(|e| e.starts_with(prefix)),
                    "{c:?}: {reply:?}"
                ),
            }
        }
        // The same no-op inside a transaction.
        let replies = client::pipeline(
            &mut con,
            &[
                vec!["MULTI"],
                vec!["SLIDINGWINDOW.ALLOW", "full", "3600", "3", "1003"],
                vec!["SLIDINGWINDOW.PEEK", "full", "3600", "3", "1003"],
                vec!["EXEC"],
            ],
        );
        assert!(matches!(replies[3], redis::Value::Array(_)), "{replies:?}");
        assert_eq!(
            offset(&master),
            offset0,
            "a no-op call was propagated to replicas"
        );
        assert_eq!(aof(&master), aof0, "a no-op call was written to the AOF");

        // A rejection that trims is a change: it must propagate (this also shows the check can fail).
        let r = sw5_with(&mut con, "ALLOW", "full", 1, 1, 2001, 2);
        assert_eq!(r, [0, 1, 0, -1, 1], "ALLOW full 1 1 2001 COST 2");
        let offset1 = offset(&master);
        assert!(offset1 > offset0, "a trimming rejection did not propagate");
        assert!(
            aof(&master) > aof0,
            "a trimming rejection did not reach the AOF"
        );
        assert_eq!(sw5_with(&mut con, "ALLOW", "fresh", 3600, 3, 1000, 1)[0], 1);
        assert!(
            offset(&master) > offset1,
            "an admitted ALLOW did not propagate"
        );
        wait_in_sync(&master, &replica);
        assert_eq!(master.digest(), replica.digest());
    }
}
