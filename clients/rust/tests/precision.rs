//! `PRECISION p` through the crate against a real redis-server with the module, on both storages:
//! the members logged at the rounded score, PEEK answering what ALLOW does, refunds at that
//! score, the server's range error, and lease objects with a precision: never more than a limit
//! in any window, a bounded number of distinct scores, unused and given-back permits refunded at
//! the score they were logged at (not an older request's).

use testkit::harness;
mod support;

use harness::Server;
use slidingwindow_client::{
    Check, CheckAll, Clock, Error, Keyed, Lease, LeaseConfig, MAX_EXACT, Now, Refund, Source,
    logged_score,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{client, limit, logged, most_in_window};

const T: u64 = 1_700_000_000_250;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_log_the_rounded_score_and_refunds_take_it_back() {
    for storage in ["zset", "compact"] {
        let s = Server::builder().storage(storage).start();
        let c = client(&s);
        let limits = [limit(60, 3)];
        let check = Check::new(b"u", &limits).precision(Some(1000));
        // The contract's example (docs/commands.md, Coarse times).
        let peek = c.peek(&check.now(Now::Ms(T))).await.unwrap();
        let first = c.allow(&check.now(Now::Ms(T))).await.unwrap();
        assert_eq!(peek, first, "{storage}: PEEK answers what ALLOW does");
        assert_eq!((first.allowed, first.count, first.remaining), (true, 1, 2));
        assert_eq!(first.reset_after_ms, 60_750);
        let second = c.allow(&check.now(Now::Ms(T + 450))).await.unwrap();
        assert_eq!((second.count, second.reset_after_ms), (2, 60_300));
        assert_eq!(logged(&s, "u"), [T + 750, T + 750]);
        let a = c
            .peek(&check.now(Now::Ms(T + 60_749)).cost(2))
            .await
            .unwrap();
        assert!(
            !a.allowed,
            "{storage}: counted until the rounded score leaves"
        );
        let b = c
            .peek(&check.now(Now::Ms(T + 60_750)).cost(2))
            .await
            .unwrap();
        assert!(b.allowed, "{storage}: {b:?}");
        // A refund AT the `now` passed takes nothing: the members are logged later.
        let early = Refund::new(b"u", 1).at(Now::Ms(T + 450));
        assert_eq!(c.refund(&early).await.unwrap(), 0);
        let at = Now::Ms(logged_score(T + 450, Some(1000)));
        assert_eq!(c.refund(&Refund::new(b"u", 1).at(at)).await.unwrap(), 1);
        assert_eq!(logged(&s, "u"), [T + 750]);

        // On every key of an ALLOWALL, with a lease: now + ms rounded up.
        let keys = [Keyed::new(b"{t}a", &limits), Keyed::new(b"{t}b", &limits)];
        let all = CheckAll::new(&keys)
            .now(Now::Ms(T))
            .lease(100)
            .precision(Some(300));
        assert_eq!(
            c.peek_all(&all).await.unwrap(),
            c.allow_all(&all).await.unwrap()
        );
        let score = logged_score(T + 100, Some(300));
        assert_eq!(score % 300, 0);
        assert!((T + 100..T + 400).contains(&score));
        assert_eq!(logged(&s, "{t}a"), [score]);
        assert_eq!(logged(&s, "{t}b"), [score]);

        // The rounded score above 2^53 on the server's clock is the server's error: now + 2^52
        // rounded up to a multiple of 2^52 + 1 is 2^53 + 2.
        let far = Check::new(b"far", &limits)
            .lease(MAX_EXACT / 2)
            .precision(Some(MAX_EXACT / 2 + 1));
        match c.allow(&far).await {
            Err(Error::Server(e)) => assert!(e.contains("PRECISION"), "{e}"),
            other => panic!("{storage}: expected the server's error, got {other:?}"),
        }
        assert!(logged(&s, "far").is_empty(), "the error changes nothing");
    }
}

/// Tasks ask for permits for 2 s on limits of 30 a second and 120 in 5 s, leasing 8 for 100 ms
/// with `PRECISION 250` on the server's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_with_precision_stay_within_the_limits_on_few_scores() {
    for storage in ["zset", "compact"] {
        let s = Server::builder().storage(storage).start();
        let limits = [limit(1, 30), limit(5, 120)];
        let cfg = LeaseConfig::new(8, 100).precision(Some(250));
        let lease = Lease::new(client(&s), b"hot", &limits, cfg).unwrap();
        let start = Instant::now();
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let lease = lease.clone();
                tokio::spawn(async move {
                    let mut admitted = 0u64;
                    while start.elapsed() < Duration::from_millis(2000) {
                        let r = lease.allow().await.expect("a permit or a refusal");
                        if r.reply.allowed {
                            admitted += 1;
                        } else {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                    admitted
                })
            })
            .collect();
        let mut handed = 0;
        for t in tasks {
            handed += t.await.unwrap();
        }
        lease.close().await.unwrap();
        let stats = lease.stats();
        let scores = logged(&s, "hot");
        assert_eq!(scores.len() as u64, handed, "{storage}: {stats:?}");
        assert!(
            stats.refused_from_memory + stats.leases_refused > 0,
            "over the limit"
        );
        for l in &limits {
            let most = most_in_window(&scores, l.window_ms());
            assert!(
                most as u64 <= l.max(),
                "{storage}: {most} in {l:?}: {stats:?}"
            );
        }
        assert!(scores.iter().all(|t| t % 250 == 0), "{storage}: {scores:?}");
        let mut distinct = scores.clone();
        distinct.dedup();
        // The contract's bound: (Wmax + ms) / p + 2.
        assert!(distinct.len() <= (5000 + 100) / 250 + 2, "{distinct:?}");
    }
}

/// A lease's unused permits and a given-back exact permit go back at the score they were logged
/// at: an older request, logged before the rounded score, stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_take_back_what_was_logged_at_the_rounded_score() {
    for storage in ["zset", "compact"] {
        let s = Server::builder().storage(storage).start();
        let c = client(&s);
        let limits = [limit(60, 100)];
        let older = Check::new(b"k", &limits).now(Now::Ms(T - 150));
        assert!(c.allow(&older).await.unwrap().allowed);
        let fixed = Clock::Own(Arc::new(|| T));
        let cfg = LeaseConfig::new(10, 2000)
            .clock(fixed.clone())
            .precision(Some(1000));
        let lease = Lease::new(c.clone(), b"k", &limits, cfg).unwrap();
        let mut charges = Vec::new();
        for _ in 0..3 {
            let r = lease.allow().await.unwrap();
            assert_eq!((r.reply.allowed, r.source), (true, Source::Memory));
            charges.push(r.charge.unwrap());
        }
        let end = logged_score(T + 2000, Some(1000));
        assert!(charges.iter().all(|ch| ch.logged_at() == end));
        assert_eq!(lease.close().await.unwrap(), 7);
        assert_eq!(logged(&s, "k"), [T - 150, end, end, end], "{storage}");

        // An exact call (a quiet key) logs at `now` rounded up; giving it back refunds there.
        let cfg = LeaseConfig::new(10, 2000)
            .clock(fixed)
            .when_busy(true)
            .precision(Some(1000));
        let quiet = Lease::new(c.clone(), b"q", &limits, cfg).unwrap();
        assert!(
            c.allow(&Check::new(b"q", &limits).now(Now::Ms(T - 150)))
                .await
                .unwrap()
                .allowed
        );
        let r = quiet.allow().await.unwrap();
        assert_eq!(
            (r.reply.allowed, r.source, r.at_ms),
            (true, Source::Exact, T)
        );
        let charge = r.charge.unwrap();
        assert_eq!(charge.logged_at(), logged_score(T, Some(1000)));
        assert_eq!(logged(&s, "q"), [T - 150, charge.logged_at()]);
        assert_eq!(quiet.give_back(charge).await.unwrap(), 1);
        assert_eq!(logged(&s, "q"), [T - 150], "{storage}");
    }
}

/// The storage check the services make before passing `PRECISION`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storage_is_checked_for_precision() {
    let s = Server::builder().storage("zset").start();
    assert_eq!(client(&s).storage(b"k").await.unwrap(), "zset");
    let w = client(&s).precision_warning(b"k").await.expect("a warning");
    assert!(w.contains("zset") && w.contains("saves no memory"), "{w}");
    let s = Server::builder().storage("compact").start();
    assert_eq!(client(&s).storage(b"k").await.unwrap(), "compact");
    assert_eq!(client(&s).precision_warning(b"k").await, None);
    // CONFIG renamed away: the warning says it could not be checked.
    let s = Server::builder()
        .args(["--rename-command", "CONFIG", "\"\""])
        .start();
    let w = client(&s).precision_warning(b"k").await.expect("a warning");
    assert!(w.contains("could not be checked"), "{w}");
}
