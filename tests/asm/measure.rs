//! The module's declaration of atomic slot migration, and the ignored measurement of a
//! 1,000-slot migration (make measure-asm).

use super::*;

/// The module declares atomic slot migration on Valkey 9 and later only, and loads everywhere.
#[test]
fn the_module_declares_atomic_slot_migration_on_valkey_9_only() {
    let s = Server::start();
    let v = s.version();
    let modules: Vec<Vec<Value>> = q(&mut s.client(), &["MODULE", "LIST"]);
    let listed = format!("{modules:?}");
    assert!(listed.contains("slidingwindow"), "MODULE LIST: {listed}");
    let log = std::fs::read_to_string(s.log_path()).unwrap_or_default();
    assert_eq!(
        log.contains("handles atomic slot migration"),
        v.valkey_at_least(9),
        "{}: the load log says:\n{}",
        v.text,
        s.log_tail()
    );
}

/// Not a test: how long `CLUSTER MIGRATESLOTS` of the 1,000 slots `RANGE` takes when they hold
/// 1,000,000 requests in 10 compact logs of 20,000 distinct times each, under the traffic
/// above (every reply and every key checked: nothing lost, nothing over-admitted); the same
/// without traffic; and the same requests as sorted-set members on servers without the module.
/// `make measure-asm` runs it on Valkey 9.
#[test]
#[ignore = "a measurement: make measure-asm"]
fn measure_a_1000_slot_migration() {
    if !has_asm("measure_a_1000_slot_migration") {
        return;
    }
    const LOGS: usize = 10;
    const CALLS: u64 = 20_000;
    const COST: u64 = 5;
    let mut rows = Vec::new();
    for traffic in [true, false] {
        let setup = Setup::start();
        setup.storage("compact");
        let logs = setup.logs("log:", LOGS, CALLS, COST);
        let driven: Vec<_> = logs[..2]
            .iter()
            .map(|k| (k.clone(), log_model(CALLS, COST)))
            .collect();
        let (keys, seen, clocks) = traffic_keys(&setup, driven);
        let mut running = traffic.then(|| {
            let mut t = Traffic::spawn(setup.cluster.client(), keys.clone(), seen, clocks);
            t.wait_more(300);
            t
        });
        let at_start = running.as_ref().map_or(0, Traffic::calls);
        let took = timed_migration(&setup);
        if let Some(mut t) = running.take() {
            let during = t.calls() - at_start;
            t.wait_more(300);
            let seen = t.stop();
            assert_seen(&setup.cluster.nodes[setup.dst], &keys, &seen);
            rows.push(format!(
                "module, compact logs, under traffic: {took:?} ({during} calls answered during it, \
                 {} in all, every reply and key as the model says)",
                seen.calls
            ));
        } else {
            rows.push(format!("module, compact logs, no traffic: {took:?}"));
        }
    }
    let setup = Setup::of(Cluster::start_without_module());
    let took = timed_migration(&setup);
    rows.push(format!("no module, the slots empty: {took:?}"));
    // Back to the source, then with the data.
    let src = setup.src;
    let back = Setup {
        cluster: setup.cluster,
        src: setup.dst,
        dst: src,
    };
    let took = timed_migration(&back);
    rows.push(format!("no module, the slots empty, moved back: {took:?}"));
    let setup = Setup {
        cluster: back.cluster,
        src,
        dst: back.src,
    };
    let names = setup.names("log:", LOGS);
    let mut con = setup.cluster.nodes[setup.src].client();
    for key in &names {
        for chunk in (0..CALLS).collect::<Vec<_>>().chunks(1000) {
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(key);
            for j in chunk {
                for c in 0..COST {
                    cmd.arg(T0 + j).arg(format!("{}-{c}", T0 + j));
                }
            }
            let added: u64 = cmd.query(&mut con).expect("ZADD");
            assert_eq!(added, chunk.len() as u64 * COST, "{key}");
        }
        let n: u64 = q(&mut con, &["ZCARD", key]);
        assert_eq!(n, CALLS * COST, "{key}");
    }
    let took = timed_migration(&setup);
    rows.push(format!(
        "no module, the same requests as sorted-set members: {took:?}"
    ));
    eprintln!(
        "CLUSTER MIGRATESLOTS SLOTSRANGE {} {} of {} requests:",
        RANGE.0,
        RANGE.1,
        LOGS as u64 * CALLS * COST
    );
    for r in rows {
        eprintln!("  {r}");
    }
}

/// `CLUSTER MIGRATESLOTS` of `RANGE`, from the command to the source's job at `success`; checks
/// that nothing stayed behind.
fn timed_migration(setup: &Setup) -> Duration {
    let start = Instant::now();
    setup.migrate();
    setup.wait_export(&["success"]);
    let took = start.elapsed();
    wait_until(
        CONVERGE_DEADLINE,
        "the source to drop the moved keys",
        || setup.keys_in_range(setup.src) == 0,
    );
    took
}
