//! In-flight limits (`--concurrency`, `--tenant-concurrency`, `--global-concurrency N/HOLD`):
//! never more than N requests at the upstream, a slot back when its response ends, and a dead
//! gateway's slots back when HOLD has passed.

use testkit::harness;
mod support;

use harness::{STARTUP_DEADLINE, Server, wait_until};
use std::io::Write;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;
use support::*;

/// Sends `GET path` with `headers` on a thread of its own; its status comes on the channel.
fn send(
    gw: &Gateway,
    path: &'static str,
    headers: Vec<(&'static str, String)>,
    out: &mpsc::Sender<u16>,
) {
    let (url, out) = (gw.url.clone(), out.clone());
    thread::spawn(move || {
        let agent = agent(Duration::from_secs(60));
        let mut req = agent.get(format!("{url}{path}"));
        for (name, value) in &headers {
            req = req.header(*name, value.as_str());
        }
        let status = req.call().map_or(0, |r| r.status().as_u16());
        let _ = out.send(status);
    });
}

fn key(who: &str) -> Vec<(&'static str, String)> {
    vec![("x-api-key", who.to_string())]
}

fn n_plus_one_held_requests_see_exactly_one_429_and_slots_return_at_the_end(redis: Server) {
    let (up, gw) = proxied_on(&redis, "--concurrency 3/30s --metrics-listen 127.0.0.1:0");
    let (tx, rx) = mpsc::channel();
    for _ in 0..4 {
        send(&gw, "/held", key("alice"), &tx);
    }
    // Three at the upstream, held; the fourth answered at once.
    let first = rx.recv_timeout(STARTUP_DEADLINE).expect("one answer");
    assert_eq!(first, 429);
    wait_until(STARTUP_DEADLINE, "three requests at the upstream", || {
        up.hits.load(Ordering::SeqCst) == 3
    });
    assert_eq!(peek_count(&redis, "inflight:id:{alice}", 30, 3), 3);
    // Another identity has slots of its own.
    assert_eq!(gw.get_path("/", Some("bob")).status, 201);
    up.release();
    let rest: Vec<u16> = (0..3)
        .map(|_| rx.recv_timeout(STARTUP_DEADLINE).expect("an answer"))
        .collect();
    assert_eq!(rest, [200, 200, 200]);
    // The responses ended: every slot back, long before the hold.
    wait_until(STARTUP_DEADLINE, "alice's slots released", || {
        peek_count(&redis, "inflight:id:{alice}", 30, 3) == 0
    });
    assert_eq!(gw.get_path("/", Some("alice")).status, 201);
    let text = gw.metrics();
    assert_eq!(sample(&text, "gateway_inflight_refused_total"), Some(1));
    assert_eq!(
        sample(&text, "gateway_top_refused{identity=\"alice\"}"),
        Some(1)
    );
}

/// An upstream that counts the requests it is answering at once and the most it saw.
struct Counting {
    url: String,
    most: Arc<AtomicUsize>,
    served: Arc<AtomicUsize>,
}

fn counting_upstream() -> Counting {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let (m, s) = (most.clone(), served.clone());
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (now, most, served) = (now.clone(), m.clone(), s.clone());
            thread::spawn(move || {
                read_head(&mut stream);
                let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(at_once, Ordering::SeqCst);
                // Long enough for the others to pile up.
                thread::sleep(Duration::from_millis(20));
                served.fetch_add(1, Ordering::SeqCst);
                now.fetch_sub(1, Ordering::SeqCst);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nup"
                );
            });
        }
    });
    Counting { url, most, served }
}

fn the_upstream_never_sees_more_than_n_in_flight(redis: Server) {
    let up = counting_upstream();
    let gw = Gateway::start(
        &redis,
        &["--upstream", &up.url, "--global-concurrency", "3/30s"],
    );
    let (tx, rx) = mpsc::channel();
    let clients = 8;
    let (url, tx2) = (gw.url.clone(), tx.clone());
    drop(tx);
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (url, tx) = (url.clone(), tx2.clone());
            thread::spawn(move || {
                let agent = agent(Duration::from_secs(30));
                for _ in 0..15 {
                    let r = agent
                        .get(format!("{url}/"))
                        .header("x-api-key", format!("c{c}"))
                        .call()
                        .expect("a reply");
                    tx.send(r.status().as_u16()).unwrap();
                }
            })
        })
        .collect();
    drop(tx2);
    for t in threads {
        t.join().unwrap();
    }
    let statuses: Vec<u16> = rx.iter().collect();
    assert_eq!(statuses.len(), clients * 15);
    assert!(
        statuses.iter().all(|&s| s == 200 || s == 429),
        "{statuses:?}"
    );
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    assert!(ok > 0, "{statuses:?}");
    assert_eq!(up.served.load(Ordering::SeqCst), ok);
    let most = up.most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "{most} in flight at once");
}

fn a_killed_gateways_slot_returns_after_hold(redis: Server) {
    let up = Upstream::start();
    let args = ["--upstream", up.url.as_str(), "--concurrency", "1/10s"];
    let mut first = Gateway::start(&redis, &args);
    let (tx, rx) = mpsc::channel();
    send(&first, "/held", key("alice"), &tx);
    wait_until(STARTUP_DEADLINE, "the request at the upstream", || {
        up.hits.load(Ordering::SeqCst) == 1
    });
    // SIGKILL: no release is ever sent.
    first.child.kill().expect("SIGKILL the gateway");
    first.child.wait().expect("reap the gateway");
    assert_eq!(
        rx.recv_timeout(STARTUP_DEADLINE),
        Ok(0),
        "the client lost its connection"
    );
    let second = Gateway::start(&redis, &args);
    let r = second.get_path("/", Some("alice"));
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.json()["limit"], "concurrency");
    // The slot leaves the window when its hold has passed.
    wait_until(
        Duration::from_secs(40),
        "the dead gateway's slot to return",
        || peek_count(&redis, "inflight:id:{alice}", 10, 1) == 0,
    );
    assert_eq!(second.get_path("/", Some("alice")).status, 201);
    up.release();
}

fn a_tenant_shares_its_slots_and_other_tenants_keep_theirs(redis: Server) {
    let (up, gw) = proxied_on(
        &redis,
        "--tenant-header x-tenant --tenant-limit 1000/60s --tenant-concurrency 2/30s",
    );
    let of = |tenant: &str, who: &str| {
        vec![
            ("x-tenant", tenant.to_string()),
            ("x-api-key", who.to_string()),
        ]
    };
    let (tx, rx) = mpsc::channel();
    send(&gw, "/held", of("acme", "a1"), &tx);
    send(&gw, "/held", of("acme", "a2"), &tx);
    wait_until(STARTUP_DEADLINE, "two requests at the upstream", || {
        up.hits.load(Ordering::SeqCst) == 2
    });
    let r = gw.get_with("/", &[("x-tenant", "acme"), ("x-api-key", "a3")]);
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.json()["limit"], "tenant-concurrency");
    let r = gw.get_with("/", &[("x-tenant", "other"), ("x-api-key", "a3")]);
    assert_eq!(r.status, 201, "{r:?}");
    up.release();
    for _ in 0..2 {
        assert_eq!(rx.recv_timeout(STARTUP_DEADLINE), Ok(200));
    }
    wait_until(STARTUP_DEADLINE, "acme's slots released", || {
        peek_count(&redis, "inflight:tenant:{acme}", 30, 2) == 0
    });
    let r = gw.get_with("/", &[("x-tenant", "acme"), ("x-api-key", "a3")]);
    assert_eq!(r.status, 201, "{r:?}");
}

on_both_backends!(
    n_plus_one_held_requests_see_exactly_one_429_and_slots_return_at_the_end,
    the_upstream_never_sees_more_than_n_in_flight,
    a_killed_gateways_slot_returns_after_hold,
    a_tenant_shares_its_slots_and_other_tenants_keep_theirs,
);
