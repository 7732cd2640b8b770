//! The compact storage's own commands: CONVERT both ways, its errors and its declared key; APPLY
//! refusing what it cannot replay.

use super::*;

/// CONVERT both ways keeps every timestamp, every reply and the TTL; to the storage a key already
/// has, it changes nothing.
#[test]
fn convert_both_ways_keeps_replies_and_ttl() {
    let keys = ["v0", "v1", "v2", "v3"];
    let s = Server::start();
    let replica = start_replica(&s, &[]);
    let mut c = s.client();
    traffic(&mut c, &keys, 21, 2000);
    let before: Vec<_> = keys
        .iter()
        .map(|k| (peeks(&mut c, k), pexpiretime(&mut c, k), scores(&mut c, k)))
        .collect();
    for (target, kind_after) in [
        ("compact", "swcompact"),
        ("zset", "zset"),
        ("COMPACT", "swcompact"),
    ] {
        for (k, want) in keys.iter().zip(&before) {
            let n: i64 = q(&mut c, &["SLIDINGWINDOW.CONVERT", k, target]);
            assert_eq!(n as usize, want.2.len(), "{k} to {target}: the count");
            assert_eq!(kind(&mut c, k), kind_after);
            let got = (peeks(&mut c, k), pexpiretime(&mut c, k), scores(&mut c, k));
            assert_eq!(&got, want, "{k} to {target}");
        }
    }
    // Already compact: nothing changes, not even the encoding.
    let digest = s.digest();
    let dumps: Vec<_> = keys.iter().map(|k| snapshot(&mut c, k)).collect();
    for (k, want) in keys.iter().zip(&before) {
        let n: i64 = q(&mut c, &["SLIDINGWINDOW.CONVERT", k, "compact"]);
        assert_eq!(n as usize, want.2.len(), "{k} to compact again: the count");
    }
    assert_eq!(s.digest(), digest);
    assert_eq!(
        keys.iter().map(|k| snapshot(&mut c, k)).collect::<Vec<_>>(),
        dumps
    );
    wait_in_sync(&s, &replica);
    assert_eq!(
        replica.digest(),
        s.digest(),
        "the replica followed every conversion"
    );
}

#[test]
fn convert_errors_change_nothing() {
    let s = Server::start();
    let mut c = s.client();
    ok(&mut c, &["SET", "text", "x"]);
    let bad = [
        ("frac", "1.5"),
        ("neg", "-1"),
        ("inf", "inf"),
        ("ninf", "-inf"),
        ("huge", "9007199254740994"),
    ];
    for (key, score) in bad {
        let added: i64 = q(&mut c, &["ZADD", key, "1000", "ok", score, "bad"]);
        assert_eq!(added, 2, "ZADD {key}");
    }
    let digest = s.digest();
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["missing", "compact"], "ERR no such key".into()),
        (
            vec!["text", "compact"],
            "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
        ),
        (
            vec!["frac", "list"],
            "ERR storage must be zset or compact, not 'list'".into(),
        ),
        (vec!["frac", "compact"], not_a_timestamp("1.5")),
        (vec!["neg", "compact"], not_a_timestamp("-1")),
        (vec!["inf", "compact"], not_a_timestamp("inf")),
        (vec!["ninf", "compact"], not_a_timestamp("-inf")),
        (vec!["huge", "compact"], not_a_timestamp("9007199254740994")),
    ];
    for (args, want) in cases {
        let mut line = vec!["SLIDINGWINDOW.CONVERT"];
        line.extend(&args);
        let v = call(&mut c, &line);
        assert_eq!(error_line(&v).as_deref(), Some(want.as_str()), "{args:?}");
    }
    assert_eq!(s.digest(), digest, "a refused CONVERT changed data");
    let v = call(&mut c, &["SLIDINGWINDOW.CONVERT", "frac"]);
    assert!(
        error_line(&v).is_some_and(|e| e.contains("wrong number of arguments")),
        "{v:?}"
    );
}

fn not_a_timestamp(score: &str) -> String {
    format!(
        "ERR the sorted set holds a score that is not a timestamp in ms (an integer between 0 and 9007199254740992): {score}"
    )
}

/// Every bulk string in a reply, depth first.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => out.push(s.clone()),
        Value::Array(items) | Value::Set(items) => items.iter().for_each(|i| strings(i, out)),
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            strings(k, out);
            strings(v, out);
        }),
        _ => {}
    }
}

/// CONVERT declares its arguments, its key and that it writes it: `COMMAND DOCS`, `COMMAND
/// GETKEYS` and ACL read-only key patterns see it so.
#[test]
fn convert_is_declared_a_write_of_its_one_key() {
    let s = Server::start();
    let mut c = s.client();
    let mut docs = Vec::new();
    strings(
        &call(&mut c, &["COMMAND", "DOCS", "slidingwindow.convert"]),
        &mut docs,
    );
    for word in ["arguments", "key", "storage", "zset", "compact"] {
        assert!(
            docs.iter().any(|d| d == word),
            "COMMAND DOCS lacks {word}: {docs:?}"
        );
    }
    let keys: Vec<String> = q(
        &mut c,
        &["COMMAND", "GETKEYS", "SLIDINGWINDOW.CONVERT", "k", "zset"],
    );
    assert_eq!(keys, ["k"]);
    sw5(&mut c, &format!("ALLOW k 3600 10 {T0}"));
    ok(
        &mut c,
        &["ACL", "SETUSER", "reader", "on", "nopass", "%R~*", "+@all"],
    );
    let mut reader = s.client();
    ok(&mut reader, &["AUTH", "reader", "x"]);
    let v = call(&mut reader, &["SLIDINGWINDOW.CONVERT", "k", "compact"]);
    assert!(
        error_line(&v).is_some_and(|e| e.starts_with("NOPERM")),
        "{v:?}"
    );
    assert_eq!(
        sw5(&mut reader, &format!("PEEK k 3600 10 {T0}")),
        [1, 2, 8, 0, 3_600_000]
    );
    assert_eq!(kind(&mut c, "k"), "zset");
}

/// `APPLY`, the internal command, refuses malformed arguments and other types, changing nothing.
#[test]
fn apply_refuses_what_it_cannot_replay() {
    let (s, mut c) = compact_client();
    sw5(&mut c, &format!("ALLOW k 3600 10 {T0}"));
    assert_eq!(q::<i64>(&mut c, &["ZADD", "z", "1", "m"]), 1, "ZADD z");
    let digest = s.digest();
    let bad: [(&str, &str); 9] = [
        ("k", "x 0"),
        ("k", "-9007199254740993 0"),
        ("k", "1 -5"),
        ("k", "1 0 5"),
        ("k", "1 0 5 0"),
        ("k", "1 0 9007199254740993 1"),
        ("k", "1 0 5 10000001"),
        ("k", "1 0 5 6000000 6 6000000"),
        ("z", "1 0 5 1"),
    ];
    for (key, change) in bad {
        let v = call(&mut c, &["SLIDINGWINDOW.APPLY", key, change]);
        let err = error_line(&v).unwrap_or_else(|| panic!("{change:?} answered {v:?}"));
        assert!(
            err.starts_with("ERR SLIDINGWINDOW.APPLY") || err.starts_with("WRONGTYPE"),
            "{err}"
        );
    }
    let v = call(&mut c, &["SLIDINGWINDOW.APPLY", "k", "1", "0"]);
    assert!(
        error_line(&v).is_some_and(|e| e.contains("wrong number of arguments")),
        "{v:?}"
    );
    assert_eq!(s.digest(), digest, "a refused APPLY changed data");
    // A valid one does what it says.
    let apply =
        |c: &mut Connection, change: &str| -> i64 { q(c, &["SLIDINGWINDOW.APPLY", "new", change]) };
    assert_eq!(apply(&mut c, "-1 0 5 2 7 1"), 3);
    assert_eq!(scores(&mut c, "new"), [5, 5, 7]);
    assert_eq!(apply(&mut c, "5 0"), 1);
    assert_eq!(apply(&mut c, "7 0"), 0);
    assert_eq!(kind(&mut c, "new"), "none");
    // `SW.APPLY`, the name the module replicates under, is the same command.
    assert_eq!(q::<i64>(&mut c, &["SW.APPLY", "new", "-1 0 5 2 7 1"]), 3);
    assert_eq!(scores(&mut c, "new"), [5, 5, 7]);
    let v = call(&mut c, &["SW.APPLY", "new", "x 0"]);
    let err = error_line(&v).unwrap_or_else(|| panic!("SW.APPLY x 0 answered {v:?}"));
    assert!(err.starts_with("ERR SLIDINGWINDOW.APPLY: cutoff"), "{err}");
}
