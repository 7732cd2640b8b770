//! `--reserve N --settle-header NAME`: N charged before the upstream is called, then settled
//! with the cost the upstream's response reports. Checked with PEEK, whatever the storage.

use testkit::harness;
mod support;

use harness::{STARTUP_DEADLINE, Server, wait_until};
use std::io::Write;
use std::net::TcpListener;
use std::thread;
use support::*;

/// An upstream answering `/tokens/<n>` with `x-tokens: <n>`, `/bad` with `x-tokens: lots`, and
/// anything else without the header.
fn tokens_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let path = path_of(&read_head(&mut s));
            let header = match (path.strip_prefix("/tokens/"), path.as_str()) {
                (Some(n), _) => format!("x-tokens: {n}\r\n"),
                (None, "/bad") => "x-tokens: lots\r\n".to_string(),
                _ => String::new(),
            };
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\n{header}content-length: 2\r\nconnection: close\r\n\r\nup"
            );
        }
    });
    url
}

fn gateway(redis: &Server, limit: &str) -> Gateway {
    Gateway::start(
        redis,
        &[
            "--upstream",
            &tokens_upstream(),
            "--limit",
            limit,
            "--reserve",
            "10",
            "--settle-header",
            "x-tokens",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    )
}

/// Waits until the key's window holds `n`.
fn holds(redis: &Server, max: u64, n: i64) {
    wait_until(
        STARTUP_DEADLINE,
        &format!("rl:{{alice}} to hold {n}"),
        || peek_count(redis, "rl:{alice}", 60, max) == n,
    );
}

fn unused_is_refunded_excess_charged_and_no_header_keeps_the_reservation(redis: Server) {
    let gw = gateway(&redis, "100/60s");
    // 10 reserved, 3 used: 7 refunded.
    let r = gw.get_path("/tokens/3", Some("alice"));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.ratelimit(), ("l0".to_string(), 90, 60));
    holds(&redis, 100, 3);
    // 10 reserved, 25 used: 15 more charged.
    assert_eq!(gw.get_path("/tokens/25", Some("alice")).status, 200);
    holds(&redis, 100, 28);
    // Exactly as reserved: nothing to do.
    assert_eq!(gw.get_path("/tokens/10", Some("alice")).status, 200);
    // No header, then a malformed one: the reservations stay.
    assert_eq!(gw.get_path("/none", Some("alice")).status, 200);
    assert_eq!(gw.get_path("/bad", Some("alice")).status, 200);
    holds(&redis, 100, 58);
    // Settlements are counted after Redis answers them, in tasks of their own.
    wait_until(STARTUP_DEADLINE, "the settlements counted", || {
        let text = gw.metrics();
        sample(&text, "gateway_settle_refunded_total") == Some(7)
            && sample(&text, "gateway_settle_charged_total") == Some(15)
    });
    let text = gw.metrics();
    assert_eq!(sample(&text, "gateway_settle_kept_total"), Some(2));
    assert_eq!(sample(&text, "gateway_settle_refunded_total"), Some(7));
    assert_eq!(sample(&text, "gateway_settle_charged_total"), Some(15));
    assert_eq!(sample(&text, "gateway_settle_overrun_total"), Some(0));
    assert_eq!(sample(&text, "gateway_settle_overruns_total"), Some(0));
    gw.assert_logged("x-tokens header failed, keeping the reservation");
}

fn an_excess_past_the_limit_is_an_overrun_in_metrics(redis: Server) {
    let gw = gateway(&redis, "20/60s");
    // 10 reserved, 30 used: 20 more do not fit in 20 with 10 logged.
    assert_eq!(gw.get_path("/tokens/30", Some("alice")).status, 200);
    wait_until(STARTUP_DEADLINE, "the overrun counted", || {
        sample(&gw.metrics(), "gateway_settle_overruns_total") == Some(1)
    });
    let text = gw.metrics();
    assert_eq!(sample(&text, "gateway_settle_overrun_total"), Some(20));
    assert_eq!(sample(&text, "gateway_settle_charged_total"), Some(0));
    holds(&redis, 20, 10);
    // The second reservation fills the limit; the third does not fit.
    assert_eq!(gw.get_path("/tokens/10", Some("alice")).status, 200);
    let r = gw.get_path("/tokens/1", Some("alice"));
    assert_eq!(r.status, 429, "{r:?}");
    holds(&redis, 20, 20);
    let text = gw.metrics();
    assert_eq!(sample(&text, "gateway_requests_refused_total"), Some(1));
    assert_eq!(sample(&text, "gateway_requests_admitted_total"), Some(2));
}

on_both_backends!(
    unused_is_refunded_excess_charged_and_no_header_keeps_the_reservation,
    an_excess_past_the_limit_is_an_overrun_in_metrics,
);
