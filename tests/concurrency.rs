//! Concurrency: many clients on one key never get more than `max` admitted, and the command behaves
//! the same (and replicates the same) inside MULTI/EXEC and Lua scripts as on its own.

use testkit::client;
use testkit::harness;
use testkit::rng;

use client::{STORAGES, five, ok, scores, sw5_with};
use harness::{Server, call, start_replica, wait_in_sync};
use redis::Value;
use rng::Rng;
use std::thread;

const THREADS: usize = 10;
const W: i64 = 3_600_000;
const NOW: u64 = 1_700_000_000_000;

/// One call a thread made and what came back.
struct Seen {
    peek: bool,
    cost: u64,
    reply: [i64; 5],
}

/// Starts a server on `storage` and runs `plan`'s calls on `THREADS` connections at once, thread
/// `t` planned with the generator seeded `seed + t`; returns the server and every reply.
fn hammer(
    storage: &str,
    seed: u64,
    max: u64,
    plan: impl Fn(&mut Rng) -> Vec<(bool, u64)> + Sync,
) -> (Server, Vec<Seen>) {
    let s = Server::builder().storage(storage).start();
    let seen = thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let calls = plan(&mut Rng::new(seed + t as u64));
                let mut con = s.client();
                scope.spawn(move || {
                    calls
                        .into_iter()
                        .map(|(peek, cost)| {
                            let cmd = if peek { "PEEK" } else { "ALLOW" };
                            let reply = sw5_with(&mut con, cmd, "hot", 3600, max, NOW, cost);
                            Seen { peek, cost, reply }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client thread panicked"))
            .collect()
    });
    (s, seen)
}

#[test]
fn many_clients_same_now_admit_exactly_max() {
    for storage in STORAGES {
        let max = 400u64;
        // 10 x 150 calls, a fifth of them PEEKs: far more than max ALLOWs.
        let (s, seen) = hammer(storage, 100, max, |rng| {
            (0..150).map(|_| (rng.chance(20), 1)).collect()
        });
        let m = max as i64;
        let mut admitted_counts = Vec::new();
        for x in &seen {
            let [allowed, count, ..] = x.reply;
            let want = if allowed == 1 {
                [1, count, m - count, if count == m { W } else { 0 }, W]
            } else {
                [0, m, 0, W, W]
            };
            assert_eq!(x.reply, want, "peek={} reply inconsistent", x.peek);
            assert!((1..=m).contains(&count), "count {count} out of 1..={m}");
            if allowed == 1 && !x.peek {
                admitted_counts.push(count);
            }
        }
        admitted_counts.sort_unstable();
        // Each admission saw a distinct count: no two clients were admitted into the same slot.
        assert_eq!(admitted_counts, (1..=m).collect::<Vec<_>>());
        assert_eq!(scores(&mut s.client(), "hot").len() as u64, max);
    }
}

#[test]
fn many_clients_mixed_costs_fill_exactly_max_never_more() {
    for storage in STORAGES {
        let max = 1000u64;
        // Random costs first, then cost 1: 10 x 150 cost-1 calls exceed max, so the key ends full.
        let (s, seen) = hammer(storage, 200, max, |rng| {
            let mut calls: Vec<(bool, u64)> = (0..40)
                .map(|_| (rng.chance(10), rng.pick(&[1, 2, 3, 5, 8])))
                .collect();
            calls.extend((0..150).map(|_| (false, 1)));
            calls
        });
        let m = max as i64;
        let mut intervals = Vec::new();
        for x in &seen {
            let [allowed, count, remaining, ..] = x.reply;
            let cost = x.cost as i64;
            assert_eq!(remaining, (m - count).max(0), "{:?}", x.reply);
            if allowed == 1 {
                assert!(count <= m, "admitted past max: {:?}", x.reply);
                if !x.peek {
                    intervals.push((count - cost + 1, count));
                }
            } else {
                assert!(
                    count + cost > m,
                    "rejected although it fit: cost {cost}, {:?}",
                    x.reply
                );
            }
        }
        // The admitted calls' slots [count-cost+1, count] tile 1..=max: no gap, no overlap.
        intervals.sort_unstable();
        let mut next = 1;
        for (lo, hi) in &intervals {
            assert_eq!(
                *lo, next,
                "admitted slots overlap or leave a gap: {intervals:?}"
            );
            next = hi + 1;
        }
        assert_eq!(next, m + 1, "the key did not end exactly full");
        assert_eq!(scores(&mut s.client(), "hot").len() as u64, max);
    }
}

/// A sequence of calls over `$K` (a sorted set) and `$S` (a string): admissions, rejections,
/// trims, a whole-window expiry, errors, and finally the server clock.
const CALLS: &[&str] = &[
    "SLIDINGWINDOW.ALLOW $K 10 3 1000",
    "SLIDINGWINDOW.ALLOW $K 10 3 1000 COST 2",
    "SLIDINGWINDOW.PEEK $K 10 3 1000",
    "SLIDINGWINDOW.ALLOW $K 10 3 1500",
    "SLIDINGWINDOW.PEEK $K 10 3 11000",
    "SLIDINGWINDOW.ALLOW $K 10 3 11000 COST 2",
    "SLIDINGWINDOW.ALLOW $K 10 3 11500",
    "SLIDINGWINDOW.ALLOW $K 10 3 11600",
    "SLIDINGWINDOW.ALLOW $K 10 3 21000 COST 4",
    "SLIDINGWINDOW.ALLOW $K 10 3 25000",
    "SLIDINGWINDOW.ALLOW $K 10 3 40000 COST 4",
    "SLIDINGWINDOW.ALLOW $K x 3 1000",
    "SLIDINGWINDOW.PEEK $K 10 3 1000 COST",
    "SLIDINGWINDOW.ALLOW $K 10 3 1000 FOO 1",
    "SLIDINGWINDOW.ALLOW $S 10 3 1000",
    "SLIDINGWINDOW.PEEK $S 10 3 1000",
    "SLIDINGWINDOW.ALLOW $K 10 3 50000",
    "SLIDINGWINDOW.PEEK $K 60 3 *",
    "SLIDINGWINDOW.ALLOW $K 60 3 * COST 3",
];

fn line(template: &str, k: &str, s: &str) -> Vec<String> {
    template
        .split(' ')
        .map(|w| match w {
            "$K" => k.to_string(),
            "$S" => s.to_string(),
            other => other.to_string(),
        })
        .collect()
}

/// Runs each call in `CALLS` through Lua: `pcall` passes errors through as the reply.
const LUA_BATCH: &str = r"
local out = {}
for i, line in ipairs(ARGV) do
  local a = {}
  for w in string.gmatch(line, '%S+') do
    if w == '$K' then w = KEYS[1] elseif w == '$S' then w = KEYS[2] end
    a[#a + 1] = w
  end
  out[i] = redis.pcall(unpack(a))
end
return out
";

#[test]
fn multi_exec_and_lua_reply_like_plain_calls_and_replicate() {
    for storage in STORAGES {
        let master = Server::builder().storage(storage).start();
        let replica = start_replica(&master, &[]);
        let mut con = master.client();
        for mode in ["plain", "multi", "lua-each", "lua-batch"] {
            ok(&mut con, &["SET", &format!("{mode}:s"), "text"]);
        }

        let keys = |mode: &str| (format!("{mode}:k"), format!("{mode}:s"));
        let (k, s) = keys("plain");
        let plain: Vec<Value> = CALLS
            .iter()
            .map(|c| {
                let l = line(c, &k, &s);
                call(&mut con, &l.iter().map(String::as_str).collect::<Vec<_>>())
            })
            .collect();
        // Sanity: the sequence really admits, rejects and errs.
        assert_eq!(five(&plain[0]), Some([1, 1, 2, 0, 10_000]));
        assert_eq!(five(&plain[3]), Some([0, 3, 0, 9500, 9500]));
        assert_eq!(five(&plain[10]), Some([0, 0, 3, -1, 0]));
        assert!(
            matches!(plain[14], Value::ServerError(_)),
            "{:?}",
            plain[14]
        );

        let (k, s) = keys("multi");
        let mut cmds: Vec<Vec<String>> = vec![vec!["MULTI".into()]];
        cmds.extend(CALLS.iter().map(|c| line(c, &k, &s)));
        cmds.push(vec!["EXEC".into()]);
        let replies = client::pipeline(&mut con, &cmds);
        for queued in &replies[1..replies.len() - 1] {
            assert_eq!(*queued, Value::SimpleString("QUEUED".into()));
        }
        let Some(Value::Array(multi)) = replies.last() else {
            panic!("EXEC answered {:?}", replies.last());
        };
        assert_eq!(multi, &plain, "MULTI/EXEC replies differ from plain calls");

        // Like any Redis command, a wrong arity is refused while queueing, and EXEC then aborts.
        let refused = client::pipeline(
            &mut con,
            &[
                vec!["MULTI".into()],
                vec!["SLIDINGWINDOW.ALLOW".into(), k.clone()],
                vec!["EXEC".into()],
            ],
        );
        assert!(
            matches!(&refused[1], Value::ServerError(e) if e.details().unwrap_or_default().contains("wrong number of arguments")),
            "{refused:?}"
        );
        assert!(
            matches!(&refused[2], Value::ServerError(e) if e.code() == "EXECABORT"),
            "{refused:?}"
        );

        let (k, s) = keys("lua-each");
        let each: Vec<Value> = CALLS
            .iter()
            .map(|c| call(&mut con, &["EVAL", LUA_BATCH, "2", &k, &s, c]))
            .map(|v| match v {
                Value::Array(mut one) if one.len() == 1 => one.remove(0),
                other => panic!("EVAL answered {other:?}"),
            })
            .collect();
        assert_eq!(
            each, plain,
            "one EVAL per call: replies differ from plain calls"
        );

        let (k, s) = keys("lua-batch");
        let mut args = vec!["EVAL", LUA_BATCH, "2", &k, &s];
        args.extend(CALLS.iter().copied());
        let batch = match call(&mut con, &args) {
            Value::Array(v) => v,
            other => panic!("EVAL answered {other:?}"),
        };
        assert_eq!(
            batch, plain,
            "all calls in one EVAL: replies differ from plain calls"
        );

        wait_in_sync(&master, &replica);
        assert_eq!(
            master.digest(),
            replica.digest(),
            "replica differs after MULTI and Lua"
        );
        let mut rcon = replica.client();
        for mode in ["plain", "multi", "lua-each", "lua-batch"] {
            let key = format!("{mode}:k");
            let got = scores(&mut rcon, &key);
            // The last call trimmed everything and added 3 members at the server's clock.
            assert_eq!(got.len(), 3, "{key} on the replica: {got:?}");
            assert!(
                got.iter().all(|&t| t == got[0] && t > NOW),
                "{key}: {got:?}"
            );
            assert_eq!(
                got,
                scores(&mut con, &key),
                "{key}: replica and master differ"
            );
        }
    }
}
