//! Persistence and movement: DEBUG RELOAD, AOF rewrite, RDB, DUMP/RESTORE, COPY and RENAME keep
//! a compact key's log and TTL; a replica attached to compact keys holds them.

use super::*;

/// A key as a caller sees it: its PEEK answers and its absolute expiry.
type Seen = (Vec<[i64; 5]>, i64);

/// A server's whole data as a caller sees it: digest, and each key's PEEK answers and TTL.
fn state(s: &Server, keys: &[&str]) -> (String, Vec<Seen>) {
    let mut c = s.client();
    let per_key = keys
        .iter()
        .map(|k| (peeks(&mut c, k), pexpiretime(&mut c, k)))
        .collect();
    (s.digest(), per_key)
}

#[test]
fn persists_and_moves_with_every_mechanism() {
    let keys = ["p0", "p1", "p2", "p3", "p4"];
    let mut s = aof_server();
    let mut c = s.client();
    traffic(&mut c, &keys, 7, 3000);
    for k in keys {
        assert_eq!(kind(&mut c, k), "swcompact", "{k}");
    }
    let before = state(&s, &keys);
    assert_ne!(before.0, "0".repeat(40), "the traffic left no data");

    ok(&mut c, &["DEBUG", "RELOAD"]);
    assert_eq!(state(&s, &keys), before, "DEBUG RELOAD");

    // An AOF rewrite without the RDB preamble writes the logs as APPLY commands.
    rewrite_aof(&s, &mut c);
    let base = std::fs::read_dir(s.dir().join("appendonlydir"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().contains(".base."))
        .map(|e| std::fs::read(e.path()).unwrap())
        .expect("a base AOF");
    assert!(
        base.windows(8).any(|w| w.eq_ignore_ascii_case(b"SW.APPLY")),
        "the rewritten AOF holds no APPLY"
    );
    s.restart();
    assert_eq!(state(&s, &keys), before, "restart from the rewritten AOF");

    let mut c = s.client();
    ok(&mut c, &["SAVE"]);
    client::config_set(&mut c, "appendonly", "no");
    s.restart();
    assert_eq!(state(&s, &keys), before, "restart from the RDB");

    // DUMP/RESTORE keeps the log; the TTL comes with RESTORE's own argument.
    let mut c = s.client();
    let dump: Vec<u8> = q(&mut c, &["DUMP", "p0"]);
    let at = pexpiretime(&mut c, "p0");
    let restored = redis::cmd("RESTORE")
        .arg("r0")
        .arg(at)
        .arg(&dump)
        .arg("ABSTTL")
        .query::<()>(&mut c);
    assert!(restored.is_ok(), "{restored:?}");
    assert_eq!(peeks(&mut c, "r0"), peeks(&mut c, "p0"));
    assert_eq!(pexpiretime(&mut c, "r0"), at);
    assert_eq!(snapshot(&mut c, "r0"), snapshot(&mut c, "p0"));
    // COPY and RENAME.
    let copied: i64 = q(&mut c, &["COPY", "p1", "c1"]);
    assert_eq!(copied, 1);
    assert_eq!(snapshot(&mut c, "c1"), snapshot(&mut c, "p1"));
    let mine: Vec<[i64; 5]> = peeks(&mut c, "p2");
    ok(&mut c, &["RENAME", "p2", "moved"]);
    assert_eq!(peeks(&mut c, "moved"), mine);
    // The copy is a copy: changing it leaves the original alone.
    let original = snapshot(&mut c, "p1");
    sw(
        &mut c,
        &format!("ALLOW c1 3600 1000 {} COST 3", T0 + 999_999_999_999),
    );
    assert_eq!(snapshot(&mut c, "p1"), original);
    assert_ne!(snapshot(&mut c, "c1"), original);
}

#[test]
fn a_replica_attached_to_compact_keys_holds_them_and_answers_peek() {
    let keys = ["f0", "f1", "f2"];
    let master = compact_server();
    let mut c = master.client();
    traffic(&mut c, &keys, 11, 1500);
    let replica = start_replica(&master, &[]);
    traffic(&mut c, &keys, 12, 500);
    wait_in_sync(&master, &replica);
    assert_eq!(replica.digest(), master.digest());
    let mut r = replica.client();
    for k in keys {
        assert_eq!(kind(&mut r, k), "swcompact");
        assert_eq!(peeks(&mut r, k), peeks(&mut c, k), "{k}");
    }
}
