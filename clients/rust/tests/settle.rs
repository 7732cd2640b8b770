//! The settlement both services make of a request (`Ledger`), on the module path and the script
//! path: the lease scenarios of `spec/leases.json` replayed as one-key requests through a ledger
//! over a lease map (a permit from memory, the exact call where the lease sends the key to one, a
//! refusal from memory); a request refused by its exact call after a permit and an admitted
//! exact call gives the permit back and refunds the charge; a permit found late is taken back
//! with the exact charge; a charge made with `PRECISION` is refunded at its rounded score.

use testkit::harness;
mod support;

use serde_json::Value as Json;
use slidingwindow_client::{
    Batch, Check, Client, Clock, Leasable, LeaseConfig, LeaseMap, LeaseMapConfig, Ledger, Limit,
    Now, OnRefusal, Reply, Stopped, unix_ms,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::{client, lease_spec, limit, paths, scenario};

/// Steps whose `allowed`, `count` or `remaining` the crate's lease answers otherwise by design
/// (tests/spec_leases.rs says why): a lease found ended before its timer fired is refunded after
/// the next lease call, whose reply so counts its unused permits.
const OTHERWISE: &[(&str, usize)] = &[(
    "a lease that ended gives its unused permits back before the next",
    2,
)];

/// Every score `key`'s sorted set holds, sorted (the `zset` storage on both paths).
fn logged(s: &harness::Server, key: &str) -> Vec<u64> {
    let scored: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut s.client())
        .expect("ZRANGE");
    scored.into_iter().map(|(_, score)| score as u64).collect()
}

/// `[allowed, count, remaining]`.
fn three(r: &Reply) -> Json {
    Json::from(vec![
        Json::from(u8::from(r.allowed)),
        Json::from(r.count),
        Json::from(r.remaining),
    ])
}

/// One request on `key` alone, settled through a ledger at `at` (the map's clock): a permit,
/// else the exact call the lease sends it to, else the lease's refusal from memory.
async fn one_request(c: &Client, map: &LeaseMap, key: &[u8], limits: &[Limit], at: u64) -> Reply {
    let mut ledger = Ledger::new("test");
    let leasable = [Leasable {
        index: 0,
        map,
        key,
        limits,
    }];
    let pass = ledger.try_take(&leasable, OnRefusal::Refuse);
    let deadline = Instant::now() + Duration::from_secs(5);
    match ledger
        .take(&leasable, OnRefusal::Refuse, deadline, pass)
        .await
    {
        // Admitted with its permit: the ledger is dropped, the permit spent.
        Ok(()) => match ledger.permits().first() {
            Some(p) => p.reply.reply.clone(),
            None => c
                .allow(&Check::new(key, limits).now(Now::Ms(at)))
                .await
                .expect("the exact call"),
        },
        Err(Stopped::Refused(0, r)) => r.reply,
        Err(Stopped::Refused(i, _)) => panic!("a refusal for key {i}"),
        Err(Stopped::Failed(e)) => panic!("taking a permit: {e}"),
        Err(Stopped::TimedOut) => panic!("no lease within 5 s"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_lease_scenarios_as_requests() {
    let spec = lease_spec();
    let t0 = spec["t0"].as_u64().unwrap();
    let mut failures = Vec::new();
    let mut replayed = 0;
    for (path, s) in &paths(&["zset"]) {
        let c = client(s);
        for (i, sc) in spec["scenarios"].as_array().unwrap().iter().enumerate() {
            let name = sc["name"].as_str().unwrap();
            let steps = sc["steps"].as_array().unwrap();
            // Other clients' calls and invalid leases are the lease object's own spec.
            if sc["invalid"].as_bool().unwrap_or(false) || steps.iter().any(|s| s["op"] == "call") {
                continue;
            }
            let tag = format!("{{settle{}-{path}-{i}}}", std::process::id());
            let (key, limits) = scenario(sc, &tag);
            let time = Arc::new(AtomicU64::new(t0));
            let read = time.clone();
            let (size, ms) = (
                sc["size"].as_u64().unwrap(),
                sc["duration_ms"].as_u64().unwrap(),
            );
            let lease = LeaseConfig::new(size, ms)
                .clock(Clock::Own(Arc::new(move || read.load(Ordering::Relaxed))));
            let map = LeaseMap::new(c.clone(), LeaseMapConfig::new(size, ms).lease(lease))
                .expect("a lease map");
            for (j, step) in steps.iter().enumerate() {
                if step["op"] != "allow" || OTHERWISE.contains(&(name, j)) {
                    continue;
                }
                let at = t0 + step["at"].as_u64().unwrap();
                time.store(at, Ordering::Relaxed);
                let r = one_request(&c, &map, key.as_bytes(), &limits, at).await;
                let want = Json::from(step["reply"].as_array().unwrap()[..3].to_vec());
                if three(&r) != want {
                    failures.push(format!(
                        "{path}: {name}: step {j}: want {want}, got {}",
                        three(&r)
                    ));
                }
                replayed += 1;
            }
            map.close_all().await.expect("close");
        }
    }
    assert!(replayed > 0, "no step replayed");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A map of leases of `size` for a minute, on the server's clock, leasing quiet keys too.
fn leases(c: &Client, size: u64) -> LeaseMap {
    let lease = LeaseConfig::new(size, 60_000);
    LeaseMap::new(c.clone(), LeaseMapConfig::new(size, 60_000).lease(lease)).expect("a lease map")
}

/// A permit from `map` for key `index` of a request, waited for.
async fn permit(ledger: &mut Ledger, map: &LeaseMap, index: usize, key: &[u8]) {
    let limits = [limit(60, 100)];
    let leasable = [Leasable {
        index,
        map,
        key,
        limits: &limits,
    }];
    let pass = ledger.try_take(&leasable, OnRefusal::Refuse);
    let deadline = Instant::now() + Duration::from_secs(5);
    assert!(
        ledger
            .take(&leasable, OnRefusal::Refuse, deadline, pass)
            .await
            .is_ok()
    );
    assert!(ledger.holds(index), "a permit for key {index}");
}

#[tokio::test(flavor = "current_thread")]
async fn all_or_none() {
    for (path, s) in &paths(&["zset"]) {
        let c = client(s);
        let map = leases(&c, 10);
        let keys: Vec<String> = ["leased", "admits", "full"]
            .iter()
            .map(|k| format!("{{settle-{path}}}:{k}"))
            .collect();
        let key = |i: usize| keys.get(i).map(String::as_bytes);
        let one = [limit(60, 1)];
        // The third key is full before the request.
        assert!(
            c.allow(&Check::new(key(2).unwrap(), &one))
                .await
                .unwrap()
                .allowed
        );
        let mut ledger = Ledger::new("test");
        permit(&mut ledger, &map, 0, key(0).unwrap()).await;
        let admitted = c
            .allow(&Check::new(key(1).unwrap(), &one).detail(true))
            .await
            .unwrap();
        assert!(admitted.allowed, "{path}");
        let now = admitted.detail.expect("DETAIL").now_ms;
        ledger.charged(1, 0, now, 1, None);
        let refused = c.allow(&Check::new(key(2).unwrap(), &one)).await.unwrap();
        assert!(!refused.allowed, "{path}");
        assert!(!ledger.late(), "{path}: the lease lasts a minute");
        ledger.undo(&c, Batch::pipeline, key).await.unwrap();
        assert_eq!(logged(s, &keys[1]), Vec::<u64>::new(), "{path}: refunded");
        assert_eq!(
            logged(s, &keys[2]).len(),
            1,
            "{path}: the full key untouched"
        );
        // The permit went back into its lease: closing returns all ten.
        assert_eq!(map.close_all().await.unwrap(), 10, "{path}");
        assert_eq!(logged(s, &keys[0]), Vec::<u64>::new(), "{path}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_late_permit_is_taken_back() {
    for (path, s) in &paths(&["zset"]) {
        let c = client(s);
        let t = unix_ms();
        let time = Arc::new(AtomicU64::new(t));
        let read = time.clone();
        let lease = LeaseConfig::new(5, 1000)
            .clock(Clock::Own(Arc::new(move || read.load(Ordering::Relaxed))));
        let map = LeaseMap::new(c.clone(), LeaseMapConfig::new(5, 1000).lease(lease)).unwrap();
        let keys = [format!("{{late-{path}}}:a"), format!("{{late-{path}}}:b")];
        let key = |i: usize| keys.get(i).map(String::as_bytes);
        let mut ledger = Ledger::new("test");
        permit(&mut ledger, &map, 0, key(0).unwrap()).await;
        // The exact call is decided when the lease has ended (its permits logged then).
        let limits = [limit(60, 100)];
        let at = t + 1000;
        let r = c
            .allow(&Check::new(key(1).unwrap(), &limits).now(Now::Ms(at)))
            .await
            .unwrap();
        assert!(r.allowed, "{path}");
        ledger.charged(1, 0, at, 1, None);
        assert!(ledger.late(), "{path}");
        ledger.undo(&c, Batch::transaction, key).await.unwrap();
        assert!(ledger.permits().is_empty(), "{path}");
        assert_eq!(logged(s, &keys[1]), Vec::<u64>::new(), "{path}");
        map.close_all().await.unwrap();
        assert_eq!(logged(s, &keys[0]), Vec::<u64>::new(), "{path}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn refunds_at_the_rounded_score() {
    for (path, s) in &paths(&["zset"]) {
        let c = client(s);
        let key = format!("{{precise-{path}}}");
        let limits = [limit(60, 100)];
        let now = unix_ms() / 1000 * 1000 + 1;
        let check = Check::new(key.as_bytes(), &limits)
            .now(Now::Ms(now))
            .precision(Some(1000));
        // An older request at the same key stays.
        let older = Check::new(key.as_bytes(), &limits).now(Now::Ms(now - 1));
        assert!(c.allow(&older).await.unwrap().allowed);
        assert!(c.allow(&check).await.unwrap().allowed);
        assert_eq!(logged(s, &key), [now - 1, now + 999], "{path}");
        let mut ledger = Ledger::new("test");
        ledger.charged(0, 0, now, 1, Some(1000));
        let mut batch = Batch::transaction();
        ledger
            .refunds(&mut batch, |_| true, |_| Some(key.as_bytes()))
            .unwrap();
        let answers = c.exec(&batch).await.unwrap();
        assert_eq!(answers.len(), 1);
        assert_eq!(
            answers
                .into_iter()
                .next()
                .unwrap()
                .unwrap()
                .removed()
                .unwrap(),
            1
        );
        assert_eq!(logged(s, &key), [now - 1], "{path}");
    }
}
