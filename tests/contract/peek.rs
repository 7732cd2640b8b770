//! PEEK: the same reply as ALLOW without a change, the key's LRU clock and LFU counter left
//! alone, both held to the contract model.

use super::*;

/// 200 members, 71 of them expired at the PEEK's `now`: the PEEK counts past 64 members and
/// looks up the 101st oldest, both through the set's own commands, run in place.
fn deep_peek(c: &mut Connection) {
    let _: () = q(c, &["DEL", "big"]);
    for i in 0..200 {
        let now = (1_000 + i * 10).to_string();
        assert_eq!(sw5(c, &format!("ALLOW big 600 1000 {now}"))[0], 1);
    }
    deep_peek_only(c);
}

/// PEEK leaves the key's LRU clock alone, even where it reads through the set's own commands.
#[test]
fn peek_leaves_the_lru_clock_alone() {
    let (_s, mut c) = started();
    deep_peek(&mut c);
    let idle = |c: &mut Connection| q::<i64>(c, &["OBJECT", "IDLETIME", "big"]);
    harness::wait_until(Duration::from_secs(10), "OBJECT IDLETIME big >= 2", || {
        idle(&mut c) >= 2
    });
    let before = idle(&mut c);
    deep_peek_only(&mut c);
    assert!(idle(&mut c) >= before, "PEEK reset the idle time");
    // The check can fail: a read that touches the key resets it.
    assert_eq!(q::<i64>(&mut c, &["ZCARD", "big"]), 200, "ZCARD big");
    // 0, or 1 if Redis's LRU clock ticked between the two commands; `before` was at least 2.
    assert!(idle(&mut c) <= 1, "ZCARD did not reset the idle time");
}

/// Under an LFU policy PEEK leaves the access counter alone (with log factor 0 and no decay, any
/// touch would add exactly one).
#[test]
fn peek_leaves_the_lfu_counter_alone() {
    let s = Server::builder()
        .args(["--maxmemory-policy", "allkeys-lfu"])
        .args(["--lfu-log-factor", "0", "--lfu-decay-time", "0"])
        .start();
    let mut c = s.client();
    deep_peek(&mut c);
    let freq = |c: &mut Connection| q::<i64>(c, &["OBJECT", "FREQ", "big"]);
    let before = freq(&mut c);
    deep_peek_only(&mut c);
    assert_eq!(freq(&mut c), before, "PEEK counted as an access");
    assert_eq!(q::<i64>(&mut c, &["ZCARD", "big"]), 200, "ZCARD big");
    assert_eq!(freq(&mut c), before + 1);
}

fn deep_peek_only(c: &mut Connection) {
    // Cutoff 1700: 1000..=1700 have left, 129 remain; max 100 needs the 30th (2000) to leave.
    assert_eq!(sw5(c, "PEEK big 600 100 601700"), [0, 129, 0, 300, 1290]);
}

#[test]
fn peek_equals_allow_and_both_follow_the_contract_model() {
    let (s, mut c) = started();
    let mut rng = Rng::new(0x5EED_0001);
    let mut model = Model::default();
    let mut now: i64 = 1_000_000;
    let mut outcomes = [0; 2];
    // Windows of a minute or more, so the key's real TTL never fires during the test.
    for step in 0..600 {
        let window = [60, 61, 120][rng.between(0, 2) as usize];
        let w = window * 1000;
        let max = rng.between(1, 6);
        let cost = if rng.between(0, 2) == 0 {
            None
        } else {
            Some(rng.between(1, 8))
        };
        now = match rng.between(0, 9) {
            0 => now + rng.between(w / 2, 2 * w),
            1 => (now - rng.between(0, w / 4)).max(0),
            _ => now + rng.between(0, w / 8),
        };
        let args = match cost {
            Some(n) => format!("k {window} {max} {now} COST {n}"),
            None => format!("k {window} {max} {now}"),
        };
        let n = cost.unwrap_or(1);
        let before = state(&s, &mut c, "k");
        let peek = sw5(&mut c, &format!("PEEK {args}"));
        assert_eq!(
            state(&s, &mut c, "k"),
            before,
            "step {step}: PEEK {args} changed data"
        );
        let allow = sw5(&mut c, &format!("ALLOW {args}"));
        assert_eq!(peek, allow, "step {step}: PEEK vs ALLOW {args}");
        let u = |v: i64| u64::try_from(v).expect("test values are not negative");
        let want = model.allow(u(window), u(max), u(now), u(n));
        assert_eq!(allow, want, "step {step}: ALLOW {args} vs contract");
        outcomes[allow[0] as usize] += 1;
        assert_eq!(
            scores(&mut c, "k"),
            model.scores,
            "step {step}: stored scores"
        );
        assert_eq!(exists(&mut c, "k"), !model.scores.is_empty(), "step {step}");
    }
    assert!(outcomes[0] > 100 && outcomes[1] > 100, "{outcomes:?}");
}
