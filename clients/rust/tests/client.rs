//! The client against a real redis-server with the module (the workspace's harness: free loopback
//! ports, `--loadmodule`), on both storages: every command's typed reply, error replies kept as
//! their text, requests refused before sending, batches, a restarted server, a cluster.

use testkit::cluster;
use testkit::harness;
mod support;

use harness::{Server, call, error_line};
use slidingwindow_client::{
    Answer, Backend, Batch, Call, Check, CheckAll, Client, Detail, Error, Keyed, Lease,
    LeaseConfig, LimitState, Now, Options, Refund, Reply, RetryAfter, Topology,
};
use support::{client, limit, logged, stat};

const T: u64 = 1_700_000_000_000;

fn reply(allowed: bool, count: u64, remaining: u64, retry: u64, reset: u64, limit: usize) -> Reply {
    Reply {
        allowed,
        count,
        remaining,
        retry_after: RetryAfter::Ms(retry),
        reset_after_ms: reset,
        limit,
        detail: None,
    }
}

async fn every_command(storage: &str) {
    let s = Server::builder().storage(storage).start();
    let c = client(&s);
    let three = [limit(10, 3)];
    let at = |t| Check::new(b"a", &three).now(Now::Ms(t));
    assert_eq!(
        c.allow(&at(T)).await.unwrap(),
        reply(true, 1, 2, 0, 10_000, 0)
    );
    c.allow(&at(T + 1)).await.unwrap();
    assert_eq!(
        c.allow(&at(T + 2)).await.unwrap(),
        reply(true, 3, 0, 9998, 10_000, 0)
    );
    let refused = reply(false, 3, 0, 9997, 9999, 0);
    assert_eq!(c.peek(&at(T + 3)).await.unwrap(), refused);
    assert_eq!(c.allow(&at(T + 3)).await.unwrap(), refused);
    // A cost above max never fits.
    let never = c.peek(&at(T + 3).cost(4)).await.unwrap();
    assert_eq!(never.retry_after, RetryAfter::Never);

    // Two limits, COST and DETAIL: the binding one is the one with the least room.
    let two = [limit(1, 5), limit(10, 3)];
    let b = Check::new(b"b", &two).now(Now::Ms(T)).cost(2).detail(true);
    let peeked = c.peek(&b).await.unwrap();
    let got = c.allow(&b).await.unwrap();
    assert_eq!(peeked, got, "PEEK answers what ALLOW does");
    assert_eq!(
        got,
        Reply {
            detail: Some(Detail {
                limits: vec![
                    LimitState {
                        count: 2,
                        remaining: 3,
                        retry_after: RetryAfter::Ms(0),
                        reset_after_ms: 1000
                    },
                    LimitState {
                        count: 2,
                        remaining: 1,
                        retry_after: RetryAfter::Ms(10_000),
                        reset_after_ms: 10_000
                    },
                ],
                now_ms: T,
            }),
            ..reply(true, 2, 1, 10_000, 10_000, 1)
        }
    );
    // `*` with DETAIL: the server's clock.
    let before = slidingwindow_client::unix_ms();
    let star = c.peek(&Check::new(b"b", &two).detail(true)).await.unwrap();
    let now_ms = star.detail.map(|d| d.now_ms).unwrap_or(0);
    assert!(now_ms + 1000 >= before, "{now_ms} {before}");

    // LEASE: the permits are logged at now + ms; the reset includes ms.
    let five = [limit(10, 5)];
    let lease = Check::new(b"c", &five).now(Now::Ms(T)).cost(3).lease(500);
    assert_eq!(
        c.allow(&lease).await.unwrap(),
        reply(true, 3, 2, 10_500, 10_500, 0)
    );
    assert_eq!(logged(&s, "c"), [T + 500; 3]);

    // ALLOWALL and PEEKALL: the binding index counts the limits in key order.
    let user = [limit(1, 2)];
    let tenant = [limit(60, 3)];
    let keys = [Keyed::new(b"{t}:u", &user), Keyed::new(b"{t}", &tenant)];
    let all = CheckAll::new(&keys).now(Now::Ms(T));
    let peeked = c.peek_all(&all).await.unwrap();
    let got = c.allow_all(&all).await.unwrap();
    assert_eq!(peeked, got);
    assert_eq!(got, reply(true, 1, 1, 0, 1000, 0));
    c.allow_all(&all).await.unwrap();
    let full = c.allow_all(&all.now(Now::Ms(T + 10))).await.unwrap();
    assert_eq!(full, reply(false, 2, 0, 990, 990, 0));
    assert_eq!(all.locate(full.limit).map(|(k, _)| k), Some(0));
    let tenant_binds = c.allow_all(&all.now(Now::Ms(T + 1000))).await.unwrap();
    // The user's 1 s window has emptied; the tenant's minute now binds.
    assert_eq!(tenant_binds, reply(true, 3, 0, 59_000, 60_000, 1));
    // An ALLOWALL's charge back from every key, in one pipeline.
    let removed = c.refund_all(&["{t}:u", "{t}"], 1, Now::Ms(T + 1000)).await;
    assert_eq!(removed.unwrap(), 2);
    assert_eq!(
        (logged(&s, "{t}:u"), logged(&s, "{t}")),
        (vec![], vec![T, T])
    );

    // REFUND AT takes back the newest at or before it, never a later one.
    let at_t1 = Refund::new(b"a", 1).at(Now::Ms(T + 1));
    assert_eq!(c.refund(&at_t1).await.unwrap(), 1);
    assert_eq!(logged(&s, "a"), [T, T + 2]);
    assert_eq!(c.refund(&Refund::new(b"a", 5)).await.unwrap(), 2);
    assert_eq!(c.refund(&Refund::new(b"nothing", 1)).await.unwrap(), 0);
}

#[tokio::test]
async fn every_command_answers_typed_zset() {
    every_command("zset").await;
}

#[tokio::test]
async fn every_command_answers_typed_compact() {
    every_command("compact").await;
}

#[tokio::test]
async fn error_replies_are_kept_as_their_text() {
    let s = Server::start();
    let c = client(&s);
    let mut con = s.client();
    let _: () = redis::cmd("SET").arg("s").arg("x").query(&mut con).unwrap();
    let one = [limit(1, 10)];
    let text = |e: Error| match e {
        Error::Server(t) => t,
        other => panic!("expected an error reply, got {other:?}"),
    };
    let e = c.allow(&Check::new(b"s", &one)).await.unwrap_err();
    assert!(!e.may_have_run());
    let wrongtype = error_line(&call(
        &mut con,
        &["SLIDINGWINDOW.ALLOW", "s", "1", "10", "*"],
    ));
    assert_eq!(Some(text(e)), wrongtype);
    assert!(wrongtype.is_some_and(|t| t.starts_with("WRONGTYPE ")));
    // Checked by the server only: its cap on the members one call adds.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slidingwindow.max-members-per-call")
        .arg(5)
        .query(&mut con)
        .unwrap();
    let e = c
        .allow(&Check::new(b"k", &[limit(1, 100)]).cost(6))
        .await
        .unwrap_err();
    let raw = call(
        &mut con,
        &["SLIDINGWINDOW.ALLOW", "k", "1", "100", "*", "COST", "6"],
    );
    assert_eq!(Some(text(e)), error_line(&raw));
    let e = c.refund(&Refund::new(b"s", 1)).await.unwrap_err();
    assert!(text(e).starts_with("WRONGTYPE"));

    // Any command, raw.
    let pong = c.command(&redis::cmd("PING"), b"k").await.unwrap();
    assert_eq!(pong, redis::Value::SimpleString("PONG".into()));
    let e = c
        .command(redis::cmd("LPUSH").arg("s").arg(1), b"s")
        .await
        .unwrap_err();
    assert!(text(e).starts_with("WRONGTYPE"));

    // The module forced on a server without it: a configuration error naming the reply (tests/
    // backend.rs: the script path).
    let plain = Server::builder().without_module().start();
    let options = Options::from_urls(&[plain.url()], false).unwrap();
    let e = Client::new(&options.backend(Backend::Module))
        .unwrap()
        .allow(&Check::new(b"k", &one))
        .await
        .unwrap_err();
    assert!(!e.may_have_run());
    match e {
        Error::Config(why) => assert!(why.contains("ERR unknown command"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn what_the_contract_refuses_is_never_sent() {
    let s = Server::start();
    let c = client(&s);
    let one = [limit(1, 10)];
    let bad = [
        c.allow(&Check::new(b"k", &[])).await,
        c.allow(&Check::new(b"k", &one).cost(0)).await,
        c.allow(&Check::new(b"k", &one).lease(0)).await,
        c.peek(&Check::new(b"k", &one).now(Now::Ms(1 << 54))).await,
        c.allow_all(&CheckAll::new(&[])).await,
        c.allow_all(&CheckAll::new(&[
            Keyed::new(b"k", &one),
            Keyed::new(b"k", &one),
        ]))
        .await,
    ];
    for r in bad {
        assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    }
    assert!(matches!(
        c.refund(&Refund::new(b"k", 0)).await,
        Err(Error::Invalid(_))
    ));
    assert_eq!(stat(&s, "allow_calls") + stat(&s, "peek_calls"), 0);
    assert_eq!(stat(&s, "refund_calls"), 0);
    assert_eq!(stat(&s, "errors"), 0);
}

#[tokio::test]
async fn batches_answer_each_call_in_order() {
    let s = Server::start();
    let c = client(&s);
    let mut con = s.client();
    let _: () = redis::cmd("SET")
        .arg("{t}:s")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let one = [limit(60, 2)];
    let keys = [Keyed::new(b"{t}:a", &one), Keyed::new(b"{t}:b", &one)];
    for mut batch in [Batch::transaction(), Batch::pipeline()] {
        let _: () = redis::cmd("DEL")
            .arg("{t}:a")
            .arg("{t}:b")
            .query(&mut con)
            .unwrap();
        batch
            .call(Call::allow_all(&CheckAll::new(&keys).now(Now::Ms(T))).unwrap())
            .call(Call::allow(&Check::new(b"{t}:a", &one).now(Now::Ms(T + 1))).unwrap())
            .call(Call::allow(&Check::new(b"{t}:s", &one)).unwrap());
        batch
            .refund(&Refund::new(b"{t}:b", 1).at(Now::Ms(T)))
            .unwrap()
            .call(Call::peek(&Check::new(b"{t}:a", &one).now(Now::Ms(T + 2))).unwrap());
        assert_eq!(batch.len(), 5);
        let mut answers = c.exec(&batch).await.unwrap().into_iter();
        let mut next = || answers.next().expect("one answer per call");
        assert_eq!(
            next().unwrap(),
            Answer::Reply(reply(true, 1, 1, 0, 60_000, 0))
        );
        assert_eq!(
            next().unwrap().reply().unwrap(),
            reply(true, 2, 0, 59_999, 60_000, 0)
        );
        assert!(matches!(next(), Err(Error::Server(t)) if t.starts_with("WRONGTYPE")));
        assert_eq!(next().unwrap().removed().unwrap(), 1);
        assert!(!next().unwrap().reply().unwrap().allowed);
        assert_eq!(logged(&s, "{t}:a"), [T, T + 1]);
        assert_eq!(logged(&s, "{t}:b"), Vec::<u64>::new());
    }
    assert!(c.exec(&Batch::transaction()).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_restarted_server_is_used_at_once() {
    let mut s = Server::start();
    let c = client(&s);
    let one = [limit(60, 10)];
    let check = Check::new(b"k", &one);
    assert_eq!(c.allow(&check).await.unwrap().remaining, 9);
    s.kill9();
    let down = c.allow(&check).await.unwrap_err();
    assert!(matches!(down, Error::Redis(_)), "{down:?}");
    s.restart();
    // The first call after the restart is served (the restarted server has no data).
    assert_eq!(c.allow(&check).await.unwrap().remaining, 9);
    // The same when no call came while it was away: the old link is found closed.
    s.restart();
    assert_eq!(c.allow(&check).await.unwrap().remaining, 9);
}

fn errorstat(node: &Server, code: &str) -> u64 {
    node.info_field("errorstats", &format!("errorstat_{code}"))
        .and_then(|v| v.strip_prefix("count=")?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_routes_every_call_to_its_slot() {
    routes_every_call(cluster::Cluster::start("zset"), "slidingwindow.allowall").await;
}

/// The same on a cluster without the module: the script, loaded on each master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_module_runs_the_script_on_every_master() {
    routes_every_call(cluster::Cluster::start_without_module(), "evalsha").await;
}

/// `ran`: the command every master runs (the module's ALLOWALL, or the script's EVALSHA).
async fn routes_every_call(cl: cluster::Cluster, ran: &str) {
    let seeds: Vec<String> = cl.nodes.iter().map(Server::url).collect();
    let options = Options::from_urls(&seeds, true).unwrap();
    assert!(matches!(options.topology, Topology::Cluster(_)));
    let c = Client::new(&options).unwrap();
    assert!(c.is_cluster());
    let user = [limit(60, 2)];
    let tenant = [limit(60, 100)];
    // Tenants spread over the three masters; each call goes straight to its slot's master
    // (the cluster client's own routing would read ALLOWALL's numkeys as its key).
    let tenants: Vec<String> = (0..12).map(|i| format!("tenant{i}")).collect();
    for t in &tenants {
        let (u, k) = (format!("{{{t}}}:u"), format!("{{{t}}}"));
        let keys = [
            Keyed::new(u.as_bytes(), &user),
            Keyed::new(k.as_bytes(), &tenant),
        ];
        let all = CheckAll::new(&keys);
        assert!(c.peek_all(&all).await.unwrap().allowed);
        assert!(c.allow_all(&all).await.unwrap().allowed);
        assert_eq!(
            c.allow(&Check::new(u.as_bytes(), &user))
                .await
                .unwrap()
                .remaining,
            0
        );
        assert_eq!(c.refund(&Refund::new(k.as_bytes(), 1)).await.unwrap(), 1);
        let mut batch = Batch::transaction();
        batch
            .call(Call::allow_all(&all).unwrap())
            .refund(&Refund::new(u.as_bytes(), 2))
            .unwrap();
        let answers = c.exec(&batch).await.unwrap();
        assert!(!answers[0].clone().unwrap().reply().unwrap().allowed);
        assert_eq!(answers[1].clone().unwrap().removed().unwrap(), 2);
    }
    let masters = cl.masters();
    let spread: std::collections::BTreeSet<usize> = tenants
        .iter()
        .map(|t| cl.master_of_slot(cl.keyslot(&format!("{{{t}}}"))))
        .collect();
    assert_eq!(
        spread.len(),
        masters.len(),
        "the tenants cover every master"
    );
    for &m in &masters {
        assert_eq!(
            errorstat(&cl.nodes[m], "MOVED"),
            0,
            "node {m} redirected a call"
        );
        assert!(cluster::calls_of(&cl.nodes[m], ran) > 0, "node {m}: {ran}");
    }
    // Keys in different slots: the server's own error, as its text.
    let keys = [Keyed::new(b"{a}", &user), Keyed::new(b"{b}", &user)];
    match c.allow_all(&CheckAll::new(&keys)).await {
        Err(Error::Server(t)) => assert!(t.starts_with("CROSSSLOT"), "{t}"),
        other => panic!("expected CROSSSLOT, got {other:?}"),
    }
    // A lease on a cluster key.
    let lease = Lease::new(c.clone(), b"{hot}", &tenant, LeaseConfig::new(5, 60_000)).unwrap();
    for _ in 0..7 {
        assert!(lease.allow().await.unwrap().reply.allowed);
    }
    assert_eq!(lease.close().await.unwrap(), 3);
    let owner = &cl.nodes[cl.master_of_slot(cl.keyslot("{hot}"))];
    let members: u64 = redis::cmd("ZCARD")
        .arg("{hot}")
        .query(&mut owner.client())
        .unwrap();
    assert_eq!(members, 7);
    assert_eq!(lease.stats().lease_calls, 2);
}

/// `top` on one node, then on a cluster: every master asked, the keys of each listed once, in
/// TOP's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_lists_the_keys_refused_most_on_every_master() {
    let one = [limit(60, 1)];
    async fn refuse(c: &Client, key: &str, one: &[slidingwindow_client::Limit], n: usize) {
        let check = Check::new(key.as_bytes(), one).now(Now::Ms(T));
        assert!(c.allow(&check).await.unwrap().allowed, "{key}");
        for _ in 0..n {
            assert!(!c.allow(&check).await.unwrap().allowed, "{key}");
        }
    }
    let entry = |key: &str, refused| slidingwindow_client::TopEntry {
        key: key.as_bytes().to_vec(),
        refused,
        error: 0,
    };
    let s = Server::start();
    let c = client(&s);
    refuse(&c, "a", &one, 2).await;
    refuse(&c, "b", &one, 3).await;
    assert_eq!(c.top(10).await.unwrap(), vec![entry("b", 3), entry("a", 2)]);
    assert_eq!(c.top(1).await.unwrap(), vec![entry("b", 3)]);
    assert!(matches!(c.top(0).await, Err(Error::Invalid(_))));
    assert!(matches!(c.top(5000).await, Err(Error::Server(_))));

    let cl = cluster::Cluster::start("zset");
    let seeds: Vec<String> = cl.nodes.iter().map(Server::url).collect();
    let c = Client::new(&Options::from_urls(&seeds, true).unwrap()).unwrap();
    let keys: Vec<String> = (0..12).map(|i| format!("top:{{user:{i}}}")).collect();
    for (i, key) in keys.iter().enumerate() {
        refuse(&c, key, &one, i + 1).await;
    }
    let listing = cl
        .masters()
        .iter()
        .filter(|&&m| {
            call(&mut cl.nodes[m].client(), &["SLIDINGWINDOW.TOP"]) != redis::Value::Array(vec![])
        })
        .count();
    assert!(listing > 1, "the refused keys are on {listing} master(s)");
    let want: Vec<_> = (0..12)
        .rev()
        .map(|i| entry(&keys[i], i as u64 + 1))
        .collect();
    assert_eq!(c.top(12).await.unwrap(), want);
}
