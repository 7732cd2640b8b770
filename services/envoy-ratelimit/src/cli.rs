//! The command line. Flags that have a counterpart in envoyproxy/ratelimit also read its
//! environment variable (a flag given wins): here when it maps one to one, else in env.rs.

use clap::{Parser, ValueEnum};
use slidingwindow_client::Backend;
use slidingwindow_service::duration::parse_duration;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnRedisError {
    /// Answer OK (requests pass unlimited while Redis is away).
    Open,
    /// Answer OVER_LIMIT for every descriptor with an enforced limit.
    Closed,
}

/// An Envoy rate limit service (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on
/// Redis with the slidingwindow module: rolling windows, all of a request's descriptors charged
/// atomically with SLIDINGWINDOW.ALLOWALL.
#[derive(Debug, Parser)]
#[command(
    name = "envoy-ratelimit",
    version,
    after_help = "`envoy-ratelimit healthcheck --help`: exit 0 when a running service is SERVING."
)]
pub struct Cli {
    /// A YAML config file (envoyproxy/ratelimit's format) or a directory of them, reloaded when
    /// it changes (and on SIGHUP).
    #[arg(long, value_name = "PATH")]
    pub config: PathBuf,
    /// Several files may define one domain: their descriptors are merged.
    #[arg(long, env = "MERGE_DOMAIN_CONFIG")]
    pub merge_domain_config: bool,
    /// How often the config path is read for changes; 0 never.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub reload_interval: Duration,
    /// Redis URL (redis://[user:password@]host:port[/db], rediss:// for TLS); with --cluster, a
    /// seed node, with --sentinel, a sentinel (repeatable).
    #[arg(
        long = "redis",
        value_name = "URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis: Vec<String>,
    /// Talk to a Redis Cluster (a request's keys share its domain's hash tag: one slot).
    #[arg(long, conflicts_with = "sentinel")]
    pub cluster: bool,
    /// Talk to the master of this Sentinel service; --redis names the sentinels.
    #[arg(long, value_name = "NAME")]
    pub sentinel: Option<String>,
    /// With --sentinel: the master's password, or user:password (the sentinels' own come from
    /// their URLs).
    #[arg(long, value_name = "[USER:]PASSWORD")]
    pub redis_auth: Option<String>,
    /// PEM certificates that rediss:// links trust instead of the system's.
    #[arg(long, value_name = "PATH", env = "REDIS_TLS_CACERT")]
    pub redis_ca_file: Option<PathBuf>,
    /// Prepended to every key (no `{` or `}`: the domain is the hash tag).
    #[arg(
        long,
        value_name = "PREFIX",
        env = "CACHE_KEY_PREFIX",
        default_value = ""
    )]
    pub key_prefix: String,
    /// gRPC address, HOST:PORT or :PORT (all interfaces); port 0 picks a free one. The first line
    /// on stdout is `listening on ADDR`.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081", value_parser = listen_addr)]
    pub listen: SocketAddr,
    /// HTTP address of `/json` and `/healthcheck` (off if not given); stdout says `http on ADDR`.
    #[arg(long, value_name = "ADDR", value_parser = listen_addr)]
    pub http_listen: Option<SocketAddr>,
    /// HTTP address of the Prometheus `/metrics` (off if not given); stdout says `metrics on ADDR`.
    #[arg(long, value_name = "ADDR", value_parser = listen_addr)]
    pub metrics_listen: Option<SocketAddr>,
    /// `/metrics` lists the N descriptor keys refused most (a Space-Saving summary of N entries:
    /// at most N series); 0 lists none.
    #[arg(long, value_name = "N", default_value_t = slidingwindow_service::prometheus::DEFAULT_TOP)]
    pub metrics_top: usize,
    /// Hits past this share of a limit count as near_limit.
    #[arg(long, value_name = "RATIO", env = "NEAR_LIMIT_RATIO", default_value_t = 0.8, value_parser = ratio)]
    pub near_limit_ratio: f32,
    /// How often Redis is pinged for the health status.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub health_interval: Duration,
    /// When Redis is unreachable or answers an error. A configuration error (a server that can
    /// run neither the module's commands nor the script) answers OVER_LIMIT whatever this says.
    #[arg(long, value_enum, default_value_t = OnRedisError::Open)]
    pub on_redis_error: OnRedisError,
    /// The module's commands, the Lua script (any Redis or Valkey: managed ones cannot load
    /// modules), or auto: the module where the server has it, else the script. `module` refuses
    /// to start on a server without it.
    #[arg(long, value_name = "auto|module|script", env = "SLIDINGWINDOW_BACKEND", default_value = "auto", value_parser = slidingwindow_service::backend::parse)]
    pub backend: Backend,
    /// Add RateLimit-Policy, RateLimit (and Retry-After when refused) to response_headers_to_add.
    #[arg(long)]
    pub response_headers: bool,
    /// Add the reference's RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
    #[arg(long, env = "LIMIT_RESPONSE_HEADERS_ENABLED")]
    pub limit_response_headers: bool,
    #[arg(
        long,
        value_name = "NAME",
        env = "LIMIT_LIMIT_HEADER",
        default_value = "RateLimit-Limit"
    )]
    pub limit_limit_header: String,
    #[arg(
        long,
        value_name = "NAME",
        env = "LIMIT_REMAINING_HEADER",
        default_value = "RateLimit-Remaining"
    )]
    pub limit_remaining_header: String,
    #[arg(
        long,
        value_name = "NAME",
        env = "LIMIT_RESET_HEADER",
        default_value = "RateLimit-Reset"
    )]
    pub limit_reset_header: String,
}

pub fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    full.parse()
        .map_err(|_| format!("{s:?}: expected HOST:PORT or :PORT, such as 127.0.0.1:8081 or :0"))
}

fn ratio(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{s:?}: expected a number from 0 to 1")),
    }
}

impl Cli {
    pub fn validate(&self) -> Result<(), String> {
        if self.redis.len() > 1 && !self.cluster && self.sentinel.is_none() {
            return Err("several --redis URLs need --cluster or --sentinel".into());
        }
        if self.redis_auth.is_some() && self.sentinel.is_none() {
            return Err("--redis-auth is for --sentinel (put other credentials in the URL)".into());
        }
        if self.key_prefix.contains(['{', '}']) {
            return Err(
                "--key-prefix must not hold { or }: the domain is the keys' hash tag".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        let cli = Cli::try_parse_from([
            "e",
            "--config",
            "c.yaml",
            "--listen",
            ":0",
            "--on-redis-error",
            "closed",
            "--reload-interval",
            "250ms",
        ])
        .unwrap();
        assert_eq!(cli.listen.to_string(), "0.0.0.0:0");
        assert_eq!(cli.on_redis_error, OnRedisError::Closed);
        assert_eq!(cli.reload_interval, Duration::from_millis(250));
        assert_eq!(cli.limit_reset_header, "RateLimit-Reset");
        assert_eq!(cli.backend, Backend::Auto);
        let script = Cli::try_parse_from(["e", "--config", "c", "--backend", "script"]);
        assert_eq!(script.unwrap().backend, Backend::Script);
        assert!(Cli::try_parse_from(["e", "--config", "c", "--backend", "lua"]).is_err());
        assert!(!cli.response_headers && cli.validate().is_ok());
        assert!(Cli::try_parse_from(["e", "--config", "c", "--listen", "nope"]).is_err());
        assert!(Cli::try_parse_from(["e", "--config", "c", "--near-limit-ratio", "2"]).is_err());
        assert!(Cli::try_parse_from(["e"]).is_err());
        let two = Cli::try_parse_from([
            "e",
            "--config",
            "c",
            "--redis",
            "redis://a",
            "--redis",
            "redis://b",
        ]);
        assert!(two.unwrap().validate().is_err());
        let sentinel = Cli::try_parse_from([
            "e",
            "--config",
            "c",
            "--sentinel",
            "m",
            "--redis",
            "redis://a",
            "--redis",
            "redis://b",
        ]);
        assert!(sentinel.unwrap().validate().is_ok());
        let tagged = Cli::try_parse_from(["e", "--config", "c", "--key-prefix", "{x}"]);
        assert!(tagged.unwrap().validate().is_err());
    }
}
