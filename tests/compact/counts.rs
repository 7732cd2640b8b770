//! Counts past 2^32 and up to 2^53 on one timestamp: never wrapped by ALLOW, REFUND, trims, COPY,
//! DEBUG RELOAD, DUMP/RESTORE or a replica; CONVERT to a sorted set refused past its size; the
//! RDB encoding in runs, so that a DUMP costs the key's distinct timestamps.

use super::encoding::restore_payload;
use super::*;
use testkit::dump::{payload, varint, write_len};

/// `ALLOW`'s largest `max`, so that only the count is tested.
const MAX: u64 = 1 << 53;

/// The reproduction: 430 calls of COST 10^7 on one timestamp.
fn four_point_three_billion(c: &mut Connection, key: &str) {
    wide_calls(c);
    let mut pipe = redis::pipe();
    for _ in 0..430 {
        pipe.cmd("SLIDINGWINDOW.ALLOW")
            .arg(key)
            .arg(3600)
            .arg(MAX)
            .arg(T0)
            .arg("COST")
            .arg(10_000_000);
    }
    let replies: Vec<Vec<i64>> = pipe.query(c).expect("430 ALLOWs");
    for (i, r) in replies.iter().enumerate() {
        assert_eq!(r[..2], [1, (i as i64 + 1) * 10_000_000], "call {i}");
    }
}

/// The PEEK count of `key` at `now` with window `w` (the log's count in the window plus 1).
fn count(c: &mut Connection, key: &str, w: u64, now: u64) -> i64 {
    sw5(c, &format!("PEEK {key} {w} {MAX} {now}"))[1]
}

/// Encoding 2 of `runs` (sorted distinct timestamps, counts): each timestamp's distance from the
/// one before, a copied one followed by 0 and its extra copies.
fn encoding_2(runs: &[(u64, u64)]) -> Vec<u8> {
    let (mut out, mut prev) = (Vec::new(), 0);
    for &(ts, n) in runs {
        varint(&mut out, ts - prev);
        if n > 1 {
            out.push(0);
            varint(&mut out, n - 1);
        }
        prev = ts;
    }
    out
}

/// RESTOREs `runs` into `key` as encoding 2, with the type header and RDB version of a DUMP
/// this server made.
fn restore_runs(c: &mut Connection, key: &str, runs: &[(u64, u64)]) -> redis::RedisResult<()> {
    sw5(c, &format!("ALLOW header:probe 60 5 {T0}"));
    let dump: Vec<u8> = q(c, &["DUMP", "header:probe"]);
    let (body, trailer) = dump.split_at(dump.len() - 10);
    let head = &body[..10];
    let buf = encoding_2(runs);
    let mut value = vec![2u8];
    write_len(&mut value, runs.len() as u64);
    value.push(5);
    write_len(&mut value, buf.len() as u64);
    value.extend(&buf);
    value.push(0);
    restore_payload(c, key, &payload(&[head, &value].concat(), &trailer[..2]))
}

/// The reproduction, then the same count through REFUND, a trim, COPY, DEBUG RELOAD,
/// DUMP/RESTORE and a replica: no count wraps.
#[test]
fn counts_past_2_to_the_32_on_one_timestamp() {
    let master = compact_server();
    let mut c = master.client();
    four_point_three_billion(&mut c, "k");
    let replica = start_replica(&master, &[]);
    assert_eq!(q::<i64>(&mut c, &["SLIDINGWINDOW.REFUND", "k", "1"]), 1);
    assert_eq!(count(&mut c, "k", 3600, T0), 4_300_000_000);
    // A newer timestamp beside it, then a trim of the older one by a call a window later.
    sw5(&mut c, &format!("ALLOW k 3600 {MAX} {} COST 7", T0 + 1000));
    assert_eq!(count(&mut c, "k", 3600, T0 + 1000), 4_300_000_007);
    assert_eq!(q::<i64>(&mut c, &["COPY", "k", "copy"]), 1);
    let dump: Vec<u8> = q(&mut c, &["DUMP", "k"]);
    assert!(dump.len() <= 64, "a DUMP of {} bytes", dump.len());
    restore_payload(&mut c, "restored", &dump).expect("RESTORE");
    ok(&mut c, &["DEBUG", "RELOAD"]);
    for key in ["k", "copy", "restored"] {
        assert_eq!(count(&mut c, key, 3600, T0 + 1000), 4_300_000_007, "{key}");
        assert_eq!(q::<Vec<u8>>(&mut c, &["DUMP", key]), dump, "{key}");
    }
    wait_in_sync(&master, &replica);
    assert_eq!(replica.digest(), master.digest());
    let mut r = replica.client();
    assert_eq!(count(&mut r, "copy", 3600, T0 + 1000), 4_300_000_007);
    // A sorted set cannot hold it: CONVERT refuses and changes nothing.
    let err = error_line(&call(&mut c, &["SLIDINGWINDOW.CONVERT", "k", "zset"]));
    assert_eq!(
        err.as_deref(),
        Some(
            "ERR the compact log holds 4300000006 requests, more than a sorted set holds (4294967295 members, one a request)"
        )
    );
    assert_eq!(kind(&mut c, "k"), "swcompact");
    // A window that leaves the big timestamp out trims it: the 7 newer ones stay.
    let line = format!("ALLOW k 1 {MAX} {}", T0 + 1500);
    assert_eq!(sw5(&mut c, &line)[1], 8);
    assert_eq!(count(&mut c, "k", 3600, T0 + 1500), 9);
    assert_eq!(
        info_u64(&master, "slidingwindow", "slidingwindow_trimmed"),
        4_299_999_999
    );
    wait_in_sync(&master, &replica);
    assert_eq!(replica.digest(), master.digest());
}

/// Counts near 2^53 arrive by RESTORE (no call adds that many): refunds, trims, COPY and DEBUG
/// RELOAD keep them; a payload of more than 2^53 requests is refused whole.
#[test]
fn counts_near_2_to_the_53() {
    let (s, mut c) = compact_client();
    let runs = [(T0, MAX - 12), (T0 + 1000, 3), (T0 + 2000, 9)];
    restore_runs(&mut c, "k", &runs).expect("RESTORE");
    // At 2^53 the window is full: a PEEK of cost 1 is refused, its count what the log holds.
    assert_eq!(
        sw5(&mut c, &format!("PEEK k 3600 {MAX} {}", T0 + 2000))[..2],
        [0, MAX as i64]
    );
    let refunded: i64 = q(
        &mut c,
        &[
            "SLIDINGWINDOW.REFUND",
            "k",
            "10",
            "AT",
            &(T0 + 1000).to_string(),
        ],
    );
    assert_eq!(refunded, 10);
    assert_eq!(count(&mut c, "k", 3600, T0 + 2000), (MAX - 10 + 1) as i64);
    assert_eq!(q::<i64>(&mut c, &["COPY", "k", "copy"]), 1);
    ok(&mut c, &["DEBUG", "RELOAD"]);
    for key in ["k", "copy"] {
        assert_eq!(
            count(&mut c, key, 3600, T0 + 2000),
            (MAX - 10 + 1) as i64,
            "{key}"
        );
    }
    let dump: Vec<u8> = q(&mut c, &["DUMP", "k"]);
    assert!(dump.len() <= 64, "a DUMP of {} bytes", dump.len());
    // A trim of the oldest timestamp (2^53 - 19 of it).
    assert_eq!(
        sw5(&mut c, &format!("ALLOW k 1 {MAX} {}", T0 + 2500))[1],
        10
    );
    assert_eq!(
        count(&mut c, "copy", 3600, T0 + 2000),
        (MAX - 10 + 1) as i64
    );
    // More than 2^53 in all, or a zero count: refused, nothing written, the server alive.
    for (what, runs) in [
        ("2^53 + 1", vec![(T0, MAX), (T0 + 1, 1)]),
        ("2^53 on two", vec![(T0, MAX / 2 + 1), (T0 + 1, MAX / 2)]),
    ] {
        assert!(restore_runs(&mut c, "bad", &runs).is_err(), "{what}");
        assert_eq!(q::<i64>(&mut c, &["EXISTS", "bad"]), 0, "{what}");
    }
    restore_runs(&mut c, "top", &[(T0, MAX)]).expect("2^53 exactly");
    // 2^53 on one timestamp: 33 blocks of 2^48 - 1 and their index.
    let memory: u64 = q(&mut c, &["MEMORY", "USAGE", "top"]);
    assert!(memory <= 4096, "2^53 on one timestamp in {memory} bytes");
    let line = format!("PEEK top 3600 {MAX} {T0}");
    assert_eq!(sw5(&mut c, &line)[..2], [0, MAX as i64]);
    assert!(s.info_field("server", "redis_version").is_some());
}

/// 10^8 requests on 10 timestamps: a DUMP of a few dozen bytes, equal after RESTORE; the RDB
/// value tracks MEMORY USAGE for other arrival patterns too.
#[test]
fn a_dump_costs_the_distinct_timestamps() {
    let (_s, mut c) = compact_client();
    wide_calls(&mut c);
    for i in 0..10 {
        let line = format!("ALLOW counted 3600 {MAX} {} COST 10000000", T0 + i * 1000);
        assert_eq!(sw5(&mut c, &line)[0], 1);
    }
    let dump: Vec<u8> = q(&mut c, &["DUMP", "counted"]);
    assert!(dump.len() <= 4096, "a DUMP of {} bytes", dump.len());
    restore_payload(&mut c, "back", &dump).expect("RESTORE");
    assert_eq!(q::<Vec<u8>>(&mut c, &["DUMP", "back"]), dump);
    assert_eq!(peeks(&mut c, "back"), peeks(&mut c, "counted"));
    assert_eq!(count(&mut c, "back", 3600, T0 + 9000), 100_000_001);
    // (key, ms between calls, cost): dense, spread, bursts.
    let mut pipe = redis::pipe();
    for (key, gap, cost) in [
        ("dense", 1u64, 1u64),
        ("spread", 997, 1),
        ("bursts", 50, 40),
    ] {
        for i in 0..20_000u64 {
            let now = T0 + i * gap;
            pipe.cmd("SLIDINGWINDOW.ALLOW")
                .arg(key)
                .arg(9_007_199_254_740u64)
                .arg(MAX)
                .arg(now)
                .arg("COST")
                .arg(cost)
                .ignore();
        }
    }
    let () = pipe.query(&mut c).expect("ALLOWs");
    for key in ["counted", "dense", "spread", "bursts"] {
        let dump: Vec<u8> = q(&mut c, &["DUMP", key]);
        let memory: u64 = q(&mut c, &["MEMORY", "USAGE", key]);
        assert!(
            dump.len() as u64 <= 8 * memory,
            "{key}: a DUMP of {} bytes for {memory} bytes of memory",
            dump.len()
        );
    }
}

/// An AOF rewrite without the RDB preamble writes a count past 2^32 as APPLY batches; the server
/// restarted from it holds the same count and the same DUMP.
#[test]
fn counts_past_2_to_the_32_through_the_aof() {
    let mut s = aof_server();
    let mut c = s.client();
    four_point_three_billion(&mut c, "k");
    sw5(&mut c, &format!("ALLOW k 3600 {MAX} {} COST 3", T0 + 1000));
    let dump: Vec<u8> = q(&mut c, &["DUMP", "k"]);
    rewrite_aof(&s, &mut c);
    s.restart();
    let mut c = s.client();
    assert_eq!(count(&mut c, "k", 3600, T0 + 1000), 4_300_000_004);
    assert_eq!(q::<Vec<u8>>(&mut c, &["DUMP", "k"]), dump);
}
