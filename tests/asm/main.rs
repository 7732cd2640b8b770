//! Atomic slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`) with the module loaded on every
//! node of a 3-master, 3-replica cluster: slots holding keys of both storages (compact logs of
//! over a million requests among them) move while a cluster client calls ALLOW, ALLOWALL and
//! REFUND on them; a migration cancelled half-way leaves the source whole and the target as it
//! was. On servers without atomic slot migration (Redis 7 and 8, Valkey 8) every test says so
//! and passes without starting a cluster: the legacy `SETSLOT`/`MIGRATE` path is tests/cluster.rs's.

use testkit::client;
use testkit::cluster;
use testkit::harness;
use testkit::model;
use testkit::rng;

use client::{info_u64, ok, q, scores};
use cluster::{CONVERGE_DEADLINE, Cluster, calls_of};
use harness::{Server, wait_until};
use model::Model;
use redis::Value;
use redis::cluster::ClusterConnection;
use rng::Rng;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

mod measure;
mod moves;

/// The slots that move: all served by the first master `redis-cli --cluster create` makes.
const RANGE: (u16, u16) = (0, 999);
/// Explicit `now` of the calls that build and drive the logs (ms).
const T0: u64 = 1_700_000_000_000;
/// The big compact logs: this many keys, each built by `BIG_CALLS` calls of `COST` `BIG_COST`
/// at distinct milliseconds: 4 * 20,000 * 13 = 1,040,000 requests.
const BIG_KEYS: usize = 4;
const BIG_CALLS: u64 = 20_000;
const BIG_COST: u64 = 13;
/// Their window (s) and max: nothing leaves the window or is refused while the tests run.
const BIG_WINDOW: u64 = 86_400;
const BIG_MAX: u64 = 10_000_000;
/// Keys the traffic drives with its own clock, per storage; tags of ALLOWALL pairs, per storage.
const SINGLES: usize = 6;
const PAIRS: usize = 3;
/// Keys called with `now = *` (window 1 s, max 3), for the over-admission check.
const STARS: usize = 2;
const STAR_MAX: u64 = 3;
/// ALLOWALL's limits: the user key 5 a minute, the tenant key 8 a minute and 100 an hour.
const PAIR_LIMITS: [(usize, u64, u64); 3] = [(0, 60, 5), (1, 60, 8), (1, 3600, 100)];

/// Whether the servers under test have atomic slot migration (Valkey 9 and later); if not,
/// says why the test does nothing there.
fn has_asm(test: &str) -> bool {
    let v = Server::start().version();
    let yes = v.valkey_at_least(9);
    if !yes {
        eprintln!(
            "{test}: skipped on {} {}: CLUSTER MIGRATESLOTS (atomic slot migration) is Valkey 9's; \
             the legacy SETSLOT/MIGRATE path is tested by tests/cluster.rs",
            if v.valkey { "Valkey" } else { "Redis" },
            v.text
        );
    }
    yes
}

/// A cluster whose first master owns `RANGE`, with the module set to `storage` on every master.
struct Setup {
    cluster: Cluster,
    src: usize,
    dst: usize,
}

impl Setup {
    fn start() -> Setup {
        let setup = Setup::of(Cluster::start("compact"));
        let (src, _) = setup.nodes();
        let log = std::fs::read_to_string(src.log_path()).unwrap_or_default();
        assert!(
            log.contains("handles atomic slot migration"),
            "the module did not opt in to atomic slot migration:\n{}",
            src.log_tail()
        );
        setup
    }

    /// [`Setup::start`] where the servers migrate slots atomically (`has_asm` of `test`).
    fn start_for(test: &str) -> Option<Setup> {
        has_asm(test).then(Setup::start)
    }

    /// The source and the target of the move.
    fn nodes(&self) -> (&Server, &Server) {
        (&self.cluster.nodes[self.src], &self.cluster.nodes[self.dst])
    }

    fn of(cluster: Cluster) -> Setup {
        let src = cluster.master_of_slot(RANGE.0);
        assert_eq!(
            cluster.master_of_slot(RANGE.1),
            src,
            "{RANGE:?} on one master"
        );
        let dst = *cluster
            .masters()
            .iter()
            .find(|&&m| m != src)
            .expect("another master");
        Setup { cluster, src, dst }
    }

    fn storage(&self, storage: &str) {
        for m in self.cluster.masters() {
            client::config_set(
                &mut self.cluster.nodes[m].client(),
                "slidingwindow.storage",
                storage,
            );
        }
    }

    /// `n` names `prefix<j>` whose slots are in `RANGE`.
    fn names(&self, prefix: &str, n: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut j = 0;
        while out.len() < n {
            let name = format!("{prefix}{j}");
            if (RANGE.0..=RANGE.1).contains(&self.cluster.keyslot(&name)) {
                out.push(name);
            }
            j += 1;
        }
        out
    }

    /// Builds the big compact logs on the source: pipelined ALLOWs at distinct milliseconds.
    fn big_logs(&self) -> Vec<String> {
        self.storage("compact");
        self.logs("big:", BIG_KEYS, BIG_CALLS, BIG_COST)
    }

    /// `n` logs named `prefix<j>` in `RANGE`, each of `calls` calls at distinct milliseconds
    /// from `T0`, `cost` requests each.
    fn logs(&self, prefix: &str, n: usize, calls: u64, cost: u64) -> Vec<String> {
        let keys = self.names(prefix, n);
        let mut con = self.cluster.nodes[self.src].client();
        for key in &keys {
            for chunk in (0..calls).collect::<Vec<_>>().chunks(10_000) {
                let mut p = redis::pipe();
                for j in chunk {
                    p.cmd("SLIDINGWINDOW.ALLOW")
                        .arg(key)
                        .arg(BIG_WINDOW)
                        .arg(BIG_MAX)
                        .arg(T0 + j)
                        .arg("COST")
                        .arg(cost)
                        .ignore();
                }
                let () = p.query(&mut con).expect("build a big log");
            }
            let kind: String = q(&mut con, &["TYPE", key]);
            assert_eq!(kind, "swcompact", "{key}");
        }
        keys
    }

    fn migrate(&self) {
        let dst_id = self.cluster.id(self.dst);
        let (a, b) = (RANGE.0.to_string(), RANGE.1.to_string());
        ok(
            &mut self.cluster.nodes[self.src].client(),
            &[
                "CLUSTER",
                "MIGRATESLOTS",
                "SLOTSRANGE",
                &a,
                &b,
                "NODE",
                &dst_id,
            ],
        );
    }

    /// Waits until the source's export job reaches one of `states`; returns it (a failed job
    /// fails the test with its message).
    fn wait_export(&self, states: &[&str]) -> String {
        let mut last = String::new();
        wait_until(
            Duration::from_secs(120),
            &format!("the export job to reach {states:?}"),
            || {
                let job = job(&self.cluster.nodes[self.src], "EXPORT");
                last = job.get("state").cloned().unwrap_or_default();
                assert!(
                    last != "failed" || states.contains(&"failed"),
                    "the migration failed: {job:?}\nsource log:\n{}\ntarget log:\n{}",
                    self.cluster.nodes[self.src].log_tail(),
                    self.cluster.nodes[self.dst].log_tail()
                );
                states.contains(&last.as_str())
            },
        );
        last
    }

    /// Keys in `RANGE` on node `i`.
    fn keys_in_range(&self, i: usize) -> u64 {
        let mut con = self.cluster.nodes[i].client();
        (RANGE.0..=RANGE.1)
            .map(|s| q::<u64>(&mut con, &["CLUSTER", "COUNTKEYSINSLOT", &s.to_string()]))
            .sum()
    }
}

/// The newest slot migration job of `kind` (`EXPORT` or `IMPORT`) on `node`, as a map.
fn job(node: &Server, kind: &str) -> HashMap<String, String> {
    let jobs: Vec<HashMap<String, String>> =
        q(&mut node.client(), &["CLUSTER", "GETSLOTMIGRATIONS"]);
    jobs.into_iter()
        .find(|j| j.get("operation").map(String::as_str) == Some(kind))
        .unwrap_or_default()
}

/// (`compact_keys`, `compact_bytes`) of INFO.
fn gauges(s: &Server) -> (u64, u64) {
    (
        info_u64(s, "slidingwindow", "slidingwindow_compact_keys"),
        info_u64(s, "slidingwindow", "slidingwindow_compact_bytes"),
    )
}

/// How many compact logs `s` holds, counted by `SCAN ... TYPE swcompact`.
fn compact_logs(s: &Server) -> u64 {
    let mut con = s.client();
    let mut cursor = "0".to_string();
    let mut n = 0;
    loop {
        let (next, keys): (String, Vec<String>) = q(
            &mut con,
            &["SCAN", &cursor, "TYPE", "swcompact", "COUNT", "1000"],
        );
        n += keys.len() as u64;
        if next == "0" {
            return n;
        }
        cursor = next;
    }
}

/// `DEBUG DIGEST-VALUE key` and `PEXPIRETIME key` on `s`.
fn fingerprint(s: &Server, key: &str) -> (String, i64) {
    let mut con = s.client();
    let digest: Vec<String> = q(&mut con, &["DEBUG", "DIGEST-VALUE", key]);
    let at: i64 = q(&mut con, &["PEXPIRETIME", key]);
    (digest.concat(), at)
}

/// What the traffic drives: single keys and ALLOWALL pairs with the caller's own clock (each
/// reply checked against its model), and keys called with `*`.
#[derive(Clone)]
struct Keys {
    singles: Vec<String>,
    /// Each pair: the user key `{tag}:u`, then the tenant key `{tag}`.
    pairs: Vec<[String; 2]>,
    stars: Vec<String>,
}

/// What the traffic saw, and the models of every key it drove.
struct Seen {
    singles: Vec<Model>,
    pairs: Vec<[Model; 2]>,
    /// Per star key, `(now, cost)` of each admitted call, `now` as DETAIL reported it.
    stars: Vec<Vec<(u64, u64)>>,
    calls: u64,
    refunded: u64,
    allowall_admitted: u64,
}

struct Traffic {
    stop: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
    handle: Option<thread::JoinHandle<Seen>>,
}

impl Traffic {
    fn spawn(con: ClusterConnection, keys: Keys, seen: Seen, clocks: Vec<u64>) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicU64::new(0));
        let (s, c) = (stop.clone(), calls.clone());
        let handle = thread::spawn(move || drive(con, &keys, seen, clocks, &s, &c));
        Traffic {
            stop,
            calls,
            handle: Some(handle),
        }
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Waits for `n` more answered calls; fails if the traffic died.
    fn wait_more(&mut self, n: u64) {
        let target = self.calls() + n;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.calls() < target {
            if self.handle.as_ref().is_none_or(|h| h.is_finished()) {
                self.stop();
                unreachable!("the traffic ended by itself");
            }
            assert!(Instant::now() < deadline, "the traffic made no progress");
            thread::sleep(Duration::from_millis(2));
        }
    }

    fn stop(&mut self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        match self.handle.take().expect("joined once").join() {
            Ok(seen) => seen,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// Sequential calls through the cluster client (it follows `MOVED`); every reply is checked.
fn drive(
    mut con: ClusterConnection,
    keys: &Keys,
    mut seen: Seen,
    mut clocks: Vec<u64>,
    stop: &AtomicBool,
    calls: &AtomicU64,
) -> Seen {
    let mut rng = Rng::new(0xA5A5);
    let singles = keys.singles.len();
    while !stop.load(Ordering::SeqCst) {
        let op = rng.next() % 100;
        let cost = if rng.chance(80) { 1 } else { rng.range(2, 4) };
        if op < 70 {
            let i = (rng.next() % singles as u64) as usize;
            let now = tick(&mut rng, &mut clocks[i]);
            if op < 55 {
                let (window, max) = (3600, 4 + i as u64 % 3 * 5);
                let got: Value = redis::cmd("SLIDINGWINDOW.ALLOW")
                    .arg(&keys.singles[i])
                    .arg(window)
                    .arg(max)
                    .arg(now)
                    .arg("COST")
                    .arg(cost)
                    .query(&mut con)
                    .unwrap_or_else(|e| panic!("ALLOW {}: {e}", keys.singles[i]));
                let want = seen.singles[i].allow(window, max, now, cost);
                assert_eq!(client::five(&got), Some(want), "ALLOW {}", keys.singles[i]);
            } else {
                let got: u64 = redis::cmd("SLIDINGWINDOW.REFUND")
                    .arg(&keys.singles[i])
                    .arg(cost)
                    .arg("AT")
                    .arg(now)
                    .query(&mut con)
                    .unwrap_or_else(|e| panic!("REFUND {}: {e}", keys.singles[i]));
                assert_eq!(
                    got,
                    seen.singles[i].refund(cost, Some(now)),
                    "REFUND {}",
                    keys.singles[i]
                );
                seen.refunded += got;
            }
        } else if op < 90 {
            let p = (rng.next() % keys.pairs.len() as u64) as usize;
            let now = tick(&mut rng, &mut clocks[singles + p]);
            let mut cmd = redis::cmd("SLIDINGWINDOW.ALLOWALL");
            cmd.arg(2)
                .arg(&keys.pairs[p][..])
                .arg(now)
                .arg("COST")
                .arg(cost);
            for (k, w, m) in PAIR_LIMITS {
                cmd.arg("LIMIT").arg(k + 1).arg(w).arg(m);
            }
            let got: Vec<i64> = cmd
                .query(&mut con)
                .unwrap_or_else(|e| panic!("ALLOWALL {:?}: {e}", keys.pairs[p]));
            let want = Model::allow_all(&mut seen.pairs[p], &PAIR_LIMITS, now, cost);
            assert_eq!(got, want, "ALLOWALL {:?} at {now}", keys.pairs[p]);
            seen.allowall_admitted += u64::from(got[0] == 1);
        } else {
            let s = (rng.next() % keys.stars.len() as u64) as usize;
            let got: Value = redis::cmd("SLIDINGWINDOW.ALLOW")
                .arg(&keys.stars[s])
                .arg(1)
                .arg(STAR_MAX)
                .arg("*")
                .arg("COST")
                .arg(cost)
                .arg("DETAIL")
                .query(&mut con)
                .unwrap_or_else(|e| panic!("ALLOW {} *: {e}", keys.stars[s]));
            let Value::Array(v) = &got else {
                panic!("ALLOW * DETAIL: {got:?}")
            };
            let int = |x: &Value| match x {
                Value::Int(n) => *n,
                other => panic!("ALLOW * DETAIL: {other:?} in {got:?}"),
            };
            assert_eq!(v.len(), 8, "ALLOW * DETAIL: {got:?}");
            if int(&v[0]) == 1 {
                seen.stars[s].push((int(&v[7]) as u64, cost));
            }
        }
        seen.calls += 1;
        calls.store(seen.calls, Ordering::SeqCst);
    }
    seen
}

/// The model of a log `Setup::logs` built with `calls` and `cost`.
fn log_model(calls: u64, cost: u64) -> Model {
    let mut m = Model::default();
    for j in 0..calls {
        m.scores.extend(std::iter::repeat_n(T0 + j, cost as usize));
    }
    m
}

/// Two of the big logs are driven too (the other two stay as built): their first trims remove
/// hundreds of thousands of requests at once.
fn driven(big: &[String]) -> Vec<(String, Model)> {
    big[..2]
        .iter()
        .map(|k| (k.clone(), log_model(BIG_CALLS, BIG_COST)))
        .collect()
}

/// Every driven key on `node` holds what the model of the admitted calls says (nothing lost,
/// nothing doubled), and no window of a star key's `now` held more than its max.
fn assert_seen(node: &Server, keys: &Keys, seen: &Seen) {
    let mut t = node.client();
    for (key, m) in keys.singles.iter().zip(&seen.singles) {
        assert_eq!(scores(&mut t, key), m.scores, "{key}");
    }
    for (pair, models) in keys.pairs.iter().zip(&seen.pairs) {
        for (key, m) in pair.iter().zip(models) {
            assert_eq!(scores(&mut t, key), m.scores, "{key}");
        }
    }
    for (key, admitted) in keys.stars.iter().zip(&seen.stars) {
        assert!(!admitted.is_empty(), "{key}: nothing admitted");
        assert_never_over(admitted, 1000, STAR_MAX, key);
    }
}

/// Moves a caller's clock on: mostly a few ms, sometimes past a window, now and then back.
fn tick(rng: &mut Rng, clock: &mut u64) -> u64 {
    *clock = match rng.next() % 100 {
        0..75 => *clock + rng.range(0, 3000),
        75..92 => *clock + rng.range(60_000, 200_000),
        _ => clock.saturating_sub(rng.range(0, 4000)),
    };
    *clock
}

/// No window of `window_ms` ending at an admitted call's `now` holds more than `max` requests.
fn assert_never_over(admitted: &[(u64, u64)], window_ms: u64, max: u64, key: &str) {
    let mut calls = admitted.to_vec();
    calls.sort_unstable();
    for &(t, _) in &calls {
        let held: u64 = calls
            .iter()
            .filter(|&&(u, _)| u + window_ms > t && u <= t)
            .map(|&(_, c)| c)
            .sum();
        assert!(
            held <= max,
            "{key}: {held} requests in the window ending at {t}"
        );
    }
}

/// Creates the traffic's keys: singles and pairs half on each storage (the storage config
/// decides a new key's), each by a first call its model records.
/// `driven` are logs built by `Setup::logs` the traffic drives too, with their models.
fn traffic_keys(setup: &Setup, driven: Vec<(String, Model)>) -> (Keys, Seen, Vec<u64>) {
    let mut keys = Keys {
        singles: Vec::new(),
        pairs: Vec::new(),
        stars: setup.names("star:", STARS),
    };
    let mut seen = Seen {
        singles: Vec::new(),
        pairs: Vec::new(),
        stars: vec![Vec::new(); STARS],
        calls: 0,
        refunded: 0,
        allowall_admitted: 0,
    };
    let mut con = setup.cluster.client();
    for storage in ["zset", "compact"] {
        setup.storage(storage);
        for key in setup.names(&format!("{storage}:s:"), SINGLES / 2) {
            let mut m = Model::default();
            let got: Value = q(
                &mut con,
                &["SLIDINGWINDOW.ALLOW", &key, "3600", "4", &T0.to_string()],
            );
            assert_eq!(client::five(&got), Some(m.allow(3600, 4, T0, 1)));
            keys.singles.push(key);
            seen.singles.push(m);
        }
        for tag in setup.names(&format!("{storage}:t"), PAIRS) {
            let pair = [format!("{{{tag}}}:u"), format!("{{{tag}}}")];
            let mut models = [Model::default(), Model::default()];
            for (key, m) in pair.iter().zip(&mut models) {
                let got: Value = q(
                    &mut con,
                    &["SLIDINGWINDOW.ALLOW", key, "3600", "100", &T0.to_string()],
                );
                assert_eq!(client::five(&got), Some(m.allow(3600, 100, T0, 1)));
            }
            keys.pairs.push(pair);
            seen.pairs.push(models);
        }
    }
    for (key, m) in driven {
        keys.singles.push(key);
        seen.singles.push(m);
    }
    let clocks = vec![T0 + BIG_CALLS; keys.singles.len() + keys.pairs.len()];
    (keys, seen, clocks)
}
