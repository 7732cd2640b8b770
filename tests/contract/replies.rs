//! The five-field reply: admission, the trim boundary, cost, retry-after, the clock, the
//! TTL, the members, the largest arguments.

use super::*;

#[test]
fn replies_admit_then_reject_then_slide() {
    let (_s, mut c) = started();
    // window 10 s, max 3
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 100000"), [1, 1, 2, 0, 10000]);
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 101000"), [1, 2, 1, 0, 10000]);
    // full now: the next request waits for the oldest (100000) to leave.
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 102000"), [1, 3, 0, 8000, 10000]);
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 103000"), [0, 3, 0, 7000, 9000]);
    assert_eq!(scores(&mut c, "k"), [100000, 101000, 102000]);
    // At 110000 the cutoff is 100000: that member goes, a new one comes in.
    assert_eq!(sw5(&mut c, "ALLOW k 10 3 110000"), [1, 3, 0, 1000, 10000]);
    assert_eq!(scores(&mut c, "k"), [101000, 102000, 110000]);
}

#[test]
fn trim_boundary_is_score_at_most_now_minus_window() {
    let (_s, mut c) = with_members("4999 a 5000 b 5001 c");
    // PEEK at 15000 (cutoff 5000) counts c only, plus the would-be request, and removes nothing.
    assert_eq!(sw5(&mut c, "PEEK k 10 10 15000"), [1, 2, 8, 0, 10000]);
    assert_eq!(scores(&mut c, "k"), [4999, 5000, 5001]);
    // At 14999 (cutoff 4999) only a, exactly at the cutoff, goes; b at cutoff+1 stays.
    assert_eq!(sw5(&mut c, "ALLOW k 10 10 14999"), [1, 3, 7, 0, 10000]);
    let m = members(&mut c, "k");
    assert_eq!(m[0], ("b".to_string(), 5000));
    assert_eq!(m[1], ("c".to_string(), 5001));
    assert_eq!(m[2].1, 14999);
    // At 15000 (cutoff 5000) b goes too.
    assert_eq!(sw5(&mut c, "ALLOW k 10 10 15000"), [1, 3, 7, 0, 10000]);
    assert_eq!(scores(&mut c, "k"), [5001, 14999, 15000]);
}

#[test]
fn cost_adds_n_members_all_scored_now() {
    let (_s, mut c) = started();
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 5 1000 COST 3"),
        [1, 3, 2, 10000, 10000]
    );
    assert_eq!(scores(&mut c, "k"), [1000, 1000, 1000]);
    // 3 + 3 > 5: rejected, nothing added.
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 5 2000 COST 3"),
        [0, 3, 2, 9000, 9000]
    );
    assert_eq!(scores(&mut c, "k"), [1000, 1000, 1000]);
    // 3 + 2 <= 5: admitted, both new members at 2000.
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 5 2000 COST 2"),
        [1, 5, 0, 9000, 10000]
    );
    assert_eq!(scores(&mut c, "k"), [1000, 1000, 1000, 2000, 2000]);
    let m = members(&mut c, "k");
    let names: HashSet<&String> = m.iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 5, "members must be distinct: {m:?}");
}

#[test]
fn retry_after_waits_for_the_need_th_oldest_member() {
    let (_s, mut c) = started();
    for now in [1000, 2000, 3000, 4000, 5000] {
        assert_eq!(sw5(&mut c, &format!("ALLOW k 10 5 {now}"))[0], 1);
    }
    // count 5, max 5: a request of cost n needs n members gone; the n-th oldest decides.
    assert_eq!(sw5(&mut c, "PEEK k 10 5 6000"), [0, 5, 0, 5000, 9000]);
    assert_eq!(
        sw5(&mut c, "PEEK k 10 5 6000 COST 3"),
        [0, 5, 0, 7000, 9000]
    );
    assert_eq!(
        sw5(&mut c, "PEEK k 10 5 6000 COST 5"),
        [0, 5, 0, 9000, 9000]
    );
    // cost > max can never be admitted.
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 6000 COST 6"), [0, 5, 0, -1, 9000]);
    // With room for some: count 3 after trimming 1000 and 2000 at 12000; cost 4 needs 2 gone.
    assert_eq!(
        sw5(&mut c, "ALLOW k 10 5 12000 COST 4"),
        [0, 3, 2, 2000, 3000]
    );
    assert_eq!(scores(&mut c, "k"), [3000, 4000, 5000]);
}

#[test]
fn cost_above_max_on_empty_key_replies_minus_one_and_zero() {
    let (_s, mut c) = started();
    assert_eq!(sw5(&mut c, "ALLOW k 10 1 1000 COST 2"), [0, 0, 1, -1, 0]);
    assert_eq!(sw5(&mut c, "PEEK k 10 1 1000 COST 2"), [0, 0, 1, -1, 0]);
    assert!(!exists(&mut c, "k"));
}

#[test]
fn members_in_the_future_count_and_set_reset_after() {
    let (_s, mut c) = with_members("50000 future");
    assert_eq!(sw5(&mut c, "ALLOW k 10 2 10000"), [1, 2, 0, 10000, 50000]);
    assert_eq!(sw5(&mut c, "ALLOW k 10 2 10001"), [0, 2, 0, 9999, 49999]);
    assert_eq!(scores(&mut c, "k"), [10000, 50000]);
}

#[test]
fn missing_key_is_an_empty_window() {
    let (_s, mut c) = started();
    assert_eq!(sw5(&mut c, "PEEK nokey 10 3 1000"), [1, 1, 2, 0, 10000]);
    assert!(!exists(&mut c, "nokey"));
    assert_eq!(sw5(&mut c, "ALLOW nokey 10 3 1000"), [1, 1, 2, 0, 10000]);
    assert!(exists(&mut c, "nokey"));
}

#[test]
fn key_disappears_when_the_window_empties() {
    let (_s, mut c) = started();
    assert_eq!(sw5(&mut c, "ALLOW k 10 1 1000"), [1, 1, 0, 10000, 10000]);
    assert!(exists(&mut c, "k"));
    // Everything trimmed and nothing added (cost > max): the key must be gone.
    assert_eq!(sw5(&mut c, "ALLOW k 10 1 50000 COST 2"), [0, 0, 1, -1, 0]);
    assert!(!exists(&mut c, "k"));
    assert_eq!(q::<String>(&mut c, &["TYPE", "k"]), "none");
}

#[test]
fn ttl_is_window_from_server_clock_only_when_admitted() {
    let (_s, mut c) = started();
    // Admitted: expiry = server clock + W, whatever `now` says.
    let t1 = admit_expiring(&mut c, "ALLOW k 10 2 1000", 10_000);
    let pttl: i64 = q(&mut c, &["PTTL", "k"]);
    assert!(0 < pttl && pttl <= 10000, "PTTL {pttl}");

    // Rejected: TTL left alone (both without and with a trim).
    let far = (t1 + 3_600_000).to_string();
    assert_eq!(sw5(&mut c, "ALLOW k 10 2 1000")[0], 1);
    let set: i64 = q(&mut c, &["PEXPIREAT", "k", &far]);
    assert_eq!(set, 1, "PEXPIREAT");
    assert_eq!(sw5(&mut c, "ALLOW k 10 2 2000")[0], 0);
    assert_eq!(pexpiretime(&mut c, "k").to_string(), far);
    assert_eq!(q::<i64>(&mut c, &["ZADD", "k", "5000", "x"]), 1, "ZADD k");
    // At 11000 the two members at 1000 go, 2 remain, max 1: rejected after a trim.
    assert_eq!(sw5(&mut c, "ALLOW k 10 1 11000"), [0, 1, 0, 4000, 4000]);
    assert_eq!(pexpiretime(&mut c, "k").to_string(), far);

    // Admitted on a key that expires later: its expiry stays (contract, "Expiry").
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 11000")[0], 1);
    assert_eq!(pexpiretime(&mut c, "k").to_string(), far);
    // Admitted on a key with an earlier expiry, or none: W from the server's clock.
    let set: i64 = q(&mut c, &["PEXPIREAT", "k", &(t1 + 5000).to_string()]);
    assert_eq!(set, 1, "PEXPIREAT");
    let t3 = admit_expiring(&mut c, "ALLOW k 10 5 11000", 10_000);
    assert_eq!(q::<i64>(&mut c, &["PERSIST", "k"]), 1, "PERSIST k");
    assert_eq!(sw5(&mut c, "ALLOW k 30 5 11000")[0], 1);
    let t4 = server_time_ms(&mut c);
    let at = pexpiretime(&mut c, "k");
    assert!(t3 + 30000 <= at && at <= t4 + 30000, "{t3} {at} {t4}");
}

#[test]
fn members_are_unique_crockford_ulids_scored_now() {
    let (_s, mut c) = started();
    assert_eq!(sw5(&mut c, "ALLOW k 10 1000 5000 COST 200")[..2], [1, 200]);
    for i in 0..50 {
        assert_eq!(sw5(&mut c, "ALLOW k 10 1000 5000")[..2], [1, 201 + i]);
    }
    let m = members(&mut c, "k");
    assert_eq!(m.len(), 250);
    let mut seen = HashSet::new();
    for (name, score) in &m {
        assert_eq!(*score, 5000, "member {name} not scored now");
        assert_eq!(name.len(), 26, "member {name:?} is not 26 characters");
        assert!(
            name.bytes()
                .all(|b| b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(&b)),
            "member {name:?} is not Crockford base32"
        );
        // A ULID's first character encodes the top 3 bits of a 48-bit timestamp: at most '7'.
        assert!(
            name.as_bytes()[0] <= b'7',
            "member {name:?} overflows 128 bits"
        );
        assert!(seen.insert(name.clone()), "member {name} repeated");
    }
}

#[test]
fn now_star_scores_with_the_server_clock() {
    let (_s, mut c) = started();
    let t0 = server_time_ms(&mut c);
    assert_eq!(sw5(&mut c, "ALLOW k 10 5 *"), [1, 1, 4, 0, 10000]);
    let t1 = server_time_ms(&mut c);
    let sc: Vec<i64> = scores(&mut c, "k").into_iter().map(|s| s as i64).collect();
    assert_eq!(sc.len(), 1);
    assert!(
        t0 <= sc[0] && sc[0] <= t1,
        "score {} not within TIME [{t0}, {t1}]",
        sc[0]
    );
    // max 1: rejected, so both waits are score + W - now, with now somewhere in [t1, t2].
    let r = sw5(&mut c, "PEEK k 10 1 *");
    let t2 = server_time_ms(&mut c);
    assert_eq!(r[..3], [0, 1, 0]);
    assert_eq!(r[3], r[4]);
    assert!(
        sc[0] + 10000 - t2 <= r[4] && r[4] <= sc[0] + 10000 - t1,
        "reset {} with score {} and TIME in [{t1}, {t2}]",
        r[4],
        sc[0]
    );
}

#[test]
fn now_star_and_the_ttl_read_the_clock_once() {
    let (_s, mut c) = started();
    // A large COST keeps the call busy long enough for a second clock reading to differ.
    let cost = "400000";
    let ok: String = q(
        &mut c,
        &["CONFIG", "SET", "slidingwindow.max-members-per-call", cost],
    );
    assert_eq!(ok, "OK");
    assert_eq!(
        sw5(&mut c, &format!("ALLOW k 3600 {cost} * COST {cost}"))[..3],
        [1, 400000, 0]
    );
    let sc = scores(&mut c, "k");
    assert_eq!(sc.len(), 400000);
    assert!(sc.iter().all(|t| *t == sc[0]), "one score for one call");
    assert_eq!(pexpiretime(&mut c, "k"), sc[0] as i64 + 3_600_000);
}

#[test]
fn largest_valid_arguments_are_accepted() {
    let (_s, mut c) = started();
    let w: i64 = 9007199254740 * 1000;
    assert_eq!(
        sw5(&mut c, &format!("ALLOW k 9007199254740 {TWO_53} {TWO_53}")),
        [1, 1, TWO_53 - 1, 0, w]
    );
    let pttl: i64 = q(&mut c, &["PTTL", "k"]);
    assert!(0 < pttl && pttl <= w, "PTTL {pttl}");
    // A cost of 2^53 with one member in the window is rejected and nothing overflows.
    assert_eq!(
        sw5(
            &mut c,
            &format!("ALLOW k 9007199254740 {TWO_53} {TWO_53} COST {TWO_53}")
        ),
        [0, 1, TWO_53 - 1, w, w]
    );
    assert_eq!(sw5(&mut c, "ALLOW z 10 1 0"), [1, 1, 0, 10000, 10000]);
    assert_eq!(scores(&mut c, "z"), [0]);
}

#[test]
fn option_name_is_case_insensitive() {
    let (_s, mut c) = started();
    assert_eq!(sw5(&mut c, "ALLOW a 10 5 1000 cost 2")[..2], [1, 2]);
    assert_eq!(sw5(&mut c, "ALLOW a 10 5 1000 CoSt 2")[..2], [1, 4]);
    assert_eq!(sw5(&mut c, "PEEK a 10 5 1000 cOST 1")[..2], [1, 5]);
    assert_eq!(sw5(&mut c, "allow a 10 5 1000 COST 1")[..2], [1, 5]);
}

#[test]
fn binary_key_names_work() {
    let (_s, mut c) = started();
    let key: &[u8] = b"rate:\x00\xff \r\n:key";
    let argv: [&[u8]; 5] = [b"SLIDINGWINDOW.ALLOW", key, b"10", b"2", b"1000"];
    assert_eq!(ints(&call_bytes(&mut c, &argv)), [1, 1, 1, 0, 10000]);
    let n: i64 = redis::cmd("ZCARD").arg(key).query(&mut c).unwrap();
    assert_eq!(n, 1);
}

/// Ranks and trims beyond a short walk (more than 64 members) answer exactly, PEEK included,
/// also with a member scored in the future and admissions PEEK only plays virtually.
#[test]
fn deep_ranks_and_large_trims_answer_exactly() {
    let (s, mut c) = started();
    let t0: i64 = 1_700_000_000_000;
    let fill = |c: &mut Connection, key: &str| {
        for i in 0..200 {
            assert_eq!(sw5(c, &format!("ALLOW {key} 10 1000 {}", t0 + i))[0], 1);
        }
    };
    // The 100th oldest (t0 + 99) must leave before a cost of 900 fits.
    fill(&mut c, "a");
    let line = format!("a 10 1000 {} COST 900", t0 + 500);
    let want = [0, 200, 800, 99 + 10_000 - 500, 199 + 10_000 - 500];
    assert_eq!(sw5(&mut c, &format!("PEEK {line}")), want);
    assert_eq!(sw5(&mut c, &format!("ALLOW {line}")), want);

    // One member from a clock ahead; 799 more fit exactly, and the 799th oldest is one of them.
    fill(&mut c, "b");
    assert_eq!(
        sw5(&mut c, &format!("ALLOW b 10 1000 {}", t0 + 5000))[1],
        201
    );
    let line = format!("b 10 1000 {} COST 799", t0 + 600);
    let want = [1, 1000, 0, 10_000, 5000 + 10_000 - 600];
    let digest = s.digest();
    assert_eq!(sw5(&mut c, &format!("PEEK {line}")), want);
    assert_eq!(s.digest(), digest, "PEEK changed the data");
    assert_eq!(sw5(&mut c, &format!("ALLOW {line}")), want);

    // 151 members leave at once; the rest stay, in order.
    fill(&mut c, "c");
    let now = t0 + 10_150;
    assert_eq!(
        sw5(&mut c, &format!("PEEK c 10 1000 {now}")),
        [1, 50, 950, 0, 10_000]
    );
    assert_eq!(
        sw5(&mut c, &format!("ALLOW c 10 1000 {now}")),
        [1, 50, 950, 0, 10_000]
    );
    let first: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("c")
        .arg(0)
        .arg(0)
        .arg("WITHSCORES")
        .query(&mut c)
        .unwrap();
    assert_eq!(first[0].1, (t0 + 151) as f64);
}
