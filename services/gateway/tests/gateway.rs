//! End to end: a real redis-server with the module and one without it (the shared harness), the
//! gateway binary as its own process on a free port, and a real HTTP client: limits, tenants, the
//! deny cache, cluster mode, precision. Failures are in failures.rs, identities in identities.rs.

use testkit::harness;
mod support;

use harness::{Builder, STARTUP_DEADLINE, Server, server_time_ms, wait_until};
use std::io::{Read, Write};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::*;

#[test]
fn a_burst_gets_exactly_max_then_429_with_retry_after() {
    burst(
        Server::start(),
        "module (auto: the server has the slidingwindow module)",
    );
}

/// The same on a server without the module, the gateway started with no backend flag.
#[test]
fn a_burst_without_the_module_gets_exactly_max_then_429() {
    burst(Server::start_without_module(), "script (auto: ");
}

/// `backend`: what the gateway's start-up line says after `gateway: backend `.
fn burst(redis: Server, backend: &str) {
    let gw = Gateway::start(&redis, &["--limit", "5/60s"]);
    gw.assert_logged(&format!("gateway: backend {backend}"));
    for left in (0..5).rev() {
        let r = gw.get(Some("alice"));
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, "ok\n");
        assert_eq!(
            policy(r.header("ratelimit-policy").unwrap_or_default()),
            [("l0".to_string(), 5, 60)]
        );
        // t: the window empties one full window after this, the newest request.
        assert_eq!(r.ratelimit(), ("l0".to_string(), left, 60));
    }
    let mut con = redis.client();
    let scores: Vec<(String, i64)> = scores(&mut con, "rl:{alice}");
    let (oldest, newest) = (scores[0].1, scores[4].1);
    let before = server_time_ms(&mut con);
    let r = gw.get(Some("alice"));
    let after = server_time_ms(&mut con);
    assert_eq!(r.status, 429, "{r:?}");
    let body = r.json();
    assert_eq!(body["error"], "rate limited");
    assert_eq!(body["limit"], "l0");
    // The refused request was handled at some instant in [before, after]: its wait is the
    // oldest request's exit from the window, seen from then.
    let retry = body["retry_after_ms"].as_i64().expect("retry_after_ms");
    assert!(
        oldest + 60_000 - after <= retry && retry <= oldest + 60_000 - before,
        "{retry}"
    );
    assert_eq!(
        r.header("retry-after"),
        Some(seconds_up(retry).to_string().as_str())
    );
    let (name, remaining, t) = r.ratelimit();
    assert_eq!((name.as_str(), remaining), ("l0", 0));
    // t: the window empties when the newest request leaves it.
    assert!(
        seconds_up(newest + 60_000 - after) <= t && t <= seconds_up(newest + 60_000 - before),
        "{t}"
    );
    let members: i64 = redis::cmd("ZCARD")
        .arg("rl:{alice}")
        .query(&mut con)
        .unwrap();
    assert_eq!(members, 5, "a refused request is not logged");

    // Other identities are independent: another key, and no key (the client's IP).
    assert_eq!(gw.get(Some("bob")).ratelimit(), ("l0".to_string(), 4, 60));
    assert_eq!(gw.get(None).ratelimit(), ("l0".to_string(), 4, 60));
    let ip: i64 = redis::cmd("ZCARD")
        .arg("rl:{127.0.0.1}")
        .query(&mut con)
        .unwrap();
    assert_eq!(ip, 1);
}

fn a_second_limit_binds_when_the_first_has_room(redis: Server) {
    // Closed: a server that refuses the LIMIT option answers 503 here, not an unlimited 200.
    let gw = Gateway::cli(
        &redis,
        "--limit 10/1s --limit 3/60s --on-redis-error closed",
    );
    for left in (0..3).rev() {
        let r = gw.get(Some("carol"));
        assert_eq!(r.status, 200, "{r:?}\n{}", gw.log());
        assert_eq!(
            policy(r.header("ratelimit-policy").unwrap_or_default()),
            [("l0".to_string(), 10, 1), ("l1".to_string(), 3, 60)]
        );
        assert_eq!(r.ratelimit(), ("l1".to_string(), left, 60));
    }
    let r = gw.get(Some("carol"));
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.json()["limit"], "l1");
    assert_eq!(r.ratelimit().0, "l1");
    let retry_after: i64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
}

fn admitted_requests_reach_the_upstream_refused_ones_do_not(redis: Server) {
    let (up, hits) = upstream("HTTP/1.1");
    let gw = Gateway::start(&redis, &["--limit", "1/60s", "--upstream", &up]);
    let r = gw.get_path("/hello?x=1", Some("erin"));
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.body, "GET /base/hello?x=1 HTTP/1.1 xff=127.0.0.1");
    assert_eq!(r.header("x-upstream"), Some("yes"));
    assert_eq!(r.ratelimit(), ("l0".to_string(), 0, 60));
    assert_eq!(gw.get_path("/hello", Some("erin")).status, 429);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[test]
fn without_limits_nothing_is_limited() {
    let redis = Server::start();
    let gw = Gateway::start(&redis, &[]);
    for _ in 0..3 {
        let r = gw.get(Some("frank"));
        assert_eq!((r.status, r.header("ratelimit")), (200, None));
    }
    assert!(gw.log().contains("not rate limited"));
}

/// A one-node cluster holding every slot, started from `server`: the cluster client's routing, on
/// one process.
fn one_node_cluster(server: Builder) -> Server {
    let redis = server.cluster().start();
    let mut con = redis.client();
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut con)
        .unwrap();
    wait_until(STARTUP_DEADLINE, "cluster_state:ok", || {
        redis.info_field("cluster", "cluster_enabled").as_deref() == Some("1")
            && redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(&mut con)
                .unwrap()
                .contains("cluster_state:ok")
    });
    redis
}

fn cluster_mode(server: Builder) {
    let redis = one_node_cluster(server);
    let url = redis.url();
    let gw = Gateway::start_with(&["--cluster", "--redis", &url, "--limit", "2/60s"]);
    gw.assert_auto_backend(&redis);
    assert_eq!(gw.get(Some("gina")).ratelimit(), ("l0".to_string(), 1, 60));
    assert_eq!(gw.get(Some("gina")).ratelimit(), ("l0".to_string(), 0, 60));
    assert_eq!(gw.get(Some("gina")).status, 429);
}

fn refused_identities_are_answered_from_memory_until_their_retry_time(redis: Server) {
    let gw = Gateway::start(&redis, &["--limit", "2/2s"]);
    for _ in 0..2 {
        assert_eq!(gw.get(Some("ivan")).status, 200);
    }
    let first = gw.get(Some("ivan"));
    assert_eq!(first.status, 429, "{first:?}");
    assert_eq!(limiter_calls(&redis), 3);
    let mut last = retry_after_ms(&first);
    assert!((1..=2000).contains(&last), "{last}");
    // The next refusals come from memory: no call, and headers counting down from the cached
    // refusal.
    for _ in 0..5 {
        let r = gw.get(Some("ivan"));
        assert_eq!(r.status, 429, "{r:?}");
        let retry = retry_after_ms(&r);
        assert!(0 < retry && retry <= last, "{retry} after {last}");
        assert_eq!(
            r.header("retry-after"),
            Some(seconds_up(retry).to_string().as_str())
        );
        let (name, remaining, t) = r.ratelimit();
        assert_eq!((name.as_str(), remaining), ("l0", 0));
        assert!(seconds_up(retry) <= t && t <= 2, "t={t} retry={retry}");
        assert_eq!(r.json()["limit"], "l0");
        last = retry;
    }
    assert_eq!(limiter_calls(&redis), 3, "no Redis call while refused");
    // Another identity is not affected.
    assert_eq!(gw.get(Some("jane")).status, 200);
    // Once the wait is over Redis is asked again, and admits.
    wait_until(STARTUP_DEADLINE, "ivan to be admitted again", || {
        gw.get(Some("ivan")).status == 200
    });
    assert!(limiter_calls(&redis) > 4);
}

fn without_the_deny_cache_every_refusal_asks_redis(redis: Server) {
    let gw = Gateway::start(&redis, &["--limit", "1/60s", "--deny-cache", "off"]);
    assert_eq!(gw.get(Some("ivan")).status, 200);
    for _ in 0..3 {
        assert_eq!(gw.get(Some("ivan")).status, 429);
    }
    assert_eq!(limiter_calls(&redis), 1 + 3);
}

fn tenants_are_limited_as_a_whole_in_one_call(redis: Server) {
    let gw = Gateway::cli(
        &redis,
        "--limit 2/60s --tenant-header x-tenant --tenant-limit 3/60s --on-redis-error closed",
    );
    let get =
        |tenant: &str, key: &str| gw.get_with("/", &[("x-tenant", tenant), ("x-api-key", key)]);
    for bad in [&[("x-api-key", "u1")][..], &[("x-tenant", "a}b")]] {
        let r = gw.get_with("/", bad);
        assert_eq!(r.status, 400, "{r:?}");
        assert_eq!(r.json()["header"], "x-tenant");
    }
    let r = get("acme", "u1");
    assert_eq!(r.status, 200, "{r:?}\n{}", gw.log());
    assert_eq!(
        policy(r.header("ratelimit-policy").unwrap_or_default()),
        [("l0".to_string(), 2, 60), ("t0".to_string(), 3, 60)]
    );
    // The identity's limit binds while the tenant has more room.
    assert_eq!(r.ratelimit(), ("l0".to_string(), 1, 60));
    assert_eq!(get("acme", "u1").ratelimit(), ("l0".to_string(), 0, 60));
    let r = get("acme", "u1");
    assert_eq!((r.status, r.json()["limit"].clone()), (429, "l0".into()));
    // Another identity of the tenant: its own limit has room, the tenant's binds.
    assert_eq!(get("acme", "u2").ratelimit(), ("t0".to_string(), 0, 60));
    let r = get("acme", "u3");
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.json()["limit"], "t0");
    assert_eq!(r.ratelimit().0, "t0");
    // All or nothing: the refused request charged neither key.
    assert_eq!(zcard(&redis, "rl:{acme}:u3"), 0);
    assert_eq!(zcard(&redis, "rl:{acme}:u1"), 2);
    assert_eq!(zcard(&redis, "rl:{acme}"), 3);
    // Another tenant is independent, even for the same identity.
    assert_eq!(get("globex", "u1").ratelimit(), ("l0".to_string(), 1, 60));
    assert_eq!(zcard(&redis, "rl:{globex}"), 1);
}

fn answers_in_the_clients_http_version_and_appends_to_x_forwarded_for(redis: Server) {
    let (up, _) = upstream("HTTP/1.0");
    let gw = Gateway::start(&redis, &["--limit", "10/60s", "--upstream", &up]);
    let r = gw.get_with(
        "/v",
        &[("x-api-key", "lena"), ("x-forwarded-for", "203.0.113.7")],
    );
    assert_eq!(r.status, 201, "{r:?}");
    // One X-Forwarded-For line at the upstream, the client's list with its address appended.
    assert_eq!(r.body, "GET /base/v HTTP/1.1 xff=203.0.113.7, 127.0.0.1");
    // An HTTP/1.1 client gets HTTP/1.1 from behind an HTTP/1.0 upstream, an HTTP/1.0 one HTTP/1.0.
    for version in ["HTTP/1.1", "HTTP/1.0"] {
        let addr = gw.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET /v {version}\r\nhost: {addr}\r\nx-api-key: lena\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(
            text.starts_with(&format!("{version} 201 ")),
            "{version}: {text}"
        );
    }
}

#[test]
fn a_limit_without_a_unit_is_refused() {
    for (limit, exit_ok) in [("10/1", false), ("10/1x", false), ("10/1s", true)] {
        let out = Command::new(binary())
            .args(["--limit", limit, "--help"])
            .output()
            .expect("run the gateway");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), exit_ok, "{limit}: {stderr}");
        if !exit_ok {
            assert_eq!(out.status.code(), Some(2), "{limit}");
            assert!(
                stderr.contains(&format!(
                    "\"{limit}\": expected MAX/WINDOW such as 10/1s, 100/1m, 5000/1h or 20000/1d"
                )),
                "{limit}: {stderr}"
            );
        }
    }
}

fn the_deny_cache_is_bounded_in_bytes(redis: Server) {
    // 1 KB: a handful of entries. Twenty identities refused once each, then asked again: the
    // ones the cache could not keep ask Redis again.
    let small = Gateway::start(&redis, &["--limit", "1/60s", "--deny-cache-bytes", "1024"]);
    let ids: Vec<String> = (0..20).map(|i| format!("small-{i}")).collect();
    for id in &ids {
        assert_eq!(small.get(Some(id)).status, 200);
        assert_eq!(small.get(Some(id)).status, 429);
    }
    // Each identity's admission and refusal.
    let before = limiter_calls(&redis);
    assert_eq!(before, 40);
    for id in &ids {
        assert_eq!(small.get(Some(id)).status, 429);
    }
    let asked = limiter_calls(&redis) - before;
    assert!(asked >= 10, "only {asked} of 20 refusals asked Redis again");
    // The default (16 MiB) keeps them all.
    let big = Gateway::start(&redis, &["--limit", "1/60s"]);
    let ids: Vec<String> = (0..20).map(|i| format!("big-{i}")).collect();
    for id in &ids {
        assert_eq!(big.get(Some(id)).status, 200);
        assert_eq!(big.get(Some(id)).status, 429);
    }
    let before = limiter_calls(&redis);
    for id in &ids {
        assert_eq!(big.get(Some(id)).status, 429);
    }
    assert_eq!(limiter_calls(&redis), before, "every refusal from memory");
}

fn cluster_mode_with_a_global_limit(server: Builder) {
    // The global key has a slot of its own: its own call, first, taken back when the identity's
    // then refuses.
    let redis = one_node_cluster(server);
    let url = redis.url();
    let gw = Gateway::start_with(&[
        "--cluster",
        "--redis",
        &url,
        "--limit",
        "2/60s",
        "--global-limit",
        "3/60s",
        "--on-redis-error",
        "closed",
    ]);
    gw.assert_auto_backend(&redis);
    assert_eq!(gw.get(Some("gina")).ratelimit(), ("l0".to_string(), 1, 60));
    assert_eq!(gw.get(Some("gina")).ratelimit(), ("l0".to_string(), 0, 60));
    let r = gw.get(Some("gina"));
    assert_eq!(
        (r.status, r.ratelimit().0.as_str()),
        (429, "l0"),
        "{r:?}\n{}",
        gw.log()
    );
    wait_until(STARTUP_DEADLINE, "the global charge back", || {
        zcard(&redis, "rl:global") == 2
    });
    assert_eq!(gw.get(Some("hal")).ratelimit(), ("g0".to_string(), 0, 60));
    let r = gw.get(Some("ivy"));
    assert_eq!((r.status, r.ratelimit().0.as_str()), (429, "g0"));
    assert_eq!(zcard(&redis, "rl:{ivy}"), 0);
}

/// A 3-master cluster (each master with a replica) without the module, every master a seed:
/// identities on each master are limited exactly, and a tenant's keys (one hash tag, one slot)
/// are charged all or none by the script.
#[test]
fn a_three_master_cluster_without_the_module() {
    let cluster = testkit::cluster::Cluster::start_without_module();
    let urls: Vec<String> = cluster.nodes.iter().map(Server::url).collect();
    let start = |line: &str| {
        let mut args = vec!["--cluster", "--on-redis-error", "closed"];
        for url in &urls {
            args.extend(["--redis", url.as_str()]);
        }
        let gw = Gateway::start_with(&[args, line.split(' ').collect()].concat());
        gw.assert_logged("gateway: backend script (auto: ");
        gw
    };
    let mut con = cluster.client();
    let mut zcard = |key: &str| -> i64 { redis::cmd("ZCARD").arg(key).query(&mut con).unwrap() };
    // Identities whose keys are on the three masters (slots 15,495, 3,300 and 7,365).
    let gw = start("--limit 2/60s");
    for who in ["a", "b", "c"] {
        let got: Vec<u16> = (0..3).map(|_| gw.get(Some(who)).status).collect();
        assert_eq!(got, [200, 200, 429], "{who}\n{}", gw.log());
        assert_eq!(zcard(&format!("rl:{{{who}}}")), 2);
    }
    let gw = start("--limit 2/60s --tenant-header x-tenant --tenant-limit 3/60s");
    let get = |key: &str| gw.get_with("/", &[("x-tenant", "acme"), ("x-api-key", key)]);
    assert_eq!(get("u1").ratelimit(), ("l0".to_string(), 1, 60));
    assert_eq!(get("u2").ratelimit(), ("l0".to_string(), 1, 60));
    assert_eq!(get("u3").ratelimit(), ("t0".to_string(), 0, 60));
    let r = get("u4");
    assert_eq!((r.status, r.ratelimit().0.as_str()), (429, "t0"), "{r:?}");
    // The refused request charged neither the tenant's key nor the identity's.
    assert_eq!(zcard("rl:{acme}:u4"), 0);
    assert_eq!(zcard("rl:{acme}"), 3);
}

#[test]
fn a_bad_precision_is_refused() {
    for bad in ["0", "9007199254740993", "1s", ""] {
        let out = Command::new(binary())
            .args(["--limit", "10/1s", "--precision", bad])
            .output()
            .expect("run the gateway");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--precision"), "{bad}: {stderr}");
    }
}

/// `--precision` logs admitted requests at Redis's `now` rounded up, and a refund takes back the
/// request at its rounded score (an older request stays); on the sorted-set storage the gateway
/// warns at start that it saves nothing there.
#[test]
fn precision_rounds_the_scores_refunds_them_and_warns_on_zset() {
    let (up, _) = upstream("HTTP/1.1");
    for storage in ["zset", "compact"] {
        let redis = Server::builder().storage(storage).start();
        let args = ["--limit", "10/60s", "--precision", "1000"];
        let more = ["--refund-on", "5xx", "--upstream", &up];
        let gw = Gateway::start(&redis, &[&args[..], &more[..]].concat());
        let warned = gw
            .log()
            .contains("warning: --precision 1000: slidingwindow.storage is zset");
        assert_eq!(warned, storage == "zset", "{storage}: {}", gw.log());
        // An older request, not on a multiple of 1000.
        let mut con = redis.client();
        let old = (server_time_ms(&mut con) - 5000) / 1000 * 1000 + 1;
        let r: Vec<i64> = redis::cmd("SLIDINGWINDOW.ALLOW")
            .arg("rl:{lena}")
            .arg(60)
            .arg(10)
            .arg(old)
            .query(&mut con)
            .unwrap();
        assert_eq!(r[0], 1);
        for _ in 0..2 {
            assert_eq!(gw.get_path("/ok", Some("lena")).status, 201);
        }
        assert_eq!(gw.get_path("/fail", Some("lena")).status, 503);
        wait_until(STARTUP_DEADLINE, "the 503 refunded", || {
            stat(&redis, "refunded") == 1
        });
        if storage == "compact" {
            let converted: i64 = redis::cmd("SLIDINGWINDOW.CONVERT")
                .arg("rl:{lena}")
                .arg("zset")
                .query(&mut con)
                .unwrap();
            assert_eq!(converted, 3, "the key's logged requests");
        }
        let logged: Vec<i64> = scores(&mut con, "rl:{lena}")
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        assert_eq!(logged.len(), 3, "{storage}: {logged:?}");
        assert_eq!(logged[0], old, "{storage}: the older request stays");
        assert!(logged[1..].iter().all(|s| s % 1000 == 0), "{logged:?}");
    }
}

on_both_backends!(
    a_second_limit_binds_when_the_first_has_room,
    refused_identities_are_answered_from_memory_until_their_retry_time,
    without_the_deny_cache_every_refusal_asks_redis,
    the_deny_cache_is_bounded_in_bytes,
    admitted_requests_reach_the_upstream_refused_ones_do_not,
    tenants_are_limited_as_a_whole_in_one_call,
    answers_in_the_clients_http_version_and_appends_to_x_forwarded_for,
);

on_both_backends!(builders: cluster_mode, cluster_mode_with_a_global_limit);
