//! Differential tests: the module against the seed's Lua script (tests/fixtures/seed.lua, copied
//! verbatim from the seed), on twin keys, over seeded random sequences of requests; and the module
//! against the helpers' Lua fallback (clients/lua/slidingwindow.lua) on ALLOW, PEEK, ALLOWALL,
//! PEEKALL and REFUND with `LEASE`, `PRECISION`, `DETAIL`, `slidingwindow.lateness` and the
//! per-call cap, on both storages, replies and error texts byte for byte.

use model::Expiry;
use rng::Rng;
use testkit::common;
use testkit::kit;
use testkit::{model, rng};

use common::{Server, error_line, ints, server_time_ms};
use kit::{pexpiretime, scores};
use redis::Value;

const SEED_LUA: &str = include_str!("fixtures/seed.lua");
const CLIENT_LUA: &str = include_str!("../clients/lua/slidingwindow.lua");

/// How a scenario draws its requests.
struct Scenario {
    name: &'static str,
    seed: u64,
    steps: usize,
    /// Window lengths in seconds to pick from. At least a minute, so that no key really
    /// expires while the two twins are being compared.
    windows: &'static [i64],
    maxes: &'static [i64],
    /// Per mille of steps that move time backward, and that jump across whole windows.
    back: i64,
    jump: i64,
    /// Largest forward step in ms for an ordinary request.
    stride: i64,
}

fn run(s: &Server, sc: &Scenario) {
    let mut c = s.client();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SEED_LUA)
        .query(&mut c)
        .unwrap();
    let (m, l) = (format!("{}:module", sc.name), format!("{}:lua", sc.name));
    let mut rng = Rng::new(sc.seed);
    // A realistic Unix time in ms: the script passes numbers through Lua's "%.14g", which is
    // exact only up to 14 digits.
    let mut now: i64 = 1_700_000_000_000;
    let mut admitted = 0;
    // Server-clock bounds of each twin's expiry: the seed's script sets its window from the
    // server's clock at each admission; the module keeps the later of that and the key's own.
    let (mut seed_expiry, mut module_expiry) = (Expiry::default(), Expiry::default());
    // The twins' scores (equal) after the previous step.
    let mut held: Vec<u64> = Vec::new();
    for step in 0..sc.steps {
        let window = rng.pick(sc.windows);
        let max = rng.pick(sc.maxes);
        let dice = rng.between(0, 999);
        now = if dice < sc.back {
            now - rng.between(0, window * 1000)
        } else if dice < sc.back + sc.jump {
            now + rng.between(1, 3) * window * 1000 + rng.between(-1, 1)
        } else {
            now + rng.between(0, sc.stride)
        };
        let what = format!(
            "{} step {step}: window {window} max {max} now {now}",
            sc.name
        );

        let before = server_time_ms(&mut c);
        let reply = redis::cmd("SLIDINGWINDOW.ALLOW")
            .arg(&m)
            .arg(window)
            .arg(max)
            .arg(now)
            .query(&mut c)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let r = ints(&reply);
        assert_eq!(r.len(), 5, "{what}: {r:?}");
        let member = format!("lua-{step}");
        let lua: i64 = redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(1)
            .arg(&l)
            .arg(window)
            .arg(max)
            .arg(now)
            .arg(&member)
            .query(&mut c)
            .unwrap_or_else(|e| panic!("{what}: script: {e}"));
        let after = server_time_ms(&mut c);
        let lua_admitted = redis::cmd("ZSCORE")
            .arg(&l)
            .arg(&member)
            .query::<Option<f64>>(&mut c)
            .unwrap()
            .is_some();

        assert_eq!(r[1], lua, "{what}: count vs script's return (module {r:?})");
        assert_eq!(r[0] == 1, lua_admitted, "{what}: admitted (module {r:?})");
        assert_eq!(r[2], (max - r[1]).max(0), "{what}: remaining");
        let fresh = held.iter().all(|&s| s as i64 <= now - window * 1000);
        held = scores(&mut c, &m);
        assert_eq!(held, scores(&mut c, &l), "{what}: scores");
        if r[0] == 1 {
            seed_expiry.admit(true, before, after, window * 1000);
            module_expiry.admit(fresh, before, after, window * 1000);
        }
        let (tm, tl) = (pexpiretime(&mut c, &m), pexpiretime(&mut c, &l));
        if tm < 0 || tl < 0 {
            assert_eq!(tm, tl, "{what}: expiry (-1 none, -2 no key)");
        } else {
            // Both twins were set from the server clock by two calls in [before, after]; the
            // exact instants differ a little, so each is checked against that bracket.
            assert!(
                module_expiry.holds(tm),
                "{what}: module expiry {tm} not in {module_expiry:?}"
            );
            assert!(
                seed_expiry.holds(tl),
                "{what}: script expiry {tl} not in {seed_expiry:?}"
            );
        }
        admitted += r[0];
    }
    // The scenario exercised both outcomes.
    assert!(
        admitted > 0 && admitted < sc.steps as i64,
        "{}: {admitted} admitted",
        sc.name
    );
}

// One scenario a row.
#[rustfmt::skip]
const SCENARIOS: &[Scenario] = &[
    Scenario { name: "steady", seed: 1, steps: 1500, windows: &[60], maxes: &[5], back: 0, jump: 5, stride: 20_000 },
    Scenario { name: "varying", seed: 2, steps: 1500, windows: &[60, 61, 120, 300], maxes: &[1, 2, 3, 7, 20], back: 100, jump: 30, stride: 30_000 },
    Scenario { name: "backward", seed: 3, steps: 1000, windows: &[60, 90], maxes: &[3, 4], back: 400, jump: 20, stride: 40_000 },
    Scenario { name: "burst", seed: 4, steps: 1000, windows: &[60, 3600], maxes: &[10, 50], back: 20, jump: 10, stride: 3 },
];

fn scenario(name: &str) -> &'static Scenario {
    SCENARIOS.iter().find(|s| s.name == name).unwrap()
}

/// A test per scenario, by its name.
macro_rules! scenario_tests {
    ($($test:ident: $name:literal,)*) => {
        $(
            #[test]
            fn $test() {
                run(&Server::start(), scenario($name));
            }
        )*
    };
}

scenario_tests! {
    steady_traffic_matches_the_seed_script: "steady",
    varying_window_and_max_match_the_seed_script: "varying",
    time_going_backward_matches_the_seed_script: "backward",
    bursts_in_the_same_millisecond_match_the_seed_script: "burst",
}

/// The helpers' script, loaded once, called as the helpers call it.
struct Fallback {
    sha: String,
    /// The module's configs as the script takes them after the command word in ARGV[1]
    /// (`"lateness 3000"`), or nothing for the defaults.
    configs: String,
}

impl Fallback {
    fn load(c: &mut redis::Connection) -> Fallback {
        let sha = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(CLIENT_LUA)
            .query(c)
            .unwrap();
        Fallback {
            sha,
            configs: String::new(),
        }
    }

    /// The same script, given `configs` on every call.
    fn with(self, configs: &str) -> Fallback {
        Fallback {
            configs: configs.to_string(),
            ..self
        }
    }

    /// `command` with `keys` as KEYS and `rest` (the arguments after the keys) after the entropy.
    fn run(
        &self,
        c: &mut redis::Connection,
        command: &str,
        keys: &[String],
        rest: &[String],
    ) -> Value {
        let mut args = vec![
            "EVALSHA".to_string(),
            self.sha.clone(),
            keys.len().to_string(),
        ];
        args.extend(keys.iter().cloned());
        let word = format!("{} {}", command.to_lowercase(), self.configs);
        args.push(word.trim_end().to_string());
        args.push("0123456789ABCDEF".to_string());
        args.extend(rest.iter().cloned());
        common::call_words(c, &args)
    }

    /// What the script answers to the module's argv `SLIDINGWINDOW.<command> words...`, split
    /// into KEYS as the helpers do (no keys when numkeys, the keys and now are not all there).
    fn like(&self, c: &mut redis::Connection, command: &str, words: &[String]) -> Value {
        if ["REFUND", "ALLOW", "PEEK"].contains(&command) {
            return match words.split_first() {
                Some((key, rest)) => self.run(c, command, std::slice::from_ref(key), rest),
                None => self.run(c, command, &[], &[]),
            };
        }
        let numkeys = words
            .first()
            .filter(|w| w.len() <= 2 && w.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|w| w.parse::<usize>().ok())
            .filter(|n| (1..=16).contains(n) && words.len() >= n + 2);
        match numkeys {
            Some(n) => {
                let mut rest = vec![words[0].clone()];
                rest.extend(words[n + 1..].iter().cloned());
                self.run(c, command, &words[1..=n], &rest)
            }
            None => self.run(c, command, &[], words),
        }
    }
}

/// A reply as text: the integers (arrays in brackets, nested for `DETAIL`), or the error line.
fn shown(v: &Value) -> String {
    match error_line(v) {
        Some(e) => e,
        None => match v {
            Value::Int(n) => n.to_string(),
            Value::Array(items) => {
                let inner: Vec<String> = items.iter().map(shown).collect();
                format!("[{}]", inner.join(", "))
            }
            other => panic!("not an integer reply: {other:?}"),
        },
    }
}

fn module(c: &mut redis::Connection, command: &str, words: &[String]) -> Value {
    let mut args = vec![format!("SLIDINGWINDOW.{command}")];
    args.extend(words.iter().cloned());
    common::call_words(c, &args)
}

/// A call's arguments after the command name, for one side's keys (`m` module, `l` script).
type Words = Box<dyn Fn(&str) -> Vec<String>>;

/// One stream's shape: its seed and length, the pool of keys, the most keys and limits a call
/// names, and the lateness both sides run with (the module's config, the script's argument).
struct Keys {
    seed: u64,
    steps: usize,
    pool: usize,
    most_keys: u64,
    most_limits: u64,
    lateness: i64,
}

/// Seeded streams of ALLOW, PEEK, ALLOWALL, PEEKALL and REFUND over a pool of keys, some with
/// `LEASE`, `PRECISION` or `DETAIL`: the module's twin keys and the script's get the same calls;
/// replies, every key's scores and TTLs must agree.
fn run_keys(s: &Server, k: Keys) {
    let Keys {
        seed,
        steps,
        pool,
        most_keys,
        most_limits,
        lateness,
    } = k;
    let mut c = s.client();
    kit::config_set(&mut c, "slidingwindow.lateness", lateness);
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
        let before = server_time_ms(&mut c);
        let want = shown(&module(&mut c, command, &words_of("m")));
        let got = shown(&lua.like(&mut c, command, &words_of("l")));
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
            let (m, l) = (name("m", k), name("l", k));
            held[k] = scores(&mut c, &m);
            assert_eq!(scores(&mut c, &l), held[k], "{what}: key {k}");
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
        kit::config_set(&mut c, "slidingwindow.max-members-per-call", cap);
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

/// The script's own configs in ARGV[1]: an unknown name or a bad value is refused, naming it.
#[test]
fn the_client_script_refuses_configs_it_does_not_know() {
    let s = Server::start();
    let mut c = s.client();
    let lua = Fallback::load(&mut c);
    let words: Vec<String> = "k 10 5 1000".split(' ').map(String::from).collect();
    let cases = [
        (
            "lateness 86400001",
            "ERR slidingwindow.lua: config lateness must be an integer between 0 and 86400000",
        ),
        (
            "lateness",
            "ERR slidingwindow.lua: config lateness must be an integer between 0 and 86400000",
        ),
        (
            "max-members-per-call 0",
            "ERR slidingwindow.lua: config max-members-per-call must be an integer between 1 and 10000000",
        ),
        (
            "storage compact",
            "ERR slidingwindow.lua: unknown config 'storage' in ARGV[1] (configs: lateness, max-members-per-call)",
        ),
    ];
    for (configs, error) in cases {
        let lua = Fallback {
            sha: lua.sha.clone(),
            configs: configs.to_string(),
        };
        assert_eq!(
            shown(&lua.like(&mut c, "ALLOW", &words)),
            error,
            "{configs}"
        );
    }
    assert!(!kit::exists(&mut c, "k"));
    let lua = Fallback {
        sha: lua.sha.clone(),
        configs: "LATENESS 5 Max-Members-Per-Call 9".to_string(),
    };
    assert_eq!(
        shown(&lua.like(&mut c, "ALLOW", &words)),
        "[1, 1, 4, 0, 10000]"
    );
}

#[test]
fn malformed_calls_get_the_same_error_from_the_client_script() {
    let s = Server::start();
    let mut c = s.client();
    let lua = Fallback::load(&mut c);
    let cases: &[(&str, &str)] = &[
        ("ALLOWALL", ""),
        ("ALLOWALL", "1"),
        ("ALLOWALL", "x K1 1 LIMIT 1 1 1"),
        ("ALLOWALL", "0 1 LIMIT 1 1 1"),
        (
            "PEEKALL",
            "17 K1 K2 K3 K4 K5 K6 K7 K8 K9 K10 K11 K12 K13 K14 K15 K16 K17 1",
        ),
        ("ALLOWALL", "2 K1 K2"),
        ("ALLOWALL", "3 K1 K2"),
        ("ALLOWALL", "2 K1 K1 1 LIMIT 1 1 1"),
        ("PEEKALL", "1 K1 -1 LIMIT 1 1 1"),
        ("ALLOWALL", "1 K1 1"),
        ("ALLOWALL", "2 K1 K2 1 LIMIT 1 1 1"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1"),
        ("PEEKALL", "2 K1 K2 1 LIMIT 3 1 1 LIMIT 1 1 1"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 0 1"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 0"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 COST 1 cost 2"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 COST 0"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 FOO"),
        ("PEEKALL", "1 K1 1 LIMIT 1 10 200000 COST 100001"),
        ("REFUND", ""),
        ("REFUND", "K1"),
        ("REFUND", "K1 0"),
        ("REFUND", "K1 1.5"),
        ("REFUND", "K1 1 AT"),
        ("REFUND", "K1 1 at -1"),
        ("REFUND", "K1 1 AT 5 at 6"),
        ("REFUND", "K1 1 COST 1"),
        ("REFUND", "K3 1"),
        (
            "ALLOWALL",
            "3 K1 K2 K3 1 LIMIT 1 60 9 LIMIT 2 60 9 LIMIT 3 60 9",
        ),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 LEASE 0"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 LEASE"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 LEASE 5 lease 6"),
        ("PEEKALL", "1 K1 9007199254740992 LIMIT 1 1 1 LEASE 1"),
        ("ALLOWALL", "1 K1 * LIMIT 1 1 1 LEASE 9007199254740992"),
        ("ALLOWALL", "1 K1 1 DETAIL LIMIT 1 1 1 detail"),
        ("ALLOWALL", "2 K1 K2 1 LEASE x LIMIT 1 1 1"),
        (
            "ALLOWALL",
            "2 K1 K2 1 COST 60000 LIMIT 1 10 1000000 LIMIT 2 10 1000000",
        ),
        ("ALLOW", "K1 10 5 1 LEASE x"),
        ("ALLOW", "K1 10 5 1 LEASE 9007199254740993"),
        ("ALLOW", "K1 10 5 * LEASE 9007199254740992"),
        ("ALLOW", "K1 1 1 * LEASE 9007199254740992 FOO"),
        ("ALLOW", "K1 1 1 5 LEASE 9007199254740992 FOO"),
        ("ALLOW", "K1 1 1 * LEASE 9007199254740991 FOO"),
        ("ALLOW", "K1 10 5 1 PRECISION 0"),
        ("ALLOW", "K1 10 5 1 PRECISION x"),
        ("ALLOW", "K1 10 5 1 PRECISION"),
        ("PEEK", "K1 10 5 1 PRECISION 5 precision 5"),
        ("ALLOW", "K1 10 5 1 PRECISION 9007199254740993"),
        ("ALLOW", "K1 10 5 9007199254740991 PRECISION 3 FOO"),
        ("ALLOW", "K1 10 5 9007199254740991 PRECISION 2 FOO"),
        (
            "PEEK",
            "K1 10 5 1000 PRECISION 3 LEASE 9007199254739991 FOO",
        ),
        (
            "ALLOW",
            "K1 10 5 1000 LEASE 9007199254739991 PRECISION 3 FOO",
        ),
        ("ALLOW", "K1 10 5 1000 PRECISION 3 LEASE 9007199254739993"),
        (
            "ALLOW",
            "K1 10 5 * LEASE 4503599627370497 PRECISION 4503599627370497 FOO",
        ),
        ("ALLOW", "K1 10 5 * PRECISION 4503599627370497 FOO"),
        ("ALLOWALL", "1 K1 1 LIMIT 1 1 1 PRECISION 0"),
        ("PEEKALL", "1 K1 9007199254740991 LIMIT 1 1 1 PRECISION 3"),
        ("ALLOWALL", "2 K1 K2 1 PRECISION x LIMIT 1 1 1"),
        ("PEEK", "K1 10 5 1 DETAIL DETAIL"),
        ("ALLOW", "K1 10 5 1 DETAIL 5"),
        ("ALLOW", "K1 10 5 1 DETAILS"),
        ("ALLOW", "K1 10 5 1 LIMIT 1 1 LEASE 0"),
        ("ALLOW", "K3 10 5 1 LEASE 5 DETAIL"),
        ("PEEK", "K1 10 1000000 1 COST 100001 DETAIL"),
    ];
    let seventeen = format!("1 K1 1{}", " LIMIT 1 1 1".repeat(17));
    let cases = cases
        .iter()
        .copied()
        .chain([("ALLOWALL", seventeen.as_str())]);
    for (command, line) in cases {
        for side in ["m", "l"] {
            let _: () = redis::cmd("ZADD")
                .arg(format!("{side}:K1"))
                .arg(1)
                .arg("a")
                .query(&mut c)
                .unwrap();
            kit::ok(&mut c, &["SET", &format!("{side}:K3"), "x"]);
        }
        let words = |side: &str| -> Vec<String> {
            line.split_whitespace()
                .map(|w| {
                    if w.starts_with('K') {
                        format!("{side}:{w}")
                    } else {
                        w.to_string()
                    }
                })
                .collect()
        };
        let want = module(&mut c, command, &words("m"));
        let got = lua.like(&mut c, command, &words("l"));
        assert!(error_line(&want).is_some(), "{command} {line}: {want:?}");
        assert_eq!(shown(&got), shown(&want), "{command} {line}");
        assert_eq!(
            scores(&mut c, "l:K1"),
            scores(&mut c, "m:K1"),
            "{command} {line}"
        );
        assert_eq!(
            scores(&mut c, "l:K2"),
            scores(&mut c, "m:K2"),
            "{command} {line}"
        );
    }
}
