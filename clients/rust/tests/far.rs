//! The lease object with its server far away (issue 40): a real redis-server with the module
//! behind a relay that holds each chunk 40 ms each way (a round trip of 80 ms or more, over a
//! quarter of the lease), leases of 50 for 100 ms on the server's clock with this host's clock
//! taken as the server's (`synced_within(Some(0))`: the same host), one limit of 1,000 a second,
//! callers at a steady rate for 2 s. Under the limit every request is admitted, nearly all from
//! memory, and some lease is sized below 50 (only the far mode sizes leases to the callers'
//! rate); over it no 1 s span of the callers' clock holds more than 1,000 admitted, and some are
//! refused. Either way no permit is handed out after its lease's end and every unused permit
//! goes back.

use testkit::harness;
mod support;

use harness::Server;
use slidingwindow_client::{Lease, LeaseConfig, LeaseReply, Source, Stats, unix_ms};
use std::time::Duration;
use support::{client_at, limit, logged, most_in_window, stat};
use testkit::relay;
use tokio::task::JoinSet;
use tokio::time::Instant;

const SIZE: u64 = 50;
const LEASE_MS: u64 = 100;
const MAX: u64 = 1000;
const WINDOW_MS: u64 = 1000;
const ONE_WAY: Duration = Duration::from_millis(40);
/// Each caller's pace: 25 requests a second.
const PERIOD: Duration = Duration::from_millis(40);
const RUN: Duration = Duration::from_secs(2);

/// One answer and this host's clock read just before its call.
struct Answer {
    before_ms: u64,
    reply: LeaseReply,
}

/// What a run left: the answers, the lease's counters after close, and the server's.
struct Run {
    answers: Vec<Answer>,
    stats: Stats,
    server: Server,
}

impl Run {
    fn admitted(&self) -> impl Iterator<Item = &Answer> {
        self.answers.iter().filter(|a| a.reply.reply.allowed)
    }

    fn refused(&self) -> usize {
        self.answers.len() - self.admitted().count()
    }
}

/// `rate` requests a second for [`RUN`] on key `k`, from `rate / 25` tasks of 25 a second each,
/// their starts spread over one [`PERIOD`]; a task behind its schedule calls again at once.
/// Then the lease is closed (its unused permits back) and the checks every run passes are made.
async fn offer(rate: u64) -> Run {
    let server = Server::start();
    let far = relay::start(
        format!("127.0.0.1:{}", server.port()).parse().unwrap(),
        ONE_WAY,
    );
    let cfg = LeaseConfig::new(SIZE, LEASE_MS).synced_within(Some(0));
    let lease = Lease::new(
        client_at(&far.redis_url()),
        b"k",
        &[limit(WINDOW_MS / 1000, MAX)],
        cfg,
    )
    .unwrap();
    let tasks = rate * PERIOD.as_millis() as u64 / 1000;
    let each = (RUN.as_millis() / PERIOD.as_millis()) as u32;
    let start = Instant::now();
    let mut callers = JoinSet::new();
    for i in 0..tasks {
        let lease = lease.clone();
        let offset = PERIOD * i as u32 / tasks as u32;
        callers.spawn(async move {
            let mut answers = Vec::new();
            for k in 0..each {
                tokio::time::sleep_until(start + offset + PERIOD * k).await;
                let before_ms = unix_ms();
                let reply = lease.allow().await.expect("a permit or a refusal");
                answers.push(Answer { before_ms, reply });
            }
            answers
        });
    }
    let mut answers = Vec::new();
    while let Some(done) = callers.join_next().await {
        answers.extend(done.unwrap());
    }
    lease.close().await.unwrap();
    let run = Run {
        answers,
        stats: lease.stats(),
        server,
    };
    eprintln!(
        "{rate}/s: {} answered, {} admitted: {:?}",
        run.answers.len(),
        run.admitted().count(),
        run.stats
    );
    check(&run);
    run
}

/// What holds at any rate.
fn check(run: &Run) {
    let stats = run.stats;
    let admitted: Vec<&Answer> = run.admitted().collect();
    assert_eq!(stats.errors, 0, "{stats:?}");
    assert_eq!(
        admitted.len() as u64,
        stats.from_memory + stats.exact_admitted,
        "{stats:?}"
    );
    for a in &admitted {
        let charge = a
            .reply
            .charge
            .as_ref()
            .expect("an admitted request's charge");
        if a.reply.source == Source::Memory {
            // A lease's permits are logged at its end (no PRECISION): none is handed out after
            // it, on this host's clock (the contract's `t <= now + ms`) or in its `at_ms`.
            let end = charge.logged_at();
            assert!(
                a.before_ms <= end,
                "a permit handed out at {} or later, after its lease's end {end}",
                a.before_ms
            );
            assert!(
                a.reply.at_ms < end,
                "at_ms {} of a lease ending {end}",
                a.reply.at_ms
            );
        }
    }
    for a in run.answers.iter().filter(|a| !a.reply.reply.allowed) {
        assert!(a.reply.charge.is_none());
    }
    let times: Vec<u64> = admitted.iter().map(|a| a.reply.at_ms).collect();
    let most = most_in_window(&times, WINDOW_MS);
    assert!(
        most as u64 <= MAX,
        "{most} admitted within {WINDOW_MS} ms: {stats:?}"
    );
    // The server's log: every ALLOW it admitted is a granted lease or an admitted exact call,
    // and what it logged less what came back with REFUND is what the callers were handed.
    let s = &run.server;
    assert_eq!(
        stat(s, "admitted"),
        stats.leases_granted + stats.exact_admitted,
        "{stats:?}"
    );
    assert_eq!(stat(s, "refunded"), stats.refunded, "{stats:?}");
    assert_eq!(
        stat(s, "admitted_requests") - stat(s, "refunded"),
        admitted.len() as u64,
        "{stats:?}"
    );
    let scores = logged(s, "k");
    let most = most_in_window(&scores, WINDOW_MS);
    assert!(most as u64 <= MAX, "{most} logged within {WINDOW_MS} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_limit_every_request_is_admitted_mostly_from_memory() {
    let run = offer(300).await;
    let stats = run.stats;
    assert_eq!(run.refused(), 0, "the key has room: {stats:?}");
    assert_eq!(stats.leases_refused, 0, "{stats:?}");
    assert!(stats.from_memory > stats.exact_calls, "{stats:?}");
    assert!(
        stats.from_memory * 2 > run.answers.len() as u64,
        "most from memory: {stats:?}"
    );
    // Near, every lease asks for SIZE permits; far, a lease asks for what the callers take
    // while it is usable: fewer than SIZE at this rate.
    let leased = stat(&run.server, "admitted_requests") - stats.exact_admitted;
    assert!(
        leased < SIZE * stats.leases_granted,
        "{leased} permits in {} leases: none sized to the callers' rate: {stats:?}",
        stats.leases_granted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_limit_no_second_admits_more_than_the_max() {
    let run = offer(2000).await;
    let stats = run.stats;
    assert!(run.refused() > 0, "{stats:?}");
}
