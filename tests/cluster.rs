//! Redis Cluster: 3 masters and 3 replicas, the module on every node, driven by a cluster-aware
//! client. Replies match the contract model on every master, a slot moves to another master
//! under traffic (MOVED/ASK), and a replica takes over its master under traffic; no admission is
//! lost or doubled.

use testkit::client;
use testkit::cluster;
use testkit::harness;
use testkit::model;
use testkit::traffic;

use client::{STORAGES, ok, q, sw5_with};
use cluster::{CONVERGE_DEADLINE, Cluster, calls_of};
use harness::{Server, call, error_line, wait_until};
use std::collections::BTreeSet;
use traffic::{Outcome, State, Traffic, Workload, assert_keys_match_on};

#[test]
fn replies_match_the_model_on_every_master() {
    for storage in STORAGES {
        replies_match_the_model(storage);
    }
}

#[test]
fn a_slot_moves_to_another_master_under_traffic() {
    for storage in STORAGES {
        slot_moves_under_traffic(storage);
    }
}

#[test]
fn a_replica_takes_over_its_master_under_traffic() {
    for storage in STORAGES {
        failover_under_traffic(storage);
    }
}

fn replies_match_the_model(storage: &str) {
    let cluster = Cluster::start(storage);
    let w = Workload::new("spread:", 12, 0x5EED);
    let owners: BTreeSet<usize> = (0..w.keys)
        .map(|i| cluster.master_of_slot(cluster.keyslot(&w.key(i))))
        .collect();
    assert_eq!(owners.len(), 3, "the keys do not reach all three masters");

    let mut traffic = Traffic::spawn(cluster.client(), &w, State::new(w.keys), true);
    traffic.wait_more(1500);
    let out = traffic.stop();
    assert_counted(&out);
    // No failover here: every admitted call reached a replica within WAIT's timeout.
    assert_eq!(out.unacked, 0, "admitted calls no replica acknowledged");
    assert_keys_match_on(&mut cluster.client(), &w, &out);
    cluster.assert_replicas_match();

    // PEEK is a read: a replica in READONLY mode answers it for its own slots, as its master would.
    for i in 0..w.keys {
        let key = w.key(i);
        let replica = cluster.replica_of(cluster.master_of_slot(cluster.keyslot(&key)));
        let mut con = cluster.nodes[replica].client();
        ok(&mut con, &["READONLY"]);
        let (now, max) = (out.state.clocks[i], w.max(i));
        assert_eq!(
            sw5_with(&mut con, "PEEK", &key, 3600, max, now, 1),
            out.state.models[i].peek(3600, max, now, 1),
            "PEEK {key} on its replica"
        );
    }
}

/// All keys share one slot (their hash tag); it moves key by key from its master to another,
/// the operator's way, while the traffic keeps calling: keys already moved are reached through
/// ASK, and through MOVED once the slot belongs to the target.
fn slot_moves_under_traffic(storage: &str) {
    let cluster = Cluster::start(storage);
    let w = Workload::new("{hot}:", 4, 0xA5C);
    let slot = cluster.keyslot(&w.key(0));
    let src = cluster.master_of_slot(slot);
    let dst = *cluster
        .masters()
        .iter()
        .find(|&&m| m != src)
        .expect("another master");
    let (src_id, dst_id) = (cluster.id(src), cluster.id(dst));
    let dst_port = cluster.nodes[dst].port().to_string();
    let s = slot.to_string();

    let mut traffic = Traffic::spawn(cluster.client(), &w, State::new(w.keys), false);
    traffic.wait_more(200);

    // Importing on the target first, so the source's ASK redirections are accepted there.
    setslot(&cluster.nodes[dst], &["IMPORTING", &src_id], slot);
    setslot(&cluster.nodes[src], &["MIGRATING", &dst_id], slot);
    traffic.wait_more(100);
    let mut src_con = cluster.nodes[src].client();
    let mut moved = Vec::new();
    for _ in 0..w.keys {
        let keys: Vec<String> = q(&mut src_con, &["CLUSTER", "GETKEYSINSLOT", &s, "1"]);
        let Some(key) = keys.first() else { break };
        let reply = migrate(&mut src_con, &dst_port, key);
        assert!(reply == "OK" || reply == "NOKEY", "MIGRATE {key}: {reply}");
        // The key is gone from the source: a plain client is sent to the target with ASK.
        assert_redirect(
            &cluster.nodes[src],
            key,
            &format!("ASK {s} 127.0.0.1:{dst_port}"),
        );
        moved.push(key.clone());
        // Some keys moved, some not yet: the traffic runs against both.
        traffic.wait_more(100);
    }
    let left: u64 = q(&mut src_con, &["CLUSTER", "COUNTKEYSINSLOT", &s]);
    assert_eq!(left, 0, "keys left on the source after moving {moved:?}");
    assert!(moved.len() >= 2, "only {moved:?} existed to be moved");
    let target = &cluster.nodes[dst];
    assert!(
        calls_of(target, "asking") > 0,
        "the traffic never followed an ASK"
    );
    let allowed_on_target = calls_of(target, "slidingwindow.allow");
    assert!(allowed_on_target > 0, "no ALLOW ran on the target");

    // The target first, then the source, then the other masters, as redis-cli --cluster does.
    setslot(&cluster.nodes[dst], &["NODE", &dst_id], slot);
    setslot(&cluster.nodes[src], &["NODE", &dst_id], slot);
    for m in cluster.masters() {
        if m != src && m != dst {
            setslot(&cluster.nodes[m], &["NODE", &dst_id], slot);
        }
    }
    assert_redirect(
        &cluster.nodes[src],
        &w.key(0),
        &format!("MOVED {s} 127.0.0.1:{dst_port}"),
    );
    traffic.wait_more(200);
    let out = traffic.stop();
    assert_counted(&out);
    assert!(
        calls_of(target, "slidingwindow.allow") > allowed_on_target,
        "no ALLOW ran on the target once it owned the slot"
    );

    cluster.wait_stable();
    assert_eq!(cluster.master_of_slot(slot), dst);
    assert_keys_match_on(&mut cluster.client(), &w, &out);
    let held: u64 = q(
        &mut cluster.nodes[dst].client(),
        &["CLUSTER", "COUNTKEYSINSLOT", &s],
    );
    let live = out.state.models.iter().filter(|m| !m.scores.is_empty());
    assert_eq!(held, live.count() as u64, "keys on the target");
    cluster.assert_replicas_match();
}

/// `CLUSTER FAILOVER` on the replica of a master the traffic is writing to; every admitted call
/// is acknowledged by a replica (`WAIT 1`), and the new master continues every key's count.
fn failover_under_traffic(storage: &str) {
    let cluster = Cluster::start(storage);
    let w = Workload::new("fo:", 12, 0xF0F0);
    let slot = cluster.keyslot(&w.key(0));
    let old = cluster.master_of_slot(slot);
    let new = cluster.replica_of(old);

    let mut traffic = Traffic::spawn(cluster.client(), &w, State::new(w.keys), true);
    traffic.wait_more(300);
    ok(&mut cluster.nodes[new].client(), &["CLUSTER", "FAILOVER"]);
    let role = |i: usize| cluster.nodes[i].info_field("replication", "role");
    wait_until(
        CONVERGE_DEADLINE,
        "the replica to take over its master",
        || role(new).as_deref() == Some("master") && role(old).as_deref() == Some("slave"),
    );
    traffic.wait_more(300);
    let out = traffic.stop();
    assert_counted(&out);
    // A replica runs the replicated effects, never the command: these calls came after the switch.
    assert!(
        calls_of(&cluster.nodes[new], "slidingwindow.allow") > 0,
        "the new master answered no ALLOW"
    );
    eprintln!(
        "failover: {} calls, {} admitted, {} met a demoted master in WAIT",
        out.calls, out.admitted, out.unacked
    );

    cluster.wait_stable();
    assert_eq!(cluster.master_of_slot(slot), new);
    assert_eq!(cluster.replica_of(new), old);
    let (now, max) = (out.state.clocks[0], w.max(0));
    assert_eq!(
        sw5_with(
            &mut cluster.nodes[new].client(),
            "PEEK",
            &w.key(0),
            3600,
            max,
            now,
            1
        ),
        out.state.models[0].peek(3600, max, now, 1),
        "PEEK on the new master"
    );
    assert_keys_match_on(&mut cluster.client(), &w, &out);
    cluster.assert_replicas_match();
}

/// `MIGRATE` of one key from the node of `con` to the node on `port`: `OK` or `NOKEY`.
fn migrate(con: &mut redis::Connection, port: &str, key: &str) -> String {
    q(
        con,
        &["MIGRATE", "127.0.0.1", port, "", "0", "10000", "KEYS", key],
    )
}

fn setslot(node: &Server, args: &[&str], slot: u16) {
    let s = slot.to_string();
    let mut line = vec!["CLUSTER", "SETSLOT", &s];
    line.extend(args);
    ok(&mut node.client(), &line);
}

/// A plain (not cluster-aware) client calling PEEK on `key` at `node` is redirected: `want` is
/// the whole error line (`ASK slot host:port` or `MOVED ...`), which shows the module's key is
/// declared so that the cluster checks it.
fn assert_redirect(node: &Server, key: &str, want: &str) {
    let reply = call(
        &mut node.client(),
        &["SLIDINGWINDOW.PEEK", key, "3600", "3", "0"],
    );
    assert_eq!(error_line(&reply).as_deref(), Some(want), "PEEK {key}");
}

/// The traffic ran by itself to the end, with both admitted and rejected calls.
fn assert_counted(out: &Outcome) {
    assert!(out.died.is_none(), "traffic died: {:?}", out.died);
    assert!(
        out.admitted > 0 && out.admitted < out.calls,
        "{} admitted of {} calls",
        out.admitted,
        out.calls
    );
}

/// ALLOWALL / PEEKALL keys are declared: keys of different slots answer `CROSSSLOT`, on any
/// node, before the module runs; hash-tagged keys of one slot are served by its master.
#[test]
fn several_keys_must_share_a_slot() {
    let cluster = Cluster::start("zset");
    let crossslot = "CROSSSLOT Keys in request don't hash to the same slot";
    for node in &cluster.nodes {
        let mut con = node.client();
        for cmd in ["SLIDINGWINDOW.ALLOWALL", "SLIDINGWINDOW.PEEKALL"] {
            let args = [
                cmd, "2", "a", "b", "*", "LIMIT", "1", "60", "5", "LIMIT", "2", "60", "5",
            ];
            let reply = call(&mut con, &args);
            assert_eq!(error_line(&reply).as_deref(), Some(crossslot), "{cmd}");
        }
    }
    let mut c = cluster.client();
    let limits = [(0, 60, 5), (1, 60, 5)];
    let keys = ["{t7}:user:42".to_string(), "{t7}".to_string()];
    let mut models = vec![model::Model::default(); 2];
    for now in [1000u64, 1000, 2000] {
        let got = multi(&mut c, "ALLOWALL", &keys, &limits, now, 2);
        assert_eq!(
            got,
            Some(model::Model::allow_all(&mut models, &limits, now, 2))
        );
    }
    assert_eq!(
        calls_of(
            &cluster.nodes[cluster.master_of_slot(cluster.keyslot("{t7}"))],
            "slidingwindow.allowall"
        ),
        3
    );
    cluster.assert_replicas_match();
}

/// A hash-tagged ALLOWALL (a user key and its tenant key) runs through a live slot migration:
/// keys move one by one from one master to another while calls continue. A call that finds its
/// keys split between the two nodes is refused whole (`TRYAGAIN`) and changes nothing; every
/// other reply, and every key at the end, on the target and its replica, equals the model's.
#[test]
fn several_keys_run_through_a_live_slot_migration() {
    for storage in STORAGES {
        let cluster = Cluster::start(storage);
        let keys: Vec<String> = ["{ten}:u1", "{ten}:u2", "{ten}"].map(String::from).to_vec();
        // Each user at 5 a minute, the tenant at 8 a minute and 100 an hour.
        let limits = [(0, 60, 5), (1, 60, 5), (2, 60, 8), (2, 3600, 100)];
        let slot = cluster.keyslot(&keys[0]);
        let src = cluster.master_of_slot(slot);
        let dst = *cluster.masters().iter().find(|&&m| m != src).unwrap();
        let (src_id, dst_id) = (cluster.id(src), cluster.id(dst));
        let dst_port = cluster.nodes[dst].port().to_string();
        let s = slot.to_string();
        // Calls that find the keys split answer TRYAGAIN however often they are retried.
        let mut c = cluster.client_retrying(3);
        let mut models = vec![model::Model::default(); keys.len()];
        let mut now = 1_700_000_000_000u64;
        let (mut answered, mut retried) = (0, 0);
        let mut step = |c: &mut redis::cluster::ClusterConnection, now: &mut u64| {
            *now += 2500;
            let cost = 1 + *now % 2;
            let peeked = multi(c, "PEEKALL", &keys, &limits, *now, cost);
            match multi(c, "ALLOWALL", &keys, &limits, *now, cost) {
                Some(got) => {
                    let want = model::Model::allow_all(&mut models, &limits, *now, cost);
                    assert_eq!(got, want, "ALLOWALL at {now}");
                    if let Some(p) = peeked {
                        assert_eq!(p, got, "PEEKALL at {now}");
                    }
                    answered += 1;
                }
                None => retried += 1,
            }
        };
        for _ in 0..10 {
            step(&mut c, &mut now);
        }
        setslot(&cluster.nodes[dst], &["IMPORTING", &src_id], slot);
        setslot(&cluster.nodes[src], &["MIGRATING", &dst_id], slot);
        step(&mut c, &mut now);
        let mut src_con = cluster.nodes[src].client();
        for _ in 0..keys.len() {
            let held: Vec<String> = q(&mut src_con, &["CLUSTER", "GETKEYSINSLOT", &s, "1"]);
            let Some(key) = held.first() else { break };
            let reply = migrate(&mut src_con, &dst_port, key);
            assert_eq!(reply, "OK", "MIGRATE {key}");
            // Keys split between the nodes, or all moved: calls go on.
            for _ in 0..3 {
                step(&mut c, &mut now);
            }
        }
        setslot(&cluster.nodes[dst], &["NODE", &dst_id], slot);
        setslot(&cluster.nodes[src], &["NODE", &dst_id], slot);
        for m in cluster.masters() {
            if m != src && m != dst {
                setslot(&cluster.nodes[m], &["NODE", &dst_id], slot);
            }
        }
        for _ in 0..10 {
            step(&mut c, &mut now);
        }
        assert!(
            answered >= 20,
            "{storage}: {answered} answered, {retried} refused"
        );
        assert!(
            calls_of(&cluster.nodes[dst], "slidingwindow.allowall") > 0,
            "no ALLOWALL ran on the target"
        );
        cluster.wait_stable();
        assert_eq!(cluster.master_of_slot(slot), dst);
        let mut target = cluster.nodes[dst].client();
        for (key, m) in keys.iter().zip(&models) {
            assert_eq!(
                client::scores(&mut target, key),
                m.scores,
                "{storage}: {key}"
            );
        }
        cluster.assert_replicas_match();
    }
}

/// One ALLOWALL / PEEKALL through the cluster client: its six integers, or None when the
/// cluster refused it whole (`TRYAGAIN`: its keys were split by a migration; the client's
/// retries may end on the redirection that led there).
fn multi(
    c: &mut redis::cluster::ClusterConnection,
    cmd: &str,
    keys: &[String],
    limits: &[(usize, u64, u64)],
    now: u64,
    cost: u64,
) -> Option<Vec<i64>> {
    let mut command = redis::cmd(&format!("SLIDINGWINDOW.{cmd}"));
    command
        .arg(keys.len())
        .arg(keys)
        .arg(now)
        .arg("COST")
        .arg(cost);
    for &(k, w, m) in limits {
        command.arg("LIMIT").arg(k + 1).arg(w).arg(m);
    }
    match command.query::<Vec<i64>>(c) {
        Ok(v) => Some(v),
        // The client retries these a few times; while the keys stay split, it gives up with the
        // last one (a refused call changed nothing).
        Err(e) if matches!(e.code(), Some("TRYAGAIN" | "MOVED" | "ASK")) => None,
        Err(e) => panic!("{cmd}: {e}"),
    }
}
