//! End to end, `--global-limit` and `--lease`: a busy shared key leased and a quiet one exact,
//! a tenant's permit taken from its lease only when the identity's own exact call admits (a
//! request charged to every key or to none), a lease refused near the limit, unused permits
//! back at each lease's end and on SIGTERM, the admission log on Redis's clock, no lateness
//! needed (the module's defaults). Each on a server with the module and on one without it.

use testkit::harness;
mod support;

use harness::{STARTUP_DEADLINE, Server, server_time_ms, wait_until};
use support::*;

fn temp_path(name: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "http-gateway-{name}-{}-{nanos}.log",
        std::process::id()
    ))
}

fn a_global_limit_is_one_key_for_all_traffic(redis: Server) {
    let gw = Gateway::start(&redis, &["--limit", "2/60s", "--global-limit", "3/60s"]);
    let r = gw.get(Some("a"));
    assert_eq!(
        policy(r.header("ratelimit-policy").unwrap_or_default()),
        [("l0".to_string(), 2, 60), ("g0".to_string(), 3, 60)]
    );
    assert_eq!(r.ratelimit(), ("l0".to_string(), 1, 60));
    assert_eq!(gw.get(Some("a")).ratelimit(), ("l0".to_string(), 0, 60));
    // Refused by its own limit: the global key is not charged.
    assert_eq!(gw.get(Some("a")).status, 429);
    assert_eq!(zcard(&redis, "rl:global"), 2);
    assert_eq!(gw.get(Some("b")).ratelimit(), ("g0".to_string(), 0, 60));
    let r = gw.get(Some("c"));
    assert_eq!((r.status, r.json()["limit"].clone()), (429, "g0".into()));
    assert_eq!(zcard(&redis, "rl:{c}"), 0, "all or nothing");
    // One gateway's charges are every gateway's.
    let other = Gateway::start(&redis, &["--global-limit", "3/60s"]);
    assert_eq!(other.get(Some("d")).status, 429);
}

fn a_busy_global_key_is_leased_and_its_unused_permits_come_back_on_sigterm(redis: Server) {
    let log = temp_path("admissions");
    let mut gw = Gateway::start(
        &redis,
        &[
            "--global-limit",
            "1000/60s",
            "--lease",
            "10/60s",
            "--admission-log",
            log.to_str().unwrap(),
        ],
    );
    let before = server_time_ms(&mut redis.client());
    // Nine requests in a minute do not fill a lease of 10: each is one exact call.
    for i in 1..=9 {
        assert_eq!(
            gw.get(Some("x")).ratelimit(),
            ("g0".to_string(), 1000 - i, 60)
        );
    }
    assert_eq!(limiter_calls(&redis), 9);
    // The tenth fills one: a lease of 10 is taken (one call), then five more from memory.
    for i in 10..=15 {
        let r = gw.get(Some("x"));
        assert_eq!(r.status, 200, "{r:?}");
        // Counted as an exact call would count it, the lease's own permits free until used; the
        // window empties a minute after the lease's end.
        assert_eq!(
            r.ratelimit(),
            ("g0".to_string(), 1000 - i, 120),
            "request {i}"
        );
    }
    assert_eq!(limiter_calls(&redis), 10);
    assert_eq!(zcard(&redis, "rl:global"), 19, "the lease is logged whole");
    let status = gw.terminate();
    assert!(status.success(), "{status:?}\n{}", gw.log());
    gw.assert_logged("gateway: leases closed, 4 unused permits given back");
    assert_eq!(
        zcard(&redis, "rl:global"),
        15,
        "4 unused permits given back"
    );
    // The admission log: one line per admitted request, its time and first key.
    let text = std::fs::read_to_string(&log).unwrap();
    let after = server_time_ms(&mut redis.client());
    let lines: Vec<(i64, &str)> = text
        .lines()
        .map(|l| {
            let (t, key) = l.split_once(' ').expect("<ms> <key>");
            (t.parse().expect("ms"), key)
        })
        .collect();
    assert_eq!(lines.len(), 15, "{text}");
    assert!(
        lines
            .iter()
            .all(|&(t, key)| key == "rl:global" && before <= t && t <= after),
        "{text}"
    );
    let _ = std::fs::remove_file(&log);
    // No lateness warning: the gateway needs none.
    assert!(!gw.log().contains("lateness"), "{}", gw.log());
}

fn a_lease_ends_and_gives_its_unused_permits_back(redis: Server) {
    let gw = Gateway::start(
        &redis,
        &["--global-limit", "1000/60s", "--lease", "5/300ms"],
    );
    for _ in 0..5 {
        assert_eq!(gw.get(Some("y")).status, 200);
    }
    // Four exact calls, then a lease of 5 whose first permit is the fifth request's; 300 ms
    // later its 4 unused permits go back.
    assert_eq!(limiter_calls(&redis), 5);
    wait_until(STARTUP_DEADLINE, "the lease's end", || {
        zcard(&redis, "rl:global") == 5
    });
}

fn a_tenants_permit_comes_from_its_lease_only_when_the_identity_admits(redis: Server) {
    let mut gw = Gateway::cli(
        &redis,
        "--limit 2/60s --tenant-header x-tenant --tenant-limit 100/60s --lease 5/60s --on-redis-error closed",
    );
    let get = |who: &str| gw.get_with("/", &[("x-tenant", "acme"), ("x-api-key", who)]);
    // Four requests: one ALLOWALL each on both keys.
    for who in ["u1", "u1", "u2", "u2"] {
        assert_eq!(get(who).status, 200);
    }
    assert_eq!(limiter_calls(&redis), 4);
    // The fifth fills a lease: the tenant's 5 permits in one call, then u3's own exact ALLOW.
    let r = get("u3");
    assert_eq!(r.status, 200, "{r:?}\n{}", gw.log());
    assert_eq!(r.ratelimit(), ("l0".to_string(), 1, 60));
    assert_eq!(limiter_calls(&redis), 6);
    assert_eq!(zcard(&redis, "rl:{acme}"), 4 + 5);
    assert_eq!(get("u3").status, 200);
    assert_eq!(
        limiter_calls(&redis),
        7,
        "one call: the tenant's permit from memory"
    );
    // u3's own limit refuses: its tenant permit goes back into the lease, charged to neither.
    let r = get("u3");
    assert_eq!((r.status, r.json()["limit"].clone()), (429, "l0".into()));
    assert_eq!(zcard(&redis, "rl:{acme}:u3"), 2);
    // The permit given back is handed out again: u4's request takes the third of five.
    assert_eq!(get("u4").status, 200);
    assert!(gw.terminate().success());
    gw.assert_logged("gateway: leases closed, 2 unused permits given back");
    // Exactly what was admitted: 4 exact, 3 from the lease.
    assert_eq!(zcard(&redis, "rl:{acme}"), 7);
    let identities: i64 = ["u1", "u2", "u3", "u4"]
        .iter()
        .map(|u| zcard(&redis, &format!("rl:{{acme}}:{u}")))
        .sum();
    assert_eq!(identities, 7);
}

fn near_the_tenants_limit_its_lease_is_refused_and_the_rest_answered_from_memory(redis: Server) {
    let gw = Gateway::cli(
        &redis,
        "--limit 100/60s --tenant-header x-tenant --tenant-limit 6/60s --lease 5/60s",
    );
    let get = |who: &str| gw.get_with("/", &[("x-tenant", "acme"), ("x-api-key", who)]);
    let statuses: Vec<u16> = (0..8).map(|i| get(&format!("u{i}")).status).collect();
    // Four exact, a lease of 5 that does not fit (4 + 5 > 6) with room for 2, so two more exact,
    // then the tenant's lease refuses from memory: every last permit handed out, none twice, and
    // refused requests charge no one (and cost no call).
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 429, 429]);
    assert_eq!(limiter_calls(&redis), 4 + 1 + 2);
    assert_eq!(zcard(&redis, "rl:{acme}"), 6);
    for i in 0..8 {
        assert_eq!(
            zcard(&redis, &format!("rl:{{acme}}:u{i}")),
            i64::from(i < 6)
        );
    }
}

fn every_call_is_on_redis_clock(redis: Server) {
    let gw = Gateway::start(&redis, &["--global-limit", "10/60s", "--lease", "5/60s"]);
    let before = server_time_ms(&mut redis.client());
    for _ in 0..6 {
        assert_eq!(gw.get(Some("x")).status, 200);
    }
    let after = server_time_ms(&mut redis.client());
    // Four exact calls at Redis's `now`, then a lease logged at its end, Redis's `now` + 60 s.
    let times: Vec<i64> = scores(&mut redis.client(), "rl:global")
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(times.len(), 9, "{times:?}");
    assert!(
        times[..4].iter().all(|&t| before <= t && t <= after),
        "{times:?}"
    );
    assert!(
        times[4..]
            .iter()
            .all(|&t| before + 60_000 <= t && t <= after + 60_000),
        "{times:?}"
    );
    assert!(!gw.log().contains("lateness"), "{}", gw.log());
}

#[test]
fn a_lease_that_cannot_fit_a_limit_is_refused_at_start() {
    for (args, error) in [
        (
            &["--global-limit", "50/1s", "--lease", "100/100ms"][..],
            "--lease 100/100ms: a lease must fit every leased limit (the smallest max is 50)",
        ),
        (
            &["--limit", "50/1s", "--lease", "10/100ms"],
            "--lease leases --global-limit and --tenant-limit keys: give one",
        ),
    ] {
        let out = std::process::Command::new(support::binary())
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(error), "{stderr}");
    }
}

on_both_backends!(
    a_busy_global_key_is_leased_and_its_unused_permits_come_back_on_sigterm,
    a_lease_ends_and_gives_its_unused_permits_back,
    a_tenants_permit_comes_from_its_lease_only_when_the_identity_admits,
    near_the_tenants_limit_its_lease_is_refused_and_the_rest_answered_from_memory,
    a_global_limit_is_one_key_for_all_traffic,
    every_call_is_on_redis_clock,
);
