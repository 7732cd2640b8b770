//! The encoding: corrupt DUMP payloads refused, the golden RDBs of encodings 1 and 2, and the
//! DUMP fixtures of earlier layouts restored to the same logs.

use super::*;
use testkit::dump::{crc64, payload};

/// `RESTORE key 0 payload`.
pub(super) fn restore_payload(c: &mut Connection, key: &str, p: &[u8]) -> redis::RedisResult<()> {
    redis::cmd("RESTORE").arg(key).arg(0).arg(p).query::<()>(c)
}

/// A payload whose checksum is right but whose log is not: refused, and the server carries on.
#[test]
fn corrupt_restore_payloads_are_refused() {
    let (s, mut c) = compact_client();
    sw5(&mut c, &format!("ALLOW k 3600 10 {T0} COST 2"));
    sw5(&mut c, &format!("ALLOW k 3600 10 {}", T0 + 1000));
    let dump: Vec<u8> = q(&mut c, &["DUMP", "k"]);
    let (body, trailer) = dump.split_at(dump.len() - 10);
    assert_eq!(
        crc64(&dump[..dump.len() - 8]).to_le_bytes(),
        dump[dump.len() - 8..]
    );
    // type 7, then the module id (0x81 + 8 bytes), the count (opcode 2), the buffer (opcode 5).
    let (head, value) = body.split_at(10);
    assert_eq!(value[..2], [2, 2], "2 distinct timestamps");
    assert_eq!(value[2], 5, "a string buffer follows");
    let version = &trailer[..2];
    let restore = |c: &mut Connection, p: &[u8]| restore_payload(c, "bad", p);
    // (what is wrong, the value after the module id)
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("count 0", [&[2u8, 0][..], &value[2..]].concat()),
        ("count 3", [&[2u8, 3][..], &value[2..]].concat()),
        ("count 1", [&[2u8, 1][..], &value[2..]].concat()),
        ("no buffer", [&value[..2], &[0u8][..]].concat()),
        ("truncated", value[..value.len() - 3].to_vec()),
    ];
    // A timestamp above 2^53: the first varint replaced by 2^53 + 1.
    let mut big = vec![2u8, 1, 5, 8];
    big.extend([0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10, 0]);
    cases.push(("above 2^53", big));
    for (what, value) in &cases {
        let p = payload(&[head, value].concat(), version);
        let r = restore(&mut c, &p);
        assert!(r.is_err(), "{what}: RESTORE accepted it");
        assert!(
            s.info_field("server", "redis_version").is_some(),
            "{what}: the server died"
        );
        let exists: i64 = q(&mut c, &["EXISTS", "bad"]);
        assert_eq!(exists, 0, "{what}");
    }
    // An encoding version from the future (the module id's low 10 bits): refused with a log line.
    let mut future = head.to_vec();
    let last = future.len() - 1;
    future[last] = future[last].wrapping_add(1);
    let r = restore(&mut c, &payload(&[&future, value].concat(), version));
    assert!(r.is_err(), "a future encoding was accepted");
    wait_until(Duration::from_secs(10), "the refusal in the log", || {
        std::fs::read_to_string(s.log_path())
            .unwrap_or_default()
            .contains("encoding version 3 is newer than this module knows (2)")
    });
    // And the original still restores.
    let ok = restore(&mut c, &payload(body, version));
    assert!(ok.is_ok(), "{ok:?}");
    assert_eq!(peeks(&mut c, "bad"), peeks(&mut c, "k"));
}

/// The golden RDB: written by encoding 1 (Redis 7.0's RDB format), committed, and loaded by every
/// later version of the module to the same logs.
const GOLDEN: &str = "tests/fixtures/compact-v1.rdb";

/// The calls that made the golden RDB (then PERSIST and SAVE): key, window, max, now, cost.
fn golden_calls() -> Vec<(&'static str, u64, u64, u64, u64)> {
    let mut calls = vec![
        ("golden:zero", 60, 5, 0, 1),
        ("golden:top", 60, 5, 1 << 53, 2),
    ];
    for i in 0..1500u64 {
        calls.push(("golden:steady", 3600, 100_000, T0 + i * 37, 1 + i % 3));
    }
    calls.push(("golden:burst", 3600, 100_000, T0, 70_000));
    for i in 0..300u64 {
        calls.push((
            "golden:wide",
            9_007_199_254_740,
            100_000,
            T0 + i * (1 << 28),
            1,
        ));
    }
    calls
}

fn golden_models() -> Vec<(&'static str, Model)> {
    let mut models: Vec<(&'static str, Model)> = Vec::new();
    for (key, w, max, now, cost) in golden_calls() {
        let i = match models.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                models.push((key, Model::default()));
                models.len() - 1
            }
        };
        models[i].1.allow(w, max, now, cost);
    }
    models
}

#[test]
#[ignore = "writes tests/fixtures/compact-v1.rdb: only when the golden file must be made anew"]
fn write_the_golden_rdb() {
    let (s, mut c) = compact_client();
    for (key, w, max, now, cost) in golden_calls() {
        sw5(&mut c, &format!("ALLOW {key} {w} {max} {now} COST {cost}"));
    }
    for (key, _) in golden_models() {
        assert_eq!(q::<i64>(&mut c, &["PERSIST", key]), 1, "PERSIST {key}");
    }
    ok(&mut c, &["SAVE"]);
    std::fs::copy(s.dir().join("dump.rdb"), GOLDEN).unwrap();
}

/// A server that loaded the golden RDB at `path`, and a connection to it.
fn golden_server(path: &str) -> (Server, Connection) {
    let s = Server::builder()
        .args(["--dbfilename", "golden.rdb"])
        .start();
    std::fs::copy(path, s.dir().join("golden.rdb")).expect(path);
    let mut c = s.client();
    ok(&mut c, &["DEBUG", "RELOAD", "NOSAVE"]);
    (s, c)
}

#[test]
fn the_golden_rdb_loads_to_the_same_logs() {
    let (_s, mut c) = golden_server(GOLDEN);
    let models = golden_models();
    let keys: i64 = q(&mut c, &["DBSIZE"]);
    assert_eq!(keys as usize, models.len());
    for (key, model) in models {
        assert_eq!(kind(&mut c, key), "swcompact", "{key}");
        assert_eq!(pexpiretime(&mut c, key), -1, "{key} has no TTL");
        for (w, max, now, cost) in [
            (3600, 10, T0 + 5000, 1),
            (60, 3, T0, 2),
            (86_400, 100_000, 1 << 53, 7),
        ] {
            let want = model.peek(w, max, now, cost);
            assert_eq!(
                sw5(&mut c, &format!("PEEK {key} {w} {max} {now} COST {cost}")),
                want,
                "{key}"
            );
        }
        assert_eq!(scores(&mut c, key), model.scores, "{key}");
    }
}

/// The golden RDB of encoding 2 (runs): the keys of the first one, written again, and a counted
/// key past 2^32 on one timestamp.
const GOLDEN_V2: &str = "tests/fixtures/compact-v2.rdb";

/// The counted key of the golden RDB of encoding 2: (now, calls of COST 10^7).
const GOLDEN_COUNTED: [(u64, u64); 3] = [(T0, 430), (T0 + 1, 1), (T0 + 5000, 3)];

#[test]
#[ignore = "writes tests/fixtures/compact-v2.rdb: only when the golden file must be made anew"]
fn write_the_golden_v2_rdb() {
    let (s, mut c) = compact_client();
    wide_calls(&mut c);
    for (key, w, max, now, cost) in golden_calls() {
        sw5(&mut c, &format!("ALLOW {key} {w} {max} {now} COST {cost}"));
    }
    for (now, calls) in GOLDEN_COUNTED {
        for _ in 0..calls {
            let line = format!("ALLOW golden:counted 3600 {MAX_TS} {now} COST 10000000");
            assert_eq!(sw5(&mut c, &line)[0], 1);
        }
    }
    for (key, _) in golden_models() {
        assert_eq!(q::<i64>(&mut c, &["PERSIST", key]), 1, "PERSIST {key}");
    }
    assert_eq!(q::<i64>(&mut c, &["PERSIST", "golden:counted"]), 1);
    ok(&mut c, &["SAVE"]);
    std::fs::copy(s.dir().join("dump.rdb"), GOLDEN_V2).unwrap();
}

#[test]
fn the_golden_v2_rdb_loads_to_the_same_logs() {
    let (_s, mut c) = golden_server(GOLDEN_V2);
    let models = golden_models();
    let keys: i64 = q(&mut c, &["DBSIZE"]);
    assert_eq!(keys as usize, models.len() + 1);
    for (key, model) in models {
        assert_eq!(kind(&mut c, key), "swcompact", "{key}");
        assert_eq!(scores(&mut c, key), model.scores, "{key}");
    }
    // The counted key: 4.3 * 10^9 on T0, 10^7 a ms later, 3 * 10^7 five seconds later.
    assert_eq!(pexpiretime(&mut c, "golden:counted"), -1);
    // (window, in requests at T0 + 5000)
    for (w, want) in [(1, 30_000_000), (5, 40_000_000), (3600, 4_340_000_000)] {
        let line = format!("PEEK golden:counted {w} {MAX_TS} {} COST 1", T0 + 5000);
        assert_eq!(sw5(&mut c, &line)[1], want + 1, "window {w}");
    }
    // A DUMP in runs: a few bytes.
    let dump: Vec<u8> = q(&mut c, &["DUMP", "golden:counted"]);
    assert!(dump.len() <= 64, "{} bytes", dump.len());
}

const DUMPS: &str = "tests/fixtures/compact-v1-dumps.txt";

/// The calls behind the DUMP fixture: per key, `(now, cost)` in the order sent, over spans from
/// 1 ms to 2^53 ms, out of order, with bursts.
fn dump_calls() -> Vec<(String, Vec<(u64, u64)>)> {
    let mut rng = Rng::new(0xD0);
    [1u64, 1000, 86_400_000, 1 << 33, 1 << 41, 1 << 53]
        .into_iter()
        .map(|span| {
            let start = MAX_TS - span;
            let calls = (0..400)
                .map(|i| {
                    let cost = if i % 97 == 0 { 300 } else { rng.range(1, 3) };
                    (start + rng.range(0, span), cost)
                })
                .collect();
            (format!("span{span}"), calls)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Writes the DUMP fixture at `path`: on a compact server, `make` makes each key of `calls`
/// with its calls, then its DUMP is a line `key hex`.
fn write_fixture<K: AsRef<str>, C>(
    path: &str,
    calls: Vec<(K, C)>,
    mut make: impl FnMut(&mut Connection, &str, C),
) {
    let (_s, mut c) = compact_client();
    let mut out = String::new();
    for (key, calls) in calls {
        let key = key.as_ref();
        make(&mut c, key, calls);
        let dump: Vec<u8> = q(&mut c, &["DUMP", key]);
        out.push_str(&format!("{key} {}\n", hex(&dump)));
    }
    std::fs::write(path, out).unwrap();
}

/// RESTOREs every line of the DUMP fixture at `path`: `key hex`, a line for each key of `calls`
/// in order. Returns `calls`.
fn restore_fixture<K: AsRef<str>, C>(
    c: &mut Connection,
    path: &str,
    calls: Vec<(K, C)>,
) -> Vec<(K, C)> {
    let text = std::fs::read_to_string(path).expect(path);
    assert_eq!(text.lines().count(), calls.len());
    for (line, (key, _)) in text.lines().zip(&calls) {
        let (name, payload) = line.split_once(' ').expect("key hex");
        assert_eq!(name, key.as_ref());
        let ok: String = redis::cmd("RESTORE")
            .arg(name)
            .arg(0)
            .arg(unhex(payload))
            .query(c)
            .expect("RESTORE");
        assert_eq!(ok, "OK");
    }
    calls
}

/// Run once with `SLIDINGWINDOW_MODULE` set to a build of commit 345f612 (the ring of fixed-width
/// slots): its DUMPs of `dump_calls`, one `key hex` line each.
#[test]
#[ignore = "writes tests/fixtures/compact-v1-dumps.txt with the module under test"]
fn write_the_dump_fixture() {
    write_fixture(DUMPS, dump_calls(), |c, key, calls| {
        for (now, cost) in calls {
            sw5(
                c,
                &format!("ALLOW {key} 9007199254740 1000000 {now} COST {cost}"),
            );
        }
    });
}

/// DUMPs made by the previous layout's build restore with the same timestamps, and answer as
/// the calls that made them say.
#[test]
fn dumps_of_the_previous_build_restore() {
    let (_s, mut c) = compact_client();
    for (key, calls) in restore_fixture(&mut c, DUMPS, dump_calls()) {
        let mut want: Vec<u64> = calls
            .iter()
            .flat_map(|(now, cost)| std::iter::repeat_n(*now, *cost as usize))
            .collect();
        want.sort_unstable();
        assert_eq!(kind(&mut c, &key), "swcompact");
        assert_eq!(scores(&mut c, &key), want, "{key}");
        let count: i64 = q(&mut c, &["SLIDINGWINDOW.CONVERT", &key, "compact"]);
        assert_eq!(count as usize, want.len(), "{key}");
    }
}

const BLOCK_DUMPS: &str = "tests/fixtures/compact-v1-dumps-blocks.txt";

/// A call behind the second DUMP fixture: `ALLOW key 9007199254740 1000000 now COST cost`, or
/// `REFUND key n AT at`.
#[derive(Clone, Copy)]
enum Call {
    Allow(u64, u64),
    Refund(u64, u64),
}

/// Per key, the calls behind the DUMP fixture of the block layout (commit 8c38406: blocks in a
/// row, a Fenwick tree over their lengths): logs of several blocks, at several widths, out of
/// order, with bursts and refunds.
fn block_dump_calls() -> Vec<(&'static str, Vec<Call>)> {
    let mut rng = Rng::new(0xB10C);
    let mut keys = Vec::new();
    // (key, span, calls, percent of refunds)
    for (key, span, calls, refunds) in [
        ("dense", 3000u64, 3000, 5),
        ("late", 1 << 20, 2000, 15),
        ("wide", 1 << 50, 800, 10),
    ] {
        let start = T0.min(MAX_TS - span);
        let mut out = Vec::new();
        for i in 0..calls {
            let now = match key {
                "dense" => start + i as u64,
                _ => start + rng.range(0, span),
            };
            if rng.chance(refunds) {
                out.push(Call::Refund(rng.range(1, 4), now));
            } else {
                out.push(Call::Allow(now, rng.range(1, 3)));
            }
        }
        keys.push((key, out));
    }
    keys.push((
        "burst",
        vec![
            Call::Allow(T0, 3000),
            Call::Allow(T0 + 5, 1500),
            Call::Allow(T0 + 2, 700),
            Call::Refund(100, T0),
        ],
    ));
    keys
}

/// The log the calls of one key leave, by the contract model.
fn block_dump_model(calls: &[Call]) -> Model {
    let mut model = Model::default();
    for call in calls {
        block_dump_step(&mut model, call);
    }
    model
}

/// One call of `block_dump_calls` on `model`; returns the members a refund removes (0 for an
/// ALLOW).
fn block_dump_step(model: &mut Model, call: &Call) -> u64 {
    match *call {
        Call::Allow(now, cost) => {
            model.allow(9_007_199_254_740, 1_000_000, now, cost);
            0
        }
        Call::Refund(n, at) => model.refund(n, Some(at)),
    }
}

/// Run once with the module built at commit 8c38406: its DUMPs of `block_dump_calls`.
#[test]
#[ignore = "writes tests/fixtures/compact-v1-dumps-blocks.txt with the module under test"]
fn write_the_block_dump_fixture() {
    write_fixture(BLOCK_DUMPS, block_dump_calls(), |c, key, calls| {
        let mut model = Model::default();
        for call in calls {
            let removed = block_dump_step(&mut model, &call);
            match call {
                Call::Allow(now, cost) => {
                    let line = format!("ALLOW {key} 9007199254740 1000000 {now} COST {cost}");
                    assert_eq!(sw5(c, &line)[0], 1, "{line}");
                }
                Call::Refund(n, at) => {
                    let (n, at) = (n.to_string(), at.to_string());
                    let refunded: u64 = q(c, &["SLIDINGWINDOW.REFUND", key, &n, "AT", &at]);
                    assert_eq!(refunded, removed, "REFUND {key} {n} AT {at}");
                }
            }
        }
    });
}

/// DUMPs made by the build before the block index restore to the logs their calls made.
#[test]
fn dumps_of_the_block_layout_restore() {
    let (_s, mut c) = compact_client();
    for (key, calls) in restore_fixture(&mut c, BLOCK_DUMPS, block_dump_calls()) {
        let want = block_dump_model(&calls).scores;
        assert!(want.len() > 1000, "{key}: {} requests", want.len());
        assert_eq!(kind(&mut c, key), "swcompact");
        assert_eq!(scores(&mut c, key), want, "{key}");
        // The restored log takes the calls that follow as any other.
        let newest = *want.last().unwrap();
        let line = format!("ALLOW {key} 9007199254740 1000000 {newest} COST 5000");
        assert_eq!(sw5(&mut c, &line)[1] as usize, want.len() + 5000, "{key}");
        let refunded: i64 = q(&mut c, &["SLIDINGWINDOW.REFUND", key, "5000"]);
        assert_eq!(refunded, 5000, "{key}");
        assert_eq!(scores(&mut c, key), want, "{key}");
    }
}
