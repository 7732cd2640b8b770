//! `acquire` / `release` and `reserve` / `settle` / `cancel` against a real server's clock: N+1
//! holders see one refusal, a dead holder's slot comes back after the hold, a settlement refunds,
//! charges or reports an overrun.

use testkit::harness;
mod support;

use harness::Server;
use slidingwindow_client::{Check, Client, Error, Settlement};
use std::time::{Duration, Instant};
use support::{client, limit};

/// Members a one-hour PEEK counts on `key`.
async fn held(c: &Client, key: &[u8]) -> u64 {
    let hour = [limit(3600, 1_000_000)];
    c.peek(&Check::new(key, &hour)).await.unwrap().count - 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_plus_one_holders_see_one_refusal_and_a_dead_holders_slot_comes_back() {
    let s = Server::start();
    let c = client(&s);
    let slots: Vec<_> = acquire_at_once(&c, b"k", 6).await;
    assert_eq!(slots.iter().filter(|s| s.allowed()).count(), 5);
    assert_eq!(held(&c, b"k").await, 5);
    let mut released = 0;
    for slot in &slots {
        if c.release(slot).await.unwrap() {
            released += 1;
        }
        assert!(!c.release(slot).await.unwrap(), "released twice");
    }
    assert_eq!((released, held(&c, b"k").await), (5, 0));

    let dead = c.acquire(b"d", 1, 1).await.unwrap();
    assert!(dead.allowed());
    assert!(!c.acquire(b"d", 1, 1).await.unwrap().allowed());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let slot = c.acquire(b"d", 1, 1).await.unwrap();
        if slot.allowed() {
            assert!(c.release(&slot).await.unwrap());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dead holder's slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its late release takes nothing: the acquire after the hold trimmed its member.
    assert!(!c.release(&dead).await.unwrap());
}

/// `n` concurrent acquires of one slot among 5 on `key`.
async fn acquire_at_once(
    c: &Client,
    key: &'static [u8],
    n: usize,
) -> Vec<slidingwindow_client::Slot> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.acquire(key, 5, 60).await.unwrap() })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_then_settle_or_cancel() {
    let s = Server::start();
    let c = client(&s);
    let limits = [limit(60, 100)];
    for (n, used, want, after) in [
        (
            10,
            3,
            Settlement {
                refunded: 7,
                ..Default::default()
            },
            3,
        ),
        (
            10,
            15,
            Settlement {
                charged: 5,
                ..Default::default()
            },
            18,
        ),
        (
            70,
            90,
            Settlement {
                overrun: 20,
                ..Default::default()
            },
            88,
        ),
    ] {
        let r = c.reserve(b"r", &limits, n).await.unwrap();
        assert!(r.allowed());
        assert_eq!(c.settle(&r, used).await.unwrap(), want);
        assert!(matches!(c.settle(&r, used).await, Err(Error::Invalid(_))));
        assert_eq!(held(&c, b"r").await, after);
    }
    let r = c.reserve(b"r", &[limit(60, 1000)], 50).await.unwrap();
    assert_eq!(c.cancel(&r).await.unwrap(), 50);
    assert_eq!(held(&c, b"r").await, 88);
    let refused = c.reserve(b"r", &limits, 20).await.unwrap();
    assert!(!refused.allowed());
    assert!(matches!(
        c.settle(&refused, 0).await,
        Err(Error::Invalid(_))
    ));
}
