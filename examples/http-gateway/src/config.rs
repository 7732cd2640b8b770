//! The command line: limits, addresses, and what to do when Redis fails.

use axum::http::Uri;
use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::str::FromStr;

/// Largest `max` and window (in ms) the module accepts: integers up to 2^53 are exact scores.
const MAX_EXACT: u64 = 1 << 53;
/// SLIDINGWINDOW.ALLOW takes at most 16 limits, the positional one included.
pub const MAX_LIMITS: usize = 16;

/// At most `max` requests in any `window_s` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub max: u64,
    pub window_s: u64,
}

impl FromStr for Limit {
    type Err = String;

    /// `MAX/WINDOW`, the window a number of seconds with an optional unit: `10/1s`, `100/60`, `5000/1h`.
    fn from_str(s: &str) -> Result<Limit, String> {
        let bad =
            || format!("{s:?}: expected MAX/WINDOW such as 10/1s, 100/1m, 5000/1h or 20000/1d");
        let (max, window) = s.split_once('/').ok_or_else(bad)?;
        let max: u64 = max.parse().map_err(|_| bad())?;
        let split = window
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(window.len());
        let (digits, unit) = window.split_at(split);
        let n: u64 = digits.parse().map_err(|_| bad())?;
        let scale = match unit {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(bad()),
        };
        let window_s = n.checked_mul(scale).ok_or_else(bad)?;
        if !(1..=MAX_EXACT).contains(&max) || !(1..=MAX_EXACT / 1000).contains(&window_s) {
            return Err(format!(
                "{s:?}: max must be in 1..=2^53 and the window in 1 s..=2^53 ms"
            ));
        }
        Ok(Limit { max, window_s })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnRedisError {
    /// Let the request through (unlimited while Redis is away).
    Open,
    /// Answer 503 Service Unavailable.
    Closed,
}

/// An HTTP gateway that rate-limits every request with SLIDINGWINDOW.ALLOW before it reaches the
/// upstream (or a built-in `200 ok`). Identity: the x-api-key header, else the client's IP address.
#[derive(Debug, Parser)]
#[command(name = "http-gateway", version)]
pub struct Config {
    /// A limit as MAX/WINDOW (window in s, m, h or d), repeatable: `--limit 10/1s --limit 100/1m`.
    /// The first is the command's positional limit, the others its LIMIT options (at most 16 in
    /// all). Without any, requests are not limited (a baseline for load tests).
    #[arg(long = "limit", value_name = "MAX/WINDOW")]
    pub limits: Vec<Limit>,
    /// Address to listen on (port 0: any free port; the chosen address is printed on stdout).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
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
    /// When Redis is unreachable or answers an error: let requests through, or answer 503.
    #[arg(long, value_enum, default_value_t = OnRedisError::Open)]
    pub on_redis_error: OnRedisError,
}

impl Config {
    /// Checks what clap cannot: the number of limits and the upstream's form.
    pub fn validate(&self) -> Result<(), String> {
        if self.limits.len() > MAX_LIMITS {
            return Err(format!("at most {MAX_LIMITS} --limit options"));
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
            ("100/60", 100, 60),
            ("5/2m", 5, 120),
            ("5000/1h", 5000, 3600),
            ("1/1d", 1, 86_400),
            ("9007199254740992/9007199254740", 1 << 53, 9_007_199_254_740),
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
            "-1/1s",
            "1.5/1s",
            "10/1 s",
            "9007199254740993/1s",
            "1/9007199254741",
        ] {
            assert!(bad.parse::<Limit>().is_err(), "{bad}");
        }
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
        assert!(cfg.validate().is_ok());
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
