//! The module's configs: from redis.conf, `MODULE LOADEX` and `CONFIG SET`, kept by
//! `CONFIG REWRITE`, refused out of range, and doing what they say.

mod common;
#[path = "support/kit.rs"]
mod kit;

use common::{Server, call, error_line, module_path};
use kit::{q, sw, sw5};

/// `CONFIG GET slidingwindow.*`, whose order is the server's: (cap, storage).
fn configs(con: &mut redis::Connection) -> (String, String) {
    let pairs: std::collections::HashMap<String, String> =
        q(con, &["CONFIG", "GET", "slidingwindow.*"]);
    assert_eq!(pairs.len(), 2, "{pairs:?}");
    let get = |name: &str| pairs.get(name).cloned().unwrap_or_default();
    (
        get("slidingwindow.max-members-per-call"),
        get("slidingwindow.storage"),
    )
}

/// The per-call cap is the config: admissions up to it pass, one more is the error naming it,
/// and a refused value changes nothing.
#[test]
fn the_cap_is_the_config() {
    let s = Server::builder()
        .args(["--slidingwindow.max-members-per-call", "5"])
        .start();
    let mut c = s.client();
    assert_eq!(sw5(&mut c, "ALLOW k 10 100 1000 COST 5")[..2], [1, 5]);
    let v = sw(&mut c, "ALLOW k 10 100 1000 COST 6");
    assert_eq!(
        error_line(&v).as_deref(),
        Some("ERR cost 6 would add more than 5 members in one call")
    );
    for bad in ["0", "10000001", "-1", "x"] {
        let v = call(
            &mut c,
            &["CONFIG", "SET", "slidingwindow.max-members-per-call", bad],
        );
        assert!(error_line(&v).is_some(), "{bad}: {v:?}");
    }
    let v = call(&mut c, &["CONFIG", "SET", "slidingwindow.storage", "list"]);
    assert!(error_line(&v).is_some(), "{v:?}");
    assert_eq!(configs(&mut c), ("5".into(), "zset".into()));
    let _: () = q(
        &mut c,
        &["CONFIG", "SET", "slidingwindow.max-members-per-call", "6"],
    );
    assert_eq!(sw5(&mut c, "ALLOW k 10 100 1000 COST 6")[..2], [1, 11]);
}

/// redis.conf sets them after `loadmodule`; `CONFIG REWRITE` writes runtime changes back, and a
/// restart from the file has them.
#[test]
fn redis_conf_and_config_rewrite_keep_them() {
    let conf = format!(
        "loadmodule {}\nslidingwindow.max-members-per-call 7\n",
        module_path().display()
    );
    let mut s = Server::builder()
        .without_module()
        .config_file(&conf)
        .start();
    let mut c = s.client();
    assert_eq!(configs(&mut c), ("7".into(), "zset".into()));
    let _: () = q(
        &mut c,
        &["CONFIG", "SET", "slidingwindow.storage", "compact"],
    );
    let _: () = q(&mut c, &["CONFIG", "REWRITE"]);
    let written = std::fs::read_to_string(s.config_path()).unwrap();
    assert!(
        written.contains("slidingwindow.storage compact"),
        "{written}"
    );
    s.restart();
    let mut c = s.client();
    assert_eq!(configs(&mut c), ("7".into(), "compact".into()));
    sw5(&mut c, "ALLOW k 10 100 1000");
    let kind: String = q(&mut c, &["TYPE", "k"]);
    assert_eq!(kind, "swcompact", "a key made after the restart");
}

/// `MODULE LOADEX ... CONFIG` sets them when loading at runtime; a bad value refuses the load.
#[test]
fn module_loadex_sets_them() {
    let s = Server::builder()
        .without_module()
        .args(["--enable-module-command", "yes"])
        .start();
    let mut c = s.client();
    let path = module_path().display().to_string();
    let v = call(
        &mut c,
        &[
            "MODULE",
            "LOADEX",
            &path,
            "CONFIG",
            "slidingwindow.storage",
            "bogus",
        ],
    );
    assert!(error_line(&v).is_some(), "a bad value loaded: {v:?}");
    let _: () = q(
        &mut c,
        &[
            "MODULE",
            "LOADEX",
            &path,
            "CONFIG",
            "slidingwindow.storage",
            "compact",
        ],
    );
    assert_eq!(configs(&mut c), ("100000".into(), "compact".into()));
    sw5(&mut c, "ALLOW k 10 100 1000");
    let kind: String = q(&mut c, &["TYPE", "k"]);
    assert_eq!(kind, "swcompact");
}
