//! The lease object against a real redis-server with the module, on both storages: many
//! concurrent tasks never get more than a limit allows in any window (counting the scores logged
//! and the permits handed out), every last permit is handed out near the limit, unused permits go
//! back at a lease's end and on close, permits given back, leasing only busy keys, several keys,
//! a Redis that is away.

use testkit::harness;
mod support;

use harness::Server;
use slidingwindow_client::{Clock, Error, Keyed, Lease, LeaseConfig, Limit, RetryAfter, Source};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::{client, counted, eventually, limit, logged, most_in_window};

/// `tasks` tasks ask for permits for 2.5 s, each pausing `pause_ms` after a permit (a refused
/// one waits 10 ms), on limits of 30 a second and 120 in 5 s, leasing 8 for 100 ms.
async fn many_tasks(storage: &str, clock: Clock, tasks: usize, pause_ms: u64) {
    let own = matches!(clock, Clock::Own(_));
    let mut server = Server::builder().storage(storage);
    if own {
        // Calls stamped by the caller reach Redis out of order: lateness covers it.
        server = server.args(["--slidingwindow.lateness", "10000"]);
    }
    let s = server.start();
    let limits = [limit(1, 30), limit(5, 120)];
    let cfg = LeaseConfig::new(8, 100).clock(clock);
    let lease = Lease::new(client(&s), b"hot", &limits, cfg).unwrap();
    let start = Instant::now();
    let tasks: Vec<_> = (0..tasks)
        .map(|_| {
            let lease = lease.clone();
            tokio::spawn(async move {
                let mut admitted = Vec::new();
                let mut refused = 0u64;
                while start.elapsed() < Duration::from_millis(2500) {
                    let r = lease.allow().await.expect("a permit or a refusal");
                    if r.reply.allowed {
                        assert!(r.charge.is_some());
                        admitted.push((r.at_ms, r.source));
                        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                    } else {
                        assert!(r.charge.is_none());
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                (admitted, refused)
            })
        })
        .collect();
    let mut handed = Vec::new();
    let mut refused = 0;
    for t in tasks {
        let (a, r) = t.await.unwrap();
        handed.extend(a);
        refused += r;
    }
    lease.close().await.unwrap();
    let stats = lease.stats();
    let times: Vec<u64> = handed.iter().map(|&(t, _)| t).collect();
    let memory = handed.iter().filter(|(_, s)| *s == Source::Memory).count() as u64;
    assert!(refused > 0, "the load is over the limit");
    assert!(memory > 0, "some permits come from memory");
    assert_eq!(memory, stats.from_memory);
    assert_eq!(
        handed.len() as u64,
        stats.from_memory + stats.exact_admitted
    );
    // Every unused permit went back: the log holds exactly what was handed out.
    let scores = logged(&s, "hot");
    assert_eq!(scores.len(), handed.len(), "{stats:?}");
    for l in &limits {
        let most = most_in_window(&scores, l.window_ms());
        assert!(most as u64 <= l.max(), "{most} logged in {l:?}: {stats:?}");
        if own {
            // The times the permits were handed out at, on the clock passed as `now`.
            let most = most_in_window(&times, l.window_ms());
            assert!(
                most as u64 <= l.max(),
                "{most} handed out in {l:?}: {stats:?}"
            );
        }
    }
    // 2.5 s of a 30/s limit: more than 45 fit, and calls are fewer than permits.
    assert!(handed.len() > 45, "{} handed out: {stats:?}", handed.len());
    assert!(stats.lease_calls < memory, "{stats:?}");
}

/// A module `$name` of two tests, `zset` and `compact`, each running `many_tasks` on that storage.
macro_rules! on_both_storages {
    ($(#[$doc:meta])* $name:ident($clock:expr, $tasks:expr, $pause_ms:expr)) => {
        $(#[$doc])*
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn zset() {
                many_tasks("zset", $clock, $tasks, $pause_ms).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn compact() {
                many_tasks("compact", $clock, $tasks, $pause_ms).await;
            }
        }
    };
}

on_both_storages!(many_tasks_on_their_own_clock(Clock::system(), 32, 0));
on_both_storages!(
    /// About 48 requests a second against leases of 8 for 100 ms: leases end partly used.
    paced_tasks_on_their_own_clock(Clock::system(), 16, 333)
);
on_both_storages!(many_tasks_on_the_servers_clock(Clock::Server, 32, 0));
on_both_storages!(
    /// About 48 requests a second against leases of 8 for 100 ms: leases end partly used.
    paced_tasks_on_the_servers_clock(Clock::Server, 16, 333)
);

/// A lease on `k`, under a limit of 100 in 60 s.
fn on_k(s: &Server, cfg: LeaseConfig) -> Lease {
    Lease::new(client(s), b"k", &[limit(60, 100)], cfg).unwrap()
}

async fn spawn_attempts(lease: &Lease, tasks: usize, each: usize) -> Vec<(bool, Source)> {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let lease = lease.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for _ in 0..each {
                    let r = lease.allow().await.expect("allow");
                    got.push((r.reply.allowed, r.source));
                }
                got
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_the_limit_every_last_permit_is_handed_out() {
    for storage in ["zset", "compact"] {
        let s = Server::builder().storage(storage).start();
        let limits = [limit(3600, 25), limit(7200, 100)];
        let lease = Lease::new(client(&s), b"k", &limits, LeaseConfig::new(10, 60_000)).unwrap();
        let got = spawn_attempts(&lease, 16, 4).await;
        let admitted = got.iter().filter(|(a, _)| *a).count();
        assert_eq!(admitted, 25, "{storage}");
        // Two leases of 10, a third refused (20 + 10 > 25): the last 5 by exact calls.
        let stats = lease.stats();
        assert_eq!(
            (
                stats.leases_granted,
                stats.from_memory,
                stats.exact_admitted
            ),
            (2, 20, 5),
            "{storage}: {stats:?}"
        );
        assert!(stats.leases_refused >= 1);
        assert_eq!(lease.close().await.unwrap(), 0, "both leases were used up");
        assert_eq!(counted(&s, "k", 3600), 25);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_permits_go_back_at_the_end_and_on_close() {
    for storage in ["zset", "compact"] {
        let s = Server::builder().storage(storage).start();
        // Long enough for the checks below to run within it on a busy machine.
        let cfg = LeaseConfig::new(10, 2000).clock(Clock::system());
        let lease = on_k(&s, cfg);
        let mut at = Vec::new();
        for i in 0..3 {
            let r = lease.allow().await.unwrap();
            assert_eq!((r.reply.allowed, r.source), (true, Source::Memory));
            // As an exact ALLOW would answer had nothing else happened since the lease.
            let reply = &r.reply;
            assert_eq!((reply.count, reply.remaining), (i + 1, 99 - i));
            assert_eq!(reply.retry_after, RetryAfter::Ms(0));
            assert!(reply.reset_after_ms <= 62_000, "{reply:?}");
            at.push(r.at_ms);
        }
        assert_eq!(counted(&s, "k", 60), 10, "the lease is logged whole");
        eventually("the lease to end", || lease.stats().refunded == 7).await;
        assert_eq!(counted(&s, "k", 60), 3);
        let scores = logged(&s, "k");
        // Logged at the lease's end, after every handout.
        assert!(
            scores
                .iter()
                .all(|&s| s == scores[0] && at.iter().all(|&t| t < s))
        );
        for _ in 0..2 {
            assert_eq!(lease.allow().await.unwrap().source, Source::Memory);
        }
        assert_eq!(counted(&s, "k", 60), 13);
        assert_eq!(lease.close().await.unwrap(), 8);
        assert_eq!(
            counted(&s, "k", 60),
            5,
            "{storage}: close returns the rest at once"
        );
        let after = lease.allow().await.unwrap();
        assert_eq!((after.reply.allowed, after.source), (true, Source::Exact));
        assert_eq!(counted(&s, "k", 60), 6);
        let stats = lease.stats();
        assert_eq!(
            (stats.lease_calls, stats.refund_calls, stats.refunded),
            (2, 2, 15),
            "{stats:?}"
        );
        assert_eq!(stats.calls, 5);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_permit_is_handed_out_at_or_after_the_lease_end_on_the_callers_clock() {
    const T: u64 = 1_700_000_000_000;
    let s = Server::start();
    let now = Arc::new(AtomicU64::new(T));
    let read = now.clone();
    let clock = Clock::Own(Arc::new(move || read.load(Ordering::Relaxed)));
    // A minute long: the monotonic end never comes first here.
    let cfg = LeaseConfig::new(5, 60_000).clock(clock);
    let lease = Lease::new(client(&s), b"k", &[limit(3600, 100)], cfg).unwrap();
    let take = || async {
        let r = lease.allow().await.unwrap();
        assert_eq!((r.reply.allowed, r.source), (true, Source::Memory));
        (r.at_ms, lease.stats().lease_calls)
    };
    assert_eq!(take().await, (T, 1));
    assert_eq!(logged(&s, "k"), [T + 60_000; 5]);
    now.store(T + 59_999, Ordering::Relaxed);
    assert_eq!(take().await, (T + 59_999, 1), "the last ms of the lease");
    now.store(T + 60_000, Ordering::Relaxed);
    assert_eq!(take().await, (T + 60_000, 2), "a new lease at its end");
    // The first lease's 3 unused went back at its end; the new one is logged at its own.
    let mut expect = vec![T + 60_000; 2];
    expect.extend([T + 120_000; 5]);
    assert_eq!(logged(&s, "k"), expect);
    assert_eq!(lease.close().await.unwrap(), 4);
    assert_eq!(logged(&s, "k"), [T + 60_000, T + 60_000, T + 120_000]);
    let stats = lease.stats();
    assert_eq!((stats.refunded, stats.from_memory, stats.calls), (7, 3, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_given_back() {
    let s = Server::start();
    let lease = on_k(&s, LeaseConfig::new(5, 60_000));
    let first = lease.allow().await.unwrap();
    assert_eq!(lease.give_back(first.charge.unwrap()).await.unwrap(), 1);
    let stats = lease.stats();
    assert_eq!(
        (stats.returned, stats.refund_calls),
        (1, 0),
        "into the live lease"
    );
    let mut charges = Vec::new();
    for _ in 0..5 {
        let r = lease.allow().await.unwrap();
        assert_eq!(r.source, Source::Memory);
        charges.push(r.charge.unwrap());
    }
    // Six permits out of a lease of five: the returned one was handed out again.
    let stats = lease.stats();
    assert_eq!((stats.from_memory, stats.returned), (6, 1), "{stats:?}");
    assert!(lease.allow().await.unwrap().reply.allowed);
    assert_eq!(counted(&s, "k", 60), 10);
    // A permit of the first lease, now replaced: back with a REFUND at that lease's end.
    let old = charges.pop().unwrap();
    assert_eq!(lease.give_back(old).await.unwrap(), 1);
    assert_eq!(counted(&s, "k", 60), 9);
    assert_eq!(lease.stats().refund_calls, 1);
    assert_eq!(lease.close().await.unwrap(), 4);
    let exact = lease.allow().await.unwrap();
    assert_eq!(exact.source, Source::Exact);
    assert_eq!(counted(&s, "k", 60), 6);
    assert_eq!(lease.give_back(exact.charge.unwrap()).await.unwrap(), 1);
    assert_eq!(counted(&s, "k", 60), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_busy_key_is_leased() {
    let s = Server::start();
    let cfg = LeaseConfig::new(5, 3000).when_busy(true);
    let lease = on_k(&s, cfg);
    for _ in 0..4 {
        assert_eq!(lease.allow().await.unwrap().source, Source::Exact);
    }
    assert_eq!(
        lease.stats().lease_calls,
        0,
        "4 calls do not fill a lease of 5"
    );
    // The fifth within the lease's duration: the key is busy.
    assert_eq!(lease.allow().await.unwrap().source, Source::Memory);
    assert_eq!(counted(&s, "k", 60), 9);
    // The lease ends with 4 unused: the key is quiet again.
    eventually("the lease to end", || lease.stats().refunded == 4).await;
    assert_eq!(lease.allow().await.unwrap().source, Source::Exact);
    assert_eq!(counted(&s, "k", 60), 6);
    assert_eq!(lease.stats().lease_calls, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_over_several_keys_counts_on_each() {
    let s = Server::builder().storage("compact").start();
    let a = [limit(3600, 5)];
    let b = [limit(3600, 7)];
    let keys = [Keyed::new(b"{t}:a", &a), Keyed::new(b"{t}:b", &b)];
    let lease = Lease::new_all(client(&s), &keys, LeaseConfig::new(3, 60_000)).unwrap();
    let got = spawn_attempts(&lease, 8, 2).await;
    assert_eq!(got.iter().filter(|(a, _)| *a).count(), 5);
    assert_eq!(lease.close().await.unwrap(), 0);
    assert_eq!(
        (counted(&s, "{t}:a", 3600), counted(&s, "{t}:b", 3600)),
        (5, 5)
    );
    // A lease larger than a max could never be granted.
    let too_big = Lease::new_all(client(&s), &keys, LeaseConfig::new(6, 1000));
    assert!(matches!(too_big, Err(Error::Invalid(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_waiting_on_a_failed_lease_get_its_error() {
    let mut s = Server::start();
    let lease = on_k(&s, LeaseConfig::new(10, 60_000));
    s.kill9();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let lease = lease.clone();
            tokio::spawn(async move { lease.allow().await })
        })
        .collect();
    for h in handles {
        assert!(matches!(h.await.unwrap(), Err(Error::Redis(_))));
    }
    let stats = lease.stats();
    assert_eq!(
        stats.errors, stats.lease_calls,
        "one failure per lease call"
    );
    assert!(stats.lease_calls <= 4);
    s.restart();
    assert_eq!(lease.allow().await.unwrap().source, Source::Memory);
    assert_eq!(counted(&s, "k", 60), 10);
}

#[test]
fn a_lease_must_fit_its_limits() {
    let s = Server::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let c = client(&s);
    let l: [Limit; 1] = [limit(60, 10)];
    for cfg in [
        LeaseConfig::new(0, 100),
        LeaseConfig::new(11, 100),
        LeaseConfig::new(5, 0),
    ] {
        assert!(matches!(
            Lease::new(c.clone(), b"k", &l, cfg),
            Err(Error::Invalid(_))
        ));
    }
    assert!(matches!(
        Lease::new(c, b"k", &[], LeaseConfig::new(1, 100)),
        Err(Error::Invalid(_))
    ));
}

// One thread: the lease call's task runs only when the test awaits, so the permits taken before
// that are handed out while the call is in flight.
#[tokio::test(flavor = "current_thread")]
async fn a_key_busy_while_its_lease_call_is_in_flight_asks_for_the_next_one_earlier() {
    let s = Server::start();
    let lease = Lease::new(
        client(&s),
        b"k",
        &[limit(60, 1000)],
        LeaseConfig::new(16, 60_000),
    )
    .unwrap();
    let permit = || matches!(lease.try_take(None), slidingwindow_client::Take::Permit(_));
    assert_eq!(lease.allow().await.unwrap().source, Source::Memory);
    // 12 taken leave 4, a quarter: the next lease is asked for, and the last 4 go meanwhile.
    for i in 2..=16 {
        assert!(permit(), "permit {i}");
    }
    eventually("the second lease", || lease.stats().leases_granted == 2).await;
    // 4 handed out during that call: the third lease is asked for with twice that, 8, left
    // (not 4).
    for i in 1..=8 {
        assert!(permit(), "permit {i} of the second lease");
    }
    eventually("the third lease", || lease.stats().leases_granted == 3).await;
    assert_eq!(counted(&s, "k", 60), 48);
    assert_eq!(lease.stats().lease_calls, 3);
    assert_eq!(lease.close().await.unwrap(), 8 + 16);
    assert_eq!(counted(&s, "k", 60), 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_lease_is_asked_for_before_the_current_one_runs_out() {
    let s = Server::start();
    let lease = on_k(&s, LeaseConfig::new(8, 60_000));
    for _ in 0..5 {
        assert_eq!(lease.allow().await.unwrap().source, Source::Memory);
    }
    assert_eq!(lease.stats().lease_calls, 1);
    // The sixth leaves 2 of 8, a quarter: the next lease is asked for now.
    assert_eq!(lease.allow().await.unwrap().source, Source::Memory);
    eventually("the next lease", || lease.stats().leases_granted == 2).await;
    assert_eq!(counted(&s, "k", 60), 16);
    for _ in 0..2 {
        assert_eq!(lease.allow().await.unwrap().source, Source::Memory);
    }
    // The first is used up: the ninth comes from the next one without waiting for a call.
    assert!(matches!(
        lease.try_take(None),
        slidingwindow_client::Take::Permit(_)
    ));
    let stats = lease.stats();
    assert_eq!((stats.lease_calls, stats.from_memory), (2, 9), "{stats:?}");
    assert_eq!(lease.close().await.unwrap(), 7);
    assert_eq!(counted(&s, "k", 60), 9);
}
