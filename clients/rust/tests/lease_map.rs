//! The lease map against a real redis-server with the module: busy keys leased and quiet ones
//! exact, many tasks over many keys never over a limit (scores logged, permits handed out),
//! eviction bounded in keys and bytes with the evicted objects' permits back, close_all, permits
//! given back, a caller's time for the handout, the refund hook, limits that change.

use testkit::harness;
mod support;

use harness::Server;
use slidingwindow_client::{Clock, LeaseConfig, LeaseMap, LeaseMapConfig, Limit, Source, Take};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{client, counted, eventually, limit, logged, most_in_window};

fn map(s: &Server, cfg: LeaseMapConfig) -> LeaseMap {
    LeaseMap::new(client(s), cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_key_is_leased_a_quiet_one_is_not() {
    let s = Server::start();
    // Long enough for the checks below to run within it on a busy machine.
    let m = map(&s, LeaseMapConfig::new(5, 3000));
    let l = [limit(60, 100)];
    for _ in 0..4 {
        assert_eq!(m.allow(b"hot", &l).await.unwrap().source, Source::Exact);
    }
    // The fifth call within the lease's duration: busy.
    let r = m.allow(b"hot", &l).await.unwrap();
    assert_eq!((r.reply.allowed, r.source), (true, Source::Memory));
    for _ in 0..2 {
        assert_eq!(m.allow(b"quiet", &l).await.unwrap().source, Source::Exact);
    }
    assert_eq!(counted(&s, "hot", 60), 9, "4 exact, a lease of 5");
    assert_eq!(counted(&s, "quiet", 60), 2);
    let stats = m.stats();
    assert_eq!((stats.keys, stats.created, stats.evicted), (2, 2, 0));
    assert_eq!(
        (
            stats.leases.lease_calls,
            stats.leases.exact_calls,
            stats.leases.from_memory
        ),
        (1, 6, 1)
    );
    assert!(stats.bytes > 0);
    assert_eq!(m.close_all().await.unwrap(), 4);
    assert_eq!(counted(&s, "hot", 60), 5);
}

/// 16 tasks over 4 keys for 2 s, on limits of 30 a second and 100 in 5 s, leases of 8 for
/// 100 ms: two keys take most of the traffic (leased), two a little (exact).
async fn many_tasks_over_many_keys(storage: &str, clock: Clock) {
    let own = matches!(clock, Clock::Own(_));
    let mut server = Server::builder().storage(storage);
    if own {
        // Calls stamped by the caller reach Redis out of order: lateness covers it.
        server = server.args(["--slidingwindow.lateness", "10000"]);
    }
    let s = server.start();
    let limits = [limit(1, 30), limit(5, 100)];
    let cfg =
        LeaseMapConfig::new(8, 100).lease(LeaseConfig::new(8, 100).clock(clock).when_busy(true));
    let m = map(&s, cfg);
    let start = Instant::now();
    let keys: [&[u8]; 4] = [b"k0", b"k1", b"k2", b"k3"];
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let m = m.clone();
            tokio::spawn(async move {
                let mut handed = Vec::new();
                let mut n = 0u64;
                while start.elapsed() < Duration::from_secs(2) {
                    // Keys 0 and 1 busy, 2 and 3 every 16th call.
                    let k = if n.is_multiple_of(16) {
                        2 + i % 2
                    } else {
                        i % 2
                    };
                    n += 1;
                    let r = m
                        .allow(keys[k], &limits)
                        .await
                        .expect("a permit or a refusal");
                    if r.reply.allowed {
                        handed.push((k, r.at_ms, r.source));
                    } else {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                handed
            })
        })
        .collect();
    let mut handed = Vec::new();
    for t in tasks {
        handed.extend(t.await.unwrap());
    }
    m.close_all().await.unwrap();
    let stats = m.stats();
    assert!(stats.leases.from_memory > 0, "{stats:?}");
    assert!(stats.leases.exact_calls > 0, "{stats:?}");
    for (k, key) in keys.iter().enumerate() {
        let name = std::str::from_utf8(key).unwrap();
        let times: Vec<u64> = handed.iter().filter(|h| h.0 == k).map(|h| h.1).collect();
        let scores = logged(&s, name);
        // Every unused permit went back: each key's log holds exactly what was handed out.
        assert_eq!(scores.len(), times.len(), "{name}: {stats:?}");
        for l in &limits {
            let most = most_in_window(&scores, l.window_ms());
            assert!(most as u64 <= l.max(), "{name}: {most} logged in {l:?}");
            if own {
                let most = most_in_window(&times, l.window_ms());
                assert!(most as u64 <= l.max(), "{name}: {most} handed out in {l:?}");
            }
        }
    }
    let busy = handed
        .iter()
        .filter(|h| h.0 < 2 && h.2 == Source::Memory)
        .count();
    assert!(busy > 0, "the busy keys were leased");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_over_many_keys_zset() {
    many_tasks_over_many_keys("zset", Clock::system()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_over_many_keys_compact() {
    many_tasks_over_many_keys("compact", Clock::system()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_over_many_keys_on_the_servers_clock() {
    many_tasks_over_many_keys("compact", Clock::Server).await;
}

/// Takes one permit of `key` from a lease (the map leases every key).
async fn leased(m: &LeaseMap, key: &[u8]) {
    let r = m.allow(key, &[limit(60, 100)]).await.unwrap();
    assert_eq!((r.reply.allowed, r.source), (true, Source::Memory));
}

fn always(size: u64, ms: u64) -> LeaseMapConfig {
    LeaseMapConfig::new(size, ms).lease(LeaseConfig::new(size, ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_is_bounded_and_gives_the_unused_permits_back() {
    let s = Server::start();
    let m = map(&s, always(3, 60_000).max_keys(2));
    leased(&m, b"a").await;
    leased(&m, b"b").await;
    leased(&m, b"a").await;
    assert_eq!((counted(&s, "a", 60), counted(&s, "b", 60)), (3, 3));
    // b is the least recently used: a third key evicts it, and its 2 unused permits go back.
    leased(&m, b"c").await;
    eventually("b's unused permits back", || counted(&s, "b", 60) == 1).await;
    assert_eq!(counted(&s, "a", 60), 3);
    let stats = m.stats();
    assert_eq!((stats.keys, stats.evicted, stats.created), (2, 1, 3));
    // Bytes: a bound below two entries keeps one.
    // A key too large for the map on its own is not leased: exact calls.
    let small = map(&s, always(3, 60_000).max_bytes(1));
    let r = small.allow(b"d", &[limit(60, 100)]).await.unwrap();
    assert_eq!((r.reply.allowed, r.source), (true, Source::Exact));
    assert_eq!(counted(&s, "d", 60), 1);
    assert_eq!(small.stats().keys, 0);
    let one = m.stats().bytes / 2;
    let fits_one = map(&s, always(3, 60_000).max_bytes(one + one / 2));
    leased(&fits_one, b"e").await;
    leased(&fits_one, b"f").await;
    assert_eq!(fits_one.stats().keys, 1);
    eventually("e's unused permits back", || counted(&s, "e", 60) == 1).await;
    // a: 1 of 3 left; c: 2.
    assert_eq!(m.close_all().await.unwrap(), 1 + 2);
    assert_eq!(fits_one.close_all().await.unwrap(), 2);
    assert_eq!(small.close_all().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keys_leave_first() {
    let s = Server::start();
    let m = map(&s, always(3, 60_000).idle(Duration::from_millis(200)));
    leased(&m, b"a").await;
    leased(&m, b"b").await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    leased(&m, b"b").await;
    // a has been idle for longer than 200 ms, b not: a new key evicts a only.
    leased(&m, b"c").await;
    eventually("a's unused permits back", || counted(&s, "a", 60) == 1).await;
    let stats = m.stats();
    assert_eq!((stats.keys, stats.evicted), (2, 1));
    assert_eq!(counted(&s, "b", 60), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_all_gives_every_unused_permit_back_then_calls_are_exact() {
    for storage in ["zset", "compact"] {
        let s = Server::builder().storage(storage).start();
        let m = map(&s, always(10, 60_000));
        for key in [&b"a"[..], b"b", b"c"] {
            leased(&m, key).await;
        }
        leased(&m, b"a").await;
        assert_eq!(m.close_all().await.unwrap(), 8 + 9 + 9, "{storage}");
        assert_eq!(
            (
                counted(&s, "a", 60),
                counted(&s, "b", 60),
                counted(&s, "c", 60)
            ),
            (2, 1, 1)
        );
        let r = m.allow(b"a", &[limit(60, 100)]).await.unwrap();
        assert_eq!((r.reply.allowed, r.source), (true, Source::Exact));
        assert!(matches!(
            m.try_take(b"a", &[limit(60, 100)], None),
            Ok(Take::Exact)
        ));
        assert_eq!(counted(&s, "a", 60), 3);
        assert_eq!(m.stats().keys, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_given_back_through_the_map() {
    let s = Server::start();
    let hook_keys = Arc::new(Mutex::new(Vec::new()));
    let seen = hook_keys.clone();
    let lease = LeaseConfig::new(3, 60_000).on_refund(Arc::new(move |k: &[u8]| {
        seen.lock().unwrap().push(k.to_vec());
    }));
    let m = map(&s, LeaseMapConfig::new(3, 60_000).lease(lease).max_keys(1));
    let l = [limit(60, 100)];
    let r = m.allow(b"a", &l).await.unwrap();
    // Into the live lease: no call, and the permit is handed out again.
    assert_eq!(m.give_back(b"a", r.charge.unwrap()).await.unwrap(), 1);
    let r = m.allow(b"a", &l).await.unwrap();
    assert_eq!(r.source, Source::Memory);
    assert_eq!(m.stats().leases.returned, 1);
    assert_eq!(counted(&s, "a", 60), 3);
    // Once a's object is evicted (its 2 unused permits back), a REFUND at the lease's end.
    leased(&m, b"b").await;
    eventually("a's unused permits back", || counted(&s, "a", 60) == 1).await;
    assert_eq!(m.give_back(b"a", r.charge.unwrap()).await.unwrap(), 1);
    assert_eq!(counted(&s, "a", 60), 0);
    eventually("the hook told twice", || {
        hook_keys.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(*hook_keys.lock().unwrap(), [b"a".to_vec(), b"a".to_vec()]);
    assert_eq!(m.close_all().await.unwrap(), 2);
    eventually("the hook told of b", || {
        hook_keys.lock().unwrap().len() == 3
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_at_the_callers_time_never_at_or_after_the_end() {
    const T: u64 = 1_700_000_000_000;
    let s = Server::start();
    let now = Arc::new(AtomicU64::new(T));
    let read = now.clone();
    let clock = Clock::Own(Arc::new(move || read.load(Ordering::Relaxed)));
    let m = map(
        &s,
        always(5, 60_000).lease(LeaseConfig::new(5, 60_000).clock(clock)),
    );
    let l = [limit(3600, 100)];
    let Take::Wait(w) = m.try_take(b"k", &l, Some(T)).unwrap() else {
        panic!("the first call starts a lease");
    };
    assert!(w.wait().await.unwrap(), "granted");
    let take = |at| match m.try_take(b"k", &l, Some(at)).unwrap() {
        Take::Permit(r) => Some(r.at_ms),
        Take::Wait(_) => None,
        Take::Exact | Take::Refused(_) => panic!("always leasing, far from the max"),
    };
    assert_eq!(take(T + 10), Some(T + 10), "handed out at the time given");
    assert_eq!(
        take(T + 59_999),
        Some(T + 59_999),
        "the last ms of the lease"
    );
    assert_eq!(logged(&s, "k"), [T + 60_000; 5]);
    now.store(T + 60_000, Ordering::Relaxed);
    let Take::Wait(w) = m.try_take(b"k", &l, Some(T + 60_000)).unwrap() else {
        panic!("its end: a new lease is asked for");
    };
    assert!(w.wait().await.unwrap(), "granted");
    // The first lease's 3 unused went back; the new one is logged at its own end.
    let mut expect = vec![T + 60_000; 2];
    expect.extend([T + 120_000; 5]);
    assert_eq!(logged(&s, "k"), expect);
    assert_eq!(m.close_all().await.unwrap(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_limits_for_a_key_make_a_new_object() {
    let s = Server::start();
    let m = map(&s, always(3, 60_000));
    leased(&m, b"k").await;
    let other: [Limit; 1] = [limit(60, 50)];
    let r = m.allow(b"k", &other).await.unwrap();
    assert_eq!(r.source, Source::Memory);
    // The first object was closed: its 2 unused permits went back.
    eventually("the old object's permits back", || {
        counted(&s, "k", 60) == 4
    })
    .await;
    let stats = m.stats();
    assert_eq!((stats.keys, stats.created), (1, 2));
    // A lease larger than a max is refused when the key's object is made.
    assert!(m.try_take(b"tiny", &[limit(60, 2)], None).is_err());
}
