//! The gateway's Prometheus `/metrics` (`--metrics-listen`): requests admitted and refused, the
//! identities refused most (`--metrics-top`), and the reservations' settlements (`--reserve`).

use axum::Router;
use axum::routing::get;
use slidingwindow_service::prometheus::{TopRefused, counter};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Metrics {
    pub admitted: AtomicU64,
    pub refused: AtomicU64,
    /// Refused because a --concurrency limit was full.
    pub inflight_refused: AtomicU64,
    /// Reserved and not used, refunded (requests' units).
    pub settle_refunded: AtomicU64,
    /// Used beyond the reservation and admitted by the limits.
    pub settle_charged: AtomicU64,
    /// Used beyond the reservation and refused by the limits: spent anyway.
    pub settle_overrun: AtomicU64,
    /// Settlements whose overrun was not zero.
    pub settle_overruns: AtomicU64,
    /// Responses without a valid --settle-header: the reservation kept.
    pub settle_kept: AtomicU64,
    /// Calls that met a configuration error (neither the module nor the script runs).
    pub redis_config_errors: AtomicU64,
    top: TopRefused,
}

impl Metrics {
    pub fn new(top: usize) -> Metrics {
        Metrics {
            top: TopRefused::new(top),
            ..Metrics::default()
        }
    }

    /// One request refused (429) for `identity`.
    pub fn refused(&self, identity: &[u8]) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.top.count(identity);
    }

    pub fn admitted(&self) {
        self.admitted.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(a: &AtomicU64, n: u64) {
        if n > 0 {
            a.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (name, help, a) in [
            (
                "gateway_requests_admitted_total",
                "Requests admitted",
                &self.admitted,
            ),
            (
                "gateway_requests_refused_total",
                "Requests answered 429",
                &self.refused,
            ),
            (
                "gateway_inflight_refused_total",
                "Requests answered 429 by a --concurrency limit",
                &self.inflight_refused,
            ),
            (
                "gateway_settle_refunded_total",
                "Reserved units not used, refunded",
                &self.settle_refunded,
            ),
            (
                "gateway_settle_charged_total",
                "Units used beyond a reservation, admitted",
                &self.settle_charged,
            ),
            (
                "gateway_settle_overrun_total",
                "Units used beyond a reservation, refused by the limits: spent anyway",
                &self.settle_overrun,
            ),
            (
                "gateway_settle_overruns_total",
                "Settlements with an overrun",
                &self.settle_overruns,
            ),
            (
                "gateway_settle_kept_total",
                "Responses without a valid settle header: the reservation kept",
                &self.settle_kept,
            ),
            (
                "gateway_redis_config_errors_total",
                "Calls that met a configuration error: neither the module nor the script runs",
                &self.redis_config_errors,
            ),
        ] {
            counter(&mut out, name, help, load(a));
        }
        self.top.render(&mut out, "gateway_top_refused", "identity");
        out
    }
}

/// `GET /metrics`.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new().route("/metrics", get(move || async move { metrics.render() }))
}
