//! Differential tests: the module against the seed's Lua script (tests/fixtures/seed.lua, copied
//! verbatim from the seed), on twin keys, over seeded random sequences of requests; and the module
//! against the helpers' Lua fallback (clients/lua/slidingwindow.lua) on ALLOW, PEEK, ALLOWALL,
//! PEEKALL and REFUND with `LEASE`, `PRECISION`, `DETAIL`, `slidingwindow.lateness` and the
//! per-call cap, on both storages, replies and error texts byte for byte.

mod arguments;
mod fallback;
mod streams;

use rng::Rng;
use testkit::harness;
use testkit::rng;

use harness::{Server, ints, server_time_ms};
use testkit::client::{pexpiretime, scores};
use testkit::model::Expiry;

const SEED_LUA: &str = include_str!("../fixtures/seed.lua");

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
