//! Clock edge cases: calls at the ends of the ranges of `now`, the window and max, answered as
//! the contract says.

use super::*;

#[test]
fn clock_edge_cases_follow_the_contract() {
    let s = Server::start();
    let mut con = s.client();
    let m = MAX_EXACT;
    let mi = m as i64;
    let wmax = MAX_WINDOW;
    let wmax_ms = (MAX_WINDOW * 1000) as i64;
    let mut check =
        |cmd: &str, key: &str, w: u64, max: u64, now: u64, cost: u64, want: [i64; 5]| {
            let got = sw5_with(&mut con, cmd, key, w, max, now, cost);
            assert_eq!(got, want, "{cmd} {key} {w} {max} {now} COST {cost}");
        };

    // now = 0: members at 0 leave exactly when now - W reaches 0.
    check("ALLOW", "zero", 1, 2, 0, 1, [1, 1, 1, 0, 1000]);
    check("ALLOW", "zero", 1, 2, 0, 1, [1, 2, 0, 1000, 1000]);
    check("ALLOW", "zero", 1, 2, 0, 1, [0, 2, 0, 1000, 1000]);
    check("ALLOW", "zero", 1, 2, 999, 1, [0, 2, 0, 1, 1]);
    check("ALLOW", "zero", 1, 2, 1000, 1, [1, 1, 1, 0, 1000]);

    // now = 2^53 with the longest window and the largest max; the score is stored exactly.
    check("ALLOW", "top", wmax, m, m, 1, [1, 1, mi - 1, 0, wmax_ms]);
    let pair: Vec<String> = q(&mut s.client(), &["ZRANGE", "top", "0", "0", "WITHSCORES"]);
    assert_eq!(pair[1], "9007199254740992", "2^53 not stored exactly");
    // Far behind the stored member: it is in the future and still counts; the reset wait is
    // 2^53 + W - 0, larger than 2^53 but far from overflowing.
    check(
        "ALLOW",
        "top",
        wmax,
        m,
        0,
        1,
        [1, 2, mi - 2, 0, mi + wmax_ms],
    );
    // Back at 2^53 the cutoff is 2^53 - W = 992, so the member at 0 has left the window.
    check(
        "PEEK",
        "top",
        wmax,
        m,
        m,
        m,
        [0, 1, mi - 1, wmax_ms, wmax_ms],
    );
    check("PEEK", "top", wmax, m, m, 1, [1, 2, mi - 2, 0, wmax_ms]);

    // Far ahead of the stored members: they all expire at once.
    check("ALLOW", "ahead", 10, 5, 1000, 1, [1, 1, 4, 0, 10_000]);
    check("ALLOW", "ahead", 10, 5, 1001, 1, [1, 2, 3, 0, 10_000]);
    check("ALLOW", "ahead", 10, 5, 1002, 1, [1, 3, 2, 0, 10_000]);
    check("ALLOW", "ahead", 10, 5, m, 1, [1, 1, 4, 0, 10_000]);
    assert_eq!(client::scores(&mut s.client(), "ahead"), vec![m]);

    // Behind a member at 2^53 with a one-second window.
    check("ALLOW", "behind", 1, 3, m, 1, [1, 1, 2, 0, 1000]);
    check("ALLOW", "behind", 1, 3, 0, 1, [1, 2, 1, 0, mi + 1000]);
    check("ALLOW", "behind", 1, 3, 0, 2, [0, 2, 1, 1000, mi + 1000]);

    // A window longer than now: the cutoff is negative and a member at 0 stays.
    check("ALLOW", "long", 3600, 2, 5000, 1, [1, 1, 1, 0, 3_600_000]);
    check(
        "ALLOW",
        "long",
        3600,
        2,
        0,
        1,
        [1, 2, 0, 3_600_000, 3_605_000],
    );
    check(
        "ALLOW",
        "long",
        3600,
        2,
        0,
        1,
        [0, 2, 0, 3_600_000, 3_605_000],
    );

    // The TTL of the longest window: W ms from the server's clock, no overflow.
    let t0 = harness::server_time_ms(&mut s.client());
    check("ALLOW", "ttl", wmax, 1, 1, 1, [1, 1, 0, wmax_ms, wmax_ms]);
    let t1 = harness::server_time_ms(&mut s.client());
    let at: i64 = q(&mut s.client(), &["PEXPIRETIME", "ttl"]);
    assert!(
        (t0 + wmax_ms..=t1 + wmax_ms).contains(&at),
        "PEXPIRETIME {at} is not W after the call ({t0}..{t1})"
    );

    // Scores written by someone else: -inf leaves, +inf stays forever and saturates the wait.
    let added: i64 = q(
        &mut s.client(),
        &[
            "ZADD", "foreign", "-inf", "a", "-5", "b", "100", "c", "+inf", "d",
        ],
    );
    assert_eq!(added, 4, "ZADD foreign");
    check("PEEK", "foreign", 10, 10, 1000, 1, [1, 4, 6, 0, i64::MAX]);
    check("ALLOW", "foreign", 10, 10, 1000, 1, [1, 4, 6, 0, i64::MAX]);
    check(
        "ALLOW",
        "foreign",
        10,
        4,
        1000,
        1,
        [0, 4, 0, 8995, i64::MAX],
    );
    let n: u64 = q(&mut s.client(), &["ZCARD", "foreign"]);
    assert_eq!(n, 4);

    // One past each limit is an error naming the argument, and changes nothing.
    let digest = s.digest();
    let past = (m + 1).to_string();
    let wpast = (wmax + 1).to_string();
    for (args, name) in [
        (
            vec!["SLIDINGWINDOW.ALLOW", "top", "10", "5", past.as_str()],
            "now",
        ),
        (
            vec!["SLIDINGWINDOW.ALLOW", "top", wpast.as_str(), "5", "1"],
            "window",
        ),
        (
            vec!["SLIDINGWINDOW.ALLOW", "top", "10", past.as_str(), "1"],
            "max",
        ),
        (
            vec![
                "SLIDINGWINDOW.ALLOW",
                "top",
                "10",
                "5",
                "1",
                "COST",
                past.as_str(),
            ],
            "cost",
        ),
    ] {
        let v = call(&mut s.client(), &args);
        let err = error_line(&v).unwrap_or_else(|| panic!("{args:?} answered {v:?}"));
        assert!(
            err.starts_with("ERR") && err.contains(name),
            "{args:?}: {err}"
        );
    }
    assert_eq!(s.digest(), digest);
}
