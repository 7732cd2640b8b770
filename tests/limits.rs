//! Several limits in one call (`LIMIT window max`, CONTRACT.md "Several limits"), against a real
//! `redis-server`: every reply, the stored scores and the TTL equal the contract model's; LIMIT
//! options equal to the positional limit change nothing but the sixth integer; malformed options
//! are refused and change nothing; replicas and the AOF end with the master's data.

use model::{Expiry, Model};
use rng::Rng;
use testkit::client;
use testkit::harness;
use testkit::model;
use testkit::rng;

use client::{STORAGES, exists, pexpiretime, q, scores, snapshot};
use harness::{Server, call, error_line, ints, server_time_ms, start_replica, wait_in_sync};
use redis::Connection;

/// One call: the command, key, limits as (window s, max) with the positional one first, `now`,
/// and the cost (sent as `COST` only when `cost_at` places it).
struct Call<'a> {
    cmd: &'a str,
    key: &'a str,
    limits: &'a [(u64, u64)],
    now: u64,
    cost: u64,
    /// Where `COST n` goes among the `LIMIT` options (None: not sent, cost 1).
    cost_at: Option<usize>,
    /// Option names as typed: upper, lower or mixed case.
    lower: bool,
}

impl Call<'_> {
    fn words(&self) -> Vec<String> {
        let mut out = client::head_words(self.cmd, self.key, self.limits[0], self.now);
        let name = |n: &str| {
            if self.lower {
                n.to_lowercase()
            } else {
                n.to_string()
            }
        };
        for (i, (w, m)) in self.limits[1..].iter().enumerate() {
            if self.cost_at == Some(i) {
                out.extend([name("COST"), self.cost.to_string()]);
            }
            out.extend([name("LIMIT"), w.to_string(), m.to_string()]);
        }
        if self.cost_at.is_some_and(|at| at >= self.limits.len() - 1) {
            out.extend([name("CoSt"), self.cost.to_string()]);
        }
        out
    }

    fn send(&self, con: &mut Connection) -> Vec<i64> {
        ints(&harness::call_words_ok(con, &self.words()))
    }
}

/// Drives one key with PEEK then ALLOW, checking each against the model, the stored scores, and
/// the TTL: after an admission the later of the key's and `Wmax` from the server's clock,
/// untouched otherwise.
struct Driver {
    model: Model,
    /// The key's absolute expiry as last read.
    expiry: i64,
    outcomes: [u32; 2],
    /// Calls bound by a LIMIT option rather than the positional limit.
    bound_by_option: u32,
}

impl Driver {
    fn new() -> Driver {
        Driver {
            model: Model::default(),
            expiry: -2,
            outcomes: [0; 2],
            bound_by_option: 0,
        }
    }

    /// Runs the call as PEEK then ALLOW; returns ALLOW's reply.
    fn step(&mut self, con: &mut Connection, call: &Call, what: &str) -> Vec<i64> {
        let mut peek = Call {
            cmd: "PEEK",
            ..*call
        };
        peek.lower = !call.lower;
        let before = snapshot(con, call.key);
        let peeked = peek.send(con);
        assert_eq!(
            snapshot(con, call.key),
            before,
            "{what}: PEEK changed the key"
        );
        let want = self.model.peek_limits(call.limits, call.now, call.cost);
        assert_eq!(peeked, want, "{what}: PEEK {}", peek.words().join(" "));

        let wmax = call.limits.iter().map(|l| l.0).max().unwrap() as i64 * 1000;
        let fresh = self.model.empty_after(call.now as i64 - wmax);
        let t0 = server_time_ms(con);
        let got = call.send(con);
        let t1 = server_time_ms(con);
        let want = self.model.allow_limits(call.limits, call.now, call.cost);
        assert_eq!(got, want, "{what}: {}", call.words().join(" "));
        assert_eq!(got.len(), if call.limits.len() > 1 { 6 } else { 5 });
        assert_eq!(scores(con, call.key), self.model.scores, "{what}: scores");
        assert_eq!(
            exists(con, call.key),
            !self.model.scores.is_empty(),
            "{what}"
        );

        let at = pexpiretime(con, call.key);
        if self.model.scores.is_empty() {
            assert_eq!(at, -2, "{what}: an empty key is gone");
        } else if got[0] == 1 {
            // The later of the key's expiry and the call's own.
            let mut e = Expiry {
                lo: self.expiry,
                hi: self.expiry,
            };
            e.admit(fresh, t0, t1, wmax);
            assert!(e.holds(at), "{what}: expiry {at} not in {e:?}");
        } else {
            assert_eq!(at, self.expiry, "{what}: a refused call changed the TTL");
        }
        self.expiry = at;
        self.outcomes[got[0] as usize] += 1;
        self.bound_by_option += u32::from(got.get(5).is_some_and(|b| *b > 0));
        got
    }
}

/// Windows in seconds: short ones, and long ones of which every call has at least one, so that
/// no key expires on the server's clock during a test (its TTL is the longest window).
const SHORT: [u64; 4] = [1, 2, 5, 10];
const LONG: [u64; 6] = [60, 61, 90, 120, 600, 3600];

/// 1 to 4 limits in random order (windows may repeat, the long one anywhere), with maxes drawn
/// from `maxes` so that each limit binds now and then.
fn random_limits(rng: &mut Rng, maxes: &[u64]) -> Vec<(u64, u64)> {
    let mut limits: Vec<(u64, u64)> = (1..rng.range(1, 4))
        .map(|_| {
            let w = if rng.chance(50) {
                rng.pick(&SHORT)
            } else {
                rng.pick(&LONG)
            };
            (w, rng.pick(maxes))
        })
        .collect();
    let at = rng.range(0, limits.len() as u64) as usize;
    limits.insert(at, (rng.pick(&LONG), rng.pick(maxes)));
    limits
}

/// Calls with several limits on keys of their own, each checked by a `Driver`: `streams` keys,
/// `steps` calls each; `next` gives a call's `now` and cost from the previous `now`. Returns how
/// many calls were refused, admitted, and bound by a `LIMIT` option.
fn run_streams(
    s: &Server,
    seed: u64,
    (streams, steps): (u64, u64),
    maxes: &[u64],
    next: impl Fn(&mut Rng, &[(u64, u64)], u64) -> (u64, u64),
) -> [u32; 3] {
    let mut c = s.client();
    let mut rng = Rng::new(seed);
    let mut totals = [0u32; 3];
    for stream in 0..streams {
        let key = format!("lim:{seed}:{stream}");
        let limits = random_limits(&mut rng, maxes);
        let mut d = Driver::new();
        let mut now: u64 = 1_700_000_000_000 + stream * 7;
        for step in 0..steps {
            let cost;
            (now, cost) = next(&mut rng, &limits, now);
            // COST anywhere among the LIMIT options, or left out when it is 1.
            let cost_at = (cost != 1 || rng.chance(30)).then(|| rng.range(0, 3) as usize);
            let call = Call {
                cmd: "ALLOW",
                key: &key,
                limits: &limits,
                now,
                cost,
                cost_at,
                lower: rng.chance(50),
            };
            let _ = d.step(&mut c, &call, &format!("stream {stream} step {step}"));
        }
        totals[0] += d.outcomes[0];
        totals[1] += d.outcomes[1];
        totals[2] += d.bound_by_option;
    }
    totals
}

#[test]
fn random_streams_follow_the_contract_model() {
    for storage in STORAGES {
        let s = Server::builder().storage(storage).start();
        let totals = run_streams(
            &s,
            0x4C1_0417,
            (60, 60),
            &[1, 2, 3, 5, 8, 10],
            |rng, limits, now| {
                let shortest = limits.iter().map(|l| l.0).min().unwrap() * 1000;
                let longest = limits.iter().map(|l| l.0).max().unwrap() * 1000;
                let now = match rng.range(0, 19) {
                    // Backward, by up to half the longest window.
                    0 | 1 => now - rng.range(0, longest / 2),
                    // Whole windows: exactly one limit's window (a boundary), or several.
                    2 => now + rng.pick(limits).0 * 1000,
                    3 => now + longest * rng.range(1, 3),
                    4 => now + rng.range(shortest, longest),
                    _ => now + rng.range(0, shortest / 4),
                };
                // Mostly 1; sometimes a limit's max or one more, so above some limits but not others.
                let cost = match rng.range(0, 9) {
                    0..=5 => 1,
                    6 | 7 => rng.pick(limits).1 + rng.range(0, 1),
                    _ => rng.range(1, 12),
                };
                (now, cost)
            },
        );
        // The streams exercised refusals, admissions, and bindings by LIMIT options.
        assert!(totals.iter().all(|n| *n > 300), "{totals:?}");
    }
}

/// Deep logs: thousands of members, so counts and ranks go past the walks from either end to
/// the set's own commands, and a window's need-th oldest sits in the middle of the log.
#[test]
fn deep_logs_follow_the_contract_model() {
    let s = Server::start();
    let maxes = [20, 100, 300, 1000, 2000, 5000];
    let totals = run_streams(&s, 0xDEE9, (16, 80), &maxes, |rng, limits, now| {
        let now = match rng.range(0, 19) {
            0 => now - rng.range(0, 5000),
            1 => now + rng.pick(limits).0 * 1000,
            2 => now + 600_000,
            _ => now + rng.range(0, 300),
        };
        let cost = if rng.chance(20) { 1 } else { rng.range(1, 120) };
        (now, cost)
    });
    assert!(totals.iter().all(|n| *n > 50), "{totals:?}");
    // The set's own count and rank lookups ran, in place.
    for command in ["cmdstat_zcount", "cmdstat_zrange"] {
        let stats = s.info_field("commandstats", command).unwrap_or_default();
        assert!(stats.starts_with("calls="), "{command}: {stats:?}");
    }
}

#[test]
fn sixteen_limits_in_one_call() {
    for (_, _s, mut c) in client::on_each_storage() {
        let mut rng = Rng::new(0x16);
        let mut d = Driver::new();
        let mut now = 1_700_000_000_000;
        for step in 0..150 {
            let limits: Vec<(u64, u64)> = (0..16)
                .map(|i| (LONG[i % LONG.len()] + i as u64, 3 + (i as u64 * 7) % 20))
                .collect();
            now += rng.range(0, 20_000);
            let cost = rng.range(1, 3);
            let call = Call {
                cmd: "ALLOW",
                key: "k16",
                limits: &limits,
                now,
                cost,
                cost_at: Some(rng.range(0, 15) as usize),
                lower: false,
            };
            let _ = d.step(&mut c, &call, &format!("step {step}"));
        }
        assert!(d.outcomes.iter().all(|n| *n > 10), "{:?}", d.outcomes);
    }
}

/// A call whose LIMIT options all equal the positional limit answers the same five integers as
/// the call without them, stores the same scores, and sets the same TTL; the sixth integer is 0.
#[test]
fn limit_options_equal_to_the_positional_one_answer_as_without_them() {
    for (_, _s, mut c) in client::on_each_storage() {
        let mut rng = Rng::new(0xE0A1);
        let mut now: u64 = 1_700_000_000_000;
        let (mut plain, mut named) = (Driver::new(), Driver::new());
        for step in 0..400 {
            now = match rng.range(0, 9) {
                0 => now - rng.range(0, 30_000),
                1 => now + 60_000,
                _ => now + rng.range(0, 9000),
            };
            let (w, max, cost) = (rng.pick(&[60, 61, 90]), rng.range(1, 8), rng.range(1, 3));
            let copies = vec![(w, max); rng.range(2, 16) as usize];
            let alone = Call {
                cmd: "ALLOW",
                key: "plain",
                limits: &copies[..1],
                now,
                cost,
                cost_at: Some(0),
                lower: false,
            };
            let with = Call {
                key: "named",
                limits: &copies,
                cost_at: Some(rng.range(0, 15) as usize),
                ..alone
            };
            let a = plain.step(&mut c, &alone, &format!("step {step} plain"));
            let b = named.step(&mut c, &with, &format!("step {step} named"));
            assert_eq!(b[..5], a[..], "step {step}");
            assert_eq!(b[5], 0, "step {step}");
            assert_eq!(
                scores(&mut c, "plain"),
                scores(&mut c, "named"),
                "step {step}"
            );
        }
        assert!(
            plain.outcomes.iter().all(|n| *n > 50),
            "{:?}",
            plain.outcomes
        );
    }
}

/// Malformed LIMIT options, each with the exact error it must get; left to right, the first
/// error wins.
fn bad_limit_calls() -> Vec<(String, &'static str)> {
    const WINDOW: &str =
        "ERR LIMIT window must be an integer between 1 and 9007199254740 (window * 1000 <= 2^53)";
    const MAX: &str = "ERR LIMIT max must be an integer between 1 and 9007199254740992";
    const TOO_MANY: &str = "ERR syntax error, at most 16 limits in one call";
    let fifteen: String = (0..15).map(|i| format!(" LIMIT {} 9", 100 + i)).collect();
    let mut out: Vec<(String, &'static str)> = vec![
        (
            " LIMIT".into(),
            "ERR syntax error, option 'LIMIT' needs two values",
        ),
        (
            " limit 60".into(),
            "ERR syntax error, option 'limit' needs two values",
        ),
        (
            " LIMIT 60 5 LiMiT 60".into(),
            "ERR syntax error, option 'LiMiT' needs two values",
        ),
        (" LIMIT 0 5".into(), WINDOW),
        (" LIMIT 9007199254741 5".into(), WINDOW),
        (" LIMIT -1 5".into(), WINDOW),
        (" LIMIT 1.5 5".into(), WINDOW),
        (" LIMIT inf 5".into(), WINDOW),
        (" LIMIT 60 0".into(), MAX),
        (" LIMIT 60 9007199254740993".into(), MAX),
        (" LIMIT 60 nan".into(), MAX),
        (" LIMIT 60 COST 2".into(), MAX),
        // The window is checked before the max; options left to right.
        (" LIMIT 0 0".into(), WINDOW),
        (" LIMIT 0 5 COST 0".into(), WINDOW),
        (
            " COST 0 LIMIT 0 5".into(),
            "ERR cost must be an integer between 1 and 9007199254740992",
        ),
        (
            " LIMIT 60 5 FOO".into(),
            "ERR syntax error, unknown option 'FOO'",
        ),
        (
            " LIMITS 60 5".into(),
            "ERR syntax error, unknown option 'LIMITS'",
        ),
        (
            " COST 1 LIMIT 60 5 COST 1".into(),
            "ERR syntax error, option 'COST' given twice",
        ),
    ];
    // The 17th limit is refused on its name, whatever follows it.
    for tail in ["", " 60", " 60 5", " 0 0"] {
        out.push((format!("{fifteen} LIMIT{tail}"), TOO_MANY));
    }
    out.push((format!("{fifteen} COST 2 LIMIT 60 5 LIMIT 60 5"), TOO_MANY));
    // A bad value among the first 16 comes first.
    out.push((format!(" LIMIT 60 0{fifteen} LIMIT 60 5"), MAX));
    out
}

#[test]
fn bad_limit_options_are_refused_and_change_nothing() {
    for (_, s, mut c) in client::on_each_storage() {
        for now in ["1000", "2000"] {
            let r = ints(&call(
                &mut c,
                &[
                    "SLIDINGWINDOW.ALLOW",
                    "k",
                    "60",
                    "5",
                    now,
                    "LIMIT",
                    "600",
                    "9",
                ],
            ));
            assert_eq!(r[0], 1);
        }
        let before = (s.digest(), snapshot(&mut c, "k"));
        let mut checked = 0;
        for cmd in ["ALLOW", "PEEK"] {
            for (options, want) in bad_limit_calls() {
                // `now` far ahead: a call that trimmed before checking every option would show.
                let line = format!("SLIDINGWINDOW.{cmd} k 60 5 100000000{options}");
                let args: Vec<&str> = line.split(' ').collect();
                let reply = call(&mut c, &args);
                assert_eq!(error_line(&reply).as_deref(), Some(want), "{line}");
                assert_eq!(
                    (s.digest(), snapshot(&mut c, "k")),
                    before,
                    "{line} changed the data"
                );
                checked += 1;
            }
        }
        assert!(checked > 40);
        // Exactly 16 limits are fine.
        let fifteen: String = (0..15).map(|i| format!(" LIMIT {} 9", 100 + i)).collect();
        let line = format!("SLIDINGWINDOW.PEEK k 60 5 3000{fifteen}");
        let args: Vec<&str> = line.split(' ').collect();
        assert_eq!(ints(&call(&mut c, &args)), [1, 3, 2, 0, 60_000, 0]);
    }
}

/// The per-call member cap applies only when every limit would admit the call.
#[test]
fn the_member_cap_applies_only_when_every_limit_admits() {
    for (_, s, mut c) in client::on_each_storage() {
        let digest = s.digest();
        let line =
            |options: &str| format!("SLIDINGWINDOW.ALLOW k 10 2000000 1000 COST 100001{options}");
        for cmd in ["ALLOW", "PEEK"] {
            let text = line(" LIMIT 20 2000000").replace("ALLOW", cmd);
            let args: Vec<&str> = text.split(' ').collect();
            let err = error_line(&call(&mut c, &args));
            assert_eq!(
                err.as_deref(),
                Some("ERR cost 100001 would add more than 100000 members in one call"),
                "{text}"
            );
            // Above a LIMIT's max: never admissible, so an ordinary answer bound by that limit.
            let text = line(" LIMIT 1 5").replace("ALLOW", cmd);
            let args: Vec<&str> = text.split(' ').collect();
            assert_eq!(ints(&call(&mut c, &args)), [0, 0, 5, -1, 0, 1], "{text}");
        }
        assert_eq!(s.digest(), digest);
        // Counted before the trim for the cap, then trimmed: ranks learnt before the trim must not
        // serve after it. 3 members expire; the 6th oldest of the 10 left (15005) sets the retry.
        let mut zadd = vec!["ZADD".to_string(), "t".to_string()];
        for score in (1000..1003).chain(15_000..15_010) {
            zadd.extend([score.to_string(), format!("m{score}")]);
        }
        let zadd: Vec<&str> = zadd.iter().map(String::as_str).collect();
        assert_eq!(q::<i64>(&mut c, &zadd), 13, "ZADD t");
        for cmd in ["PEEK", "ALLOW"] {
            let text = format!("SLIDINGWINDOW.{cmd} t 10 100005 20000 COST 100001");
            let args: Vec<&str> = text.split(' ').collect();
            assert_eq!(
                ints(&call(&mut c, &args)),
                [0, 10, 99995, 5005, 5009],
                "{text}"
            );
        }
        assert_eq!(scores(&mut c, "t"), (15_000..15_010).collect::<Vec<u64>>());
    }
}

/// Random multi-limit traffic on a few keys, with PEEKs and malformed calls.
fn traffic(con: &mut Connection, seed: u64, steps: usize) {
    let mut rng = Rng::new(seed);
    let keys = ["m:a", "m:b", "m:{c}", "m:d"];
    let limits: Vec<Vec<(u64, u64)>> = keys
        .iter()
        .map(|_| random_limits(&mut rng, &[1, 3, 8]))
        .collect();
    let mut now = server_time_ms(con) as u64;
    let mut admitted = 0;
    for _ in 0..steps {
        let i = rng.range(0, keys.len() as u64 - 1) as usize;
        now = match rng.range(0, 19) {
            0 => now + 3_600_000,
            1 => now - rng.range(0, 60_000),
            _ => now + rng.range(0, 4000),
        };
        let one = Call {
            cmd: if rng.chance(20) { "PEEK" } else { "ALLOW" },
            key: keys[i],
            limits: &limits[i],
            now,
            cost: rng.range(1, 4),
            cost_at: Some(rng.range(0, 3) as usize),
            lower: rng.chance(50),
        };
        if rng.chance(5) {
            // Refused, replicates nothing.
            let r = call(
                con,
                &[
                    "SLIDINGWINDOW.ALLOW",
                    keys[i],
                    "60",
                    "5",
                    "*",
                    "LIMIT",
                    "0",
                    "1",
                ],
            );
            assert!(error_line(&r).is_some());
            continue;
        }
        let r = one.send(con);
        admitted += u32::from(one.cmd == "ALLOW" && r[0] == 1);
    }
    assert!(admitted > 50, "{admitted} admitted");
}

/// One key as compared between copies: name, its value (`DUMP`: members and scores, or the
/// compact log) and absolute expiry in ms.
type KeyState = (String, (Option<Vec<u8>>, i64));

/// Every key's value and absolute expiry.
fn dataset(con: &mut Connection) -> Vec<KeyState> {
    let mut keys: Vec<String> = q(con, &["KEYS", "*"]);
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let state = snapshot(con, &k);
            (k, state)
        })
        .collect()
}

#[test]
fn replicas_and_the_aof_get_the_same_data() {
    for storage in STORAGES {
        let mut s = Server::builder().storage(storage).aof_always().start();
        let replica = start_replica(&s, &[]);
        let mut c = s.client();
        traffic(&mut c, 0x5EED_0A0F, 1500);
        wait_in_sync(&s, &replica);
        let digest = s.digest();
        assert_ne!(digest, "0".repeat(40), "the traffic left no data");
        let on_master = dataset(&mut c);
        let mut rc = replica.client();
        assert_eq!(replica.digest(), digest);
        assert_eq!(dataset(&mut rc), on_master);
        // PEEK with LIMIT options answers on the read-only replica as on the master.
        let now = server_time_ms(&mut c).to_string();
        let peek = [
            "SLIDINGWINDOW.PEEK",
            "m:a",
            "60",
            "3",
            &now,
            "LIMIT",
            "3600",
            "7",
        ];
        assert_eq!(ints(&call(&mut rc, &peek)), ints(&call(&mut c, &peek)));

        // SIGKILL: with appendfsync always, everything acknowledged is in the AOF.
        s.restart();
        let mut c = s.client();
        assert_eq!(s.digest(), digest);
        assert_eq!(dataset(&mut c), on_master);
    }
}
