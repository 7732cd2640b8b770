//! End to end: a real redis-server with the module (the shared harness), the gateway binary as its
//! own process on a free port, and a real HTTP client.

#[path = "../../../tests/common/mod.rs"]
mod common;

use common::{STARTUP_DEADLINE, Server, server_time_ms, wait_until};
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The gateway binary, killed on drop; its stderr goes to a file the test can read.
struct Gateway {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Gateway {
    fn start(redis: &Server, args: &[&str]) -> Gateway {
        let url = redis.url();
        Gateway::start_with(&[&["--redis", url.as_str()], args].concat())
    }

    fn start_with(args: &[&str]) -> Gateway {
        let log = log_path();
        // A free loopback port unless the test chose the address.
        let listen: &[&str] = if args.contains(&"--listen") {
            &[]
        } else {
            &["--listen", "127.0.0.1:0"]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_http-gateway"))
            .args(listen)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&log).expect("gateway log file"))
            .spawn()
            .expect("spawn the gateway");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("gateway stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the gateway's first line");
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            panic!(
                "gateway did not start: {line:?}\n{}",
                fs::read_to_string(&log).unwrap_or_default()
            );
        };
        Gateway {
            url: url.to_string(),
            child,
            log,
        }
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn get(&self, api_key: Option<&str>) -> Reply {
        self.get_path("/", api_key)
    }

    fn get_path(&self, path: &str, api_key: Option<&str>) -> Reply {
        let key: Vec<(&str, &str)> = api_key.map(|k| ("x-api-key", k)).into_iter().collect();
        self.get_with(path, &key)
    }

    fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let mut req = agent.get(format!("{}{path}", self.url));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let mut resp = req.call().expect("HTTP request to the gateway");
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    v.to_str().expect("ASCII header").to_string(),
                )
            })
            .collect();
        Reply {
            status: resp.status().as_u16(),
            body: resp.body_mut().read_to_string().expect("body"),
            headers,
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_file(&self.log);
    }
}

fn log_path() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "http-gateway-test-{}-{}.log",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The `RateLimit` header: (limit name, r, t).
    fn ratelimit(&self) -> (String, i64, i64) {
        let v = self
            .header("ratelimit")
            .unwrap_or_else(|| panic!("no RateLimit header: {self:?}"));
        let [(name, params)] = &items(v)[..] else {
            panic!("RateLimit names one limit: {v}");
        };
        (name.clone(), params["r"], params["t"])
    }

    fn json(&self) -> serde_json::Value {
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{self:?}"
        );
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

/// A structured-field list as the RateLimit headers use it: `"l0";q=10;w=1,"l1";q=100;w=60`.
fn items(v: &str) -> Vec<(String, BTreeMap<String, i64>)> {
    v.split(',')
        .map(|item| {
            let mut parts = item.trim().split(';');
            let name = parts.next().unwrap_or_default();
            assert!(
                name.len() > 2 && name.starts_with('"') && name.ends_with('"'),
                "item name {name:?} in {v}"
            );
            let params = parts
                .map(|p| {
                    let (k, n) = p
                        .split_once('=')
                        .unwrap_or_else(|| panic!("parameter {p:?} in {v}"));
                    (
                        k.to_string(),
                        n.parse()
                            .unwrap_or_else(|_| panic!("integer parameter {p:?} in {v}")),
                    )
                })
                .collect();
            (name.trim_matches('"').to_string(), params)
        })
        .collect()
}

fn policy(v: &str) -> Vec<(String, i64, i64)> {
    items(v)
        .into_iter()
        .map(|(n, p)| (n, p["q"], p["w"]))
        .collect()
}

fn seconds_up(ms: i64) -> i64 {
    (ms + 999).div_euclid(1000)
}

#[test]
fn a_burst_gets_exactly_max_then_429_with_retry_after() {
    let redis = Server::start();
    let gw = Gateway::start(&redis, &["--limit", "5/60s"]);
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

#[test]
fn a_second_limit_binds_when_the_first_has_room() {
    let redis = Server::start();
    // Closed: a server that refuses the LIMIT option answers 503 here, not an unlimited 200.
    let gw = Gateway::start(
        &redis,
        &[
            "--limit",
            "10/1s",
            "--limit",
            "3/60s",
            "--on-redis-error",
            "closed",
        ],
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

/// Stops Redis under a running gateway, checks what requests get meanwhile, starts it again and
/// waits for the gateway to use it without being restarted.
fn outage(mode: &str, while_down: u16) {
    let mut redis = Server::start();
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

#[test]
fn redis_away_open_lets_requests_through() {
    outage("open", 200);
}

#[test]
fn redis_away_closed_answers_503() {
    outage("closed", 503);
}

/// A one-shot upstream speaking `version` (`HTTP/1.1`, `HTTP/1.0`): it answers 201 with what it
/// was asked (request line, X-Forwarded-For lines), or 503 for a path holding `/fail`; counts its
/// requests.
fn upstream(version: &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).to_string();
            let request_line = head.lines().next().unwrap_or_default().to_string();
            let xff: Vec<String> = head
                .lines()
                .filter_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("x-forwarded-for: ")
                        .map(str::to_string)
                })
                .collect();
            let body = format!("{request_line} xff={}", xff.join("|"));
            let status = if request_line.contains("/fail") {
                "503 Service Unavailable"
            } else {
                "201 Created"
            };
            let _ = write!(
                s,
                "{version} {status}\r\nx-upstream: yes\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (format!("http://{addr}/base"), hits)
}

#[test]
fn admitted_requests_reach_the_upstream_refused_ones_do_not() {
    let redis = Server::start();
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

#[test]
fn cluster_mode() {
    // A one-node cluster holding every slot: the cluster client's routing, on one process.
    let redis = Server::builder().args(["--cluster-enabled", "yes"]).start();
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
    let url = redis.url();
    let gw = Gateway::start_with(&["--cluster", "--redis", &url, "--limit", "2/60s"]);
    assert_eq!(gw.get(Some("gina")).ratelimit(), ("l0".to_string(), 1, 60));
    assert_eq!(gw.get(Some("gina")).ratelimit(), ("l0".to_string(), 0, 60));
    assert_eq!(gw.get(Some("gina")).status, 429);
}

/// One of the module's INFO counters (`slidingwindow_<name>`, or `<name>` on servers that do not
/// prefix it).
fn stat(redis: &Server, name: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("slidingwindow")
        .query(&mut redis.client())
        .unwrap();
    info.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k == name || k.strip_prefix("slidingwindow_") == Some(name))
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {name} in INFO slidingwindow:\n{info}"))
}

/// The key's log: (member, score), oldest first.
fn scores(con: &mut redis::Connection, key: &str) -> Vec<(String, i64)> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(con)
        .unwrap()
}

fn zcard(redis: &Server, key: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query(&mut redis.client())
        .unwrap()
}

fn retry_after_ms(r: &Reply) -> i64 {
    r.json()["retry_after_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("retry_after_ms: {r:?}"))
}

#[test]
fn refused_identities_are_answered_from_memory_until_their_retry_time() {
    let redis = Server::start();
    let gw = Gateway::start(&redis, &["--limit", "2/2s"]);
    for _ in 0..2 {
        assert_eq!(gw.get(Some("ivan")).status, 200);
    }
    let first = gw.get(Some("ivan"));
    assert_eq!(first.status, 429, "{first:?}");
    assert_eq!(stat(&redis, "allow_calls"), 3);
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
    assert_eq!(
        stat(&redis, "allow_calls"),
        3,
        "no Redis call while refused"
    );
    // Another identity is not affected.
    assert_eq!(gw.get(Some("jane")).status, 200);
    // Once the wait is over Redis is asked again, and admits.
    wait_until(STARTUP_DEADLINE, "ivan to be admitted again", || {
        gw.get(Some("ivan")).status == 200
    });
    assert!(stat(&redis, "allow_calls") > 4);
}

#[test]
fn without_the_deny_cache_every_refusal_asks_redis() {
    let redis = Server::start();
    let gw = Gateway::start(&redis, &["--limit", "1/60s", "--deny-cache", "off"]);
    assert_eq!(gw.get(Some("ivan")).status, 200);
    for _ in 0..3 {
        assert_eq!(gw.get(Some("ivan")).status, 429);
    }
    assert_eq!(stat(&redis, "rejected"), 3);
}

#[test]
fn a_5xx_from_the_upstream_gives_the_request_back() {
    let redis = Server::start();
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
    wait_until(STARTUP_DEADLINE, "three refunds", || {
        stat(&redis, "refunded") == 3
    });
    assert_eq!(stat(&redis, "refund_calls"), 3);
    assert_eq!(zcard(&redis, "rl:{judy}"), 0);
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
    wait_until(STARTUP_DEADLINE, "the 502 refunded", || {
        stat(&redis, "refunded") == 4
    });
    assert_eq!(zcard(&redis, "rl:{lou}"), 0);
    // Without --refund-on a failed request keeps its charge.
    let plain = Gateway::start(&redis, &["--limit", "2/60s", "--upstream", &up]);
    assert_eq!(plain.get_path("/fail", Some("kate")).status, 503);
    assert_eq!(zcard(&redis, "rl:{kate}"), 1);
    assert_eq!(stat(&redis, "refund_calls"), 4);
}

#[test]
fn tenants_are_limited_as_a_whole_in_one_call() {
    let redis = Server::start();
    let gw = Gateway::start(
        &redis,
        &[
            "--limit",
            "2/60s",
            "--tenant-header",
            "x-tenant",
            "--tenant-limit",
            "3/60s",
            "--on-redis-error",
            "closed",
        ],
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

/// Sends `signal` (STOP, CONT) to the process `pid`.
fn signal(pid: &str, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Freezes Redis under a running gateway: the calls made meanwhile are abandoned at the
/// request's deadline, run when Redis resumes, and those admitted are refunded.
fn stall(mode: &str, while_stalled: u16) {
    let redis = Server::start();
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
    assert_eq!(stat(&redis, "allow_calls"), 4, "the stalled calls ran");
    assert_eq!(stat(&redis, "refunded"), 2);
    let after: Vec<(String, i64)> = scores(&mut con, "rl:{kim}");
    assert_eq!(
        after, before,
        "{mode}: only the request served before the stall is logged"
    );
    let peek: Vec<i64> = redis::cmd("SLIDINGWINDOW.PEEK")
        .arg("rl:{kim}")
        .arg(60)
        .arg(3)
        .arg("*")
        .query(&mut con)
        .unwrap();
    // A request now would be the second in the window.
    assert_eq!(&peek[..3], [1, 2, 1]);
    assert_eq!(gw.get(Some("kim")).ratelimit(), ("l0".to_string(), 1, 60));
}

#[test]
fn redis_stalled_closed_refunds_the_abandoned_calls() {
    stall("closed", 503);
}

#[test]
fn redis_stalled_open_refunds_the_abandoned_calls() {
    stall("open", 200);
}

#[test]
fn answers_in_the_clients_http_version_and_appends_to_x_forwarded_for() {
    let redis = Server::start();
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
        let out = Command::new(env!("CARGO_BIN_EXE_http-gateway"))
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

#[test]
fn an_ipv4_client_of_an_ipv6_socket_has_one_quota() {
    let redis = Server::start();
    let url = redis.url();
    // An IPv6 socket on the IPv4 loopback: its peers are ::ffff:127.0.0.1.
    let gw = Gateway::start_with(&[
        "--redis",
        &url,
        "--listen",
        "[::ffff:127.0.0.1]:0",
        "--limit",
        "5/60s",
    ]);
    assert!(gw.url.contains("[::ffff:127.0.0.1]"), "{}", gw.url);
    let r = gw.get(None);
    assert_eq!(r.ratelimit(), ("l0".to_string(), 4, 60));
    assert_eq!(zcard(&redis, "rl:{127.0.0.1}"), 1);
    assert_eq!(zcard(&redis, "rl:{::ffff:127.0.0.1}"), 0);
}
