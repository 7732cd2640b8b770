//! Several keys in one call (`SLIDINGWINDOW.ALLOWALL` / `PEEKALL`) and refunds
//! (`SLIDINGWINDOW.REFUND`), CONTRACT.md "Several keys" and "Refunds", against a real
//! `redis-server` on both storages (and keys of both in one call), with `LEASE`, `DETAIL` and
//! `slidingwindow.lateness` among the calls: every reply (every limit's state with DETAIL),
//! every key's scores and TTL equal the contract model's; one key is ALLOW; an error on any key
//! changes no key; keyspace events and INFO counters.

use model::{Expiry, Model, Options};
use rng::Rng;
use testkit::client;
use testkit::harness;
use testkit::model;
use testkit::rng;

use client::{Events, STORAGES, detailed, exists, info_u64, pexpiretime, q, scores, snapshot};
use harness::{Server, call, error_line, ints, server_time_ms};
use redis::Connection;

/// Windows long enough that no key expires on the server's clock while a test runs (a key's
/// TTL is its longest window, and every key has one of these).
const LONG: [u64; 4] = [600, 900, 1800, 3600];
const SHORT: [u64; 4] = [1, 2, 5, 10];

/// One ALLOWALL / PEEKALL call's words: limits as (key index 0-based, window s, max).
fn all_words(
    cmd: &str,
    keys: &[String],
    limits: &[(usize, u64, u64)],
    now: &str,
    cost: u64,
) -> Vec<String> {
    all_words_with(cmd, keys, limits, now, cost, &[], false)
}

/// The same with more options (`LEASE ms`, `PRECISION p`) and `DETAIL`, before the limits.
fn all_words_with(
    cmd: &str,
    keys: &[String],
    limits: &[(usize, u64, u64)],
    now: &str,
    cost: u64,
    options: &[String],
    detail: bool,
) -> Vec<String> {
    let mut w = vec![format!("SLIDINGWINDOW.{cmd}"), keys.len().to_string()];
    w.extend(keys.iter().cloned());
    w.push(now.to_string());
    if cost != 1 {
        w.extend(["COST".to_string(), cost.to_string()]);
    }
    w.extend(options.iter().cloned());
    if detail {
        w.push("DETAIL".to_string());
    }
    for &(k, win, max) in limits {
        w.extend([
            "LIMIT".to_string(),
            (k + 1).to_string(),
            win.to_string(),
            max.to_string(),
        ]);
    }
    w
}

fn send(con: &mut Connection, words: &[String]) -> redis::Value {
    harness::call_words(con, words)
}

fn send_ok(con: &mut Connection, words: &[String]) -> Vec<i64> {
    ints(&harness::call_words_ok(con, words))
}

/// `REFUND key n [AT at]`'s count of refunded requests.
fn refunded(con: &mut Connection, key: &str, n: u64, at: Option<u64>) -> i64 {
    match send(con, &refund_words(key, n, at)) {
        redis::Value::Int(n) => n,
        other => panic!("REFUND {key} {n}: {other:?}"),
    }
}

fn refund_words(key: &str, n: u64, at: Option<u64>) -> Vec<String> {
    let mut w = vec![
        "SLIDINGWINDOW.REFUND".to_string(),
        key.to_string(),
        n.to_string(),
    ];
    if let Some(at) = at {
        w.extend(["AT".to_string(), at.to_string()]);
    }
    w
}

/// Random limits for `keys` keys: each key 1 to 3 (sometimes up to 16), one of them long, in
/// random order across keys.
fn random_limits(rng: &mut Rng, keys: usize) -> Vec<(usize, u64, u64)> {
    let mut limits = Vec::new();
    for k in 0..keys {
        limits.push((k, rng.pick(&LONG), rng.range(1, 12)));
        let more = if rng.chance(10) { 15 } else { 2 };
        for _ in 0..rng.range(0, more) {
            let w = if rng.chance(60) {
                rng.pick(&SHORT)
            } else {
                rng.pick(&LONG)
            };
            limits.push((k, w, rng.range(1, 12)));
        }
    }
    for i in (1..limits.len()).rev() {
        limits.swap(i, rng.range(0, i as u64) as usize);
    }
    limits
}

/// Streams of PEEKALL + ALLOWALL over 1 to 16 keys, with REFUNDs (with and without AT) and
/// single-key ALLOWs mixed in, time going back now and then, some calls with `LEASE`,
/// `PRECISION` or `DETAIL`, some streams with lateness; every reply, every key's scores and TTL
/// checked against the model. `mixed`: every other key is created in the other storage.
fn streams(storage: &str, mixed: bool, seed: u64, count: u64, steps: u64) -> [u32; 7] {
    let s = Server::builder().storage(storage).start();
    let mut c = s.client();
    let other = if storage == "zset" { "compact" } else { "zset" };
    let mut rng = Rng::new(seed);
    // Admitted, refused, bound by a key past the first, members refunded, leases admitted,
    // detailed calls, calls with a precision admitted.
    let mut seen = [0u32; 7];
    for stream in 0..count {
        let lateness = rng.pick(&[0, 0, 3000]);
        client::config_set(&mut c, "slidingwindow.lateness", lateness);
        let n = if rng.chance(25) {
            rng.range(1, 16)
        } else {
            rng.range(1, 4)
        } as usize;
        let keys: Vec<String> = (0..n).map(|k| format!("{{s{stream}}}:k{k}")).collect();
        let limits = random_limits(&mut rng, n);
        let mut models = vec![Model::default(); n];
        let mut expiry = vec![-2i64; n];
        if mixed {
            // Every other key made in the other storage, holding a member at 0.
            client::config_set(&mut c, "slidingwindow.storage", other);
            for k in (1..n).step_by(2) {
                let w = ["SLIDINGWINDOW.ALLOW", &keys[k], "3600", "1", "0"].map(String::from);
                assert_eq!(send_ok(&mut c, &w)[0], 1);
                models[k].scores.push(0);
                expiry[k] = pexpiretime(&mut c, &keys[k]);
            }
            client::config_set(&mut c, "slidingwindow.storage", storage);
        }
        let mut now: u64 = 1_700_000_000_000 + stream * 13;
        for step in 0..steps {
            let what = format!("stream {stream} step {step}");
            now = match rng.range(0, 19) {
                0 | 1 => now - rng.range(0, 5000),
                2 => now + rng.pick(&SHORT) * 1000,
                3 => now + rng.pick(&LONG) * 1000,
                _ => now + rng.range(0, 700),
            };
            match rng.range(0, 9) {
                // A refund on one key, at or before now, or of whatever is newest.
                0 | 1 => {
                    let k = rng.range(0, n as u64 - 1) as usize;
                    let at = rng.chance(70).then(|| now - rng.range(0, 1500));
                    let m = rng.range(1, 4);
                    let before = pexpiretime(&mut c, &keys[k]);
                    let got = send(&mut c, &refund_words(&keys[k], m, at));
                    let want = models[k].refund(m, at);
                    assert_eq!(got, redis::Value::Int(want as i64), "{what}: refund");
                    seen[3] += want as u32;
                    assert_eq!(scores(&mut c, &keys[k]), models[k].scores, "{what}: refund");
                    if models[k].scores.is_empty() {
                        assert!(!exists(&mut c, &keys[k]), "{what}: an emptied key is gone");
                        expiry[k] = -2;
                    } else {
                        assert_eq!(pexpiretime(&mut c, &keys[k]), before, "{what}: TTL");
                    }
                    continue;
                }
                // Traffic of its own on one key.
                2 => {
                    let k = rng.range(0, n as u64 - 1) as usize;
                    let own: Vec<(u64, u64)> = limits
                        .iter()
                        .filter(|l| l.0 == k)
                        .map(|l| (l.1, l.2))
                        .collect();
                    let mut w = vec![
                        "SLIDINGWINDOW.ALLOW".to_string(),
                        keys[k].clone(),
                        own[0].0.to_string(),
                        own[0].1.to_string(),
                        now.to_string(),
                    ];
                    for (win, max) in &own[1..] {
                        w.extend(["LIMIT".into(), win.to_string(), max.to_string()]);
                    }
                    let lease = rng.chance(30).then(|| rng.range(1, 3000));
                    if let Some(ms) = lease {
                        w.extend(["LEASE".into(), ms.to_string()]);
                    }
                    let t0 = server_time_ms(&mut c);
                    let got = send_ok(&mut c, &w);
                    let options = Options {
                        lease: lease.unwrap_or(0),
                        lateness,
                        ..Options::default()
                    };
                    let want = models[k].allow_with(&own, now, 1, options);
                    assert_eq!(got, want.plain(own.len() > 1), "{what}: ALLOW");
                    if got[0] == 1 {
                        let wmax = own.iter().map(|l| l.0).max().unwrap() * 1000;
                        let ttl = (wmax + options.lease + lateness) as i64;
                        let at = pexpiretime(&mut c, &keys[k]);
                        assert!(at >= t0 + ttl, "{what}: TTL");
                    }
                    expiry[k] = pexpiretime(&mut c, &keys[k]);
                    continue;
                }
                _ => {}
            }
            let cost = if rng.chance(75) { 1 } else { rng.range(1, 12) };
            let lease = rng.chance(30).then(|| rng.range(1, 3000));
            let precision = rng.chance(50).then(|| rng.pick(&[7, 1000]));
            let detail = rng.chance(30);
            let options = Options {
                lease: lease.unwrap_or(0),
                lateness,
                precision: precision.unwrap_or(1),
            };
            let mut extra = Vec::new();
            if let Some(ms) = lease {
                extra.extend(["LEASE".to_string(), ms.to_string()]);
            }
            if let Some(p) = precision {
                extra.extend(["PRECISION".to_string(), p.to_string()]);
            }
            let words =
                |cmd| all_words_with(cmd, &keys, &limits, &now.to_string(), cost, &extra, detail);
            // The six integers, and with DETAIL every limit's state and the now used.
            let answer = |c: &mut Connection, words: &[String]| {
                let reply = send(c, words);
                assert!(error_line(&reply).is_none(), "{what}: {reply:?}");
                if !detail {
                    return (ints(&reply), Vec::new());
                }
                let d = detailed(&reply);
                assert_eq!(d.now, now as i64, "{what}: DETAIL's now");
                (d.head, d.limits)
            };
            let before: Vec<_> = keys.iter().map(|k| snapshot(&mut c, k)).collect();
            let peeked = answer(&mut c, &words("PEEKALL"));
            let after: Vec<_> = keys.iter().map(|k| snapshot(&mut c, k)).collect();
            assert_eq!(after, before, "{what}: PEEKALL changed a key");
            let want = Model::peek_all_with(&models, &limits, now, cost, options);
            let shown = |want: model::Answer| match detail {
                true => (want.head.to_vec(), want.limits),
                false => (want.head.to_vec(), Vec::new()),
            };
            assert_eq!(peeked, shown(want), "{what}: PEEKALL");
            // Each key's longest window, and whether it held nothing once trimmed by it.
            let wmax: Vec<u64> = (0..n)
                .map(|k| {
                    limits
                        .iter()
                        .filter(|l| l.0 == k)
                        .map(|l| l.1)
                        .max()
                        .unwrap()
                        * 1000
                })
                .collect();
            let fresh: Vec<bool> = (0..n)
                .map(|k| models[k].empty_after((now - wmax[k] - lateness) as i64))
                .collect();
            let t0 = server_time_ms(&mut c);
            let got = answer(&mut c, &words("ALLOWALL"));
            let t1 = server_time_ms(&mut c);
            let want = Model::call_all(&mut models, &limits, now, cost, options);
            assert_eq!(got, shown(want), "{what}: {}", words("ALLOWALL").join(" "));
            assert_eq!(got, peeked, "{what}: PEEKALL is ALLOWALL");
            seen[4] += u32::from(lease.is_some() && got.0[0] == 1);
            seen[5] += u32::from(detail);
            seen[6] += u32::from(precision.is_some() && got.0[0] == 1);
            let got = got.0;
            for (k, key) in keys.iter().enumerate() {
                assert_eq!(scores(&mut c, key), models[k].scores, "{what}: key {k}");
                let at = pexpiretime(&mut c, key);
                // Members scored that far ahead of now keep the key that much longer.
                let ttl = (wmax[k] + (options.score(now) - now) + lateness) as i64;
                if models[k].scores.is_empty() {
                    assert_eq!(at, -2, "{what}: key {k} emptied");
                } else if got[0] == 1 {
                    // The later of the key's expiry and the call's own.
                    let mut e = Expiry {
                        lo: expiry[k],
                        hi: expiry[k],
                    };
                    e.admit(fresh[k], t0, t1, ttl);
                    assert!(e.holds(at), "{what}: key {k} TTL {at}, not in {e:?}");
                } else {
                    assert_eq!(
                        at, expiry[k],
                        "{what}: a refused call changed key {k}'s TTL"
                    );
                }
                expiry[k] = at;
            }
            seen[got[0] as usize] += 1;
            seen[2] += u32::from(limits[got[5] as usize].0 > 0);
        }
    }
    seen
}

#[test]
fn random_streams_follow_the_contract_model() {
    for (i, storage) in STORAGES.into_iter().enumerate() {
        let seen = streams(storage, false, 0x41_1000 + i as u64, 40, 40);
        assert!(seen.iter().all(|n| *n > 60), "{storage}: {seen:?}");
    }
}

#[test]
fn keys_of_both_storages_in_one_call() {
    let seen = streams("zset", true, 0x41_2000, 30, 40);
    assert!(seen.iter().all(|n| *n > 40), "{seen:?}");
}

/// `ALLOWALL 1 key now LIMIT 1 w m [LIMIT 1 w2 m2]...` answers what `ALLOW key w m now [LIMIT
/// w2 m2]...` answers, with a sixth integer, and leaves the same scores.
#[test]
fn one_key_allowall_is_allow() {
    for (_, _s, mut c) in client::on_each_storage() {
        let mut rng = Rng::new(0x1_A11);
        for stream in 0..30 {
            let limits: Vec<(u64, u64)> = (0..rng.range(1, 4))
                .map(|i| {
                    (
                        if i == 0 {
                            rng.pick(&LONG)
                        } else {
                            rng.pick(&SHORT)
                        },
                        rng.range(1, 8),
                    )
                })
                .collect();
            let keyed: Vec<(usize, u64, u64)> = limits.iter().map(|&(w, m)| (0, w, m)).collect();
            let (a, b) = (format!("one:{stream}:a"), format!("one:{stream}:b"));
            let mut now = 1_700_000_000_000u64;
            for _ in 0..30 {
                now = if rng.chance(10) {
                    now - rng.range(0, 3000)
                } else {
                    now + rng.range(0, 900)
                };
                let cost = rng.range(1, 3);
                let mut w = vec![
                    "SLIDINGWINDOW.ALLOW".to_string(),
                    a.clone(),
                    limits[0].0.to_string(),
                    limits[0].1.to_string(),
                    now.to_string(),
                    "COST".to_string(),
                    cost.to_string(),
                ];
                for (win, max) in &limits[1..] {
                    w.extend(["LIMIT".into(), win.to_string(), max.to_string()]);
                }
                let mut one = send_ok(&mut c, &w);
                let all = send_ok(
                    &mut c,
                    &all_words(
                        "ALLOWALL",
                        std::slice::from_ref(&b),
                        &keyed,
                        &now.to_string(),
                        cost,
                    ),
                );
                if one.len() == 5 {
                    one.push(0);
                }
                assert_eq!(all, one);
                assert_eq!(scores(&mut c, &a), scores(&mut c, &b));
            }
        }
    }
}

/// A call that is an error for any key changes no key: WRONGTYPE on the third key, the member
/// cap, and every malformed call; the trims of the first keys do not happen either.
#[test]
fn an_error_on_any_key_changes_no_key() {
    for (storage, _s, mut c) in client::on_each_storage() {
        // Keys one and two hold a member a call at 100000 would trim, and one it keeps.
        for key in ["{e}1", "{e}2"] {
            for now in ["1000", "99000"] {
                let r = send_ok(
                    &mut c,
                    &[
                        "SLIDINGWINDOW.ALLOW".into(),
                        key.into(),
                        "10".into(),
                        "10".into(),
                        now.into(),
                    ],
                );
                assert_eq!(r[0], 1);
            }
            assert_eq!(q::<i64>(&mut c, &["PERSIST", key]), 1, "PERSIST {key}");
        }
        client::ok(&mut c, &["SET", "{e}3", "text"]);
        let keys = ["{e}1".to_string(), "{e}2".to_string(), "{e}3".to_string()];
        let limits = [(0, 10, 5), (1, 10, 5), (2, 10, 5)];
        let before: Vec<_> = keys.iter().map(|k| snapshot(&mut c, k)).collect();
        let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
        for cmd in ["ALLOWALL", "PEEKALL"] {
            let got = send(&mut c, &all_words(cmd, &keys, &limits, "100000", 1));
            assert_eq!(error_line(&got).as_deref(), Some(wrongtype), "{cmd}");
        }
        client::config_set(&mut c, "slidingwindow.max-members-per-call", "5");
        let two = &keys[..2];
        let got = send(
            &mut c,
            &all_words("ALLOWALL", two, &limits[..2], "100000", 3),
        );
        assert_eq!(
            error_line(&got).as_deref(),
            Some("ERR cost 3 times 2 keys would add more than 5 members in one call")
        );
        client::config_set(&mut c, "slidingwindow.max-members-per-call", "100000");
        let bad: &[(&str, &str)] = &[
            (
                "SLIDINGWINDOW.ALLOWALL 2 {e}1 {e}1 100000 LIMIT 1 10 5 LIMIT 2 10 5",
                "ERR key 2 is key 1 again: the keys of one call must be distinct",
            ),
            (
                "SLIDINGWINDOW.ALLOWALL 2 {e}1 {e}2 100000 LIMIT 1 10 5",
                "ERR key 2 has no LIMIT: every key needs at least one",
            ),
            (
                "SLIDINGWINDOW.ALLOWALL 9 {e}1 {e}2 100000 LIMIT 1 10 5",
                "ERR numkeys must be an integer between 1 and 16, followed by that many keys and now",
            ),
            (
                "SLIDINGWINDOW.ALLOWALL 17 {e}1 {e}2 100000 LIMIT 1 10 5",
                "ERR numkeys must be an integer between 1 and 16, followed by that many keys and now",
            ),
            (
                "SLIDINGWINDOW.ALLOWALL 2 {e}1 {e}2 100000 LIMIT 3 10 5 LIMIT 1 1 1",
                "ERR LIMIT keyno must be an integer between 1 and numkeys (2)",
            ),
            (
                "SLIDINGWINDOW.ALLOWALL 2 {e}1 {e}2 100000 LIMIT 1 10",
                "ERR syntax error, option 'LIMIT' needs three values (keyno window max)",
            ),
            (
                "SLIDINGWINDOW.ALLOWALL 2 {e}1 {e}2 100000 LIMIT 1 0 5 LIMIT 2 1 1",
                "ERR LIMIT window must be an integer between 1 and 9007199254740 (window * 1000 <= 2^53)",
            ),
            (
                "SLIDINGWINDOW.ALLOWALL 2 {e}1 {e}2 100000 LIMIT 1 10 5 LIMIT 2 1 1 FOO",
                "ERR syntax error, unknown option 'FOO'",
            ),
            (
                "SLIDINGWINDOW.PEEKALL 2 {e}1 {e}2 x LIMIT 1 10 5 LIMIT 2 1 1",
                "ERR now must be an integer between 0 and 9007199254740992, or *",
            ),
            (
                "SLIDINGWINDOW.ALLOWALL 1 {e}1 100000",
                "ERR wrong number of arguments for 'slidingwindow.allowall' command",
            ),
            (
                "SLIDINGWINDOW.REFUND {e}1 0",
                "ERR n must be an integer between 1 and 9007199254740992",
            ),
            (
                "SLIDINGWINDOW.REFUND {e}1 1 AT -5",
                "ERR AT must be an integer between 0 and 9007199254740992, or *",
            ),
            (
                "SLIDINGWINDOW.REFUND {e}1 1 AT 5 AT 6",
                "ERR syntax error, option 'AT' given twice",
            ),
            (
                "SLIDINGWINDOW.REFUND {e}1 1 COST 1",
                "ERR syntax error, unknown option 'COST'",
            ),
            ("SLIDINGWINDOW.REFUND {e}3 1", wrongtype),
            (
                "SLIDINGWINDOW.REFUND {e}1",
                "ERR wrong number of arguments for 'slidingwindow.refund' command",
            ),
        ];
        for (line, want) in bad {
            let words: Vec<String> = line.split(' ').map(String::from).collect();
            let got = send(&mut c, &words);
            assert_eq!(error_line(&got).as_deref(), Some(*want), "{line}");
        }
        let after: Vec<_> = keys.iter().map(|k| snapshot(&mut c, k)).collect();
        assert_eq!(after, before, "{storage}: an error changed a key");
    }
}

/// A refund on a missing key or with nothing at or before `AT` answers 0 and changes nothing;
/// `AT *` is the server's clock.
#[test]
fn refunds_of_nothing_and_at_the_server_clock() {
    for (_, _s, mut c) in client::on_each_storage() {
        assert_eq!(refunded(&mut c, "missing", 5, None), 0);
        // Two members before the server's clock, one an hour after it.
        let t = server_time_ms(&mut c) as u64;
        let future = t + 3_600_000;
        for now in [t - 2000, t - 1000, future] {
            let r = send_ok(
                &mut c,
                &["SLIDINGWINDOW.ALLOW", "r", "36000", "10", &now.to_string()].map(String::from),
            );
            assert_eq!(r[0], 1);
        }
        let before = snapshot(&mut c, "r");
        assert_eq!(refunded(&mut c, "r", 5, Some(999)), 0);
        assert_eq!(snapshot(&mut c, "r"), before);
        // `AT *`: the member from the future stays.
        let got = call(&mut c, &["SLIDINGWINDOW.REFUND", "r", "5", "AT", "*"]);
        assert_eq!(got, redis::Value::Int(2));
        assert_eq!(scores(&mut c, "r"), [future]);
        assert_eq!(pexpiretime(&mut c, "r"), before.1, "REFUND keeps the TTL");
        assert_eq!(refunded(&mut c, "r", 9_007_199_254_740_992, None), 1);
        assert!(!exists(&mut c, "r"));
    }
}

/// Keyspace events: ALLOWALL's on each key as ALLOW's; REFUND's `zrem` (sorted set) or
/// `slidingwindow.refund` (compact), then `del` when the key emptied.
#[test]
fn keyspace_events() {
    for (storage, s, mut c) in client::on_each_storage() {
        let (add, refund) = match storage {
            "zset" => ("zadd", "zrem"),
            _ => ("slidingwindow.add", "slidingwindow.refund"),
        };
        let mut ev = [Events::watch(&s, "{v}a"), Events::watch(&s, "{v}b")];
        let marker = |c: &mut Connection, m: &str| {
            let receivers: i64 = q(c, &["PUBLISH", "marker", m]);
            assert_eq!(receivers, 2, "PUBLISH marker: the two subscribers");
        };
        let keys = ["{v}a".to_string(), "{v}b".to_string()];
        let r = send_ok(
            &mut c,
            &all_words("ALLOWALL", &keys, &[(0, 60, 5), (1, 60, 5)], "*", 2),
        );
        assert_eq!(r[0], 1);
        marker(&mut c, "1");
        for e in &mut ev {
            assert_eq!(e.until("1"), [add, "expire"]);
        }
        // A refused call changes nothing: no events.
        let r = send_ok(
            &mut c,
            &all_words("ALLOWALL", &keys, &[(0, 60, 5), (1, 60, 2)], "*", 1),
        );
        assert_eq!(r[0], 0);
        let r = send_ok(
            &mut c,
            &all_words("PEEKALL", &keys, &[(0, 60, 5), (1, 60, 5)], "*", 1),
        );
        assert_eq!(r[0], 1);
        assert_eq!(refunded(&mut c, "{v}a", 1, Some(0)), 0);
        marker(&mut c, "2");
        for e in &mut ev {
            assert_eq!(e.until("2"), Vec::<String>::new());
        }
        assert_eq!(refunded(&mut c, "{v}a", 1, None), 1);
        assert_eq!(refunded(&mut c, "{v}b", 5, None), 2);
        marker(&mut c, "3");
        assert_eq!(ev[0].until("3"), [refund]);
        assert_eq!(ev[1].until("3"), [refund, "del"]);
    }
}

/// INFO: ALLOWALL and PEEKALL count as one call each, COST once per admitted call; REFUND
/// counts its calls and the members it removed.
#[test]
fn info_counts_calls_once() {
    let s = Server::start();
    let mut c = s.client();
    let keys: Vec<String> = (0..3).map(|k| format!("{{i}}{k}")).collect();
    let limits = [(0, 60, 10), (1, 60, 10), (2, 60, 4)];
    for _ in 0..2 {
        assert_eq!(
            send_ok(&mut c, &all_words("ALLOWALL", &keys, &limits, "1000", 2))[0],
            1
        );
    }
    assert_eq!(
        send_ok(&mut c, &all_words("ALLOWALL", &keys, &limits, "1000", 2))[0],
        0
    );
    assert_eq!(
        send_ok(&mut c, &all_words("PEEKALL", &keys, &limits, "1000", 1))[0],
        0
    );
    assert!(
        error_line(&send(
            &mut c,
            &all_words("ALLOWALL", &keys, &limits, "x", 1)
        ))
        .is_some()
    );
    assert_eq!(refunded(&mut c, "{i}0", 3, None), 3);
    assert_eq!(refunded(&mut c, "{i}9", 3, None), 0);
    let info = |f: &str| info_u64(&s, "slidingwindow", &format!("slidingwindow_{f}"));
    assert_eq!(info("allow_calls"), 3);
    assert_eq!(info("peek_calls"), 1);
    assert_eq!(info("admitted"), 2);
    assert_eq!(info("rejected"), 1);
    assert_eq!(info("admitted_requests"), 4);
    assert_eq!(info("errors"), 1);
    assert_eq!(info("refund_calls"), 2);
    assert_eq!(info("refunded"), 3);
}
