//! `SLIDINGWINDOW.TOP` and `SLIDINGWINDOW.TOPRESET`: the keys refused most, as the contract's
//! "Who is refused" says: what counts (ALLOW and ALLOWALL refusals, on the binding key), what does
//! not (admissions, PEEK, errors), the order, COUNT, long names, ACL key patterns, the config, the
//! INFO fields, and nothing replicated.

use testkit::client;
use testkit::harness;

use client::{client_as, error_code, info_u64, ok, q, sw5};
use harness::{Server, call, call_bytes, error_line, start_replica, wait_in_sync};
use redis::Value;

/// TOP's reply as `(key, refused, error)`.
fn top(con: &mut redis::Connection, args: &[&str]) -> Vec<(String, i64, i64)> {
    let mut line = vec!["SLIDINGWINDOW.TOP"];
    line.extend(args);
    let v = call(con, &line);
    let Value::Array(entries) = v else {
        panic!("TOP answered {v:?}");
    };
    entries
        .iter()
        .map(|e| match e {
            Value::Array(f) => match &f[..] {
                [Value::BulkString(k), Value::Int(n), Value::Int(err)] => {
                    (String::from_utf8_lossy(k).into_owned(), *n, *err)
                }
                _ => panic!("entry {e:?}"),
            },
            _ => panic!("entry {e:?}"),
        })
        .collect()
}

fn entry(key: &str, n: i64, err: i64) -> (String, i64, i64) {
    (key.to_string(), n, err)
}

/// Refuses `key` (limit 1 per 10 s, full) `n` times; the first call fills it.
fn refuse(con: &mut redis::Connection, key: &str, n: usize) {
    assert_eq!(sw5(con, &format!("ALLOW {key} 10 1 1000"))[0], 1, "{key}");
    for _ in 0..n {
        assert_eq!(sw5(con, &format!("ALLOW {key} 10 1 1000"))[0], 0, "{key}");
    }
}

#[test]
fn top_lists_the_keys_refused_most() {
    for storage in ["zset", "compact"] {
        let s = Server::builder().storage(storage).start();
        let mut c = s.client();
        assert_eq!(top(&mut c, &[]), vec![]);
        refuse(&mut c, "a", 3);
        refuse(&mut c, "b", 5);
        refuse(&mut c, "c", 1);
        refuse(&mut c, "d", 3);
        // PEEK, admissions and errors count nothing.
        assert_eq!(sw5(&mut c, "PEEK a 10 1 1000")[0], 0);
        assert_eq!(sw5(&mut c, "ALLOW e 10 5 1000")[0], 1);
        let v = call(&mut c, &["SLIDINGWINDOW.ALLOW", "a", "0", "1", "1000"]);
        assert!(error_line(&v).is_some(), "{v:?}");
        // Ties list the smaller error, then the key's bytes.
        let all = vec![
            entry("b", 5, 0),
            entry("a", 3, 0),
            entry("d", 3, 0),
            entry("c", 1, 0),
        ];
        assert_eq!(top(&mut c, &[]), all, "{storage}");
        assert_eq!(top(&mut c, &["COUNT", "2"]), all[..2].to_vec());
        assert_eq!(top(&mut c, &["count", "1024"]), all);
        assert_eq!(
            info_u64(&s, "slidingwindow", "slidingwindow_top_keys_refusals"),
            12
        );
        assert!(info_u64(&s, "slidingwindow", "slidingwindow_top_keys_bytes") > 0);
        // ALLOWALL counts its binding limit's key.
        let all_line = [
            "SLIDINGWINDOW.ALLOWALL",
            "2",
            "t",
            "c",
            "1000",
            "LIMIT",
            "1",
            "10",
            "5",
            "LIMIT",
            "2",
            "10",
            "1",
        ];
        let v = call(&mut c, &all_line);
        // Refused by its second limit, on "c".
        assert_eq!(harness::ints(&v), [0, 1, 0, 10000, 10000, 1], "{v:?}");
        assert_eq!(top(&mut c, &["COUNT", "4"])[3], entry("c", 2, 0));
        // TOPRESET empties it.
        assert_eq!(call(&mut c, &["SLIDINGWINDOW.TOPRESET"]), Value::Okay);
        assert_eq!(top(&mut c, &[]), vec![]);
        assert_eq!(
            info_u64(&s, "slidingwindow", "slidingwindow_top_keys_refusals"),
            0
        );
        assert_eq!(
            info_u64(&s, "slidingwindow", "slidingwindow_top_keys_bytes"),
            0
        );
    }
}

#[test]
fn count_and_arity_errors() {
    let s = Server::start();
    let mut c = s.client();
    let err = |c: &mut redis::Connection, args: &[&str]| {
        let v = call(c, args);
        error_line(&v).unwrap_or_else(|| panic!("{args:?} answered {v:?}"))
    };
    let range = "ERR COUNT must be an integer between 1 and 1024 (slidingwindow.top-keys)";
    assert_eq!(err(&mut c, &["SLIDINGWINDOW.TOP", "COUNT", "0"]), range);
    assert_eq!(err(&mut c, &["SLIDINGWINDOW.TOP", "COUNT", "1025"]), range);
    assert_eq!(err(&mut c, &["SLIDINGWINDOW.TOP", "COUNT", "-1"]), range);
    assert_eq!(
        err(&mut c, &["SLIDINGWINDOW.TOP", "COUNT"]),
        "ERR syntax error, option 'COUNT' needs a value"
    );
    assert_eq!(
        err(&mut c, &["SLIDINGWINDOW.TOP", "COUNT", "1", "COUNT", "2"]),
        "ERR syntax error, option 'COUNT' given twice"
    );
    assert_eq!(
        err(&mut c, &["SLIDINGWINDOW.TOP", "FOO"]),
        "ERR syntax error, unknown option 'FOO'"
    );
    assert!(err(&mut c, &["SLIDINGWINDOW.TOPRESET", "x"]).starts_with("ERR wrong number"));
}

#[test]
fn the_config_sizes_and_turns_off_the_summary() {
    let s = Server::builder().arg("top-keys").arg("2").start();
    let mut c = s.client();
    assert_eq!(info_u64(&s, "slidingwindow", "slidingwindow_top_keys"), 2);
    refuse(&mut c, "a", 4);
    refuse(&mut c, "b", 2);
    refuse(&mut c, "c", 1);
    // "c" took the place of "b" (2 refusals): estimate 3, error 2.
    assert_eq!(top(&mut c, &[]), vec![entry("a", 4, 0), entry("c", 3, 2)]);
    let v = call(&mut c, &["SLIDINGWINDOW.TOP", "COUNT", "3"]);
    assert_eq!(
        error_line(&v).as_deref(),
        Some("ERR COUNT must be an integer between 1 and 2 (slidingwindow.top-keys)")
    );
    // Changing it empties the summary; 0 turns it off.
    client::config_set(&mut c, "slidingwindow.top-keys", "0");
    refuse(&mut c, "d", 2);
    assert_eq!(top(&mut c, &[]), vec![]);
    assert_eq!(top(&mut c, &["COUNT", "1"]), vec![]);
    assert_eq!(
        info_u64(&s, "slidingwindow", "slidingwindow_top_keys_refusals"),
        0
    );
    client::config_set(&mut c, "slidingwindow.top-keys", "1000000");
    let v = call(
        &mut c,
        &["CONFIG", "SET", "slidingwindow.top-keys", "1000001"],
    );
    assert!(error_line(&v).is_some(), "{v:?}");
    refuse(&mut c, "e", 1);
    assert_eq!(top(&mut c, &[]), vec![entry("e", 1, 0)]);
}

#[test]
fn long_names_are_cut_with_a_hash() {
    let s = Server::start();
    let mut c = s.client();
    let long = vec![b'x'; 300];
    for want in [1, 0, 0] {
        let v = call_bytes(
            &mut c,
            &[b"SLIDINGWINDOW.ALLOW", &long, b"10", b"1", b"1000"],
        );
        assert_eq!(client::five(&v).map(|f| f[0]), Some(want), "{v:?}");
    }
    let v = call(&mut c, &["SLIDINGWINDOW.TOP"]);
    let Value::Array(entries) = &v else {
        panic!("{v:?}")
    };
    let Value::Array(first) = &entries[0] else {
        panic!("{v:?}")
    };
    let Value::BulkString(name) = &first[0] else {
        panic!("{v:?}")
    };
    assert_eq!(name.len(), 251);
    assert_eq!(&name[..240], &long[..240]);
    assert_eq!(&name[240..243], b"...");
    assert!(name[243..].iter().all(u8::is_ascii_hexdigit), "{name:?}");
    assert_eq!(first[1], Value::Int(2));
}

#[test]
fn acl_key_patterns_hide_keys_and_topreset_is_dangerous() {
    let s = Server::start();
    let mut c = s.client();
    refuse(&mut c, "pub:a", 2);
    refuse(&mut c, "secret:b", 3);
    ok(
        &mut c,
        &[
            "ACL",
            "SETUSER",
            "reader",
            "on",
            ">pw",
            "~pub:*",
            "+@read",
            "+slidingwindow.top",
        ],
    );
    ok(
        &mut c,
        &[
            "ACL",
            "SETUSER",
            "ops",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-@dangerous",
        ],
    );
    let mut reader = client_as(&s, "reader");
    assert_eq!(top(&mut reader, &[]), vec![entry("pub:a", 2, 0)]);
    let mut ops = client_as(&s, "ops");
    assert_eq!(top(&mut ops, &[]).len(), 2);
    let v = call(&mut ops, &["SLIDINGWINDOW.TOPRESET"]);
    let version = s.version();
    if version.redis_at_least(7, 2) || version.valkey_at_least(8) {
        // `@dangerous` holds it where a module may declare categories.
        assert_eq!(error_code(&v), "NOPERM");
        assert_eq!(top(&mut c, &[]).len(), 2);
    } else {
        assert_eq!(v, Value::Okay);
        assert_eq!(top(&mut c, &[]), vec![]);
    }
}

#[test]
fn nothing_is_replicated() {
    let s = Server::start();
    let r = start_replica(&s, &[]);
    let mut c = s.client();
    refuse(&mut c, "k", 2);
    wait_in_sync(&s, &r);
    let mut rc = r.client();
    assert_eq!(top(&mut c, &[]), vec![entry("k", 2, 0)]);
    assert_eq!(top(&mut rc, &[]), vec![]);
    assert_eq!(
        info_u64(&r, "slidingwindow", "slidingwindow_top_keys_refusals"),
        0
    );
    let digest: String = q(&mut c, &["DEBUG", "DIGEST"]);
    assert_eq!(digest, q::<String>(&mut rc, &["DEBUG", "DIGEST"]));
}
