//! The command line: limits, addresses, and what to do when Redis fails.

use axum::http::{HeaderName, Uri};
use clap::{Parser, ValueEnum};
use slidingwindow_client::Backend;
use slidingwindow_service::duration::{number_and_unit, parse_duration};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// SLIDINGWINDOW.ALLOW takes at most 16 limits, the positional one included.
pub const MAX_LIMITS: usize = slidingwindow_client::MAX_LIMITS;

/// At most `max` requests in any `window_s` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub max: u64,
    pub window_s: u64,
}

impl FromStr for Limit {
    type Err = String;

    /// `MAX/WINDOW`, the window a number with its unit: `10/1s`, `100/60s`, `5000/1h`. A bare
    /// number (`10/1`) is refused: whether it meant seconds or minutes is the user's to say.
    fn from_str(s: &str) -> Result<Limit, String> {
        let bad =
            || format!("{s:?}: expected MAX/WINDOW such as 10/1s, 100/1m, 5000/1h or 20000/1d");
        let (max, window) = s.split_once('/').ok_or_else(bad)?;
        let max: u64 = max.parse().map_err(|_| bad())?;
        let (n, unit) = number_and_unit(window).ok_or_else(bad)?;
        let scale = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(bad()),
        };
        let window_s = n.checked_mul(scale).ok_or_else(bad)?;
        // The module's ranges, checked by the client crate.
        slidingwindow_client::Limit::new(window_s, max).map_err(|_| {
            format!("{s:?}: max must be in 1..=2^53 and the window in 1 s..=2^53 ms")
        })?;
        Ok(Limit { max, window_s })
    }
}

/// `--lease N/DURATION`: leases of `size` permits for `duration_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSpec {
    pub size: u64,
    pub duration_ms: u64,
}

impl FromStr for LeaseSpec {
    type Err = String;

    /// `N/DURATION`: `100/100ms`, `500/1s`.
    fn from_str(s: &str) -> Result<LeaseSpec, String> {
        let bad = || format!("{s:?}: expected N/DURATION such as 100/100ms or 500/1s");
        let (size, duration) = s.split_once('/').ok_or_else(bad)?;
        let size: u64 = size.parse().map_err(|_| bad())?;
        let duration = parse_duration(duration).map_err(|_| bad())?;
        let duration_ms = u64::try_from(duration.as_millis()).map_err(|_| bad())?;
        if size == 0 || duration_ms == 0 || duration.subsec_nanos() % 1_000_000 != 0 {
            return Err(bad());
        }
        Ok(LeaseSpec { size, duration_ms })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// Which upstream answers give the request's charge back (REFUND).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RefundOn {
    /// Any 5xx answer, the gateway's own 502 (upstream unreachable) included.
    #[value(name = "5xx")]
    ServerError,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnRedisError {
    /// Let the request through (unlimited while Redis is away).
    Open,
    /// Answer 503 Service Unavailable.
    Closed,
}

/// An HTTP gateway that rate-limits every request with SLIDINGWINDOW.ALLOW before it reaches the
/// upstream (or a built-in `200 ok`). Identity: the --identity-header (x-api-key), else the
/// client's IP address.
#[derive(Debug, Parser)]
#[command(name = "http-gateway", version)]
pub struct Config {
    /// A limit as MAX/WINDOW (window in s, m, h or d), repeatable: `--limit 10/1s --limit 100/1m`.
    /// The first is the command's positional limit, the others its LIMIT options (at most 16 in
    /// all). Without any, requests are not limited (a baseline for load tests).
    #[arg(long = "limit", value_name = "MAX/WINDOW")]
    pub limits: Vec<Limit>,
    /// Address to listen on (port 0: any free port; the chosen address is printed on stdout).
    #[arg(long, env = "GATEWAY_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Answer GET PATH with `200 ok` from the gateway itself (not limited, not forwarded) while it
    /// runs: for health checks (`http-gateway healthcheck`).
    #[arg(long, value_name = "PATH", env = "GATEWAY_HEALTH_PATH", value_parser = health_path)]
    pub health_path: Option<String>,
    /// Redis URL (redis://[user:password@]host:port[/db]); with --cluster, a seed node (repeatable).
    #[arg(
        long = "redis",
        value_name = "URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis: Vec<String>,
    /// Talk to a Redis Cluster (the key is rl:{identity}: one identity stays on one node).
    #[arg(long)]
    pub cluster: bool,
    /// Forward admitted requests to this http:// base URL; without it they get `200 ok`.
    #[arg(long, value_name = "URL")]
    pub upstream: Option<Uri>,
    /// When Redis is unreachable or answers an error: let requests through, or answer 503. A
    /// configuration error (a server that can run neither the module's commands nor the script)
    /// answers 503 whatever this says.
    #[arg(long, value_enum, default_value_t = OnRedisError::Open)]
    pub on_redis_error: OnRedisError,
    /// The module's commands, the Lua script (any Redis or Valkey: managed ones cannot load
    /// modules), or auto: the module where the server has it, else the script. `module` refuses
    /// to start on a server without it.
    #[arg(long, value_name = "auto|module|script", env = "GATEWAY_BACKEND", default_value = "auto", value_parser = slidingwindow_service::backend::parse)]
    pub backend: Backend,
    /// Answer an identity's requests with 429 from memory, without calling Redis, until its last
    /// refusal's retry_after_ms has passed.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub deny_cache: Switch,
    /// Most identities the deny cache holds (least recently used ones leave first).
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub deny_cache_size: u32,
    /// Most bytes the deny cache holds, keys and entries counted (least recently used leave first).
    #[arg(long, value_name = "BYTES", default_value_t = 16 << 20, value_parser = clap::value_parser!(u64).range(1024..))]
    pub deny_cache_bytes: u64,
    /// Give the request back (SLIDINGWINDOW.REFUND) when the upstream answers this.
    #[arg(long, value_enum, value_name = "5xx")]
    pub refund_on: Option<RefundOn>,
    /// The header naming the request's tenant: each request is then checked in one ALLOWALL
    /// against its identity's limits (rl:{tenant}:<identity>) and the tenant's (rl:{tenant}).
    #[arg(long, value_name = "NAME")]
    pub tenant_header: Option<HeaderName>,
    /// A limit on each tenant as a whole, MAX/WINDOW as for --limit, repeatable.
    #[arg(long = "tenant-limit", value_name = "MAX/WINDOW")]
    pub tenant_limits: Vec<Limit>,
    /// A limit on all traffic through every gateway on this Redis, one key (rl:global),
    /// MAX/WINDOW as for --limit, repeatable.
    #[arg(long = "global-limit", value_name = "MAX/WINDOW")]
    pub global_limits: Vec<Limit>,
    /// Lease the busy keys of --global-limit and --tenant-limit: take N permits for DURATION in
    /// one call and hand them out from memory (`100/100ms`); quiet keys keep one exact call.
    #[arg(long, value_name = "N/DURATION")]
    pub lease: Option<LeaseSpec>,
    /// With --lease: Redis's clock and this host's never disagree by more than MS (NTP), so a
    /// lease hands out permits until this host's clock reads Redis's `now` plus DURATION less
    /// MS, not only until DURATION after its call was sent. For a Redis far away: across an
    /// 80 ms round trip a 100 ms lease is usable for 20 ms without it, 60 ms less MS with it.
    /// Clocks further apart than MS may admit past a lease's end.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub lease_clock_bound: Option<u64>,
    /// `PRECISION MS` on every call: admitted requests are logged at Redis's `now` (a lease's
    /// end) rounded up to a multiple of MS, so that a busy key's log stops growing with its rate
    /// on the compact storage; each request counts up to MS ms longer. 1 to 2^53.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=1 << 53))]
    pub precision: Option<u64>,
    /// The header naming the client (trust it only behind authentication); missing or empty:
    /// the client's address.
    #[arg(long, value_name = "NAME", default_value = "x-api-key")]
    pub identity_header: HeaderName,
    /// IPv6 clients without an identity header share one quota per prefix of this many bits.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u8).range(0..=128))]
    pub ipv6_prefix: u8,
    /// How long the upstream may take to answer (its status line and headers) before the
    /// gateway answers 504 (a 5xx for --refund-on).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub upstream_timeout: Duration,
    /// Append one line per admitted request, `<ms> <key>` (the time passed as `now` or the
    /// lease's handout time, on the gateway's clock, and its first key): a test and audit aid.
    #[arg(long, value_name = "PATH")]
    pub admission_log: Option<PathBuf>,
    /// Serve the Prometheus `/metrics` on this address (port 0: any free port; stderr says
    /// `metrics on http://ADDR`).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// `/metrics` lists the N identities refused most (a Space-Saving summary of N entries: at
    /// most N series); 0 lists none.
    #[arg(long, value_name = "N", default_value_t = slidingwindow_service::prometheus::DEFAULT_TOP)]
    pub metrics_top: usize,
    /// At most N requests of one identity in flight, each holding its slot at most HOLD (s, m,
    /// h or d): `--concurrency 10/30s`. The slot goes back when the upstream's response ends.
    #[arg(long, value_name = "N/HOLD")]
    pub concurrency: Option<Limit>,
    /// At most N requests of one tenant (--tenant-header) in flight, as --concurrency.
    #[arg(long, value_name = "N/HOLD")]
    pub tenant_concurrency: Option<Limit>,
    /// At most N requests in flight through every gateway on this Redis, as --concurrency.
    #[arg(long, value_name = "N/HOLD")]
    pub global_concurrency: Option<Limit>,
    /// Charge each request N on its identity's --limit before proxying, settled with the cost
    /// the upstream's --settle-header reports.
    #[arg(long, value_name = "N", requires = "settle_header", value_parser = clap::value_parser!(u64).range(1..=1 << 53))]
    pub reserve: Option<u64>,
    /// The upstream's response header carrying the request's real cost (for --reserve).
    #[arg(long, value_name = "NAME", requires = "reserve")]
    pub settle_header: Option<HeaderName>,
}

/// A path the router takes as it is: `/` then no `{`, `}` or `*` (axum's captures).
pub fn health_path(s: &str) -> Result<String, String> {
    if s.starts_with('/') && !s.contains(['{', '}', '*']) {
        Ok(s.to_owned())
    } else {
        Err(format!("{s:?}: expected a path such as /healthz"))
    }
}

impl Config {
    /// Checks what clap cannot: the number of limits and the upstream's form.
    pub fn validate(&self) -> Result<(), String> {
        if self.limits.len() + self.tenant_limits.len() + self.global_limits.len() > MAX_LIMITS {
            return Err(format!(
                "at most {MAX_LIMITS} --limit, --tenant-limit and --global-limit options in all"
            ));
        }
        if self.lease_clock_bound.is_some() && self.lease.is_none() {
            return Err("--lease-clock-bound bounds the leases' clocks: give --lease too".into());
        }
        if let Some(l) = self.lease {
            if self.tenant_limits.is_empty() && self.global_limits.is_empty() {
                return Err(
                    "--lease leases --global-limit and --tenant-limit keys: give one".into(),
                );
            }
            let smallest = self
                .tenant_limits
                .iter()
                .chain(&self.global_limits)
                .map(|l| l.max)
                .min()
                .unwrap_or(0);
            if l.size > smallest {
                return Err(format!(
                    "--lease {}/{}ms: a lease must fit every leased limit (the smallest max is {smallest})",
                    l.size, l.duration_ms
                ));
            }
        }
        if self.reserve.is_some()
            && (self.limits.is_empty()
                || !self.tenant_limits.is_empty()
                || !self.global_limits.is_empty()
                || self.lease.is_some()
                || self.precision.is_some())
        {
            return Err("--reserve charges the identity's --limit: give one, and no --tenant-limit, --global-limit, --lease or --precision".into());
        }
        if self.tenant_concurrency.is_some() && self.tenant_header.is_none() {
            return Err("--tenant-concurrency needs --tenant-header".into());
        }
        if self.tenant_header.is_some() == self.tenant_limits.is_empty() {
            return Err("--tenant-header and --tenant-limit go together".into());
        }
        if self.redis.len() > 1 && !self.cluster {
            return Err("several --redis URLs need --cluster".into());
        }
        if let Some(u) = &self.upstream
            && (u.scheme_str() != Some("http") || u.authority().is_none())
        {
            return Err(format!(
                "--upstream {u}: expected http://host:port[/prefix]"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse() {
        let ok = [
            ("10/1s", 10, 1),
            ("100/60s", 100, 60),
            ("5/2m", 5, 120),
            ("5000/1h", 5000, 3600),
            ("1/1d", 1, 86_400),
            (
                "9007199254740992/9007199254740s",
                1 << 53,
                9_007_199_254_740,
            ),
        ];
        for (text, max, window_s) in ok {
            assert_eq!(text.parse(), Ok(Limit { max, window_s }), "{text}");
        }
        for bad in [
            "",
            "10",
            "10/",
            "/1s",
            "0/1s",
            "10/0s",
            "10/1x",
            "10/s",
            "10/1",
            "100/60",
            "-1/1s",
            "1.5/1s",
            "10/1 s",
            "9007199254740993/1s",
            "1/9007199254741s",
        ] {
            assert!(bad.parse::<Limit>().is_err(), "{bad}");
        }
    }

    #[test]
    fn leases_and_durations_parse() {
        assert_eq!(
            "100/100ms".parse(),
            Ok(LeaseSpec {
                size: 100,
                duration_ms: 100
            })
        );
        assert_eq!(
            "500/2s".parse(),
            Ok(LeaseSpec {
                size: 500,
                duration_ms: 2000
            })
        );
        for bad in [
            "", "100", "100/", "0/100ms", "100/0ms", "100/100", "100/1h", "x/1s",
        ] {
            assert!(bad.parse::<LeaseSpec>().is_err(), "{bad}");
        }
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        for bad in ["", "30", "s", "1.5s", "-1s", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let cfg = Config::try_parse_from(["gw"]).unwrap();
        assert_eq!(cfg.upstream_timeout, Duration::from_secs(30));
        assert_eq!(cfg.identity_header.as_str(), "x-api-key");
        assert_eq!((cfg.ipv6_prefix, cfg.deny_cache_bytes), (64, 16 << 20));
        assert!(Config::try_parse_from(["gw", "--ipv6-prefix", "129"]).is_err());
        let lease = |args: &[&str]| {
            Config::try_parse_from([&["gw"], args].concat())
                .unwrap()
                .validate()
        };
        assert!(lease(&["--global-limit", "2000/1s", "--lease", "100/100ms"]).is_ok());
        assert!(lease(&["--global-limit", "50/1s", "--lease", "100/100ms"]).is_err());
        assert!(lease(&["--limit", "500/1s", "--lease", "100/100ms"]).is_err());
        let bound = ["--global-limit", "2000/1s", "--lease", "100/100ms"];
        assert!(lease(&[&bound[..], &["--lease-clock-bound", "5"]].concat()).is_ok());
        assert!(lease(&["--global-limit", "2000/1s", "--lease-clock-bound", "5"]).is_err());
    }

    #[test]
    fn command_line() {
        let cfg = Config::try_parse_from([
            "gw",
            "--limit",
            "10/1s",
            "--limit",
            "100/60s",
            "--on-redis-error",
            "closed",
        ])
        .unwrap();
        assert_eq!(
            cfg.limits,
            [
                Limit {
                    max: 10,
                    window_s: 1
                },
                Limit {
                    max: 100,
                    window_s: 60
                }
            ]
        );
        assert_eq!(cfg.on_redis_error, OnRedisError::Closed);
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(cfg.deny_cache, Switch::On);
        assert_eq!(cfg.refund_on, None);
        assert!(cfg.validate().is_ok());
        let tenants = Config::try_parse_from([
            "gw",
            "--refund-on",
            "5xx",
            "--deny-cache",
            "off",
            "--tenant-header",
            "X-Tenant",
            "--tenant-limit",
            "1000/1m",
        ])
        .unwrap();
        assert!(tenants.validate().is_ok());
        assert_eq!(tenants.refund_on, Some(RefundOn::ServerError));
        assert_eq!(tenants.deny_cache, Switch::Off);
        assert_eq!(tenants.tenant_header.unwrap().as_str(), "x-tenant");
        for half in [
            &["gw", "--tenant-header", "x-tenant"][..],
            &["gw", "--tenant-limit", "5/1s"],
        ] {
            assert!(Config::try_parse_from(half).unwrap().validate().is_err());
        }
        assert!(Config::try_parse_from(["gw", "--refund-on", "4xx"]).is_err());
        assert!(Config::try_parse_from(["gw", "--deny-cache-size", "0"]).is_err());
        let many: Vec<String> = std::iter::once("gw".to_string())
            .chain((0..17).flat_map(|_| ["--limit".to_string(), "1/1s".to_string()]))
            .collect();
        assert!(Config::try_parse_from(many).unwrap().validate().is_err());
        let https = Config::try_parse_from(["gw", "--upstream", "https://example.com"]).unwrap();
        assert!(https.validate().is_err());
        let two =
            Config::try_parse_from(["gw", "--redis", "redis://a", "--redis", "redis://b"]).unwrap();
        assert!(two.validate().is_err());
    }
}
