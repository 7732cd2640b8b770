//! Statistics in the reference's Prometheus names (its default statsd mapping): per limit
//! total hits, over limit, near limit (NEAR_LIMIT_RATIO), within limit and shadow mode, keyed
//! as its `detailed_metric` / `value_to_metric` rules say; the config loads, the calls, Redis
//! errors and latency; our `lease` extension's counters; and the descriptor keys refused most
//! (`--metrics-top`). Rendered as Prometheus text for `/metrics`.

use crate::config::{LeaseSpec, Limit};
use crate::stat::{Counters, StatKey};
use slidingwindow_client::MapStats;
use slidingwindow_service::prometheus::{TopRefused, escape};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most statistics keys that requests' values may add (`detailed_metric`, `value_to_metric`,
/// unknown domains); beyond it they are counted under `key1="_overflow"`.
pub const MAX_DYNAMIC_SERIES: usize = 10_000;

/// Counts and sums of observations in Prometheus' default buckets (seconds).
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (b, le) in self.buckets.iter().zip(BUCKETS) {
            if s <= le {
                b.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let _ = writeln!(out, "# TYPE {name} histogram");
        let sep = if labels.is_empty() { "" } else { "," };
        for (b, le) in self.buckets.iter().zip(BUCKETS) {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {}",
                b.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

#[derive(Debug, Default)]
pub struct Metrics {
    near_limit_ratio: f32,
    /// Every limit's counters by key; kept across reloads, so a limit that stays counts on.
    series: Mutex<BTreeMap<StatKey, Arc<Counters>>>,
    dynamic: AtomicU64,
    overflow: Arc<Counters>,
    not_found: Mutex<BTreeMap<String, u64>>,
    pub config_load_success: AtomicU64,
    pub config_load_error: AtomicU64,
    pub redis_errors: AtomicU64,
    /// Calls that met a configuration error (neither the module nor the script runs).
    pub redis_config_errors: AtomicU64,
    pub service_errors: AtomicU64,
    pub total_requests: AtomicU64,
    pub response_time: Histogram,
    pub redis_latency: Histogram,
    /// The descriptors' keys refused most.
    pub top: TopRefused,
}

impl Metrics {
    pub fn new(near_limit_ratio: f32) -> Metrics {
        Metrics {
            near_limit_ratio,
            ..Metrics::default()
        }
    }

    /// Keeps the `n` descriptor keys refused most (`--metrics-top`).
    pub fn with_top(self, n: usize) -> Metrics {
        Metrics {
            top: TopRefused::new(n),
            ..self
        }
    }

    /// The counters of a matched limit: its own (found once), or those of the key the request's
    /// values made.
    pub fn of(&self, limit: &Limit, stat: Option<&StatKey>) -> Arc<Counters> {
        match stat {
            None => limit
                .counters
                .get_or_init(|| self.series(&limit.stat, false))
                .clone(),
            Some(key) => self.series(key, true),
        }
    }

    fn series(&self, key: &StatKey, dynamic: bool) -> Arc<Counters> {
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = series.get(key) {
            return c.clone();
        }
        if dynamic {
            let n = self.dynamic.fetch_add(1, Ordering::Relaxed);
            if n >= MAX_DYNAMIC_SERIES as u64 {
                self.dynamic.fetch_sub(1, Ordering::Relaxed);
                return self.overflow.clone();
            }
        }
        let c = Arc::new(Counters::default());
        series.insert(key.clone(), c.clone());
        c
    }

    pub fn domain_not_found(&self, domain: &str) {
        let mut m = self.not_found.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(domain) {
            *n += 1;
        } else if m.len() < MAX_DYNAMIC_SERIES {
            m.insert(domain.to_owned(), 1);
        } else {
            *m.entry("_overflow".to_owned()).or_default() += 1;
        }
    }

    /// One descriptor's hits, as the reference counts them: `before` requests were in the window,
    /// `cost` more were asked for; `over` when refused by this limit. Hits past the limit are
    /// over limit, hits past `NEAR_LIMIT_RATIO` of it and within it near limit.
    pub fn hits(&self, c: &Counters, limit: u32, before: u64, cost: u64, over: bool, shadow: bool) {
        let add = |a: &AtomicU64, n: u64| {
            if n > 0 {
                a.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(&c.total_hits, cost);
        let limit = u64::from(limit);
        let near = (limit as f32 * self.near_limit_ratio).floor() as u64;
        let after = before.saturating_add(cost);
        if over {
            let past = if before >= limit {
                cost
            } else {
                after.saturating_sub(limit)
            };
            add(&c.over_limit, past);
            if before < limit {
                add(&c.near_limit, limit - near.max(before));
            }
            if shadow {
                add(&c.shadow_mode, past);
            }
        } else {
            add(&c.within_limit, cost);
            if after > near {
                add(
                    &c.near_limit,
                    if before >= near { cost } else { after - near },
                );
            }
        }
    }

    /// Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let series: Vec<(StatKey, Arc<Counters>)> = {
            let s = self.series.lock().unwrap_or_else(|p| p.into_inner());
            s.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let stats: [(&str, Field); 5] = [
            ("total_hits", |c| &c.total_hits),
            ("over_limit", |c| &c.over_limit),
            ("near_limit", |c| &c.near_limit),
            ("within_limit", |c| &c.within_limit),
            ("shadow_mode", |c| &c.shadow_mode),
        ];
        for (stat, field) in stats {
            let name = format!("ratelimit_service_rate_limit_{stat}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (key, c) in &series {
                let _ = writeln!(
                    out,
                    "{name}{{{}}} {}",
                    labels(key),
                    field(c).load(Ordering::Relaxed)
                );
            }
            let overflow = field(&self.overflow).load(Ordering::Relaxed);
            if overflow > 0 {
                let _ = writeln!(out, "{name}{{key1=\"_overflow\"}} {overflow}");
            }
        }
        let _ = writeln!(
            out,
            "# TYPE ratelimit_service_rate_limit_domain_not_found counter"
        );
        for (domain, n) in self
            .not_found
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "ratelimit_service_rate_limit_domain_not_found{{domain=\"{}\"}} {n}",
                escape(domain)
            );
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (name, value) in [
            ("config_load_success", &self.config_load_success),
            ("config_load_error", &self.config_load_error),
        ] {
            let _ = writeln!(out, "# TYPE ratelimit_service_{name} counter");
            let _ = writeln!(out, "ratelimit_service_{name}{{}} {}", load(value));
        }
        let errors = "ratelimit_service_should_rate_limit_error";
        let _ = writeln!(out, "# TYPE {errors} counter");
        for (err_type, value) in [
            ("redis_error", &self.redis_errors),
            ("redis_config_error", &self.redis_config_errors),
            ("service_error", &self.service_errors),
        ] {
            let _ = writeln!(out, "{errors}{{err_type=\"{err_type}\"}} {}", load(value));
        }
        let total = "ratelimit_service_total_requests";
        let _ = writeln!(out, "# TYPE {total} counter");
        let _ = writeln!(
            out,
            "{total}{{grpc_method=\"ShouldRateLimit\"}} {}",
            load(&self.total_requests)
        );
        self.response_time.render(
            &mut out,
            "ratelimit_service_response_time_seconds",
            "grpc_method=\"ShouldRateLimit\"",
        );
        self.redis_latency
            .render(&mut out, "ratelimit_service_redis_latency_seconds", "");
        self.top
            .render(&mut out, "ratelimit_service_top_refused", "key");
        out
    }
}

/// Our `lease` extension's statistics, one series per lease spec (`size`, `duration_ms`): the
/// lease maps' counters since the spec was first loaded (a reload that drops it drops them).
pub fn render_leases(out: &mut String, specs: &[(LeaseSpec, MapStats)]) {
    let series: [(&str, &str, LeaseField); 7] = [
        ("permits_from_memory", "counter", |m| m.leases.from_memory),
        ("calls", "counter", |m| m.leases.lease_calls),
        ("granted", "counter", |m| m.leases.leases_granted),
        ("refused", "counter", |m| m.leases.leases_refused),
        ("permits_refunded", "counter", |m| m.leases.refunded),
        ("errors", "counter", |m| m.leases.errors),
        ("keys", "gauge", |m| m.keys as u64),
    ];
    for (stat, kind, value) in series {
        let name = format!("ratelimit_service_lease_{stat}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (spec, m) in specs {
            // `precision_ms` only on the maps of limits with a precision.
            let precision = spec
                .precision
                .map_or(String::new(), |p| format!(",precision_ms=\"{p}\""));
            let _ = writeln!(
                out,
                "{name}{{size=\"{}\",duration_ms=\"{}\"{precision}}} {}",
                spec.size,
                spec.duration_ms,
                value(m)
            );
        }
    }
}

/// One of a limit's counters.
type Field = fn(&Counters) -> &AtomicU64;

/// One of a lease map's statistics.
type LeaseField = fn(&MapStats) -> u64;

/// `domain`, `key1` (the first level), and `key2` (the levels below it, joined by dots).
fn labels(key: &StatKey) -> String {
    let mut s = format!("domain=\"{}\"", escape(&key.domain));
    if let Some(first) = key.parts.first() {
        let _ = write!(s, ",key1=\"{}\"", escape(first));
    }
    if key.parts.len() > 1 {
        let _ = write!(s, ",key2=\"{}\"", escape(&key.parts[1..].join(".")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(c: &Counters) -> [u64; 5] {
        [
            &c.total_hits,
            &c.over_limit,
            &c.near_limit,
            &c.within_limit,
            &c.shadow_mode,
        ]
        .map(|a| a.load(Ordering::Relaxed))
    }

    #[test]
    fn hits_as_the_reference_counts_them() {
        let m = Metrics::new(0.8);
        // Limit 10, near from 8: hits 1..=7 within, 8..=10 within and near, then over.
        let c = Counters::default();
        for before in 0..10 {
            m.hits(&c, 10, before, 1, false, false);
        }
        assert_eq!(counts(&c), [10, 0, 2, 10, 0]);
        m.hits(&c, 10, 10, 1, true, true);
        assert_eq!(counts(&c), [11, 1, 2, 10, 1]);
        // 5 asked with 7 in the window: 2 over, 2 near (8 and 9... up to the limit).
        let d = Counters::default();
        m.hits(&d, 10, 7, 5, true, false);
        assert_eq!(counts(&d), [5, 2, 2, 0, 0]);
    }

    #[test]
    fn renders_labels_and_caps_dynamic_keys() {
        let m = Metrics::new(0.8);
        let key = |parts: &[&str]| StatKey {
            domain: "d".into(),
            parts: parts.iter().map(|p| p.to_string()).collect(),
        };
        let c = m.series(&key(&["a_\"x\"", "b", "c"]), true);
        m.hits(&c, 5, 0, 2, false, false);
        m.domain_not_found("nope");
        m.redis_latency.observe(Duration::from_millis(3));
        let m = m.with_top(1);
        m.top.count(b"d_k_v");
        m.top.count(b"d_k_w");
        let text = m.render();
        // One series at most: the second key took the first's place.
        assert!(text.contains("ratelimit_service_top_refused{key=\"d_k_w\"} 2\n"));
        assert!(!text.contains("ratelimit_service_top_refused{key=\"d_k_v\"}"));
        assert!(text.contains(
            "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"a_\\\"x\\\"\",key2=\"b.c\"} 2"
        ));
        assert!(text.contains("ratelimit_service_rate_limit_domain_not_found{domain=\"nope\"} 1"));
        assert!(text.contains("ratelimit_service_redis_latency_seconds_bucket{le=\"0.005\"} 1"));
        for i in 0..MAX_DYNAMIC_SERIES + 5 {
            m.series(&key(&[&i.to_string()]), true);
        }
        assert!(Arc::ptr_eq(&m.series(&key(&["new"]), true), &m.overflow));
        // The config's own keys are never capped.
        assert!(!Arc::ptr_eq(&m.series(&key(&["own"]), false), &m.overflow));
    }
}
