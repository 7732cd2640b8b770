//! Contained panics: an error reply, the change still on replicas and in the AOF; a panic while
//! saving aborts and keeps the last RDB.

use super::*;

fn panic_module() -> PathBuf {
    let path = match std::env::var_os("SLIDINGWINDOW_PANIC_MODULE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/panic-test/libslidingwindow.so"),
    };
    assert!(
        path.is_file(),
        "panic-test module {} not found: run `make panic-module` (make test does) or set \
         SLIDINGWINDOW_PANIC_MODULE",
        path.display()
    );
    std::fs::canonicalize(&path).unwrap_or(path)
}

/// A server loading the panic-test build instead of the module under test.
fn panic_server() -> harness::Builder {
    Server::builder()
        .without_module()
        .arg("--loadmodule")
        .arg(panic_module().display().to_string())
}

fn assert_internal_error(v: &Value, how: &str) {
    let err = error_line(v).unwrap_or_else(|| panic!("{how}: DEBUGPANIC answered {v:?}"));
    assert!(
        err.starts_with("ERR slidingwindow: internal error"),
        "{how}: DEBUGPANIC answered {err}"
    );
}

/// A panic after the call changed the key (after the trim, after the add) still sends those
/// changes to replicas and the AOF: the replica and a restarted server hold the master's data.
#[test]
fn a_panic_after_a_change_still_reaches_replicas_and_the_aof() {
    let mut s = panic_server().aof_always().start();
    let replica = harness::start_replica(&s, &[]);
    let mut con = s.client();
    assert_eq!(sw5(&mut con, "ALLOW k 10 100 1000 COST 3")[0], 1);
    assert_eq!(sw5(&mut con, "ALLOW k 10 100 2000")[0], 1);
    for (point, line, left) in [
        // Trims the three members at 1000, then panics before counting.
        ("AFTER-TRIM", "ALLOW k 10 100 11500", vec![2000]),
        // Trims 2000, adds two members at 12000, then panics before setting the TTL.
        (
            "AFTER-ADD",
            "ALLOW k 10 100 12000 COST 2",
            vec![12000, 12000],
        ),
    ] {
        let armed = call(&mut con, &["SLIDINGWINDOW.DEBUGPANIC", "ARM", point]);
        assert_eq!(armed, Value::Int(1), "arming {point}");
        assert_internal_error(&client::sw(&mut con, line), point);
        assert_eq!(
            client::scores(&mut con, "k"),
            left,
            "{point}: the master's data"
        );
        harness::wait_in_sync(&s, &replica);
        assert_eq!(replica.digest(), s.digest(), "{point}: the replica differs");
        assert_eq!(client::scores(&mut replica.client(), "k"), left);
    }
    let digest = s.digest();
    s.restart();
    assert_eq!(s.digest(), digest, "the AOF differs from the master's data");
    assert!(s.is_running());
}

/// The same inside an ALLOWALL over a sorted set and a compact log: a panic after the first
/// key's trim, or after its add (every key is trimmed before any is added to), still sends what
/// the call did to replicas and the AOF.
#[test]
fn a_panic_inside_allowall_still_reaches_replicas_and_the_aof() {
    let mut s = Server::builder()
        .without_module()
        .arg("--loadmodule")
        .arg(panic_module().display().to_string())
        .aof_always()
        .start();
    let replica = harness::start_replica(&s, &[]);
    let mut con = s.client();
    assert_eq!(sw5(&mut con, "ALLOW a 10 100 1000 COST 3")[0], 1);
    client::config_set(&mut con, "slidingwindow.storage", "compact");
    assert_eq!(sw5(&mut con, "ALLOW b 10 100 1000 COST 3")[0], 1);
    let limits = "LIMIT 1 10 100 LIMIT 2 10 100";
    for (point, now, left) in [
        // Key a trimmed whole, then the panic: b untouched.
        ("AFTER-TRIM", "11500", [vec![], vec![1000, 1000, 1000]]),
        // Key b trimmed whole, then a gets its two members, then the panic.
        ("AFTER-ADD", "12000", [vec![12000, 12000], vec![]]),
    ] {
        let armed = call(&mut con, &["SLIDINGWINDOW.DEBUGPANIC", "ARM", point]);
        assert_eq!(armed, Value::Int(1), "arming {point}");
        let line = format!("SLIDINGWINDOW.ALLOWALL 2 a b {now} COST 2 {limits}");
        let args: Vec<&str> = line.split(' ').collect();
        assert_internal_error(&call(&mut con, &args), point);
        for (key, want) in ["a", "b"].iter().zip(&left) {
            assert_eq!(&client::scores(&mut con, key), want, "{point}: {key}");
        }
        harness::wait_in_sync(&s, &replica);
        assert_eq!(replica.digest(), s.digest(), "{point}: the replica differs");
    }
    let digest = s.digest();
    s.restart();
    assert_eq!(s.digest(), digest, "the AOF differs from the master's data");
}

#[test]
fn a_panic_inside_a_command_answers_an_error_and_the_server_carries_on() {
    let mut s = panic_server().start();
    let mut con = s.client();
    let before = make_sentinels(&mut con);
    assert_eq!(
        sw5_with(&mut con, "ALLOW", "rate", 3600, 5, 1000, 1),
        [1, 1, 4, 0, 3_600_000]
    );
    let digest = s.digest();

    for args in [
        vec!["SLIDINGWINDOW.DEBUGPANIC"],
        vec!["SLIDINGWINDOW.DEBUGPANIC", "rate"],
        vec![
            "SLIDINGWINDOW.DEBUGPANIC",
            "rate",
            "3600",
            "5",
            "1000",
            "COST",
            "2",
        ],
    ] {
        assert_internal_error(&call(&mut con, &args), &args.join(" "));
    }
    // Many in a row: nothing accumulates or stays poisoned.
    let many = vec![vec!["SLIDINGWINDOW.DEBUGPANIC", "x"]; 500];
    for r in client::pipeline(&mut con, &many) {
        assert_internal_error(&r, "pipelined");
    }
    // Inside a transaction and a script the panic is an error reply like any other.
    let tx = client::pipeline(
        &mut con,
        &[
            vec!["MULTI"],
            vec!["SLIDINGWINDOW.DEBUGPANIC"],
            vec!["SLIDINGWINDOW.PEEK", "rate", "3600", "5", "1000"],
            vec!["EXEC"],
        ],
    );
    let Value::Array(items) = &tx[3] else {
        panic!("EXEC answered {:?}", tx[3]);
    };
    assert_internal_error(&items[0], "in MULTI");
    assert_eq!(five(&items[1]), Some([1, 2, 3, 0, 3_600_000]));
    let lua = call(
        &mut con,
        &[
            "EVAL",
            "return redis.pcall('SLIDINGWINDOW.DEBUGPANIC')",
            "0",
        ],
    );
    assert_internal_error(&lua, "in EVAL");

    assert!(s.is_running(), "the server died");
    assert_eq!(s.digest(), digest, "a contained panic changed data");
    assert_eq!(sentinel_state(&mut con), before);
    // ALLOW carries on from where it was.
    assert_eq!(
        sw5_with(&mut con, "ALLOW", "rate", 3600, 5, 1000, 1),
        [1, 2, 3, 0, 3_600_000]
    );
    // INFO counts each contained panic as an error (3 + 500 + MULTI + EVAL), and the calls
    // around them as usual (the sentinel's ALLOW and two on `rate`; the PEEK in MULTI).
    let field =
        |name: &str| client::info_u64(&s, "slidingwindow", &format!("slidingwindow_{name}"));
    assert_eq!(field("errors"), 505);
    assert_eq!((field("allow_calls"), field("peek_calls")), (3, 1));
}

/// The log line a panic inside the compact type's `rdb_save` leaves before it aborts.
const SAVE_PANIC_LINE: &str = "slidingwindow: a deliberate panic at RdbSave, in rdb_save of a \
                               swcompact value: aborting rather than writing a truncated value";

/// A panic half-way through writing a compact log into an RDB stops the process writing it,
/// with a log line, and never leaves a truncated value behind: BGSAVE's child dies (the server
/// carries on and reports the save failed), SAVE stops the server itself; both times the last
/// RDB file stays byte for byte what it was.
#[test]
fn a_panic_while_saving_aborts_and_keeps_the_last_rdb() {
    let mut s = panic_server().storage("compact").start();
    let mut con = s.client();
    assert_eq!(
        sw5(&mut con, "ALLOW k 10 100 1000 COST 3"),
        [1, 3, 97, 0, 10000]
    );
    let ok: String = q(&mut con, &["SAVE"]);
    assert_eq!(ok, "OK");
    let rdb = s.dir().join("dump.rdb");
    let saved = std::fs::read(&rdb).unwrap();
    // Data a new save would write: only the old file may be on disk at the end.
    assert_eq!(
        sw5(&mut con, "ALLOW j 10 100 2000 COST 5"),
        [1, 5, 95, 0, 10000]
    );
    let count = |s: &Server| {
        let log = std::fs::read_to_string(s.log_path()).unwrap_or_default();
        log.matches(SAVE_PANIC_LINE).count()
    };

    let armed = call(&mut con, &["SLIDINGWINDOW.DEBUGPANIC", "ARM", "RDB-SAVE"]);
    assert_eq!(armed, Value::Int(1));
    // The fork child inherits the armed panic and dies of it; the server does not.
    let started: String = q(&mut con, &["BGSAVE"]);
    assert_eq!(started, "Background saving started");
    client::wait_persistence_idle(&s, "rdb_bgsave_in_progress");
    assert_eq!(
        s.info_field("persistence", "rdb_last_bgsave_status")
            .as_deref(),
        Some("err")
    );
    assert_eq!(count(&s), 1, "{}", s.log_tail());
    assert!(s.is_running());
    assert_eq!(std::fs::read(&rdb).unwrap(), saved, "dump.rdb after BGSAVE");

    // The server itself is still armed: SAVE runs in it, and stops it.
    let v = redis::cmd("SAVE").query::<Value>(&mut con);
    assert!(v.is_err(), "SAVE answered {v:?}");
    harness::wait_until(harness::STARTUP_DEADLINE, "the server to stop", || {
        !s.is_running()
    });
    assert_eq!(count(&s), 2, "{}", s.log_tail());
    assert_eq!(std::fs::read(&rdb).unwrap(), saved, "dump.rdb after SAVE");
}
