//! Expiry (contract, "Expiry"): an admitted call sets each key's expiry to the later of its
//! current one and `Wmax + lateness + (t - now)` from the server's clock (`t` its members' score,
//! later than `now` with `LEASE` or `PRECISION`), so an exact call after a lease, or a short window
//! after a long one, never lets a key that still holds counted members expire early. On both
//! storages and in the helpers' Lua fallback; replicas and the AOF end with the master's expiry.

use testkit::client;
use testkit::harness;

use client::{Events, detailed, exists, pexpiretime, q};
use harness::{Server, call, error_line, ints, server_time_ms, start_replica, wait_in_sync};
use redis::{Connection, Value};
use std::time::Duration;

const CLIENT_LUA: &str = include_str!("../clients/lua/slidingwindow.lua");

/// Where a call goes: the module on either storage, or the helpers' script on a sorted set.
#[derive(Debug, Clone, Copy)]
enum Side {
    Zset,
    Compact,
    Script,
}

const SIDES: [Side; 3] = [Side::Zset, Side::Compact, Side::Script];

impl Side {
    /// `ALLOW k <args>`, which must admit, and the expiry it set: `ttl` after the server's clock
    /// during the call.
    fn admit_expiring(self, c: &mut Connection, args: &str, ttl: i64, what: &str) -> i64 {
        let t0 = server_time_ms(c);
        assert_eq!(self.ints(c, "ALLOW", "k", args)[0], 1, "{what}");
        let t1 = server_time_ms(c);
        let at = self.expiry(c, "k");
        within(at, t0, t1, ttl, what);
        at
    }

    /// This side's name for `key` (its own key: the sides never share one).
    fn key(self, key: &str) -> String {
        format!("{self:?}:{key}")
    }

    /// `SLIDINGWINDOW.<command> key rest...` on this side; the key is `self.key(key)`.
    fn call(self, c: &mut Connection, command: &str, key: &str, rest: &str) -> Value {
        let key = self.key(key);
        let rest: Vec<&str> = rest.split(' ').filter(|w| !w.is_empty()).collect();
        match self {
            Side::Zset | Side::Compact => {
                let storage = if matches!(self, Side::Zset) {
                    "zset"
                } else {
                    "compact"
                };
                client::ok(c, &["CONFIG", "SET", "slidingwindow.storage", storage]);
                let name = format!("SLIDINGWINDOW.{command}");
                let mut args = vec![name.as_str(), key.as_str()];
                args.extend(rest);
                call(c, &args)
            }
            Side::Script => {
                let word = command.to_lowercase();
                let mut args = vec!["EVAL", CLIENT_LUA, "1", key.as_str(), word.as_str()];
                args.push("0123456789ABCDEF");
                args.extend(rest);
                call(c, &args)
            }
        }
    }

    /// A call that must answer an array of integers.
    fn ints(self, c: &mut Connection, command: &str, key: &str, rest: &str) -> Vec<i64> {
        let v = self.call(c, command, key, rest);
        assert!(error_line(&v).is_none(), "{self:?} {command} {rest}: {v:?}");
        ints(&v)
    }

    fn expiry(self, c: &mut Connection, key: &str) -> i64 {
        pexpiretime(c, &self.key(key))
    }
}

/// The server-clock bounds of an expiry `ttl` ms after a call made between `before` and `after`.
fn within(at: i64, before: i64, after: i64, ttl: i64, what: &str) {
    assert!(
        before + ttl <= at && at <= after + ttl,
        "{what}: expires at {at}, not in [{}, {}]",
        before + ttl,
        after + ttl
    );
}

/// The reproduction: nine permits leased for 5 s, then an exact call fills the key. The
/// exact call leaves the lease's expiry (its end plus the window) where it was, and once the
/// exact call's own window has passed on the server's clock the key still holds the nine leased
/// permits, which still count.
#[test]
fn an_exact_call_after_a_lease_keeps_the_leased_permits_alive() {
    let s = Server::start();
    let mut c = s.client();
    let mut leased_until = Vec::new();
    let mut last_call = 0;
    for side in SIDES {
        let what = format!("{side:?}");
        let t0 = server_time_ms(&mut c);
        let r = side.ints(&mut c, "ALLOW", "k", "1 10 * COST 9 LEASE 5000");
        let t1 = server_time_ms(&mut c);
        assert_eq!(r, [1, 9, 1, 6000, 6000], "{what}: the lease");
        let at = side.expiry(&mut c, "k");
        within(at, t0, t1, 6000, &format!("{what}: the lease's expiry"));
        let r = side.ints(&mut c, "ALLOW", "k", "1 10 *");
        last_call = server_time_ms(&mut c);
        assert_eq!(r[..4], [1, 10, 0, 1000], "{what}: the exact call {r:?}");
        assert_eq!(
            side.expiry(&mut c, "k"),
            at,
            "{what}: the exact call moved the expiry"
        );
        leased_until.push(at);
    }
    // Past the exact call's own window (where the key used to expire): every key is alive and
    // its leased permits still count (9 + 1 fits, 9 + 2 > 10 is refused).
    harness::wait_until(Duration::from_secs(10), "a second of server clock", || {
        server_time_ms(&mut c) > last_call + 1000
    });
    for (side, at) in SIDES.into_iter().zip(leased_until) {
        let what = format!("{side:?}");
        assert!(exists(&mut c, &side.key("k")), "{what}: the key expired");
        assert_eq!(side.expiry(&mut c, "k"), at, "{what}");
        assert_eq!(
            side.ints(&mut c, "PEEK", "k", "1 10 *")[..3],
            [1, 10, 0],
            "{what}: the leased permits"
        );
        assert_eq!(
            side.ints(&mut c, "ALLOW", "k", "1 10 * COST 2")[..3],
            [0, 9, 1],
            "{what}: the leased permits"
        );
    }
}

/// A long window then a short one, a refusal, PEEK and REFUND: only a later expiry moves it; a
/// key without an expiry gets one; one set further by hand stays.
#[test]
fn only_a_later_expiry_moves_a_keys_expiry() {
    let s = Server::start();
    let mut c = s.client();
    for side in SIDES {
        let what = |step: &str| format!("{side:?}: {step}");
        let long = side.admit_expiring(&mut c, "60 5 1000", 60_000, &what("a 60 s window"));

        assert_eq!(side.ints(&mut c, "ALLOW", "k", "1 5 1001")[0], 1);
        assert_eq!(side.expiry(&mut c, "k"), long, "{}", what("a 1 s window"));
        let r = side.ints(&mut c, "ALLOW", "k", "1 5 1002 LIMIT 30 5");
        assert_eq!(r[0], 1);
        assert_eq!(side.expiry(&mut c, "k"), long, "{}", what("30 s"));
        // Lateness counts too: a day of it moves the expiry a day on.
        if !matches!(side, Side::Script) {
            client::config_set(&mut c, "slidingwindow.lateness", "86400000");
            side.admit_expiring(&mut c, "1 9 1003", 86_401_000, &what("lateness"));
            client::config_set(&mut c, "slidingwindow.lateness", "0");
            let set: i64 = q(&mut c, &["PEXPIREAT", &side.key("k"), &long.to_string()]);
            assert_eq!(set, 1, "{}", what("PEXPIREAT"));
        }

        let longer = side.admit_expiring(&mut c, "120 9 1004", 120_000, &what("a 120 s window"));

        // Refused (with and without a trim), PEEK, REFUND: the expiry stays.
        assert_eq!(side.ints(&mut c, "ALLOW", "k", "1 1 1005")[0], 0);
        assert_eq!(side.ints(&mut c, "ALLOW", "k", "1 1 2000")[0], 0);
        assert_eq!(side.ints(&mut c, "PEEK", "k", "120 9 2003")[0], 1);
        let v = side.call(&mut c, "REFUND", "k", "1");
        assert_eq!(v, Value::Int(1), "{}", what("REFUND"));
        assert_eq!(side.expiry(&mut c, "k"), longer, "{}", what("no admission"));

        // A key without an expiry gets one; an expiry set further by hand stays.
        let persisted: i64 = q(&mut c, &["PERSIST", &side.key("k")]);
        assert_eq!(persisted, 1, "{}", what("PERSIST"));
        let at = side.admit_expiring(&mut c, "1 99 2004", 1000, &what("no expiry"));
        // An hour after that expiry.
        let far = (at + 3_600_000).to_string();
        let set: i64 = q(&mut c, &["PEXPIREAT", &side.key("k"), &far]);
        assert_eq!(set, 1, "{}", what("PEXPIREAT far"));
        assert_eq!(side.ints(&mut c, "ALLOW", "k", "60 99 2005")[0], 1);
        assert_eq!(side.expiry(&mut c, "k").to_string(), far, "{}", what("far"));
    }
}

/// `PRECISION p` scores members at `t = ceil(now / p) * p`: on the server's clock (one reading
/// for `now` and the TTL) the key expires exactly at `t + W`, the reply's reset counts to it, an
/// exact call before then keeps it, and the member counts until its score leaves the window.
#[test]
fn precision_keeps_the_key_until_its_rounded_score_leaves() {
    let s = Server::start();
    let mut c = s.client();
    for side in SIDES {
        let what = format!("{side:?}");
        let d = detailed(&side.call(&mut c, "ALLOW", "p", "1 10 * PRECISION 60000 DETAIL"));
        let t = (d.now + 59_999) / 60_000 * 60_000;
        assert_eq!(d.head[..5], [1, 1, 9, 0, t + 1000 - d.now], "{what}");
        assert_eq!(side.expiry(&mut c, "p"), t + 1000, "{what}: the expiry");
        let exact = side.ints(&mut c, "ALLOW", "p", "1 10 *");
        assert_eq!(exact[..2], [1, 2], "{what}");
        if t > d.now + 1 {
            assert_eq!(side.expiry(&mut c, "p"), t + 1000, "{what}: kept");
        }

        // On the caller's clock: decided at now, scored at 2000, counted until 3000.
        let q = |c: &mut Connection, rest: &str| side.ints(c, "ALLOW", "q", rest);
        let t0 = server_time_ms(&mut c);
        assert_eq!(
            q(&mut c, "1 2 1001 PRECISION 1000 COST 2"),
            [1, 2, 0, 1999, 1999]
        );
        let t1 = server_time_ms(&mut c);
        within(side.expiry(&mut c, "q"), t0, t1, 1999, &what);
        assert_eq!(q(&mut c, "1 2 2999 COST 2"), [0, 2, 0, 1, 1], "{what}");
        assert_eq!(
            q(&mut c, "1 2 3000 COST 2"),
            [1, 2, 0, 1000, 1000],
            "{what}"
        );
    }
}

/// ALLOWALL extends each key's expiry on its own: a key whose longest window is short keeps the
/// longer expiry an earlier call gave it.
#[test]
fn allowall_extends_each_keys_expiry_on_its_own() {
    let s = Server::start();
    let mut c = s.client();
    for side in [Side::Zset, Side::Compact] {
        let (a, b) = (side.key("{t}a"), side.key("{t}b"));
        let allowall = |c: &mut Connection, rest: &str| {
            let line = format!("SLIDINGWINDOW.ALLOWALL 2 {a} {b} {rest}");
            let args: Vec<&str> = line.split(' ').collect();
            let r = call(c, &args);
            ints(&r)[0]
        };
        let t0 = server_time_ms(&mut c);
        assert_eq!(
            allowall(&mut c, "1000 LIMIT 1 60 9 LIMIT 2 1 9 LEASE 100"),
            1
        );
        let t1 = server_time_ms(&mut c);
        let (ea, eb) = (pexpiretime(&mut c, &a), pexpiretime(&mut c, &b));
        within(ea, t0, t1, 60_100, &format!("{side:?}: key a"));
        within(eb, t0, t1, 1_100, &format!("{side:?}: key b"));
        let t0 = server_time_ms(&mut c);
        assert_eq!(allowall(&mut c, "1001 LIMIT 1 1 9 LIMIT 2 30 9"), 1);
        let t1 = server_time_ms(&mut c);
        assert_eq!(pexpiretime(&mut c, &a), ea, "{side:?}: key a kept");
        within(
            pexpiretime(&mut c, &b),
            t0,
            t1,
            30_000,
            &format!("{side:?}: b"),
        );
    }
}

/// A replica and a server restarted from its AOF end with the master's expiries, moved or kept;
/// an admission that keeps the expiry sends nothing for it and announces no `expire`, on the
/// master and on the replica alike.
#[test]
fn replicas_and_the_aof_keep_the_masters_expiry() {
    let mut s = Server::builder().aof_always().start();
    let replica = start_replica(&s, &[]);
    let mut c = s.client();
    let keys: Vec<String> = [Side::Zset, Side::Compact]
        .iter()
        .flat_map(|side| ["lease", "long", "ev"].map(|k| side.key(k)))
        .collect();
    for side in [Side::Zset, Side::Compact] {
        side.ints(&mut c, "ALLOW", "lease", "1 10 * COST 9 LEASE 5000");
        side.ints(&mut c, "ALLOW", "lease", "1 10 *");
        side.ints(&mut c, "ALLOW", "long", "3600 10 1000");
        side.ints(&mut c, "ALLOW", "long", "1 10 1001");
        side.ints(&mut c, "ALLOW", "long", "7200 10 1002 LEASE 10");
        side.ints(&mut c, "ALLOW", "long", "60 10 1003");

        // Events: a moved expiry is announced (and sent), a kept one is not, on both servers.
        let key = side.key("ev");
        let mut on_master = Events::watch(&s, &key);
        let mut on_replica = Events::watch(&replica, &key);
        let added = match side {
            Side::Zset => "zadd",
            _ => "slidingwindow.add",
        };
        for (i, (rest, want)) in [
            ("3600 10 1000", vec![added, "expire"]),
            ("1 10 1001", vec![added]),
            ("7200 10 1002", vec![added, "expire"]),
        ]
        .into_iter()
        .enumerate()
        {
            side.ints(&mut c, "ALLOW", "ev", rest);
            let marker = i.to_string();
            assert_eq!(
                q::<i64>(&mut c, &["PUBLISH", "marker", &marker]),
                1,
                "PUBLISH marker: the master's one subscriber"
            );
            assert_eq!(on_master.until(&marker), want, "{side:?} step {i}: master");
            assert_eq!(
                on_replica.until(&marker),
                want,
                "{side:?} step {i}: replica"
            );
        }
    }
    let state = |con: &mut Connection| -> Vec<(Vec<u64>, i64)> {
        keys.iter()
            .map(|k| (client::scores(con, k), pexpiretime(con, k)))
            .collect()
    };
    let want = state(&mut c);
    for (k, (_, at)) in keys.iter().zip(&want) {
        assert!(*at > 0, "{k} has no expiry");
    }
    wait_in_sync(&s, &replica);
    assert_eq!(state(&mut replica.client()), want, "the replica");
    assert_eq!(replica.digest(), s.digest());
    s.restart();
    assert_eq!(state(&mut s.client()), want, "restarted from the AOF");
}
