//! The command line.

use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

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
#[command(name = "envoy-ratelimit", version)]
pub struct Cli {
    /// A YAML config file (envoyproxy/ratelimit's format) or a directory of them.
    #[arg(long, value_name = "PATH")]
    pub config: PathBuf,
    /// Redis URL (redis://[user:password@]host:port[/db]); with --cluster, a seed node (repeatable).
    #[arg(
        long = "redis",
        value_name = "URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis: Vec<String>,
    /// Talk to a Redis Cluster (a request's keys share its domain's hash tag: one slot).
    #[arg(long)]
    pub cluster: bool,
    /// gRPC address, HOST:PORT or :PORT (all interfaces); port 0 picks a free one. The first line
    /// on stdout is `listening on ADDR`.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081", value_parser = listen_addr)]
    pub listen: SocketAddr,
    /// When Redis is unreachable or answers an error.
    #[arg(long, value_enum, default_value_t = OnRedisError::Open)]
    pub on_redis_error: OnRedisError,
    /// Add RateLimit-Policy, RateLimit (and Retry-After when refused) to response_headers_to_add.
    #[arg(long)]
    pub response_headers: bool,
}

fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    full.parse()
        .map_err(|_| format!("{s:?}: expected HOST:PORT or :PORT, such as 127.0.0.1:8081 or :0"))
}

impl Cli {
    pub fn validate(&self) -> Result<(), String> {
        if self.redis.len() > 1 && !self.cluster {
            return Err("several --redis URLs need --cluster".into());
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
        ])
        .unwrap();
        assert_eq!(cli.listen.to_string(), "0.0.0.0:0");
        assert_eq!(cli.on_redis_error, OnRedisError::Closed);
        assert!(!cli.response_headers && cli.validate().is_ok());
        assert!(Cli::try_parse_from(["e", "--config", "c", "--listen", "nope"]).is_err());
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
    }
}
