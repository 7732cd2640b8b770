//! What the gateway's end-to-end tests share: the gateway binary as its own process on a free
//! port, a real HTTP client and its replies, upstreams, and Redis's state.
#![allow(dead_code)]

pub mod netns;
pub mod poller;

use crate::harness::{STARTUP_DEADLINE, Server, wait_until};
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;
#[allow(unused_imports)]
pub use testkit::probe::{most_in_window, stat};

/// The gateway binary, killed on drop; its stderr goes to a file the test can read.
pub struct Gateway {
    pub child: Child,
    pub url: String,
    pub log: PathBuf,
}

/// The gateway under test: $GATEWAY (a released binary: `make test-dist`), else this build's.
pub fn binary() -> PathBuf {
    std::env::var_os("GATEWAY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_http-gateway")))
}

impl Gateway {
    pub fn start(redis: &Server, args: &[&str]) -> Gateway {
        let url = redis.url();
        Gateway::start_with(&[&["--redis", url.as_str()], args].concat())
    }

    /// `start` with the arguments as one line, split at whitespace.
    pub fn cli(redis: &Server, line: &str) -> Gateway {
        Gateway::start(redis, &line.split_whitespace().collect::<Vec<_>>())
    }

    /// `cli` with the upstream `up` behind the gateway.
    pub fn proxy(redis: &Server, up: &Upstream, line: &str) -> Gateway {
        let upstream = ["--upstream", up.url.as_str()];
        let args: Vec<&str> = line.split_whitespace().chain(upstream).collect();
        Gateway::start(redis, &args)
    }

    pub fn start_with(args: &[&str]) -> Gateway {
        Gateway::launch(Command::new(binary()), args)
    }

    /// `start_with` inside the network namespace `ns` (`ip netns exec`, which execs the gateway:
    /// the child's pid is the gateway's).
    pub fn start_in(ns: &str, args: &[&str]) -> Gateway {
        let mut ip = Command::new("ip");
        ip.args(["netns", "exec", ns]).arg(binary());
        Gateway::launch(ip, args)
    }

    fn launch(mut command: Command, args: &[&str]) -> Gateway {
        let log = log_path();
        // A free loopback port unless the test chose the address.
        let listen: &[&str] = if args.contains(&"--listen") {
            &[]
        } else {
            &["--listen", "127.0.0.1:0"]
        };
        let mut child = command
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

    /// Asserts that the gateway chose the backend that `redis` calls for on its own: the module
    /// where it is loaded, else the script.
    pub fn assert_auto_backend(&self, redis: &Server) {
        let backend = if redis.has_module() {
            "module"
        } else {
            "script"
        };
        self.assert_logged(&format!("gateway: backend {backend} (auto: "));
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Asserts that the log holds `text`, showing the log if not.
    pub fn assert_logged(&self, text: &str) {
        let log = self.log();
        assert!(log.contains(text), "{text:?} not in the log:\n{log}");
    }

    pub fn get(&self, api_key: Option<&str>) -> Reply {
        self.get_path("/", api_key)
    }

    pub fn get_path(&self, path: &str, api_key: Option<&str>) -> Reply {
        let key: Vec<(&str, &str)> = api_key.map(|k| ("x-api-key", k)).into_iter().collect();
        self.get_with(path, &key)
    }

    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut req = agent(Duration::from_secs(10)).get(format!("{}{path}", self.url));
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

/// A test's start: a server, and a gateway on it with the arguments `line`.
pub fn gateway(line: &str) -> (Server, Gateway) {
    let redis = Server::start();
    let gw = Gateway::cli(&redis, line);
    (redis, gw)
}

/// `gateway` in front of an `Upstream`.
pub fn proxied(line: &str) -> (Server, Upstream, Gateway) {
    let redis = Server::start();
    let (up, gw) = proxied_on(&redis, line);
    (redis, up, gw)
}

/// `proxied` on the server `redis`.
pub fn proxied_on(redis: &Server, line: &str) -> (Upstream, Gateway) {
    let up = Upstream::start();
    let gw = Gateway::proxy(redis, &up, line);
    (up, gw)
}

/// An HTTP client that returns 4xx and 5xx answers as replies, giving up after `timeout`.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

pub fn log_path() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "http-gateway-test-{}-{}.log",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The `RateLimit` header: (limit name, r, t).
    pub fn ratelimit(&self) -> (String, i64, i64) {
        let v = self
            .header("ratelimit")
            .unwrap_or_else(|| panic!("no RateLimit header: {self:?}"));
        let [(name, params)] = &items(v)[..] else {
            panic!("RateLimit names one limit: {v}");
        };
        (name.clone(), params["r"], params["t"])
    }

    pub fn json(&self) -> serde_json::Value {
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
pub fn items(v: &str) -> Vec<(String, BTreeMap<String, i64>)> {
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

pub fn policy(v: &str) -> Vec<(String, i64, i64)> {
    items(v)
        .into_iter()
        .map(|(n, p)| (n, p["q"], p["w"]))
        .collect()
}

pub fn seconds_up(ms: i64) -> i64 {
    (ms + 999).div_euclid(1000)
}

/// A request's head as an upstream reads it from `s`, up to its blank line (less if the
/// connection ends first).
pub fn read_head(s: &mut impl Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// The path of a request `head`'s request line (empty if it has none).
pub fn path_of(head: &str) -> String {
    let line = head.lines().next().unwrap_or_default();
    line.split(' ').nth(1).unwrap_or_default().to_string()
}

/// A one-shot upstream speaking `version` (`HTTP/1.1`, `HTTP/1.0`): it answers 201 with what it
/// was asked (request line, X-Forwarded-For lines), or 503 for a path holding `/fail`; counts its
/// requests.
pub fn upstream(version: &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let head = read_head(&mut s);
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

/// The key's log: (member, score), oldest first.
pub fn scores(con: &mut redis::Connection, key: &str) -> Vec<(String, i64)> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(con)
        .unwrap()
}

pub fn zcard(redis: &Server, key: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query(&mut redis.client())
        .unwrap()
}

pub fn retry_after_ms(r: &Reply) -> i64 {
    r.json()["retry_after_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("retry_after_ms: {r:?}"))
}

/// Sends `signal` (STOP, CONT) to the process `pid`.
pub fn signal(pid: &str, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

impl Gateway {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits for the process to exit (it drains and closes its leases first).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        signal(&self.pid().to_string(), "TERM");
        let mut status = None;
        wait_until(STARTUP_DEADLINE, "the gateway to exit", || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        status.expect("exited")
    }
}

/// An upstream that serves each connection in a thread of its own and answers by path: `/fail`
/// 503 at once; `/held-fail` 503 and `/held-ok` 200 once the test calls `release`; `/hang`
/// never; anything else 201. It counts the requests it got and the answers it sent.
pub struct Upstream {
    pub url: String,
    pub hits: Arc<AtomicUsize>,
    pub answered: Arc<AtomicUsize>,
    released: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let up = Upstream {
            url,
            hits: Arc::default(),
            answered: Arc::default(),
            released: Arc::default(),
        };
        let (hits, answered, released) =
            (up.hits.clone(), up.answered.clone(), up.released.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let (hits, answered, released) = (hits.clone(), answered.clone(), released.clone());
                thread::spawn(move || {
                    let path = path_of(&read_head(&mut s));
                    hits.fetch_add(1, Ordering::SeqCst);
                    if path.starts_with("/hang") {
                        thread::sleep(Duration::from_secs(120));
                        return;
                    }
                    if path.starts_with("/held") {
                        let (lock, cond) = &*released;
                        let mut go = lock.lock().unwrap();
                        while !*go {
                            go = cond.wait(go).unwrap();
                        }
                    }
                    let status = if path.contains("fail") {
                        "503 Service Unavailable"
                    } else if path.starts_with("/held") {
                        "200 OK"
                    } else {
                        "201 Created"
                    };
                    let _ = write!(
                        s,
                        "HTTP/1.1 {status}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nup"
                    );
                    answered.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        up
    }

    /// Lets the held requests (and later ones) answer.
    pub fn release(&self) {
        let (lock, cond) = &*self.released;
        *lock.lock().unwrap() = true;
        cond.notify_all();
    }
}

impl Gateway {
    /// The text of `/metrics` on the address the gateway printed on stderr (`--metrics-listen`).
    pub fn metrics(&self) -> String {
        let mut url = None;
        wait_until(STARTUP_DEADLINE, "the gateway's metrics address", || {
            url = self
                .log()
                .lines()
                .find_map(|l| l.strip_prefix("metrics on ").map(str::to_string));
            url.is_some()
        });
        let url = url.expect("found above");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        agent
            .get(format!("{url}/metrics"))
            .call()
            .expect("GET /metrics")
            .body_mut()
            .read_to_string()
            .expect("metrics text")
    }
}

/// The value of the sample `series` (`name{labels}` or `name`) in Prometheus text.
pub fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (s, v) = l.rsplit_once(' ')?;
        (s == series).then(|| v.parse().expect("an integer sample"))
    })
}

/// `SLIDINGWINDOW.PEEK key window max *`'s reply: what an ALLOW of cost 1 would answer. On a
/// server without the module the same call runs through the Lua script (EVAL).
pub fn peek(redis: &Server, key: &str, window: u64, max: u64) -> Vec<i64> {
    let (window, max) = (window.to_string(), max.to_string());
    let args = [window.as_str(), max.as_str(), "*"];
    let mut con = redis.client();
    let reply: redis::RedisResult<Vec<i64>> = redis::cmd("SLIDINGWINDOW.PEEK")
        .arg(key)
        .arg(&args)
        .query(&mut con);
    match reply {
        Err(e) if e.to_string().contains("unknown command") => redis::cmd("EVAL")
            .arg(slidingwindow_client::SCRIPT)
            .arg(1)
            .arg(key)
            .arg("peek")
            .arg("0".repeat(16))
            .arg(&args)
            .query(&mut con),
        other => other,
    }
    .expect("PEEK")
}

/// What the key's window holds now: `peek`'s `count` includes the request it asks about when it
/// would be admitted, which this takes out.
pub fn peek_count(redis: &Server, key: &str, window: u64, max: u64) -> i64 {
    let reply = peek(redis, key, window, max);
    reply[1] - reply[0]
}

/// The rate limit calls the server has run on either path (`INFO commandstats`): the module's
/// `SLIDINGWINDOW.ALLOW` and `ALLOWALL`, or the script's `EVALSHA`.
pub fn limiter_calls(redis: &Server) -> u64 {
    let calls = testkit::probe::command_calls(redis);
    ["slidingwindow.allow", "slidingwindow.allowall", "evalsha"]
        .iter()
        .filter_map(|c| calls.get(*c))
        .sum()
}

/// The rate limit calls and refunds the server has run on either path: `limiter_calls` and the
/// module's `refund_calls`, or the script's `EVALSHA` (which runs both).
pub fn calls_and_refunds(redis: &Server) -> u64 {
    let refunds = if redis.has_module() {
        stat(redis, "refund_calls")
    } else {
        0
    };
    limiter_calls(redis) + refunds
}

/// Waits until the key `key` is empty, all its requests refunded, and on a server with the
/// module until its `refunded` counter reaches `refunds`.
pub fn wait_refunded(redis: &Server, refunds: u64, key: &str) {
    wait_until(STARTUP_DEADLINE, &format!("{key} refunded"), || {
        (!redis.has_module() || stat(redis, "refunded") == refunds) && zcard(redis, key) == 0
    });
}

/// Each named test, `fn name(redis: Server)`, twice: `name::module` on a server with the module
/// and `name::script` on one without it (`enable-module-command no`: the gateway's script path).
/// `builders: name, ...` passes the test `Server::builder()` and `Server::builder().managed()`
/// instead, for tests that configure their server (`fn name(server: Builder)`).
#[allow(unused_macros)]
macro_rules! on_both_backends {
    (builders: $($name:ident),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn module() {
                super::$name(testkit::harness::Server::builder());
            }

            #[test]
            fn script() {
                super::$name(testkit::harness::Server::builder().managed());
            }
        }
    )+};
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn module() {
                super::$name(testkit::harness::Server::start());
            }

            #[test]
            fn script() {
                super::$name(testkit::harness::Server::start_without_module());
            }
        }
    )+};
}
#[allow(unused_imports)]
pub(crate) use on_both_backends;
