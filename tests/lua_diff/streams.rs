//! Seeded streams of the five commands on twin keys (and keys driven by either side at random):
//! the module and the script agree on every reply, score and expiry.

use crate::fallback::{Fallback, module, shown};
use testkit::client::{self, pexpiretime, scores};
use testkit::harness::{Server, server_time_ms};
use testkit::model::Expiry;
use testkit::rng::Rng;

/// A call's arguments after the command name, for one side's keys (`m` module, `l` script).
type Words = Box<dyn Fn(&str) -> Vec<String>>;

/// One stream's shape: its seed and length, the pool of keys, the most keys and limits a call
/// names, the lateness both sides run with (the module's config, the script's argument), and
/// whether a third set of keys gets each call from the module or the script at random (sorted
/// sets only: the script cannot read a compact key).
struct Keys {
    seed: u64,
    steps: usize,
    pool: usize,
    most_keys: u64,
    most_limits: u64,
    lateness: i64,
    mixed: bool,
}

/// Seeded streams of ALLOW, PEEK, ALLOWALL, PEEKALL and REFUND over a pool of keys, some with
/// `LEASE`, `PRECISION` or `DETAIL`: the module's twin keys and the script's get the same calls
/// (and, `mixed`, a third set driven by either at random, one call at a time); replies, every
/// key's scores and TTLs must agree.
fn run_keys(s: &Server, k: Keys) {
    let Keys {
        seed,
        steps,
        pool,
        most_keys,
        most_limits,
        lateness,
        mixed,
    } = k;
    let mut c = s.client();
    client::config_set(&mut c, "slidingwindow.lateness", lateness);
    let lua = Fallback::load(&mut c).with(&format!("lateness {lateness}"));
    let mut rng = Rng::new(seed);
    let name = move |side: &str, k: usize| format!("{side}:{k}:{{{seed}}}");
    let windows = [1, 5, 60, 120];
    let maxes = [1, 2, 3, 5, 8];
    let mut now: i64 = 1_700_000_000_000;
    let (mut admitted, mut refunded, mut leased, mut detailed) = (0, 0, 0, 0);
    let mut coarse = 0;
    // Per key, the server-clock bounds of its expiry (twins alike), and its scores after the
    // previous step.
    let mut expiry = vec![Expiry::default(); pool];
    let mut held: Vec<Vec<u64>> = vec![Vec::new(); pool];
    for step in 0..steps {
        let dice = rng.between(0, 999);
        now += if dice < 60 {
            -rng.between(0, 60_000)
        } else if dice < 80 {
            rng.between(60_000, 180_000)
        } else {
            rng.between(0, 2_000)
        };
        let roll = rng.between(0, 99);
        // The call, and each key's longest window and the TTL an admission computes (none for
        // REFUND).
        let mut ttl: Vec<(usize, i64, i64)> = Vec::new();
        let (command, words_of): (&str, Words) = if roll < 20 {
            let k = rng.range(0, pool as u64 - 1) as usize;
            let mut rest = vec![rng.pick(&[1, 1, 2, 3, 10]).to_string()];
            match rng.between(0, 3) {
                0 => {}
                1 => rest.extend(["AT".to_string(), now.to_string()]),
                2 => rest.extend(["at".to_string(), (now - rng.between(0, 5_000)).to_string()]),
                _ => rest.extend(["AT".to_string(), "*".to_string()]),
            }
            (
                "REFUND",
                Box::new(move |side| [vec![name(side, k)], rest.clone()].concat()),
            )
        } else {
            // One key in a third of the calls: ALLOW or PEEK.
            let single = roll < 45;
            let mut chosen: Vec<usize> = Vec::new();
            let want = if single {
                1
            } else {
                rng.range(1, most_keys) as usize
            };
            while chosen.len() < want {
                let k = rng.range(0, pool as u64 - 1) as usize;
                if !chosen.contains(&k) {
                    chosen.push(k);
                }
            }
            let mut limits = Vec::new();
            for keyno in 1..=chosen.len() {
                let mut mine: Vec<(i64, i64)> = (0..rng.range(1, most_limits))
                    .map(|_| (rng.pick(&windows), rng.pick(&maxes)))
                    .collect();
                // A window of a minute or more keeps every key alive during the run.
                if mine.iter().all(|(w, _)| *w < 60) {
                    mine[0].0 = 60;
                }
                limits.extend(mine.into_iter().map(|(w, m)| (keyno, w, m)));
            }
            if !single {
                for i in (1..limits.len()).rev() {
                    limits.swap(i, rng.range(0, i as u64) as usize);
                }
            }
            let lease = rng.chance(30).then(|| rng.between(1, 5_000));
            let precision = rng.chance(30).then(|| rng.pick(&[1, 3, 100, 1000, 60_000]));
            let detail = rng.chance(30);
            leased += i64::from(lease.is_some());
            coarse += i64::from(precision.is_some());
            detailed += i64::from(detail);
            // Members are scored at now + ms rounded up to the precision: that far ahead.
            let p = precision.unwrap_or(1);
            let ahead = (now + lease.unwrap_or(0) + p - 1) / p * p - now;
            for (keyno, k) in chosen.iter().enumerate() {
                let w = limits
                    .iter()
                    .filter(|l| l.0 == keyno + 1)
                    .map(|l| l.1)
                    .max();
                let wmax = w.unwrap_or(0) * 1000;
                ttl.push((*k, wmax, wmax + ahead + lateness));
            }
            let smallest = limits.iter().map(|l| l.2).min().unwrap_or(1);
            let cost = rng.pick(&[1, 1, 1, 1, 1, 2, 3, smallest + 1]);
            let peek = rng.chance(25);
            let command = match (single, peek) {
                (true, true) => "PEEK",
                (true, false) => "ALLOW",
                (false, true) => "PEEKALL",
                (false, false) => "ALLOWALL",
            };
            (
                command,
                Box::new(move |side| {
                    let mut w = Vec::new();
                    if single {
                        let (_, win, max) = limits[0];
                        w.extend([name(side, chosen[0]), win.to_string(), max.to_string()]);
                        w.push(now.to_string());
                    } else {
                        w.push(chosen.len().to_string());
                        w.extend(chosen.iter().map(|k| name(side, *k)));
                        w.push(now.to_string());
                    }
                    if cost != 1 {
                        w.extend(["COST".to_string(), cost.to_string()]);
                    }
                    if let Some(ms) = lease {
                        w.extend(["LEASE".to_string(), ms.to_string()]);
                    }
                    if let Some(p) = precision {
                        w.extend(["precision".to_string(), p.to_string()]);
                    }
                    if detail {
                        w.push("DETAIL".to_string());
                    }
                    let rest = if single { &limits[1..] } else { &limits[..] };
                    for (keyno, win, max) in rest {
                        w.push("LIMIT".to_string());
                        if !single {
                            w.push(keyno.to_string());
                        }
                        w.extend([win.to_string(), max.to_string()]);
                    }
                    w
                }),
            )
        };
        let what = format!("step {step}: {command} {}", words_of("l").join(" "));
        let by_module = rng.chance(50);
        let before = server_time_ms(&mut c);
        let want = shown(&module(&mut c, command, &words_of("m")));
        let got = shown(&lua.like(&mut c, command, &words_of("l")));
        if mixed {
            let either = if by_module {
                module(&mut c, command, &words_of("x"))
            } else {
                lua.like(&mut c, command, &words_of("x"))
            };
            assert_eq!(
                shown(&either),
                want,
                "{what}: mixed keys (module: {by_module})"
            );
        }
        let after = server_time_ms(&mut c);
        assert_eq!(got, want, "{what}");
        if command == "REFUND" {
            refunded += want.parse::<i64>().unwrap_or(0);
        } else if ["ALLOW", "ALLOWALL"].contains(&command) && want.starts_with("[1,") {
            admitted += 1;
            for &(k, wmax, t) in &ttl {
                let fresh = held[k].iter().all(|&s| s as i64 <= now - wmax - lateness);
                expiry[k].admit(fresh, before, after, t);
            }
        }
        for (k, e) in expiry.iter().enumerate() {
            let (m, l, x) = (name("m", k), name("l", k), name("x", k));
            held[k] = scores(&mut c, &m);
            assert_eq!(scores(&mut c, &l), held[k], "{what}: key {k}");
            if mixed {
                assert_eq!(scores(&mut c, &x), held[k], "{what}: mixed key {k}");
                let (tm, tx) = (pexpiretime(&mut c, &m), pexpiretime(&mut c, &x));
                if tm < 0 || tx < 0 {
                    assert_eq!(tx, tm, "{what}: mixed key {k} expiry (-1 none, -2 no key)");
                } else {
                    assert!(
                        e.holds(tx),
                        "{what}: mixed key {k} expires at {tx}, not in {e:?}"
                    );
                }
            }
            let (tm, tl) = (pexpiretime(&mut c, &m), pexpiretime(&mut c, &l));
            if tm < 0 || tl < 0 {
                assert_eq!(tm, tl, "{what}: key {k} expiry (-1 none, -2 no key)");
            } else {
                assert!(
                    e.holds(tm) && e.holds(tl),
                    "{what}: key {k} expires at {tm} (module), {tl} (script), not in {e:?}"
                );
            }
        }
    }
    assert!(
        admitted > 0
            && admitted < steps
            && refunded > 0
            && leased > 20
            && detailed > 20
            && coarse > 20,
        "{admitted} admitted, {refunded} refunded, {leased} leased, {detailed} detailed, \
         {coarse} with a precision"
    );
}

#[test]
fn several_keys_and_refunds_match_the_client_script() {
    let keys = Keys {
        seed: 31,
        steps: 400,
        pool: 3,
        most_keys: 2,
        most_limits: 3,
        lateness: 0,
        mixed: true,
    };
    run_keys(&Server::start(), keys);
}

#[test]
fn many_keys_and_refunds_match_the_client_script_on_compact_keys() {
    // The module's keys are compact logs, the script's sorted sets: the same replies and times.
    let keys = Keys {
        seed: 32,
        steps: 300,
        pool: 6,
        most_keys: 6,
        most_limits: 4,
        lateness: 0,
        mixed: false,
    };
    run_keys(&Server::builder().storage("compact").start(), keys);
}

/// With lateness, both storages: the same trims kept, the same TTLs, the same replies.
#[test]
fn lateness_matches_the_client_script() {
    for (storage, seed, lateness) in [("zset", 33, 20_000), ("compact", 34, 86_400_000)] {
        let keys = Keys {
            seed,
            steps: 250,
            pool: 4,
            most_keys: 3,
            most_limits: 3,
            lateness,
            mixed: storage == "zset",
        };
        run_keys(&Server::builder().storage(storage).start(), keys);
    }
}

/// The per-call cap counts `COST` times the number of keys, on both sides, whatever the cap;
/// an error changes no key. The script takes the cap as it takes lateness, in ARGV[1].
#[test]
fn the_cap_counts_every_key_in_the_client_script() {
    let s = Server::start();
    let mut c = s.client();
    let line = |side: &str, cost: u64, max: u64| -> Vec<String> {
        // An hour's window: the keys outlive a slow script call of 50,000 members on a busy host.
        format!(
            "2 {side}:{{a}}x {side}:{{a}}y 1000 COST {cost} LIMIT 1 3600 {max} LIMIT 2 3600 {max}"
        )
        .split(' ')
        .map(String::from)
        .collect()
    };
    let lua = Fallback::load(&mut c);
    // (cap, cost, the answer both give)
    let cases = [
        (
            100_000,
            60_000,
            "ERR cost 60000 times 2 keys would add more than 100000 members in one call",
        ),
        (100_000, 50_000, "admitted"),
        (
            5,
            3,
            "ERR cost 3 times 2 keys would add more than 5 members in one call",
        ),
        (5, 2, "admitted"),
    ];
    for (cap, cost, answer) in cases {
        client::config_set(&mut c, "slidingwindow.max-members-per-call", cap);
        let lua = Fallback {
            sha: lua.sha.clone(),
            configs: format!("max-members-per-call {cap}"),
        };
        for command in ["PEEKALL", "ALLOWALL"] {
            let want = shown(&module(&mut c, command, &line("m", cost, 1_000_000)));
            let got = shown(&lua.like(&mut c, command, &line("l", cost, 1_000_000)));
            assert_eq!(got, want, "{command} cap {cap} cost {cost}");
            if answer == "admitted" {
                assert!(
                    want.starts_with("[1,"),
                    "{command} cap {cap} cost {cost}: {want}"
                );
            } else {
                assert_eq!(want, answer, "{command} cap {cap} cost {cost}");
            }
        }
        for key in ["{a}x", "{a}y"] {
            let (m, l) = (format!("m:{key}"), format!("l:{key}"));
            assert_eq!(scores(&mut c, &l).len(), scores(&mut c, &m).len(), "{key}");
            let _: () = redis::cmd("DEL").arg(&m).arg(&l).query(&mut c).unwrap();
        }
    }
}
