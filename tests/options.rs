//! `LEASE ms`, `DETAIL` and `slidingwindow.lateness` (CONTRACT.md "Leases", "Every limit's
//! state", "Lateness") against a real `redis-server`, on both storages: random streams with and
//! without them against testkit's model (every reply, every limit's state, the stored scores,
//! the TTLs), PEEK == ALLOW with both, `*` with a lease, the errors, and callers out of order:
//! within the lateness they never over-admit, and the same stream without it does.

use model::{Answer, Expiry, Model, Options};
use rng::Rng;
use testkit::client;
use testkit::harness;
use testkit::model;
use testkit::rng;

use client::{STORAGES, detailed, exists, pexpiretime, scores, snapshot};
use harness::{Server, call, error_line, ints, server_time_ms};
use redis::{Connection, Value};

const T0: u64 = 1_700_000_000_000;
const TWO_53: u64 = 1 << 53;

/// One ALLOW / PEEK call: limits as (window s, max), the first positional.
struct Call<'a> {
    cmd: &'a str,
    key: &'a str,
    limits: &'a [(u64, u64)],
    now: String,
    cost: u64,
    lease: Option<u64>,
    precision: Option<u64>,
    detail: bool,
}

impl Call<'_> {
    fn words(&self) -> Vec<String> {
        let mut out = client::head_words(self.cmd, self.key, self.limits[0], &self.now);
        if self.cost != 1 {
            out.extend(["COST".to_string(), self.cost.to_string()]);
        }
        if let Some(ms) = self.lease {
            out.extend(["LEASE".to_string(), ms.to_string()]);
        }
        if let Some(p) = self.precision {
            out.extend(["PRECISION".to_string(), p.to_string()]);
        }
        if self.detail {
            out.push("DETAIL".to_string());
        }
        for (w, m) in &self.limits[1..] {
            out.extend(["LIMIT".to_string(), w.to_string(), m.to_string()]);
        }
        out
    }

    fn send(&self, con: &mut Connection) -> Value {
        harness::call_words_ok(con, &self.words())
    }
}

/// Whether `reply` is the model's `answer` to a call at `now`: the plain five or six integers,
/// or with `detail` the eight elements.
fn same(reply: &Value, answer: &Answer, named: bool, detail: bool, now: u64) -> bool {
    if detail {
        let got = detailed(reply);
        got.head == answer.head && got.limits == answer.limits && got.now == now as i64
    } else {
        ints(reply) == answer.plain(named)
    }
}

fn set_lateness(con: &mut Connection, ms: u64) {
    client::config_set(con, "slidingwindow.lateness", ms);
}

/// Random streams of PEEK then ALLOW with the same arguments, a lease on some, a precision on
/// some, DETAIL on some, under lateness 0 or not, time going back now and then: PEEK answers what
/// ALLOW answers, both what the model answers; the stored scores are the model's (a lease's at
/// its end, rounded up to the precision); an admitted call's expiry is the later of the key's and
/// `Wmax + (t - now) + G` from the server's clock, a refused call's is untouched.
#[test]
fn random_streams_with_and_without_options_follow_the_model() {
    for (i, storage) in STORAGES.into_iter().enumerate() {
        let s = Server::builder().storage(storage).start();
        let mut c = s.client();
        let mut rng = Rng::new(0x0E_A5E0 + i as u64);
        // Admitted with a lease, refused with a lease, with DETAIL, with lateness, admitted with
        // a precision.
        let mut seen = [0u32; 5];
        for stream in 0..24 {
            let key = format!("s{stream}");
            // The positional window long, so that no key expires by the server's clock.
            let mut limits = vec![(rng.pick(&[600, 900]), rng.range(4, 80))];
            for _ in 0..rng.range(0, 2) {
                limits.push((rng.pick(&[1, 5, 10, 600]), rng.range(1, 8)));
            }
            let named = limits.len() > 1;
            let wmax = limits.iter().map(|l| l.0).max().unwrap_or(1) as i64 * 1000;
            let lateness = rng.pick(&[0, 0, 2000, 86_400_000]);
            set_lateness(&mut c, lateness);
            let mut model = Model::default();
            let mut expiry = -2i64;
            let mut now = T0 + stream * 7;
            for step in 0..40 {
                let what = format!("{storage} stream {stream} step {step}");
                now = match rng.range(0, 9) {
                    0 => now - rng.range(0, 4000),
                    1 => now + rng.range(1000, 20_000),
                    _ => now + rng.range(0, 700),
                };
                let lease = rng.chance(40).then(|| rng.range(1, 5000));
                let precision = rng.chance(35).then(|| rng.pick(&[1, 7, 250, 1000, 60_000]));
                let (cost, detail) = (rng.range(1, 3), rng.chance(50));
                let call = |cmd| Call {
                    cmd,
                    key: &key,
                    limits: &limits,
                    now: now.to_string(),
                    cost,
                    lease,
                    precision,
                    detail,
                };
                let (peek, allow) = (call("PEEK"), call("ALLOW"));
                let options = Options {
                    lease: lease.unwrap_or(0),
                    lateness,
                    precision: precision.unwrap_or(1),
                };
                let before = snapshot(&mut c, &key);
                let peeked = peek.send(&mut c);
                assert_eq!(
                    snapshot(&mut c, &key),
                    before,
                    "{what}: PEEK changed the key"
                );
                let want = model.peek_with(&limits, now, peek.cost, options);
                assert!(
                    same(&peeked, &want, named, peek.detail, now),
                    "{what}: PEEK {peeked:?}, model {want:?}"
                );
                let fresh = model.empty_after(now as i64 - wmax - lateness as i64);
                let t0 = server_time_ms(&mut c);
                let got = allow.send(&mut c);
                let t1 = server_time_ms(&mut c);
                assert_eq!(got, peeked, "{what}: PEEK is ALLOW");
                let want = model.allow_with(&limits, now, allow.cost, options);
                assert!(
                    same(&got, &want, named, allow.detail, now),
                    "{what}: ALLOW {} answered {got:?}, model {want:?}",
                    allow.words().join(" ")
                );
                assert_eq!(scores(&mut c, &key), model.scores, "{what}: scores");
                let at = pexpiretime(&mut c, &key);
                // Members scored that far ahead of now keep the key that much longer.
                let ahead = (options.score(now) - now) as i64;
                let ttl = wmax + ahead + lateness as i64;
                if model.scores.is_empty() {
                    assert_eq!(at, -2, "{what}: an empty log is no key");
                } else if want.head[0] == 1 {
                    // The later of the key's expiry and the call's own.
                    let mut e = Expiry {
                        lo: expiry,
                        hi: expiry,
                    };
                    e.admit(fresh, t0, t1, ttl);
                    assert!(e.holds(at), "{what}: TTL {at} not in {e:?}");
                } else {
                    assert_eq!(at, expiry, "{what}: a refused call changed the TTL");
                }
                expiry = at;
                if lease.is_some() {
                    seen[usize::from(want.head[0] == 1)] += 1;
                }
                seen[2] += u32::from(allow.detail);
                seen[3] += u32::from(lateness > 0);
                seen[4] += u32::from(precision.is_some_and(|p| p > 1) && want.head[0] == 1);
            }
        }
        assert!(seen.iter().all(|n| *n > 60), "{storage}: {seen:?}");
    }
}

/// With `now = *` and DETAIL the caller learns the `now` the server used, and so the lease's end:
/// the permits are scored `now + ms`, the TTL is exactly `now + Wmax + ms + G` (one clock
/// reading), and `REFUND key unused AT now+ms` takes the unused ones back.
#[test]
fn a_lease_on_the_server_clock_tells_its_end() {
    for storage in STORAGES {
        let s = Server::builder().storage(storage).lateness(3000).start();
        let mut c = s.client();
        let t0 = server_time_ms(&mut c);
        let line = "SLIDINGWINDOW.ALLOW k 60 10 * COST 5 LEASE 2000 DETAIL";
        let got = detailed(&call(&mut c, &line.split(' ').collect::<Vec<_>>()));
        let t1 = server_time_ms(&mut c);
        let now = got.now;
        assert!(
            t0 <= now && now <= t1,
            "{storage}: now {now} not in [{t0}, {t1}]"
        );
        assert_eq!(got.head, [1, 5, 5, 0, 62_000, 0], "{storage}");
        assert_eq!(got.limits, [[5, 5, 0, 62_000]], "{storage}");
        let end = now as u64 + 2000;
        assert_eq!(scores(&mut c, "k"), [end; 5], "{storage}");
        assert_eq!(
            pexpiretime(&mut c, "k"),
            now + 60_000 + 2000 + 3000,
            "{storage}"
        );
        // Two permits handed out, three returned at the lease's end.
        let end = end.to_string();
        let refund = call(&mut c, &["SLIDINGWINDOW.REFUND", "k", "3", "AT", &end]);
        assert_eq!(refund, Value::Int(3), "{storage}");
        let later = (now + 1000).to_string();
        let peek = ints(&call(
            &mut c,
            &["SLIDINGWINDOW.PEEK", "k", "60", "10", &later],
        ));
        assert_eq!(peek, [1, 3, 7, 0, 61_000], "{storage}");
    }
}

/// DETAIL lists every limit in limit order (the positional first; for ALLOWALL, the order of the
/// LIMIT options), `b` even for one limit, and the `now` used.
#[test]
fn detail_lists_every_limit_in_order() {
    for (storage, _s, mut c) in client::on_each_storage() {
        let send = |c: &mut Connection, line: &str| call(c, &line.split(' ').collect::<Vec<_>>());
        let d = |head: Vec<i64>, limits: Vec<[i64; 4]>, now| client::Detailed { head, limits, now };
        let got = detailed(&send(&mut c, "SLIDINGWINDOW.ALLOW one 10 3 1000 DETAIL"));
        assert_eq!(
            got,
            d(vec![1, 1, 2, 0, 10_000, 0], vec![[1, 2, 0, 10_000]], 1000)
        );
        for now in ["1000", "1500"] {
            let line = format!("SLIDINGWINDOW.ALLOW k 1 2 {now} LIMIT 10 5 LIMIT 60 100");
            assert_eq!(ints(&send(&mut c, &line))[0], 1, "{storage}");
        }
        // The one-second limit is full and binds; the others have room.
        let line = "SLIDINGWINDOW.PEEK k 1 2 1800 DETAIL LIMIT 10 5 LIMIT 60 100";
        let want = d(
            vec![0, 2, 0, 200, 700, 0],
            vec![[2, 0, 200, 700], [2, 3, 0, 9700], [2, 98, 0, 59_700]],
            1800,
        );
        assert_eq!(detailed(&send(&mut c, line)), want, "{storage}");
        let allow = line.replace("PEEK", "ALLOW");
        assert_eq!(detailed(&send(&mut c, &allow)), want, "{storage}");
        // ALLOWALL: the LIMIT options' order, key 2's first.
        let line = "SLIDINGWINDOW.ALLOWALL 2 {d}a {d}b 1000 DETAIL LIMIT 2 60 10 LIMIT 1 10 1";
        let want = d(
            vec![1, 1, 0, 10_000, 10_000, 1],
            vec![[1, 9, 0, 60_000], [1, 0, 10_000, 10_000]],
            1000,
        );
        assert_eq!(detailed(&send(&mut c, line)), want, "{storage}");
        // Without DETAIL, the same call answers the six integers alone.
        let line = "SLIDINGWINDOW.PEEKALL 2 {d}a {d}b 1000 LIMIT 2 60 10 LIMIT 1 10 1";
        assert_eq!(ints(&send(&mut c, line)), [0, 1, 0, 10_000, 10_000, 1]);
    }
}

/// Every malformed LEASE, PRECISION or DETAIL is an error naming it, changing nothing, on all
/// four commands.
#[test]
fn bad_leases_precisions_and_details_are_refused_and_change_nothing() {
    let lease =
        "ERR LEASE must be an integer between 1 and 9007199254740992 - now (now + LEASE <= 2^53)";
    let precision = "ERR PRECISION must be an integer between 1 and 9007199254740992 (now + LEASE rounded up to a multiple of PRECISION <= 2^53)";
    for (storage, s, mut c) in client::on_each_storage() {
        assert_eq!(client::sw5(&mut c, "ALLOW k 60 5 1000")[0], 1);
        let digest = s.digest();
        let top = TWO_53.to_string();
        let cases: Vec<(String, &str)> = vec![
            ("k 60 5 100000 LEASE 0".into(), lease),
            ("k 60 5 100000 LEASE -1".into(), lease),
            ("k 60 5 100000 LEASE 1.5".into(), lease),
            ("k 60 5 100000 LEASE inf".into(), lease),
            ("k 60 5 100000 LEASE 99999999999999999999".into(), lease),
            (format!("k 60 5 {top} LEASE 1"), lease),
            ("k 60 5 1000 LEASE 9007199254739993".into(), lease),
            (format!("k 60 5 * LEASE {top}"), lease),
            (format!("k 60 5 * LEASE {top} FOO"), lease),
            ("k 60 5 100000 PRECISION 0".into(), precision),
            ("k 60 5 100000 PRECISION -1".into(), precision),
            ("k 60 5 100000 PRECISION nan".into(), precision),
            ("k 60 5 100000 PRECISION 9007199254740993".into(), precision),
            ("k 60 5 9007199254740991 PRECISION 3 FOO".into(), precision),
            (
                "k 60 5 1000 PRECISION 3 LEASE 9007199254739991".into(),
                precision,
            ),
            (
                "k 60 5 * LEASE 4503599627370497 PRECISION 4503599627370497".into(),
                precision,
            ),
            (
                "k 60 5 100000 PRECISION".into(),
                "ERR syntax error, option 'PRECISION' needs a value",
            ),
            (
                "k 60 5 100000 precision 5 PRECISION 5".into(),
                "ERR syntax error, option 'PRECISION' given twice",
            ),
            (
                "k 60 5 100000 LEASE".into(),
                "ERR syntax error, option 'LEASE' needs a value",
            ),
            (
                "k 60 5 100000 LEASE 5 lease 6".into(),
                "ERR syntax error, option 'lease' given twice",
            ),
            (
                "k 60 5 100000 DETAIL detail".into(),
                "ERR syntax error, option 'detail' given twice",
            ),
            (
                "k 60 5 100000 DETAIL 5".into(),
                "ERR syntax error, unknown option '5'",
            ),
            (
                "k 60 5 100000 COST 0 LEASE 0".into(),
                "ERR cost must be an integer between 1 and 9007199254740992",
            ),
        ];
        for (line, want) in &cases {
            for cmd in ["ALLOW", "PEEK"] {
                let full = format!("SLIDINGWINDOW.{cmd} {line}");
                let got = call(&mut c, &full.split(' ').collect::<Vec<_>>());
                assert_eq!(
                    error_line(&got).as_deref(),
                    Some(*want),
                    "{storage}: {full}"
                );
            }
            // The same options on ALLOWALL and PEEKALL, after the LIMIT.
            let mut words = line.split(' ');
            let (_key, w, m, now) = (words.next(), words.next(), words.next(), words.next());
            let rest: Vec<&str> = words.collect();
            let (w, m, now) = (w.unwrap_or(""), m.unwrap_or(""), now.unwrap_or(""));
            for cmd in ["ALLOWALL", "PEEKALL"] {
                let full = format!(
                    "SLIDINGWINDOW.{cmd} 1 k {now} LIMIT 1 {w} {m} {}",
                    rest.join(" ")
                );
                let got = call(&mut c, &full.split(' ').collect::<Vec<_>>());
                assert_eq!(
                    error_line(&got).as_deref(),
                    Some(*want),
                    "{storage}: {full}"
                );
            }
        }
        assert_eq!(s.digest(), digest, "{storage}: an error changed the data");
    }
}

/// PEEK and PEEKALL with LEASE and DETAIL write nothing: the dataset, the dirty counter for
/// `save` rules, and no key created.
#[test]
fn peeks_with_options_change_nothing() {
    for storage in STORAGES {
        let s = Server::builder().storage(storage).lateness(5000).start();
        let mut c = s.client();
        assert_eq!(client::sw5(&mut c, "ALLOW k 60 5 1000")[0], 1);
        let dirty = |s: &Server| s.info_field("persistence", "rdb_changes_since_last_save");
        let (digest, changes) = (s.digest(), dirty(&s));
        for line in [
            "SLIDINGWINDOW.PEEK k 60 5 90000 LEASE 500 DETAIL",
            "SLIDINGWINDOW.PEEK missing 60 5 1000 LEASE 500 DETAIL",
            "SLIDINGWINDOW.PEEKALL 2 {p}a k 1000 LEASE 5 DETAIL LIMIT 1 60 5 LIMIT 2 60 5",
        ] {
            let got = call(&mut c, &line.split(' ').collect::<Vec<_>>());
            assert_eq!(detailed(&got).head[0], 1, "{storage}: {line}");
        }
        assert_eq!((s.digest(), dirty(&s)), (digest, changes), "{storage}");
        assert!(!exists(&mut c, "missing") && !exists(&mut c, "{p}a"));
    }
}

/// The heaviest window of `limit` over the admitted requests `(time, cost)`: the most weight any
/// `(a, a + W]` holds (it is reached by a window ending at an admitted time).
fn heaviest_window(admitted: &[(u64, u64)], window_ms: u64) -> u64 {
    let mut sorted = admitted.to_vec();
    sorted.sort_unstable();
    let (mut start, mut weight, mut most) = (0, 0u64, 0u64);
    for end in 0..sorted.len() {
        weight += sorted[end].1;
        while sorted[start].0 + window_ms <= sorted[end].0 {
            weight -= sorted[start].1;
            start += 1;
        }
        most = most.max(weight);
    }
    most
}

/// Concurrent callers stamping their own clocks: each call's `now` is the newest `now` so far
/// minus up to `lag` ms. Runs the stream on `key` with lateness `g` and checks every reply and
/// the stored scores against the model; returns the admitted requests `(now, cost)`.
fn disorderly(
    c: &mut Connection,
    key: &str,
    limits: &[(u64, u64)],
    g: u64,
    lag: u64,
    seed: u64,
) -> Vec<(u64, u64)> {
    set_lateness(c, g);
    let mut rng = Rng::new(seed);
    let mut model = Model::default();
    let mut newest = T0;
    let mut admitted = Vec::new();
    for step in 0..700 {
        newest += rng.range(0, 1200);
        let now = newest - rng.range(0, lag);
        let call = Call {
            cmd: "ALLOW",
            key,
            limits,
            now: now.to_string(),
            cost: 1,
            lease: None,
            precision: None,
            detail: false,
        };
        let got = ints(&call.send(c));
        let options = Options {
            lease: 0,
            lateness: g,
            ..Options::default()
        };
        let want = model.allow_with(limits, now, 1, options);
        assert_eq!(
            got,
            want.plain(limits.len() > 1),
            "G {g} step {step}: now {now}"
        );
        if got[0] == 1 {
            admitted.push((now, 1));
        }
    }
    assert_eq!(scores(c, key), model.scores, "G {g}");
    admitted
}

/// Callers up to G ms behind the newest `now` (CONTRACT.md "Lateness"). "Never over-admit" means:
/// for every limit `(W, max)`, every window `(a, a + W]` of time holds admitted requests (by the
/// `now` each was admitted at) weighing at most `max`. It holds because each admitted call at `t`
/// found every earlier admission scored after `t - W` still logged (trims keep G more ms, and
/// the key lives `Wmax + G` past its last admission), so the last admission in any window saw
/// all the others. With lateness 0 the same traffic over-admits: a later `now` trims members an
/// earlier-stamped call, arriving after it, still has in its window.
#[test]
fn out_of_order_callers_within_the_lateness_never_over_admit() {
    let lag = 20_000;
    let limits = [(60, 8), (10, 3)];
    for (i, storage) in STORAGES.into_iter().enumerate() {
        let s = Server::builder().storage(storage).start();
        let mut c = s.client();
        let seed = 0x1A7E_0000 + i as u64;
        let admitted = disorderly(&mut c, "within", &limits, lag, lag, seed);
        assert!(
            admitted.len() > 50,
            "{storage}: {} admitted",
            admitted.len()
        );
        for (w, max) in limits {
            let most = heaviest_window(&admitted, w * 1000);
            assert!(
                most <= max,
                "{storage}: {most} in a {w} s window of max {max}"
            );
        }
        let admitted = disorderly(&mut c, "without", &limits, 0, lag, seed);
        let most = heaviest_window(&admitted, 60_000);
        assert!(
            most > 8,
            "{storage}: without lateness the same disorder should over-admit, and got at most {most}"
        );
    }
}

/// For callers whose `now` never goes back, lateness changes no reply: the same stream on a
/// key under G = 0 and on one under a day answers the same, the second keeping more.
#[test]
fn in_order_callers_answer_the_same_whatever_the_lateness() {
    for (storage, _s, mut c) in client::on_each_storage() {
        let mut rng = Rng::new(0x0D_E4);
        let limits = [(60, 5), (5, 2)];
        let mut now = T0;
        for step in 0..300 {
            now += rng.pick(&[0, 100, 900, 3000, 61_000]);
            let replies: Vec<Value> = [("a", 0), ("b", 86_400_000)]
                .into_iter()
                .map(|(key, g)| {
                    set_lateness(&mut c, g);
                    Call {
                        cmd: "ALLOW",
                        key,
                        limits: &limits,
                        now: now.to_string(),
                        cost: 1,
                        lease: None,
                        precision: None,
                        detail: step % 2 == 0,
                    }
                    .send(&mut c)
                })
                .collect();
            assert_eq!(replies[0], replies[1], "{storage} step {step}");
        }
        let (a, b) = (scores(&mut c, "a"), scores(&mut c, "b"));
        assert!(
            b.len() > a.len() && a.iter().all(|s| b.contains(s)),
            "{storage}"
        );
    }
}
