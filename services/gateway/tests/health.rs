//! The gateway's --health-path and its `healthcheck` subcommand (an image's HEALTHCHECK), against
//! a real redis-server with the module.

use testkit::common;
mod support;

use common::Server;
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

#[test]
fn the_health_path_answers_past_the_limit_and_healthcheck_follows_it() {
    let redis = Server::start();
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
