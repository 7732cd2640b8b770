//! End to end, when something fails: Redis away or stalled (`--on-redis-error`), the upstream
//! answering 5xx, silent, or the client hanging up; what was charged for them is given back.

use testkit::harness;
mod support;

use harness::{STARTUP_DEADLINE, Server, wait_until};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::time::Instant;
use support::*;

/// Stops Redis under a running gateway, checks what requests get meanwhile, starts it again and
/// waits for the gateway to use it without being restarted.
fn outage(mut redis: Server, mode: &str, while_down: u16) {
    let gw = Gateway::start(&redis, &["--limit", "100/60s", "--on-redis-error", mode]);
    assert_eq!(gw.get(Some("dave")).ratelimit().1, 99);
    redis.kill9();
    let start = Instant::now();
    for _ in 0..30 {
        let r = gw.get(Some("dave"));
        assert_eq!(r.status, while_down, "{mode}: {r:?}");
        assert_eq!(
            r.header("ratelimit"),
            None,
            "{mode}: nothing is known while Redis is away"
        );
        if while_down == 503 {
            assert_eq!(r.json()["error"], "rate limiter unavailable");
        }
    }
    let elapsed = start.elapsed();
    let log = gw.log();
    let reports = log.lines().filter(|l| l.contains("redis failed")).count();
    // At most one report per second, never one per request.
    assert!(
        (1..=elapsed.as_secs() as usize + 1).contains(&reports),
        "{reports} reports in {elapsed:?}:\n{log}"
    );
    redis.restart();
    // The first request after Redis is back is limited (the restarted server has no data).
    let r = gw.get(Some("dave"));
    assert_eq!((r.status, r.ratelimit().1), (200, 99), "{mode}: {r:?}");
    assert!(gw.log().contains("redis answers again"));
    // The same when no request came while Redis was away: the old link is found closed.
    redis.restart();
    let r = gw.get(Some("dave"));
    assert_eq!((r.status, r.ratelimit().1), (200, 99), "{mode}: {r:?}");
}

fn redis_away_open_lets_requests_through(redis: Server) {
    outage(redis, "open", 200);
}

fn redis_away_closed_answers_503(redis: Server) {
    outage(redis, "closed", 503);
}

fn a_5xx_from_the_upstream_gives_the_request_back(redis: Server) {
    let (up, _) = upstream("HTTP/1.1");
    let gw = Gateway::start(
        &redis,
        &["--limit", "2/60s", "--refund-on", "5xx", "--upstream", &up],
    );
    for _ in 0..3 {
        let r = gw.get_path("/fail", Some("judy"));
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.header("x-upstream"), Some("yes"));
        // The response still tells the charge the call made; the refund follows it.
        assert_eq!(r.ratelimit(), ("l0".to_string(), 1, 60));
    }
    wait_refunded(&redis, 3, "rl:{judy}");
    if redis.has_module() {
        assert_eq!(stat(&redis, "refund_calls"), 3);
    }
    assert_eq!(calls_and_refunds(&redis), 6, "three calls, three refunds");
    // The quota is whole again.
    assert_eq!(gw.get_path("/ok", Some("judy")).status, 201);
    assert_eq!(gw.get_path("/ok", Some("judy")).status, 201);
    assert_eq!(gw.get_path("/ok", Some("judy")).status, 429);
    // The gateway's own 502 (upstream unreachable: nothing listens on a port just freed) too.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gone = format!("http://{closed}");
    let unreachable = Gateway::start(
        &redis,
        &[
            "--limit",
            "2/60s",
            "--refund-on",
            "5xx",
            "--upstream",
            &gone,
        ],
    );
    assert_eq!(unreachable.get(Some("lou")).status, 502);
    wait_refunded(&redis, 4, "rl:{lou}");
    // Without --refund-on a failed request keeps its charge.
    let plain = Gateway::start(&redis, &["--limit", "2/60s", "--upstream", &up]);
    assert_eq!(plain.get_path("/fail", Some("kate")).status, 503);
    assert_eq!(zcard(&redis, "rl:{kate}"), 1);
    if redis.has_module() {
        assert_eq!(stat(&redis, "refund_calls"), 4);
    }
    assert_eq!(calls_and_refunds(&redis), 12, "no refund for kate");
}

/// Freezes Redis under a running gateway: the calls made meanwhile are abandoned at the
/// request's deadline, run when Redis resumes, and those admitted are refunded.
fn stall(redis: Server, mode: &str, while_stalled: u16) {
    let gw = Gateway::start(&redis, &["--limit", "3/60s", "--on-redis-error", mode]);
    assert_eq!(gw.get(Some("kim")).ratelimit(), ("l0".to_string(), 2, 60));
    let mut con = redis.client();
    let before: Vec<(String, i64)> = scores(&mut con, "rl:{kim}");
    let pid = redis
        .info_field("server", "process_id")
        .expect("process_id");
    signal(&pid, "STOP");
    for _ in 0..3 {
        let r = gw.get(Some("kim"));
        assert_eq!(r.status, while_stalled, "{mode}: {r:?}");
        assert_eq!(r.header("ratelimit"), None, "{mode}");
    }
    signal(&pid, "CONT");
    // When Redis resumes it runs the three calls: two fit (1 + 2 = 3), the third is refused.
    // Only the two admitted are taken back.
    wait_until(STARTUP_DEADLINE, "the abandoned calls to end", || {
        gw.log().contains(
            "3 calls abandoned after the request's deadline have ended: \
             2 admitted and refunded, 1 refused or failed, 0 without a reply",
        )
    });
    if redis.has_module() {
        assert_eq!(stat(&redis, "allow_calls"), 4, "the stalled calls ran");
        assert_eq!(stat(&redis, "refunded"), 2);
    }
    assert_eq!(calls_and_refunds(&redis), 6, "four calls, two refunds");
    let after: Vec<(String, i64)> = scores(&mut con, "rl:{kim}");
    assert_eq!(
        after, before,
        "{mode}: only the request served before the stall is logged"
    );
    // A request now would be the second in the window.
    assert_eq!(&peek(&redis, "rl:{kim}", 60, 3)[..3], [1, 2, 1]);
    assert_eq!(gw.get(Some("kim")).ratelimit(), ("l0".to_string(), 1, 60));
}

fn redis_stalled_closed_refunds_the_abandoned_calls(redis: Server) {
    stall(redis, "closed", 503);
}

fn redis_stalled_open_refunds_the_abandoned_calls(redis: Server) {
    stall(redis, "open", 200);
}

fn a_refund_drops_the_refusals_it_may_have_caused(redis: Server) {
    // Issue 26's case: a tenant at 3 a minute, u3's request fails and is refunded, u4 was
    // refused by the tenant meanwhile: u4 is admitted once the refund is made.
    let (up, gw) = proxied_on(
        &redis,
        "--limit 10/60s --tenant-header x-tenant --tenant-limit 3/60s --refund-on 5xx",
    );
    let get =
        |path: &str, who: &str| gw.get_with(path, &[("x-tenant", "acme"), ("x-api-key", who)]);
    assert_eq!(get("/ok", "u1").status, 201);
    assert_eq!(get("/ok", "u2").status, 201);
    let slow = std::thread::scope(|scope| {
        let failing = scope.spawn(|| get("/held-fail", "u3"));
        wait_until(STARTUP_DEADLINE, "u3's request at the upstream", || {
            up.hits.load(Ordering::SeqCst) == 3
        });
        let r = get("/ok", "u4");
        assert_eq!((r.status, r.ratelimit().0.as_str()), (429, "t0"), "{r:?}");
        // From the deny cache now: no Redis call.
        let calls = limiter_calls(&redis);
        assert_eq!(get("/ok", "u4").status, 429);
        assert_eq!(limiter_calls(&redis), calls);
        up.release();
        failing.join().unwrap()
    });
    assert_eq!(slow.status, 503);
    wait_until(STARTUP_DEADLINE, "u3's refund", || {
        zcard(&redis, "rl:{acme}") == 2
    });
    let r = get("/ok", "u4");
    assert_eq!(r.status, 201, "the tenant has room again: {r:?}");
    assert_eq!(zcard(&redis, "rl:{acme}"), 3);
}

fn a_silent_upstream_gets_504_and_the_charge_back(redis: Server) {
    let (up, gw) = proxied_on(
        &redis,
        "--limit 5/60s --refund-on 5xx --upstream-timeout 200ms",
    );
    let r = gw.get_path("/hang", Some("quiet"));
    assert_eq!(r.status, 504, "{r:?}");
    assert_eq!(r.body, "upstream timed out\n");
    wait_until(STARTUP_DEADLINE, "the refund", || {
        zcard(&redis, "rl:{quiet}") == 0
    });
    gw.assert_logged(
        "failed, answering 504 (0 more failures since the last report): no answer within 200ms",
    );
    // Without --refund-on the charge stays.
    let plain = Gateway::proxy(&redis, &up, "--limit 5/60s --upstream-timeout 200ms");
    assert_eq!(plain.get_path("/hang", Some("kept")).status, 504);
    assert_eq!(zcard(&redis, "rl:{kept}"), 1);
}

/// Sends GET `path` on a socket of its own, to be closed without reading the answer.
fn send_only(gw: &Gateway, path: &str, who: &str) -> std::net::TcpStream {
    let addr = gw.url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {who}\r\n\r\n"
    )
    .unwrap();
    s.flush().unwrap();
    s
}

fn a_client_that_hangs_up_is_refunded_when_the_upstream_then_fails(redis: Server) {
    let (up, gw) = proxied_on(&redis, "--limit 5/60s --refund-on 5xx");
    let clients = [
        send_only(&gw, "/held-fail", "gone"),
        send_only(&gw, "/held-ok", "stays"),
    ];
    wait_until(STARTUP_DEADLINE, "both requests at the upstream", || {
        up.hits.load(Ordering::SeqCst) == 2
    });
    assert_eq!(
        (zcard(&redis, "rl:{gone}"), zcard(&redis, "rl:{stays}")),
        (1, 1)
    );
    // The clients hang up before the upstream answers.
    drop(clients);
    if redis.has_module() {
        assert_eq!(stat(&redis, "refund_calls"), 0);
    }
    assert_eq!(calls_and_refunds(&redis), 2, "two calls, no refund");
    up.release();
    wait_refunded(&redis, 1, "rl:{gone}");
    // The one that succeeded keeps its charge: the upstream did the work.
    wait_until(STARTUP_DEADLINE, "both answered", || {
        up.answered.load(Ordering::SeqCst) == 2
    });
    assert_eq!(gw.get_path("/fail", Some("later")).status, 503);
    wait_refunded(&redis, 2, "rl:{later}");
    assert_eq!(zcard(&redis, "rl:{stays}"), 1);
}

fn upstream_failures_are_logged_once_a_second_with_their_cause(redis: Server) {
    let free = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap();
    drop(free);
    let gw = Gateway::start(
        &redis,
        &[
            "--limit",
            "1000/60s",
            "--upstream",
            &format!("http://{addr}"),
        ],
    );
    let start = Instant::now();
    for _ in 0..30 {
        assert_eq!(gw.get(Some("u")).status, 502);
    }
    let elapsed = start.elapsed();
    let log = gw.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("failed, answering 502"))
        .collect();
    assert!(
        (1..=elapsed.as_secs() as usize + 1).contains(&lines.len()),
        "{} lines in {elapsed:?}:\n{log}",
        lines.len()
    );
    // The cause, not just hyper's "client error (Connect)".
    assert!(
        lines[0].starts_with(&format!(
            "gateway: upstream http://{addr}/ failed, answering 502 (0 more failures since the last report): client error (Connect)"
        )) && lines[0].contains("Connection refused"),
        "{log}"
    );
    // Back: one line, with the count left out.
    let listener = TcpListener::bind(addr).unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    assert_eq!(gw.get(Some("u")).status, 200);
    let log = gw.log();
    let more = 30 - lines.len();
    assert!(
        log.contains(&format!("gateway: upstream http://{addr}/ answers again ({more} more failures since the last report)")),
        "{log}"
    );
}

on_both_backends!(
    a_5xx_from_the_upstream_gives_the_request_back,
    redis_stalled_closed_refunds_the_abandoned_calls,
    redis_stalled_open_refunds_the_abandoned_calls,
    a_client_that_hangs_up_is_refunded_when_the_upstream_then_fails,
    redis_away_open_lets_requests_through,
    a_refund_drops_the_refusals_it_may_have_caused,
    a_silent_upstream_gets_504_and_the_charge_back,
    redis_away_closed_answers_503,
    upstream_failures_are_logged_once_a_second_with_their_cause,
);
