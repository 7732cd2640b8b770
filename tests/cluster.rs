//! Redis Cluster: 3 masters and 3 replicas, the module on every node, driven by a cluster-aware
//! client. Replies match the contract model on every master, a slot moves to another master
//! under traffic (MOVED/ASK), and a replica takes over its master under traffic; no admission is
//! lost or doubled.

#[path = "support/cluster.rs"]
mod cluster;
mod common;
#[path = "support/kit.rs"]
mod kit;
use testkit::model;
use testkit::rng;
#[path = "support/traffic.rs"]
mod traffic;

use cluster::{CONVERGE_DEADLINE, Cluster, calls_of};
use common::{Server, call, error_line, wait_until};
use kit::{STORAGES, q, sw5_with};
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
    assert_keys_match_on(&mut cluster.client(), &w, &out);
    cluster.assert_replicas_match();

    // PEEK is a read: a replica in READONLY mode answers it for its own slots, as its master would.
    for i in 0..w.keys {
        let key = w.key(i);
        let replica = cluster.replica_of(cluster.master_of_slot(cluster.keyslot(&key)));
        let mut con = cluster.nodes[replica].client();
        let _: () = q(&mut con, &["READONLY"]);
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
        let reply: String = q(
            &mut src_con,
            &[
                "MIGRATE",
                "127.0.0.1",
                &dst_port,
                "",
                "0",
                "10000",
                "KEYS",
                key,
            ],
        );
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
    let _: () = q(&mut cluster.nodes[new].client(), &["CLUSTER", "FAILOVER"]);
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

fn setslot(node: &Server, args: &[&str], slot: u16) {
    let s = slot.to_string();
    let mut line = vec!["CLUSTER", "SETSLOT", &s];
    line.extend(args);
    let _: () = q(&mut node.client(), &line);
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
