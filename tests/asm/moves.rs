//! Slots moving under traffic, and a migration cancelled half-way.

use super::*;

#[test]
fn slots_move_atomically_under_traffic() {
    let Some(setup) = Setup::start_for("slots_move_atomically_under_traffic") else {
        return;
    };
    let big = setup.big_logs();
    let (keys, seen, clocks) = traffic_keys(&setup, driven(&big));
    let (src, dst) = setup.nodes();
    // The big logs: the requests they hold, their fingerprints and the source's gauges.
    let mut requests = 0;
    for key in &big {
        requests += scores(&mut src.client(), key).len();
    }
    assert!(requests >= 1_000_000, "{requests} requests in the big logs");
    // The two logs the traffic leaves alone: their fingerprints on the source.
    let untouched = &big[2..];
    let before: Vec<_> = untouched.iter().map(|k| fingerprint(src, k)).collect();
    let mut src_events = client::Events::watch(src, &untouched[0]);
    let mut dst_events = client::Events::watch(dst, &untouched[0]);
    assert_eq!(
        gauges(src).0,
        compact_logs(src),
        "the source's compact_keys"
    );
    let dst_before = gauges(dst);
    // Each key takes a while to snapshot, so calls land on keys during the snapshot.
    client::config_set(&mut src.client(), "rdb-key-save-delay", "50000");

    let mut traffic = Traffic::spawn(setup.cluster.client(), keys.clone(), seen, clocks);
    traffic.wait_more(300);
    setup.migrate();
    setup.wait_export(&["snapshotting"]);
    let at_snapshot = traffic.calls();
    let state = setup.wait_export(&[
        "replicating",
        "waiting-to-pause",
        "failover-paused",
        "failover-granted",
        "success",
    ]);
    let during_snapshot = traffic.calls() - at_snapshot;
    assert!(
        during_snapshot > 0,
        "no call was answered while the snapshot ran (then {state})"
    );
    setup.wait_export(&["success"]);
    traffic.wait_more(300);
    let seen = traffic.stop();
    eprintln!(
        "migration: {} calls ({during_snapshot} during the snapshot), {} ALLOWALL admitted, {} refunded",
        seen.calls, seen.allowall_admitted, seen.refunded
    );
    assert!(
        seen.refunded > 0 && seen.allowall_admitted > 0,
        "the traffic refunded {} and admitted {} ALLOWALL",
        seen.refunded,
        seen.allowall_admitted
    );
    let import = job(dst, "IMPORT");
    assert_eq!(
        import.get("state").map(String::as_str),
        Some("success"),
        "{import:?}"
    );

    setup.cluster.wait_stable();
    for s in RANGE.0..=RANGE.1 {
        assert_eq!(setup.cluster.master_of_slot(s), setup.dst, "slot {s}");
    }
    // Calls reached the target once it owned the slots.
    assert!(
        calls_of(dst, "slidingwindow.allow") > 0,
        "no ALLOW ran on the target"
    );
    assert!(
        calls_of(dst, "slidingwindow.allowall") > 0,
        "no ALLOWALL ran on the target"
    );

    // The snapshot rebuilt each compact log with APPLY commands of at most 512 (time, count)
    // pairs: an untouched big log's 20,000 distinct times take 40 of them.
    let batches = untouched.len() as u64 * BIG_CALLS.div_ceil(512);
    let applied = calls_of(dst, "sw.apply");
    assert!(
        applied >= batches,
        "{applied} APPLY on the target, {batches} expected at least"
    );
    // Every driven key on its new owner holds what the model of the admitted calls says.
    assert_seen(dst, &keys, &seen);
    // The star keys' 1-s TTLs would run out between a replica's digest and its master's.
    let mut c = setup.cluster.client();
    for key in &keys.stars {
        let _: u64 = q(&mut c, &["UNLINK", key]);
    }
    // Logs nobody wrote meanwhile are the source's, value and expiry.
    for (key, want) in untouched.iter().zip(&before) {
        assert_eq!(&fingerprint(dst, key), want, "{key} moved as it was");
    }

    // Nothing left on the source; its compact logs all moved, and its gauges say so.
    wait_until(
        CONVERGE_DEADLINE,
        "the source to drop the moved keys",
        || setup.keys_in_range(setup.src) == 0,
    );
    wait_until(
        CONVERGE_DEADLINE,
        "the source's gauges to reach zero",
        || gauges(src) == (0, 0),
    );
    // A deleted value is counted until it is freed (a large one on the lazy-free thread).
    wait_until(
        CONVERGE_DEADLINE,
        "the target's compact_keys to count its logs",
        || gauges(dst).0 == compact_logs(dst),
    );
    assert!(gauges(dst).1 > dst_before.1, "the target's compact_bytes");
    // The target's replica ends with the target's data (and gauges).
    setup.cluster.assert_replicas_match();
    let replica = &setup.cluster.nodes[setup.cluster.replica_of(setup.dst)];
    // The replica reclaims expired keys when its master's DELs arrive.
    wait_until(
        CONVERGE_DEADLINE,
        "the target replica's compact_keys to be its master's",
        || gauges(replica).0 == gauges(dst).0,
    );
    assert_eq!(setup.keys_in_range(setup.cluster.replica_of(setup.src)), 0);
    // Keyspace events of a log nobody wrote: on the target, its loading (one
    // `slidingwindow.add` per APPLY batch, then its expiry); on the source none, not even for
    // the trim after the handover (Valkey tells modules only: the key moved, it was not deleted).
    let receivers: u64 = q(&mut src.client(), &["PUBLISH", "marker", "moved"]);
    assert_eq!(receivers, 1, "PUBLISH marker: the source's one subscriber");
    let mut want = vec!["slidingwindow.add".to_string(); BIG_CALLS.div_ceil(512) as usize];
    want.push("expire".to_string());
    assert_eq!(
        dst_events.until("moved"),
        want,
        "{} on the target",
        untouched[0]
    );
    assert_eq!(
        src_events.until("moved"),
        Vec::<String>::new(),
        "{} on the source",
        untouched[0]
    );
}

/// Of `keys`, the compact log in the lowest slot, which holds no other of `keys`.
fn first_compact_log(setup: &Setup, keys: &[String]) -> String {
    let mut con = setup.cluster.client();
    let mut by_slot: Vec<(u16, &String)> =
        keys.iter().map(|k| (setup.cluster.keyslot(k), k)).collect();
    by_slot.sort();
    by_slot
        .iter()
        .find(|(slot, key)| {
            let kind: String = q(&mut con, &["TYPE", key]);
            kind == "swcompact" && by_slot.iter().filter(|(s, _)| s == slot).count() == 1
        })
        .map(|(_, key)| (*key).clone())
        .expect("a compact log alone in its slot")
}

#[test]
fn a_cancelled_migration_leaves_source_and_target_as_they_were() {
    let Some(setup) =
        Setup::start_for("a_cancelled_migration_leaves_source_and_target_as_they_were")
    else {
        return;
    };
    let big = setup.big_logs();
    let (keys, mut seen, _) = traffic_keys(&setup, driven(&big));
    let (src, dst) = setup.nodes();
    let all: Vec<String> = big
        .iter()
        .chain(&keys.singles)
        .chain(keys.pairs.iter().flatten())
        .cloned()
        .collect();
    let before: Vec<_> = all.iter().map(|k| fingerprint(src, k)).collect();
    let (src_before, dst_before) = (gauges(src), gauges(dst));
    let dst_replica = &setup.cluster.nodes[setup.cluster.replica_of(setup.dst)];
    let dst_replica_before = gauges(dst_replica);
    // The compact log the snapshot sends first (the lowest slot, alone in it): its keyspace
    // events on both nodes.
    let first = first_compact_log(&setup, &all);
    let mut src_events = client::Events::watch(src, &first);
    let mut dst_events = client::Events::watch(dst, &first);
    // Half a second a key: the cancel comes while the target holds part of the keys.
    client::config_set(&mut src.client(), "rdb-key-save-delay", "500000");
    setup.migrate();
    wait_until(
        Duration::from_secs(60),
        "the target to load part of the keys",
        || gauges(dst).0 > dst_before.0,
    );
    assert_eq!(setup.wait_export(&["snapshotting"]), "snapshotting");
    ok(&mut src.client(), &["CLUSTER", "CANCELSLOTMIGRATIONS"]);
    assert_eq!(setup.wait_export(&["cancelled"]), "cancelled");
    client::config_set(&mut src.client(), "rdb-key-save-delay", "0");
    wait_until(CONVERGE_DEADLINE, "the target to end its import", || {
        matches!(
            job(dst, "IMPORT").get("state").map(String::as_str),
            Some("failed" | "cancelled")
        )
    });
    // The target trimmed what it had loaded: no key, the gauges as before, on its replica too.
    wait_until(
        CONVERGE_DEADLINE,
        "the target's gauges to come back",
        || gauges(dst) == dst_before && gauges(dst_replica) == dst_replica_before,
    );
    assert_eq!(setup.keys_in_range(setup.dst), 0, "keys left on the target");
    // The target announced what it loaded, and its trim no deletion (Valkey tells modules only:
    // the keys moved away, they were not deleted); the source, whose keys did not change,
    // announced nothing.
    let receivers: u64 = q(&mut src.client(), &["PUBLISH", "marker", "cancelled"]);
    assert_eq!(receivers, 1, "PUBLISH marker: the source's one subscriber");
    let on_dst = dst_events.until("cancelled");
    assert!(
        on_dst.first().map(String::as_str) == Some("slidingwindow.add")
            && on_dst
                .iter()
                .all(|e| e == "slidingwindow.add" || e == "expire"),
        "{first} on the target: {on_dst:?}"
    );
    assert_eq!(
        src_events.until("cancelled"),
        Vec::<String>::new(),
        "{first} on the source"
    );
    assert_eq!(compact_logs(dst), dst_before.0);

    // The source still owns and serves every slot, every key as it was.
    for s in RANGE.0..=RANGE.1 {
        assert_eq!(setup.cluster.master_of_slot(s), setup.src, "slot {s}");
    }
    for (key, want) in all.iter().zip(&before) {
        assert_eq!(&fingerprint(src, key), want, "{key} on the source");
    }
    assert_eq!(gauges(src), src_before, "the source's gauges");
    let mut c = setup.cluster.client();
    let (key, m) = (&keys.singles[0], &mut seen.singles[0]);
    let now = T0 + 1;
    let got: Value = q(
        &mut c,
        &["SLIDINGWINDOW.ALLOW", key, "3600", "4", &now.to_string()],
    );
    assert_eq!(client::five(&got), Some(m.allow(3600, 4, now, 1)), "{key}");
    assert_eq!(scores(&mut src.client(), key), m.scores);
    setup.cluster.assert_replicas_match();
}

/// A compact key past 2^32 requests on one timestamp moves whole: its count and its DUMP on the
/// target, its replica in step (issue 54).
#[test]
fn counts_past_2_to_the_32_move_whole() {
    let Some(setup) = Setup::start_for("counts_past_2_to_the_32_move_whole") else {
        return;
    };
    setup.storage("compact");
    let (src, dst) = setup.nodes();
    let key = setup.names("counted:", 1).remove(0);
    let mut c = src.client();
    client::config_set(&mut c, "slidingwindow.max-members-per-call", "10000000");
    let max = 1u64 << 53;
    let mut p = redis::pipe();
    for now in std::iter::repeat_n(T0, 430).chain([T0 + 1000]) {
        p.cmd("SLIDINGWINDOW.ALLOW")
            .arg(&key)
            .arg(3600)
            .arg(max)
            .arg(now)
            .arg("COST")
            .arg(10_000_000)
            .ignore();
    }
    let () = p.query(&mut c).expect("a counted key");
    let dump: Vec<u8> = q(&mut c, &["DUMP", &key]);
    setup.migrate();
    setup.wait_export(&["success"]);
    let mut d = dst.client();
    let line = format!("PEEK {key} 3600 {max} {}", T0 + 1000);
    assert_eq!(client::sw5(&mut d, &line)[1], 4_310_000_001);
    assert_eq!(q::<Vec<u8>>(&mut d, &["DUMP", &key]), dump);
    setup.cluster.assert_replicas_match();
}
