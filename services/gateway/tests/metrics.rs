//! `/metrics` on `--metrics-listen`: requests admitted and refused, and the identities refused
//! most, at most `--metrics-top` of them.

use testkit::harness;
mod support;

use harness::Server;
use support::*;

fn top_series(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("gateway_top_refused{"))
        .map(str::to_string)
        .collect()
}

fn refusals_are_counted_and_the_top_is_bounded_by_metrics_top(redis: Server) {
    let gw = Gateway::cli(
        &redis,
        "--limit 1/60s --metrics-listen 127.0.0.1:0 --metrics-top 2",
    );
    // Each identity admitted once, then refused: alice 5 times, bob and carol once each.
    for (who, refusals) in [("alice", 5), ("bob", 1), ("carol", 1)] {
        let r = gw.get(Some(who));
        assert_eq!(r.status, 200, "{r:?}");
        for _ in 0..refusals {
            let r = gw.get(Some(who));
            assert_eq!(r.status, 429, "{r:?}");
        }
    }
    let text = gw.metrics();
    assert_eq!(sample(&text, "gateway_requests_admitted_total"), Some(3));
    assert_eq!(sample(&text, "gateway_requests_refused_total"), Some(7));
    assert_eq!(sample(&text, "gateway_top_refused_counted_total"), Some(7));
    // Two series at most: carol took bob's place (count 1), so her estimate is 2, error 1.
    assert_eq!(
        top_series(&text),
        [
            "gateway_top_refused{identity=\"alice\"} 5",
            "gateway_top_refused{identity=\"carol\"} 2"
        ]
    );
    assert_eq!(
        sample(&text, "gateway_top_refused_error{identity=\"alice\"}"),
        Some(0)
    );
    assert_eq!(
        sample(&text, "gateway_top_refused_error{identity=\"carol\"}"),
        Some(1)
    );
}

fn the_default_top_lists_ten_identities(redis: Server) {
    let gw = Gateway::start(
        &redis,
        &["--limit", "1/60s", "--metrics-listen", "127.0.0.1:0"],
    );
    for i in 0..12 {
        let who = format!("k{i:02}");
        assert_eq!(gw.get(Some(&who)).status, 200);
        // k00 refused twice, the others once.
        for _ in 0..1 + usize::from(i == 0) {
            let r = gw.get(Some(&who));
            assert_eq!(r.status, 429, "{r:?}");
        }
    }
    let text = gw.metrics();
    let top = top_series(&text);
    assert_eq!(top.len(), 10, "{text}");
    assert_eq!(top[0], "gateway_top_refused{identity=\"k00\"} 2");
    assert_eq!(sample(&text, "gateway_requests_refused_total"), Some(13));
    assert_eq!(sample(&text, "gateway_requests_admitted_total"), Some(12));
}

on_both_backends!(
    refusals_are_counted_and_the_top_is_bounded_by_metrics_top,
    the_default_top_lists_ten_identities,
);
