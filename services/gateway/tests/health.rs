//! The gateway's --health-path and its `healthcheck` subcommand (an image's HEALTHCHECK), against
//! a real redis-server with the module.

use testkit::harness;
mod support;

use harness::Server;
use std::process::{Command, Output};
use support::*;

/// `http-gateway healthcheck ARGS` with GATEWAY_* taken from `env` only.
fn healthcheck(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(binary())
        .arg("healthcheck")
        .args(args)
        .env_remove("GATEWAY_LISTEN")
        .env_remove("GATEWAY_HEALTH_PATH")
        .envs(env.iter().copied())
        .output()
        .expect("run http-gateway healthcheck")
}

fn the_health_path_answers_past_the_limit_and_healthcheck_follows_it(redis: Server) {
    let mut gw = Gateway::start(&redis, &["--limit", "1/60s", "--health-path", "/healthz"]);
    assert_eq!(gw.get(Some("a")).status, 200);
    assert_eq!(gw.get(Some("a")).status, 429);
    // Not limited, not counted: the one request stays the only one in the log.
    for _ in 0..3 {
        let r = gw.get_path("/healthz", Some("a"));
        assert_eq!((r.status, r.body.as_str()), (200, "ok"), "{r:?}");
    }
    assert_eq!(zcard(&redis, "rl:{a}"), 1);
    let addr = gw
        .url
        .strip_prefix("http://")
        .expect("http URL")
        .to_string();
    let ok = healthcheck(
        &[],
        &[
            ("GATEWAY_LISTEN", &addr),
            ("GATEWAY_HEALTH_PATH", "/healthz"),
        ],
    );
    assert!(ok.status.success(), "{ok:?}");
    // 0.0.0.0 is asked on loopback, as in an image whose gateway listens on every interface.
    let port = addr.rsplit_once(':').expect("port").1;
    let any = format!("0.0.0.0:{port}");
    let ok = healthcheck(&["--listen", &any, "--health-path", "/healthz"], &[]);
    assert!(ok.status.success(), "{ok:?}");
    // Any other path is the gateway's limited traffic: this client's address has used its one.
    assert_eq!(gw.get(None).status, 200);
    assert_eq!(gw.get(None).status, 429);
    let wrong = healthcheck(&["--listen", &addr, "--health-path", "/nope"], &[]);
    assert!(!wrong.status.success(), "{wrong:?}");
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("429"),
        "{wrong:?}"
    );
    assert!(gw.terminate().success());
    let gone = healthcheck(&["--listen", &addr, "--health-path", "/healthz"], &[]);
    assert!(!gone.status.success(), "{gone:?}");
    let missing = healthcheck(&["--listen", &addr], &[]);
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
}

/// A server that loses the script path (its scripts flushed, SCRIPT refused to the gateway's
/// user): a configuration error, not Redis away. 503 whatever `--on-redis-error` says (open here),
/// the health path 503, `/metrics` counts it, the log says what to do; once the server can run
/// the script again the health path and requests are served.
#[test]
fn a_lost_script_path_is_a_configuration_error() {
    let redis = Server::start_without_module();
    let gw = Gateway::cli(
        &redis,
        "--limit 5/60s --health-path /healthz --metrics-listen 127.0.0.1:0",
    );
    assert_eq!(gw.get(Some("a")).status, 200);
    redis.cli(&["SCRIPT", "FLUSH"]);
    redis.cli(&["ACL", "SETUSER", "default", "-script"]);
    let r = gw.get(Some("a"));
    assert_eq!(r.status, 503, "{r:?}");
    let health = gw.get_path("/healthz", None);
    assert_eq!(health.status, 503, "{health:?}");
    let metrics = gw.metrics();
    assert_eq!(
        sample(&metrics, "gateway_redis_config_errors_total"),
        Some(1),
        "{metrics}"
    );
    gw.assert_logged("configuration error: SCRIPT LOAD answered NOPERM");
    gw.assert_logged("allow SCRIPT and EVALSHA, or load the module");
    redis.cli(&["ACL", "SETUSER", "default", "+script"]);
    let health = gw.get_path("/healthz", None);
    assert_eq!((health.status, health.body.as_str()), (200, "ok"));
    assert_eq!(gw.get(Some("a")).status, 200);
    assert_eq!(zcard(&redis, "rl:{a}"), 2);
}

/// `--backend module` (or GATEWAY_BACKEND=module) on a server without the module: the gateway
/// exits at start, saying so.
#[test]
fn the_module_backend_without_the_module_refuses_to_start() {
    let redis = Server::start_without_module();
    let url = redis.url();
    for (flag, env) in [(Some("module"), None), (None, Some("module"))] {
        let mut cmd = Command::new(binary());
        cmd.args([
            "--redis",
            &url,
            "--limit",
            "5/60s",
            "--listen",
            "127.0.0.1:0",
        ]);
        cmd.env_remove("GATEWAY_BACKEND");
        if let Some(b) = flag {
            cmd.args(["--backend", b]);
        }
        if let Some(b) = env {
            cmd.env("GATEWAY_BACKEND", b);
        }
        let out = cmd.output().expect("run the gateway");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert!(
            stderr.contains("gateway: configuration error: backend module: the server has no SLIDINGWINDOW.ALLOW"),
            "{stderr}"
        );
    }
}

on_both_backends!(the_health_path_answers_past_the_limit_and_healthcheck_follows_it,);
