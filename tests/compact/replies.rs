//! What a caller sees of a compact key: the same replies as a sorted set's and the contract
//! model's for the same random call streams, and its keyspace events and WATCH.

use super::*;

/// The same random call streams against a sorted-set server and a compact server: every reply
/// equal, and equal to the contract model; TYPE, EXISTS, the stored timestamps and the TTL agree.
#[test]
fn replies_equal_a_sorted_sets_and_the_models() {
    let zset = Server::start();
    let compact = compact_server();
    let (mut z, mut c) = (zset.client(), compact.client());
    let mut rng = Rng::new(0xC0FFEE);
    let keys = ["a", "b", "c", "d"];
    let mut models = vec![Model::default(); keys.len()];
    let mut clocks = vec![T0; keys.len()];
    // Server-clock bounds of each key's expiry, per server, from its last admission.
    let mut expiry = vec![[Expiry::default(); 2]; keys.len()];
    for step in 0..4000 {
        let i = rng.range(0, keys.len() as u64 - 1) as usize;
        // Windows of an hour or more: no key expires in real time while the test runs.
        let window = rng.pick(&[3600u64, 3601, 7200]);
        clocks[i] = match rng.range(0, 99) {
            0..=3 => clocks[i] + window * 1000 * rng.range(1, 2),
            4..=11 => clocks[i].saturating_sub(rng.range(0, 90_000)),
            12..=14 => clocks[i] + rng.range(0, 1 << 33),
            _ => clocks[i] + rng.range(0, 60_000),
        };
        let (now, max, cost) = (clocks[i], rng.range(1, 12), rng.range(1, 5));
        let peek = rng.chance(20);
        let verb = if peek { "PEEK" } else { "ALLOW" };
        let line = format!("{verb} {} {window} {max} {now} COST {cost}", keys[i]);
        let fresh = models[i].empty_after(now as i64 - window as i64 * 1000);
        let want = if peek {
            models[i].peek(window, max, now, cost)
        } else {
            models[i].allow(window, max, now, cost)
        };
        for (n, con) in [&mut z, &mut c].into_iter().enumerate() {
            let before = server_time_ms(con);
            let got = sw5(con, &line);
            let after = server_time_ms(con);
            assert_eq!(
                got,
                want,
                "step {step}: {line} on the {} server",
                ["zset", "compact"][n]
            );
            if !peek && got[0] == 1 {
                expiry[i][n].admit(fresh, before, after, window as i64 * 1000);
            }
        }
        if step % 25 == 0 || step == 3999 {
            for (k, key) in keys.iter().enumerate() {
                let (tz, tc) = (kind(&mut z, key), kind(&mut c, key));
                let stored = !models[k].scores.is_empty();
                assert_eq!(
                    tz,
                    if stored { "zset" } else { "none" },
                    "step {step}: {key}"
                );
                assert_eq!(
                    tc,
                    if stored { "swcompact" } else { "none" },
                    "step {step}: {key}"
                );
                assert_eq!(scores(&mut c, key), models[k].scores, "step {step}: {key}");
                assert_eq!(scores(&mut z, key), models[k].scores, "step {step}: {key}");
                if stored {
                    for (n, con) in [&mut z, &mut c].into_iter().enumerate() {
                        let at = pexpiretime(con, key);
                        let e = expiry[k][n];
                        assert!(
                            e.holds(at),
                            "step {step}: {key} expires at {at}, not in {e:?}"
                        );
                    }
                }
            }
        }
    }
}

/// A compact key's keyspace events, and WATCH: woken by an ALLOW that admits or trims, not by
/// PEEK nor by a refusal with nothing to trim.
#[test]
fn events_and_watch() {
    let (s, mut c) = compact_client();
    let mut events = Events::watch(&s, "ev");
    // (call, its events, whether it wakes a WATCH)
    let steps: [(String, &[&str], bool); 6] = [
        (
            format!("ALLOW ev 10 2 {T0}"),
            &["slidingwindow.add", "expire"],
            true,
        ),
        (format!("PEEK ev 10 2 {T0}"), &[], false),
        (format!("ALLOW ev 10 1 {T0}"), &[], false),
        (
            format!("ALLOW ev 10 2 {} COST 3", T0 + 20_000),
            &["slidingwindow.trim", "del"],
            true,
        ),
        (
            format!("ALLOW ev 10 2 {}", T0 + 20_000),
            &["slidingwindow.add", "expire"],
            true,
        ),
        (
            format!("ALLOW ev 10 5 {} COST 9", T0 + 40_000),
            &["slidingwindow.trim", "del"],
            true,
        ),
    ];
    for (n, (line, want, wakes)) in steps.iter().enumerate() {
        ok(&mut c, &["WATCH", "ev"]);
        sw(&mut c, line);
        let tx = client::pipeline(&mut c, &[vec!["MULTI"], vec!["PING"], vec!["EXEC"]]);
        assert_eq!(tx[2] == Value::Nil, *wakes, "{line}: WATCH");
        let marker = n.to_string();
        assert_eq!(
            q::<i64>(&mut c, &["PUBLISH", "marker", &marker]),
            1,
            "PUBLISH marker: its one subscriber"
        );
        assert_eq!(events.until(&marker), *want, "{line}: events");
    }
}
