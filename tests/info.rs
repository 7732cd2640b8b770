//! `INFO slidingwindow`: the counters since load, exact after a scripted sequence of calls (every
//! trim path, rejections, errors of the module and of the server, MULTI, Lua), and the configs.

use testkit::client;
use testkit::harness;

use client::{client_as, error_code, five, ok, pipeline, q, sw, sw5};
use harness::{Server, call, error_line};
use redis::Value;

/// Every field of the section, in order, as `INFO` prints it.
struct Section {
    version: &'static str,
    allow_calls: u64,
    peek_calls: u64,
    admitted: u64,
    rejected: u64,
    admitted_requests: u64,
    trimmed: u64,
    errors: u64,
    refund_calls: u64,
    refunded: u64,
    compact_keys: u64,
    compact_bytes: u64,
    storage: &'static str,
    max_members_per_call: u64,
    lateness: u64,
    top_keys: u64,
    top_keys_refusals: u64,
}

/// Calls counted between two readings of the section (each refusal also in the summary of
/// refused keys).
struct Calls {
    allow: u64,
    peek: u64,
    admitted: u64,
    rejected: u64,
    requests: u64,
    errors: u64,
}

impl Section {
    const FRESH: Section = Section {
        version: env!("CARGO_PKG_VERSION"),
        allow_calls: 0,
        peek_calls: 0,
        admitted: 0,
        rejected: 0,
        admitted_requests: 0,
        trimmed: 0,
        errors: 0,
        refund_calls: 0,
        refunded: 0,
        compact_keys: 0,
        compact_bytes: 0,
        storage: "zset",
        max_members_per_call: 100_000,
        lateness: 0,
        top_keys: 1024,
        top_keys_refusals: 0,
    };

    /// A fresh section with these configs.
    const fn configured(
        storage: &'static str,
        max_members_per_call: u64,
        lateness: u64,
    ) -> Section {
        Section {
            storage,
            max_members_per_call,
            lateness,
            ..Section::FRESH
        }
    }

    /// The section after `calls` more.
    fn after(self, calls: Calls) -> Section {
        Section {
            allow_calls: self.allow_calls + calls.allow,
            peek_calls: self.peek_calls + calls.peek,
            admitted: self.admitted + calls.admitted,
            rejected: self.rejected + calls.rejected,
            top_keys_refusals: self.top_keys_refusals + calls.rejected,
            admitted_requests: self.admitted_requests + calls.requests,
            errors: self.errors + calls.errors,
            ..self
        }
    }

    fn text(&self) -> String {
        // `(name, value)` for each named field.
        macro_rules! named {
            ($s:expr; $($f:ident),*) => {
                [$((stringify!($f), $s.$f.to_string())),*]
            };
        }
        let mut fields = named!(self; version, allow_calls, peek_calls, admitted, rejected,
            admitted_requests, trimmed, errors, refund_calls, refunded, compact_keys, compact_bytes,
            storage, max_members_per_call, lateness, top_keys, top_keys_refusals)
        .to_vec();
        fields.push(("top_keys_bytes", BYTES.to_string()));
        let mut out = String::from("# slidingwindow\r\n");
        for (name, value) in fields {
            out.push_str(&format!("slidingwindow_{name}:{value}\r\n"));
        }
        out
    }
}

/// Where `text` leaves the summary's bytes, which its tables' capacities decide.
const BYTES: &str = "<bytes>";

/// `INFO section` with the summary's bytes replaced by `BYTES`, after checking them: 0 with
/// nothing counted, else more than a name's and at most 4 KB for the few names a test refuses.
fn info(s: &Server, section: &str) -> String {
    let text: String = q(&mut s.client(), &["INFO", section]);
    let field = |name: &str| {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].parse::<u64>().ok()
    };
    let (Some(refusals), Some(bytes)) = (
        field("slidingwindow_top_keys_refusals:"),
        field("slidingwindow_top_keys_bytes:"),
    ) else {
        return text;
    };
    if refusals == 0 {
        assert_eq!(bytes, 0, "{text}");
    } else {
        assert!(bytes > 0 && bytes <= 4096, "{text}");
    }
    text.replace(
        &format!("slidingwindow_top_keys_bytes:{bytes}\r\n"),
        &format!("slidingwindow_top_keys_bytes:{BYTES}\r\n"),
    )
}

/// `INFO slidingwindow` is exactly `want`; `INFO modules` and `INFO everything` hold it too.
fn assert_section(s: &Server, want: &Section, when: &str) {
    let want = want.text();
    assert_eq!(
        info(s, "slidingwindow").trim_end(),
        want.trim_end(),
        "{when}"
    );
    for section in ["modules", "everything"] {
        let text = info(s, section);
        assert!(text.contains(&want), "{when}: INFO {section}:\n{text}");
    }
}

fn assert_error(con: &mut redis::Connection, line: &str) {
    let v = sw(con, line);
    assert!(error_line(&v).is_some(), "{line} answered {v:?}");
}

#[test]
fn counters_are_exact_after_a_scripted_sequence() {
    let s = Server::start();
    assert_section(&s, &Section::FRESH, "fresh server");
    let mut c = s.client();

    // Admissions, rejections, and a trim of one member (walked) on a rejected call.
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 1000"), [1, 1, 2, 0, 10000]);
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 3 1001 COST 2"),
        [1, 3, 0, 10000, 10000]
    );
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 1002")[0], 0);
    assert_eq!(sw5(&mut c, "PEEK k 10 3 1003")[0], 0);
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 11000 COST 2"), [0, 2, 1, 1, 1]);
    // PEEK's trims are virtual: they count nothing.
    assert_eq!(sw5(&mut c, "PEEK k 10 3 20000"), [1, 1, 2, 0, 10000]);
    // 80 of 81 members leave at once: the in-place ZREMRANGEBYSCORE path.
    assert_eq!(sw5(&mut c, "ALLOW mid 1 200 1000 COST 80")[0], 1);
    assert_eq!(sw5(&mut c, "ALLOW mid 1 200 1500")[1], 81);
    assert_eq!(sw5(&mut c, "ALLOW mid 1 200 2000")[..2], [1, 2]);
    // A large set that expired whole: unlinked.
    assert_eq!(sw5(&mut c, "ALLOW big 1 100 1000 COST 70")[0], 1);
    assert_eq!(sw5(&mut c, "ALLOW big 1 100 5000")[..2], [1, 1]);
    let after_calls = Section {
        allow_calls: 9,
        peek_calls: 2,
        admitted: 7,
        rejected: 2,
        top_keys_refusals: 2,
        admitted_requests: 1 + 2 + 80 + 1 + 1 + 70 + 1,
        trimmed: 1 + 80 + 70,
        ..Section::FRESH
    };
    assert_section(&s, &after_calls, "after the calls");

    // Errors the module answers, of every kind.
    assert_error(&mut c, "ALLOW k 0 3 1000");
    assert_error(&mut c, "PEEK k 10 3 1000 FOO 1");
    assert_error(&mut c, "ALLOW k 10 3 1000 COST");
    assert_error(&mut c, "ALLOW huge 10 200000 1000 COST 200000");
    ok(&mut c, &["SET", "str", "v"]);
    for cmd in ["ALLOW", "PEEK"] {
        let v = sw(&mut c, &format!("{cmd} str 10 3 1000"));
        assert_eq!(error_code(&v), "WRONGTYPE", "{v:?}");
    }
    // Errors the server answers before the module runs count nothing here (INFO commandstats
    // has them as rejected_calls).
    assert_eq!(error_code(&sw(&mut c, "ALLOW k 10")), "ERR");
    ok(
        &mut c,
        &[
            "ACL",
            "SETUSER",
            "nope",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-slidingwindow.allow",
        ],
    );
    let v = sw(&mut client_as(&s, "nope"), "ALLOW k 10 3 1000");
    assert_eq!(error_code(&v), "NOPERM", "{v:?}");
    let after_errors = Section {
        errors: 6,
        ..after_calls
    };
    assert_section(&s, &after_errors, "after the errors");

    // In a transaction, each call counts when EXEC runs it.
    let tx = pipeline(
        &mut c,
        &[
            vec!["MULTI"],
            vec!["SLIDINGWINDOW.ALLOW", "m", "10", "2", "1000"],
            vec!["SLIDINGWINDOW.ALLOW", "m", "10", "2", "1000", "COST", "2"],
            vec!["SLIDINGWINDOW.PEEK", "m", "10", "2", "1000"],
            vec!["SLIDINGWINDOW.PEEK", "m", "10", "x", "1000"],
            vec!["EXEC"],
        ],
    );
    let Some(Value::Array(results)) = tx.last() else {
        panic!("EXEC answered {tx:?}")
    };
    assert_eq!(five(&results[0]), Some([1, 1, 1, 0, 10000]));
    assert_eq!(five(&results[1]).map(|r| r[0]), Some(0));
    assert_eq!(five(&results[2]).map(|r| r[0]), Some(1));
    assert_eq!(error_code(&results[3]), "ERR", "{results:?}");
    // From Lua, through redis.call and redis.pcall.
    let lua = "return redis.call('SLIDINGWINDOW.ALLOW', KEYS[1], 10, 5, 1000)";
    let v = call(&mut c, &["EVAL", lua, "1", "lua"]);
    assert_eq!(five(&v), Some([1, 1, 4, 0, 10000]), "{v:?}");
    let lua = "return redis.pcall('SLIDINGWINDOW.PEEK', KEYS[1], 10, 'nan', 1000)";
    let v = call(&mut c, &["EVAL", lua, "1", "lua"]);
    assert_eq!(error_code(&v), "ERR", "{v:?}");
    let after_scripts = after_errors.after(Calls {
        allow: 3,
        peek: 1,
        admitted: 2,
        rejected: 1,
        requests: 2,
        errors: 2,
    });
    assert_section(&s, &after_scripts, "after MULTI and Lua");

    // Several keys count once, COST once per admitted call; refunds count calls and members.
    let all = |c: &mut redis::Connection, cmd: &str, now: &str, cost: &str| {
        let line = format!(
            "SLIDINGWINDOW.{cmd} 2 {{a}}1 {{a}}2 {now} COST {cost} LIMIT 1 10 4 LIMIT 2 10 3"
        );
        call(c, &line.split(' ').collect::<Vec<_>>())
    };
    assert_eq!(harness::ints(&all(&mut c, "ALLOWALL", "1000", "2"))[0], 1);
    assert_eq!(harness::ints(&all(&mut c, "ALLOWALL", "1000", "2"))[0], 0);
    assert_eq!(harness::ints(&all(&mut c, "PEEKALL", "1000", "1"))[0], 1);
    assert!(error_line(&all(&mut c, "ALLOWALL", "x", "1")).is_some());
    assert_eq!(
        call(&mut c, &["SLIDINGWINDOW.REFUND", "{a}1", "5"]),
        Value::Int(2)
    );
    assert_eq!(
        call(&mut c, &["SLIDINGWINDOW.REFUND", "{a}9", "5"]),
        Value::Int(0)
    );
    // The trim of `{a}2` at 20000 (its two members left the window) counts.
    assert_eq!(harness::ints(&all(&mut c, "ALLOWALL", "20000", "1"))[0], 1);
    let after_several = Section {
        trimmed: after_scripts.trimmed + 2,
        refund_calls: 2,
        refunded: 2,
        ..after_scripts.after(Calls {
            allow: 3,
            peek: 1,
            admitted: 2,
            rejected: 1,
            requests: 2 + 1,
            errors: 1,
        })
    };
    assert_section(&s, &after_several, "after ALLOWALL, PEEKALL and REFUND");
}

#[test]
fn the_section_shows_the_configs_as_set() {
    // Set in the configuration (here its command-line form, after `loadmodule`).
    let s = Server::builder().config("max-members-per-call", 7).start();
    let mut c = s.client();
    let at_start = Section {
        max_members_per_call: 7,
        ..Section::FRESH
    };
    assert_section(&s, &at_start, "from the configuration");
    client::config_set(&mut c, "slidingwindow.max-members-per-call", 250);
    client::config_set(&mut c, "slidingwindow.storage", "compact");
    client::config_set(&mut c, "slidingwindow.lateness", 750);
    let set = Section::configured("compact", 250, 750);
    assert_section(&s, &set, "after CONFIG SET");
    // A refused value changes nothing.
    for (name, value) in [
        ("slidingwindow.max-members-per-call", "0"),
        ("slidingwindow.storage", "list"),
        ("slidingwindow.lateness", "86400001"),
    ] {
        client::config_refused(&mut c, name, value);
    }
    // (`tests/config.rs` checks CONFIG GET and the refusals themselves.) The errors of refused CONFIG SETs are the server's, not a command's.
    assert_section(&s, &set, "after refused CONFIG SETs");
    // The shown value is the one calls obey.
    let v = sw(&mut c, "ALLOW k 10 1000 1000 COST 251");
    assert_eq!(
        error_line(&v).as_deref(),
        Some("ERR cost 251 would add more than 250 members in one call")
    );
    assert_section(
        &s,
        &Section { errors: 1, ..set },
        "after a call over the cap",
    );
}

#[test]
fn module_loadex_configs_show_in_the_section() {
    let s = Server::builder()
        .without_module()
        .args(["--enable-module-command", "yes"])
        .start();
    let path = harness::module_path().display().to_string();
    ok(
        &mut s.client(),
        &[
            "MODULE",
            "LOADEX",
            &path,
            "CONFIG",
            "slidingwindow.max-members-per-call",
            "9",
            "CONFIG",
            "slidingwindow.storage",
            "compact",
            "CONFIG",
            "slidingwindow.lateness",
            "12",
        ],
    );
    let loaded = Section::configured("compact", 9, 12);
    assert_section(&s, &loaded, "after MODULE LOADEX");
}

/// (`compact_keys`, `compact_bytes`).
fn gauges(s: &Server) -> (u64, u64) {
    (
        client::info_u64(s, "slidingwindow", "slidingwindow_compact_keys"),
        client::info_u64(s, "slidingwindow", "slidingwindow_compact_bytes"),
    )
}

/// What restoring `key`'s DUMP adds to the gauges (through a scratch key, deleted after): the
/// bytes a loaded copy of it holds, as an RDB load or a full sync builds it.
fn loaded_bytes(s: &Server, key: &str) -> u64 {
    let mut c = s.client();
    let before = gauges(s);
    let payload: Vec<u8> = q(&mut c, &["DUMP", key]);
    let ok: String = redis::cmd("RESTORE")
        .arg("scratch")
        .arg(0)
        .arg(payload)
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let (keys, bytes) = gauges(s);
    assert_eq!(keys, before.0 + 1, "RESTORE {key}");
    let n: i64 = q(&mut c, &["DEL", "scratch"]);
    assert_eq!(n, 1);
    assert_eq!(gauges(s), before, "DEL of the restored {key}");
    bytes - before.1
}

/// The gauges count the compact keys alive and their bytes, exactly: each event moves them by
/// what it creates or frees, and they come back to zero when every key is gone, whichever way
/// it went (DEL, an overwrite, expiry, FLUSHALL, UNLINK freed on the lazy-free thread).
#[test]
fn compact_gauges_are_exact() {
    let s = Server::builder().storage("compact").start();
    let mut c = s.client();
    assert_eq!(gauges(&s), (0, 0), "fresh");

    // Create, grow, trim: one key, its bytes moving with its log.
    assert_eq!(sw5(&mut c, "ALLOW a 10 1000 1000")[..2], [1, 1]);
    let (keys, one) = gauges(&s);
    assert_eq!(keys, 1);
    // One request: a word in the value's pointer, no allocation.
    assert_eq!(one, 0, "a one-request log holds no bytes");
    assert_eq!(sw5(&mut c, "ALLOW a 10 1000 2000 COST 300")[..2], [1, 301]);
    let (keys, grown) = gauges(&s);
    assert_eq!(keys, 1);
    assert!(grown > one, "{grown} after 300 more requests, {one} before");
    assert_eq!(sw5(&mut c, "ALLOW a 10 1000 3000 COST 5")[..2], [1, 306]);
    assert_eq!(sw5(&mut c, "ALLOW a 10 1000 12500")[..2], [1, 6]);
    let (keys, trimmed) = gauges(&s);
    assert_eq!(keys, 1);
    assert!(trimmed < grown, "{trimmed} after the trim, {grown} before");
    // A log that expires whole is unlinked; the call's own request makes a new one.
    assert_eq!(sw5(&mut c, "ALLOW a 10 1000 30000")[..2], [1, 1]);
    assert_eq!(gauges(&s), (1, one), "a new log of one request");

    // REFUND gives back what it removes: a large log refunded down to a few, then deleted,
    // leaves the gauges where they were.
    let before = gauges(&s);
    assert_eq!(
        sw5(&mut c, "ALLOW r 10 100000 40000 COST 5000")[..2],
        [1, 5000]
    );
    let n: i64 = q(&mut c, &["SLIDINGWINDOW.REFUND", "r", "4990"]);
    assert_eq!(n, 4990);
    assert_eq!(gauges(&s).0, before.0 + 1);
    let n: i64 = q(&mut c, &["DEL", "r"]);
    assert_eq!(n, 1);
    assert_eq!(gauges(&s), before, "after REFUND and DEL");

    // COPY doubles the key; DEL and an overwrite give it back.
    assert_eq!(sw5(&mut c, "ALLOW a 10 1000 30001 COST 500")[..2], [1, 501]);
    let a = gauges(&s);
    let copied: i64 = q(&mut c, &["COPY", "a", "b"]);
    assert_eq!(copied, 1);
    assert_eq!(gauges(&s), (2, 2 * a.1), "after COPY");
    let n: i64 = q(&mut c, &["DEL", "b"]);
    assert_eq!(n, 1);
    assert_eq!(gauges(&s), a, "after DEL of the copy");
    let copied: i64 = q(&mut c, &["COPY", "a", "b"]);
    assert_eq!(copied, 1);
    client::ok(&mut c, &["SET", "b", "text"]);
    assert_eq!(gauges(&s), a, "after SET over the copy");

    // RESTORE loads a log as an RDB does; two loads of one payload hold the same.
    let restored = loaded_bytes(&s, "a");
    assert_eq!(loaded_bytes(&s, "a"), restored);

    // CONVERT frees the compact log, or makes one.
    let n: i64 = q(&mut c, &["SLIDINGWINDOW.CONVERT", "a", "zset"]);
    assert_eq!(n, 501);
    assert_eq!(gauges(&s), (0, 0), "after CONVERT to zset");
    let n: i64 = q(&mut c, &["SLIDINGWINDOW.CONVERT", "a", "compact"]);
    assert_eq!(n, 501);
    let (keys, converted) = gauges(&s);
    assert_eq!(keys, 1);
    assert!(converted > 0);

    // A reload (and a replica's full sync) loads every key: the sum of what each loads alone.
    for (key, cost) in [("c", 1), ("d", 40), ("e", 3000)] {
        let v = sw5(&mut c, &format!("ALLOW {key} 10 5000 1000 COST {cost}"));
        assert_eq!(v[..2], [1, cost]);
    }
    let keys = ["a", "c", "d", "e"];
    let want = (4, keys.iter().map(|k| loaded_bytes(&s, k)).sum::<u64>());
    let replica = harness::attach_replica(&s, &[]);
    harness::wait_in_sync(&s, &replica);
    assert_eq!(gauges(&replica), want, "the replica after its full sync");
    let ok: String = q(&mut c, &["DEBUG", "RELOAD"]);
    assert_eq!(ok, "OK");
    // The old dataset may be freed on the lazy-free thread after the reply (Valkey 9).
    harness::wait_until(harness::STARTUP_DEADLINE, "the reloaded gauges", || {
        gauges(&s) == want
    });
    assert_eq!(gauges(&s), want, "after DEBUG RELOAD");
    drop(replica);

    // Expiry frees the log.
    let n: i64 = q(&mut c, &["PEXPIRE", "c", "1"]);
    assert_eq!(n, 1);
    harness::wait_until(harness::STARTUP_DEADLINE, "c to expire", || {
        gauges(&s).0 == 3
    });
    // FLUSHALL frees the rest.
    let ok: String = q(&mut c, &["FLUSHALL"]);
    assert_eq!(ok, "OK");
    // Valkey 9 flushes asynchronously by default: the lazy-free thread updates the gauges.
    harness::wait_until(
        harness::STARTUP_DEADLINE,
        "FLUSHALL to free every log",
        || gauges(&s) == (0, 0),
    );

    // UNLINK of a big log frees it on the lazy-free thread, which updates the gauges: 150,000
    // requests 1 ms apart, past the 64 blocks that freeing in the background needs (equal
    // timestamps would share a few counted blocks).
    for chunk in (0..150_000u64).collect::<Vec<_>>().chunks(10_000) {
        let cmds: Vec<Vec<String>> = chunk
            .iter()
            .map(|i| client::sw_line("ALLOW", "big", 100_000, 10_000_000, 1000 + i, 1))
            .collect();
        for v in pipeline(&mut c, &cmds) {
            assert_eq!(client::five(&v).map(|f| f[0]), Some(1), "{v:?}");
        }
    }
    let lazy_before = client::info_u64(&s, "memory", "lazyfreed_objects");
    let n: i64 = q(&mut c, &["UNLINK", "big"]);
    assert_eq!(n, 1);
    harness::wait_until(harness::STARTUP_DEADLINE, "the lazy free", || {
        client::info_u64(&s, "memory", "lazyfreed_objects") == lazy_before + 1
    });
    harness::wait_until(
        harness::STARTUP_DEADLINE,
        "the gauges to reach zero",
        || gauges(&s) == (0, 0),
    );
}
