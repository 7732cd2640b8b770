//! The module's configs: from redis.conf, `MODULE LOADEX` and `CONFIG SET`, kept by
//! `CONFIG REWRITE`, refused out of range, and doing what they say.

use testkit::client;
use testkit::harness;

use client::{ok, q, sw, sw5};
use harness::{Server, call, error_line, module_path};

/// `CONFIG GET slidingwindow.*` (whose order is the server's) as (cap, storage, lateness);
/// top-keys is tests/top.rs's to check.
fn configs(con: &mut redis::Connection) -> (String, String, String) {
    let pairs: std::collections::HashMap<String, String> =
        q(con, &["CONFIG", "GET", "slidingwindow.*"]);
    assert_eq!(pairs.len(), 4, "{pairs:?}");
    let get = |name: &str| pairs.get(name).cloned().unwrap_or_default();
    (
        get("slidingwindow.max-members-per-call"),
        get("slidingwindow.storage"),
        get("slidingwindow.lateness"),
    )
}

/// `CONFIG GET slidingwindow.lateness`.
fn lateness(con: &mut redis::Connection) -> String {
    client::config_get(con, "slidingwindow.lateness")
}

/// A server without the module that lets `MODULE LOAD` load it.
fn bare_server() -> Server {
    Server::builder()
        .without_module()
        .args(["--enable-module-command", "yes"])
        .start()
}

/// `MODULE <words>`, the words split at spaces (the module's path has none in these tests).
fn load(con: &mut redis::Connection, words: &str) -> redis::Value {
    let mut cmd = vec!["MODULE"];
    cmd.extend(words.split_whitespace());
    call(con, &cmd)
}

/// The per-call cap is the config: admissions up to it pass, one more is the error naming it,
/// and a refused value changes nothing.
#[test]
fn the_cap_is_the_config() {
    let s = Server::builder().config("max-members-per-call", 5).start();
    let mut c = s.client();
    assert_eq!(sw5(&mut c, "ALLOW k 10 100 1000 COST 5")[..2], [1, 5]);
    let v = sw(&mut c, "ALLOW k 10 100 1000 COST 6");
    assert_eq!(
        error_line(&v).as_deref(),
        Some("ERR cost 6 would add more than 5 members in one call")
    );
    for bad in ["0", "10000001", "-1", "x"] {
        client::config_refused(&mut c, "slidingwindow.max-members-per-call", bad);
    }
    client::config_refused(&mut c, "slidingwindow.storage", "list");
    for bad in ["-1", "86400001", "1.5", "x"] {
        client::config_refused(&mut c, "slidingwindow.lateness", bad);
    }
    assert_eq!(configs(&mut c), ("5".into(), "zset".into(), "0".into()));
    client::config_set(&mut c, "slidingwindow.max-members-per-call", 6);
    assert_eq!(sw5(&mut c, "ALLOW k 10 100 1000 COST 6")[..2], [1, 11]);
}

/// The lateness is the config: trims keep that many ms more and the TTL is that much longer,
/// the replies unchanged; `CONFIG SET` changes it for the next call.
#[test]
fn lateness_is_the_config() {
    let s = Server::builder().lateness(2000).start();
    let mut c = s.client();
    assert_eq!(lateness(&mut c), "2000");
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 1000")[..2], [1, 1]);
    // 1000 has left the window at 12500 (cutoff 2500) but is kept (trim cutoff 500).
    let t0 = harness::server_time_ms(&mut c);
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 12500"), [1, 1, 4, 0, 10_000]);
    let t1 = harness::server_time_ms(&mut c);
    assert_eq!(client::scores(&mut c, "k"), [1000, 12_500]);
    let at = client::pexpiretime(&mut c, "k");
    assert!(t0 + 12_000 <= at && at <= t1 + 12_000, "{t0} {at} {t1}");
    client::config_set(&mut c, "slidingwindow.lateness", 0);
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 12600"), [1, 2, 3, 0, 10_000]);
    assert_eq!(client::scores(&mut c, "k"), [12_500, 12_600]);
}

/// redis.conf sets them after `loadmodule`; `CONFIG REWRITE` writes runtime changes back, and a
/// restart from the file has them.
#[test]
fn redis_conf_and_config_rewrite_keep_them() {
    let conf = format!(
        "loadmodule {}\nslidingwindow.max-members-per-call 7\nslidingwindow.lateness 2500\n",
        module_path().display()
    );
    let mut s = Server::builder()
        .without_module()
        .config_file(&conf)
        .start();
    let mut c = s.client();
    assert_eq!(configs(&mut c), ("7".into(), "zset".into(), "2500".into()));
    client::config_set(&mut c, "slidingwindow.storage", "compact");
    client::config_set(&mut c, "slidingwindow.lateness", 4000);
    ok(&mut c, &["CONFIG", "REWRITE"]);
    let written = std::fs::read_to_string(s.config_path()).unwrap();
    assert!(
        written.contains("slidingwindow.storage compact")
            && written.contains("slidingwindow.lateness 4000"),
        "{written}"
    );
    s.restart();
    let mut c = s.client();
    assert_eq!(
        configs(&mut c),
        ("7".into(), "compact".into(), "4000".into())
    );
    sw5(&mut c, "ALLOW k 10 100 1000");
    let kind: String = q(&mut c, &["TYPE", "k"]);
    assert_eq!(kind, "swcompact", "a key made after the restart");
}

/// `MODULE LOADEX ... CONFIG` sets them when loading at runtime; a bad value refuses the load.
#[test]
fn module_loadex_sets_them() {
    let s = bare_server();
    let mut c = s.client();
    let path = module_path().display().to_string();
    let v = load(
        &mut c,
        &format!("LOADEX {path} CONFIG slidingwindow.storage bogus"),
    );
    assert!(error_line(&v).is_some(), "a bad value loaded: {v:?}");
    let v = load(
        &mut c,
        &format!("LOADEX {path} CONFIG slidingwindow.lateness 86400001"),
    );
    assert!(error_line(&v).is_some(), "a bad lateness loaded: {v:?}");
    let v = load(
        &mut c,
        &format!(
            "LOADEX {path} CONFIG slidingwindow.storage compact CONFIG slidingwindow.lateness 86400000"
        ),
    );
    assert_eq!(v, redis::Value::Okay);
    assert_eq!(
        configs(&mut c),
        ("100000".into(), "compact".into(), "86400000".into())
    );
    sw5(&mut c, "ALLOW k 10 100 1000");
    let kind: String = q(&mut c, &["TYPE", "k"]);
    assert_eq!(kind, "swcompact");
}

/// `MODULE LIST`'s entry for the module: (version, load-line arguments).
fn module_entry(con: &mut redis::Connection) -> Option<(i64, Vec<String>)> {
    let list: Vec<std::collections::HashMap<String, redis::Value>> = q(con, &["MODULE", "LIST"]);
    let entry = list.into_iter().find(|m| {
        m.get("name").is_some_and(|n| {
            redis::from_redis_value::<String>(n.clone()).as_deref() == Ok("slidingwindow")
        })
    })?;
    let ver = entry
        .get("ver")
        .cloned()
        .map(redis::from_redis_value::<i64>)?
        .ok()?;
    let args = entry
        .get("args")
        .cloned()
        .map(redis::from_redis_value::<Vec<String>>)?
        .ok()?;
    Some((ver, args))
}

/// `major*10000 + minor*100 + patch` of Cargo.toml's version.
fn cargo_version_number() -> i64 {
    let part = |p: &str| p.parse::<i64>().unwrap();
    part(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + part(env!("CARGO_PKG_VERSION_PATCH"))
}

/// The load line's `name value` pairs set the configs, from redis.conf's `loadmodule`, from
/// `MODULE LOAD` and from `MODULE LOADEX ... ARGS`; `MODULE LIST` shows them and the version.
#[test]
fn load_line_arguments_are_configs() {
    let path = module_path().display().to_string();
    let conf = format!("loadmodule {path} storage compact max-members-per-call 7 lateness 5000\n");
    let s = Server::builder()
        .without_module()
        .config_file(&conf)
        .start();
    let mut c = s.client();
    assert_eq!(
        configs(&mut c),
        ("7".into(), "compact".into(), "5000".into())
    );
    let args = [
        "storage",
        "compact",
        "max-members-per-call",
        "7",
        "lateness",
        "5000",
    ]
    .map(String::from);
    assert_eq!(
        module_entry(&mut c),
        Some((cargo_version_number(), args.to_vec()))
    );
    assert_eq!(sw5(&mut c, "ALLOW k 10 100 1000 COST 7")[..2], [1, 7]);
    let kind: String = q(&mut c, &["TYPE", "k"]);
    assert_eq!(kind, "swcompact");
    let v = sw(&mut c, "ALLOW k 10 100 1000 COST 8");
    assert_eq!(
        error_line(&v).as_deref(),
        Some("ERR cost 8 would add more than 7 members in one call")
    );
    let version: String = s
        .info_field("slidingwindow", "slidingwindow_version")
        .unwrap();
    assert_eq!(version, env!("CARGO_PKG_VERSION"));

    let s = bare_server();
    let mut c = s.client();
    let v = load(&mut c, &format!("LOAD {path} max-members-per-call 9"));
    assert_eq!(v, redis::Value::Okay);
    assert_eq!(configs(&mut c), ("9".into(), "zset".into(), "0".into()));
    // A module with a data type cannot be unloaded: a new server for LOADEX.
    let s = bare_server();
    let mut c = s.client();
    // Both sources at once: the load line comes last and wins.
    let v = load(
        &mut c,
        &format!(
            "LOADEX {path} CONFIG slidingwindow.storage zset \
             CONFIG slidingwindow.max-members-per-call 11 ARGS STORAGE compact"
        ),
    );
    assert_eq!(v, redis::Value::Okay);
    assert_eq!(configs(&mut c), ("11".into(), "compact".into(), "0".into()));
}

/// A fresh directory for a server that is expected not to start.
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("slidingwindow-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Load lines the module refuses, each with the log line naming why.
const REFUSED: [(&str, &str); 6] = [
    (
        "foo 1",
        "slidingwindow: unknown load argument 'foo' (configs: storage, max-members-per-call, lateness, top-keys)",
    ),
    (
        "lateness 86400001",
        "slidingwindow: load argument 'lateness 86400001' refused: ",
    ),
    (
        "storage compact storage",
        "slidingwindow: load argument 'storage' has no value",
    ),
    (
        "storage bogus",
        "slidingwindow: load argument 'storage bogus' refused: ",
    ),
    (
        "max-members-per-call 0",
        "slidingwindow: load argument 'max-members-per-call 0' refused: ",
    ),
    (
        "max-members-per-call x",
        "slidingwindow: load argument 'max-members-per-call x' refused: ",
    ),
];

/// An unknown name, a name without a value or a bad value refuses the load, at startup (the
/// server exits) and at runtime (`MODULE LOAD` answers an error), with a log line naming it.
#[test]
fn bad_load_line_arguments_refuse_the_load() {
    let path = module_path().display().to_string();
    for (i, (args, line)) in REFUSED.iter().enumerate() {
        let dir = scratch_dir(&format!("refused-{i}"));
        let log = dir.join("redis.log");
        std::fs::write(
            dir.join("redis.conf"),
            format!("loadmodule {path} {args}\n"),
        )
        .unwrap();
        // No TCP port (a socket in the directory instead): nothing to collide with.
        let mut child = std::process::Command::new(
            std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()),
        )
        .arg(dir.join("redis.conf"))
        .args(["--port", "0", "--save", "", "--unixsocket"])
        .arg(dir.join("redis.sock"))
        .arg("--dir")
        .arg(&dir)
        .arg("--logfile")
        .arg(&log)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
        let mut status = None;
        harness::wait_until(
            harness::STARTUP_DEADLINE,
            "the refused server to exit",
            || {
                status = child.try_wait().unwrap();
                status.is_some()
            },
        );
        assert!(status.is_some_and(|s| !s.success()), "{args}: {status:?}");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains(line), "{args}: no '{line}' in\n{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    let s = bare_server();
    let mut c = s.client();
    for (args, line) in REFUSED {
        let v = load(&mut c, &format!("LOAD {path} {args}"));
        assert!(error_line(&v).is_some(), "{args} loaded: {v:?}");
        assert_eq!(module_entry(&mut c), None, "{args}");
        let text = std::fs::read_to_string(s.log_path()).unwrap();
        assert!(text.contains(line), "{args}: no '{line}' in\n{text}");
    }
}
