//! envoyproxy/ratelimit's environment variables that map onto our flags, read as those flags'
//! defaults (README, "Settings"), so that its image's configuration works here: a flag given
//! wins, then a variable clap reads itself (`MERGE_DOMAIN_CONFIG`, `CACHE_KEY_PREFIX`, ...), then
//! these. Variables with no counterpart that would change what is limited are refused; the
//! others are left alone.

use clap::Command;
use std::path::PathBuf;

/// The defaults the environment gives, by the clap id of their flag, and what it says about the
/// variables it cannot honour.
#[derive(Debug, Default, PartialEq)]
pub struct Defaults {
    pub values: Vec<(&'static str, Vec<String>)>,
    pub warnings: Vec<String>,
}

/// Reads the variables through `var` (the process's environment in `main`).
pub fn read(var: impl Fn(&str) -> Option<String>) -> Result<Defaults, String> {
    let mut d = Defaults::default();
    let is_true =
        |name: &str| var(name).is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if let Some(backend) = var("BACKEND_TYPE").filter(|b| !b.eq_ignore_ascii_case("redis")) {
        return Err(format!(
            "BACKEND_TYPE={backend}: only redis (with the module) is served"
        ));
    }
    if let Some(kind) = var("CONFIG_TYPE").filter(|c| !c.eq_ignore_ascii_case("FILE")) {
        return Err(format!(
            "CONFIG_TYPE={kind}: only FILE is read (RUNTIME_ROOT)"
        ));
    }
    // The reference reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY/*.yaml.
    if var("RUNTIME_ROOT").is_some() || var("RUNTIME_SUBDIRECTORY").is_some() {
        let mut path = PathBuf::from(
            var("RUNTIME_ROOT").unwrap_or_else(|| "/srv/runtime_data/current".into()),
        );
        path.extend(var("RUNTIME_SUBDIRECTORY"));
        path.push(var("RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".into()));
        d.values.push(("config", vec![path.display().to_string()]));
    }
    let address = |host: &str, port: &str, default_port: &str| {
        let (h, p) = (var(host), var(port));
        (h.is_some() || p.is_some()).then(|| {
            let h = h.unwrap_or_else(|| "0.0.0.0".into());
            let h = if h.contains(':') { format!("[{h}]") } else { h };
            format!("{h}:{}", p.unwrap_or_else(|| default_port.into()))
        })
    };
    if let Some(a) = address("GRPC_HOST", "GRPC_PORT", "8081") {
        d.values.push(("listen", vec![a]));
    }
    if let Some(a) = address("HOST", "PORT", "8080") {
        d.values.push(("http_listen", vec![a]));
    }
    if is_true("USE_PROMETHEUS") {
        let addr = var("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
        d.values.push(("metrics_listen", vec![addr]));
        if let Some(p) = var("PROMETHEUS_PATH").filter(|p| p != "/metrics") {
            d.warnings
                .push(format!("PROMETHEUS_PATH={p}: served at /metrics"));
        }
    }
    if is_true("USE_STATSD") || is_true("USE_DOG_STATSD") {
        d.warnings
            .push("USE_STATSD: statsd is not sent; USE_PROMETHEUS=true serves /metrics".into());
    }
    if let Some(url) = var("REDIS_URL") {
        redis(&var, &url, is_true("REDIS_TLS"), &mut d)?;
    }
    Ok(d)
}

/// REDIS_URL in the reference's forms: `host:port` (REDIS_SOCKET_TYPE=tcp) or a socket path
/// (unix, its default); REDIS_TYPE cluster: `host:port,host:port`; sentinel:
/// `master,host:port,...`. REDIS_AUTH is `password` or `user:password`.
fn redis(
    var: &impl Fn(&str) -> Option<String>,
    url: &str,
    tls: bool,
    d: &mut Defaults,
) -> Result<(), String> {
    let auth = var("REDIS_AUTH").filter(|a| !a.is_empty());
    let unix = var("REDIS_SOCKET_TYPE").is_none_or(|t| t.eq_ignore_ascii_case("unix"));
    let scheme = if tls { "rediss" } else { "redis" };
    let kind = var("REDIS_TYPE").unwrap_or_else(|| "single".into());
    let parts: Vec<&str> = url.split(',').map(str::trim).collect();
    match kind.to_ascii_lowercase().as_str() {
        "single" => {
            let one = match (unix, auth) {
                (true, None) => format!("unix://{url}"),
                (true, Some(a)) => format!("unix://{url}?pass={}", encode(&a)),
                (false, a) => format!("{scheme}://{}{url}", userinfo(a.as_deref())),
            };
            d.values.push(("redis", vec![one]));
        }
        "cluster" => {
            let nodes = parts
                .iter()
                .map(|p| format!("{scheme}://{}{p}", userinfo(auth.as_deref())));
            d.values.push(("redis", nodes.collect()));
            d.values.push(("cluster", vec!["true".into()]));
        }
        "sentinel" => {
            let [master, sentinels @ ..] = parts.as_slice() else {
                unreachable!("split yields at least one part")
            };
            if sentinels.is_empty() {
                return Err(format!(
                    "REDIS_URL={url}: REDIS_TYPE=sentinel takes master,host:port,..."
                ));
            }
            let sentinel_auth = var("REDIS_SENTINEL_AUTH");
            let urls = sentinels
                .iter()
                .map(|s| format!("{scheme}://{}{s}", userinfo(sentinel_auth.as_deref())));
            d.values.push(("redis", urls.collect()));
            d.values.push(("sentinel", vec![(*master).to_owned()]));
            if let Some(a) = auth {
                d.values.push(("redis_auth", vec![a]));
            }
        }
        other => {
            return Err(format!(
                "REDIS_TYPE={other}: expected single, cluster or sentinel"
            ));
        }
    }
    Ok(())
}

/// `user:password@` or `:password@` for a URL, each part percent-encoded.
fn userinfo(auth: Option<&str>) -> String {
    match auth {
        None => String::new(),
        Some(a) => match a.split_once(':') {
            Some((user, pass)) => format!("{}:{}@", encode(user), encode(pass)),
            None => format!(":{}@", encode(a)),
        },
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `cmd` with the defaults set on those of its arguments it has (the healthcheck has only
/// `listen`); a default makes a required argument optional.
pub fn apply(mut cmd: Command, d: &Defaults) -> Command {
    for (id, values) in &d.values {
        if cmd.get_arguments().any(|a| a.get_id() == *id) {
            // Parsed once per process: the few strings live as long as it.
            let values: Vec<&'static str> = values.iter().map(|v| &*v.clone().leak()).collect();
            cmd = cmd.mut_arg(*id, |a| a.required(false).default_values(values));
        }
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::{CommandFactory, FromArgMatches};
    use std::collections::HashMap;

    fn defaults(vars: &[(&str, &str)]) -> Result<Defaults, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        read(|name| vars.get(name).cloned())
    }

    fn parse(vars: &[(&str, &str)], args: &[&str]) -> Cli {
        let cmd = apply(Cli::command(), &defaults(vars).unwrap());
        let m = cmd.try_get_matches_from(std::iter::once("e").chain(args.iter().copied()));
        Cli::from_arg_matches(&m.unwrap()).unwrap()
    }

    #[test]
    fn the_reference_image_settings() {
        let vars = [
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("USE_STATSD", "false"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis:6379"),
            ("GRPC_PORT", "9081"),
            ("PORT", "9080"),
        ];
        let cli = parse(&vars, &[]);
        assert_eq!(cli.config, PathBuf::from("/data/ratelimit/config"));
        assert_eq!(cli.redis, ["redis://redis:6379"]);
        assert_eq!(cli.listen.to_string(), "0.0.0.0:9081");
        assert_eq!(cli.http_listen.unwrap().to_string(), "0.0.0.0:9080");
        assert_eq!(cli.metrics_listen, None);
        assert!(!cli.cluster && cli.sentinel.is_none());
        assert!(defaults(&vars).unwrap().warnings.is_empty());
        // Flags win over the environment.
        let cli = parse(
            &vars,
            &[
                "--config",
                "c.yaml",
                "--listen",
                "127.0.0.1:1",
                "--redis",
                "redis://x",
            ],
        );
        assert_eq!(cli.config, PathBuf::from("c.yaml"));
        assert_eq!(cli.listen.to_string(), "127.0.0.1:1");
        assert_eq!(cli.redis, ["redis://x"]);
        // Without RUNTIME_ROOT, --config stays required.
        let cmd = apply(Cli::command(), &defaults(&[("GRPC_PORT", "1")]).unwrap());
        assert!(cmd.try_get_matches_from(["e"]).is_err());
    }

    #[test]
    fn redis_forms() {
        let url = |vars: &[(&str, &str)]| {
            let d = defaults(vars).unwrap();
            d.values
                .into_iter()
                .filter(|(id, _)| *id != "config")
                .collect::<Vec<_>>()
        };
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            url(&[("REDIS_URL", "/run/r.sock")]),
            [("redis", v(&["unix:///run/r.sock"]))]
        );
        assert_eq!(
            url(&[
                ("REDIS_URL", "h:1"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TLS", "true"),
                ("REDIS_AUTH", "u:p@ss")
            ]),
            [("redis", v(&["rediss://u:p%40ss@h:1"]))]
        );
        assert_eq!(
            url(&[
                ("REDIS_URL", "a:1, b:2"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "cluster"),
                ("REDIS_AUTH", "pw")
            ]),
            [
                ("redis", v(&["redis://:pw@a:1", "redis://:pw@b:2"])),
                ("cluster", v(&["true"]))
            ]
        );
        assert_eq!(
            url(&[
                ("REDIS_URL", "m,s1:26379,s2:26379"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "SENTINEL"),
                ("REDIS_AUTH", "pw")
            ]),
            [
                ("redis", v(&["redis://s1:26379", "redis://s2:26379"])),
                ("sentinel", v(&["m"])),
                ("redis_auth", v(&["pw"]))
            ]
        );
        let cli = parse(
            &[
                ("REDIS_URL", "a:1,b:2"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "cluster"),
            ],
            &["--config", "c"],
        );
        assert!(cli.cluster && cli.validate().is_ok());
        assert!(defaults(&[("REDIS_URL", "m"), ("REDIS_TYPE", "sentinel")]).is_err());
        assert!(defaults(&[("REDIS_URL", "m"), ("REDIS_TYPE", "ring")]).is_err());
        assert!(defaults(&[("BACKEND_TYPE", "memcache")]).is_err());
        assert!(defaults(&[("CONFIG_TYPE", "GRPC_XDS_SOTW")]).is_err());
    }

    #[test]
    fn prometheus_and_statsd() {
        let d = defaults(&[
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_PATH", "/m"),
            ("USE_STATSD", "true"),
        ])
        .unwrap();
        assert_eq!(d.values, [("metrics_listen", vec![":9090".to_string()])]);
        assert_eq!(d.warnings.len(), 2);
        let cli = parse(
            &[
                ("USE_PROMETHEUS", "true"),
                ("PROMETHEUS_ADDR", "127.0.0.1:9"),
            ],
            &["--config", "c"],
        );
        assert_eq!(cli.metrics_listen.unwrap().to_string(), "127.0.0.1:9");
    }
}
