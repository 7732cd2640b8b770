//! Memory (issue 36), run alone with `make bench-memory` (`BENCH_MEMORY=1`): the compact log's
//! bytes per request on eight arrival patterns of 1M requests against the information bound
//! log2 C(W+N-1, N) bits (N timestamps over a span of W ms) and beside its `DUMP`'s; counted
//! keys' `DUMP` and `RESTORE` (10^8 and 2^33 requests on 10 and 10,000 timestamps); bytes per key over 100,000 keys
//! of 1, 5 and 20 requests a second apart (window 1 h) for the compact log, the sorted set, an
//! `INCRBY`+`EXPIRE` counter and redis-cell's GCRA (`CL.THROTTLE`, where it is built); then
//! `coarse`'s stream. Prints markdown tables.

use std::thread::sleep;
use std::time::Duration;

use redis::Connection;
use testkit::rng::Rng;

use crate::Result;
use crate::server::Server;

const T0: u64 = 1_700_000_000_000;
/// Requests in each pattern's log.
const N: usize = 1_000_000;
/// Keys in each row of the small-key table.
const KEYS: u64 = 100_000;
/// Two readings of `used_memory` this close are the same for the table (0.01 B a key of KEYS).
const SETTLED: f64 = 1_000.0;
/// Commands a pipeline: few enough that the client's query buffer stays small.
const PIPELINE: usize = 500;

/// The eight arrival patterns: a name and its timestamps (sorted).
fn patterns() -> Vec<(&'static str, Vec<u64>)> {
    let poisson = |mean_gap: f64, seed: u64| {
        let mut rng = Rng::new(seed);
        let mut t = 0.0f64;
        (0..N)
            .map(|_| {
                // Exponential gaps: -mean ln(u), u uniform in (0, 1].
                let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
                t += -mean_gap * (1.0 - u).ln();
                T0 + t as u64
            })
            .collect::<Vec<u64>>()
    };
    vec![
        ("1 ms apart", (0..N as u64).map(|i| T0 + i).collect()),
        (
            "10 per ms (same timestamp)",
            (0..N as u64).map(|i| T0 + i / 10).collect(),
        ),
        ("Poisson, mean gap 0.1 ms", poisson(0.1, 1)),
        ("Poisson, 1 ms", poisson(1.0, 2)),
        ("Poisson, 10 ms", poisson(10.0, 3)),
        ("Poisson, 100 ms", poisson(100.0, 4)),
        ("Poisson, 1 s", poisson(1000.0, 5)),
        (
            "1000 at one ms, then 999 ms idle",
            (0..N as u64).map(|i| T0 + i / 1000 * 1000).collect(),
        ),
    ]
}

/// log2 C(W+N-1, N) in bytes per timestamp: the fewest bits that tell apart every sorted run
/// of `n` timestamps within `w` ms.
fn bound(w: u64, n: u64) -> f64 {
    let bits: f64 = (1..=n)
        .map(|i| ((w - 1 + i) as f64 / i as f64).log2())
        .sum();
    bits / 8.0 / n as f64
}

fn pipeline(con: &mut Connection, cmds: &[Vec<String>]) -> Result<()> {
    for chunk in cmds.chunks(PIPELINE) {
        let mut p = redis::pipe();
        for c in chunk {
            p.cmd(&c[0]).arg(&c[1..]);
        }
        let replies: Vec<redis::Value> = p.query(con)?;
        if let Some(e) = replies
            .iter()
            .find(|v| matches!(v, redis::Value::ServerError(_)))
        {
            return Err(format!("{e:?}").into());
        }
    }
    Ok(())
}

/// `MEMORY USAGE` and `DUMP` bytes of a compact key holding `ts`, written as `APPLY` batches
/// of 512 pairs.
fn log_bytes(con: &mut Connection, key: &str, ts: &[u64]) -> Result<(u64, usize)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &t in ts {
        match runs.last_mut() {
            Some((last, n)) if *last == t => *n += 1,
            _ => runs.push((t, 1)),
        }
    }
    let sizes = counted_bytes(con, key, &runs)?;
    redis::cmd("DEL").arg(key).exec(con)?;
    Ok(sizes)
}

/// Writes `runs` into the compact key `key` as `APPLY` batches of at most 512 pairs and
/// `APPLY`'s 10^7 timestamps; its `MEMORY USAGE` and `DUMP` bytes.
fn counted_bytes(con: &mut Connection, key: &str, runs: &[(u64, u64)]) -> Result<(u64, usize)> {
    const MOST: u64 = 10_000_000;
    let (mut cmds, mut pairs, mut added) = (Vec::new(), Vec::new(), 0u64);
    let batch = |pairs: &mut Vec<String>| {
        vec![
            "SLIDINGWINDOW.APPLY".to_string(),
            key.to_string(),
            format!("-1 0 {}", std::mem::take(pairs).join(" ")),
        ]
    };
    for &(t, mut n) in runs {
        while n > 0 {
            if pairs.len() == 512 || added == MOST {
                cmds.push(batch(&mut pairs));
                added = 0;
            }
            let take = n.min(MOST - added);
            pairs.push(format!("{t} {take}"));
            (added, n) = (added + take, n - take);
        }
    }
    if !pairs.is_empty() {
        cmds.push(batch(&mut pairs));
    }
    pipeline(con, &cmds)?;
    let bytes: u64 = redis::cmd("MEMORY")
        .arg(&["USAGE", key, "SAMPLES", "0"][..])
        .query(con)?;
    let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query(con)?;
    Ok((bytes, dump.len()))
}

/// The server's own time for its last command, from `SLOWLOG` (µs).
fn timed(con: &mut Connection, cmd: &mut redis::Cmd) -> Result<(redis::Value, u64)> {
    redis::cmd("SLOWLOG").arg("RESET").exec(con)?;
    let v: redis::Value = cmd.query(con)?;
    // Each entry: id, time, duration (µs), arguments, client address, client name.
    let log: Vec<Vec<redis::Value>> = redis::cmd("SLOWLOG").arg("GET").arg(1).query(con)?;
    let us = match log.first().and_then(|e| e.get(2)) {
        Some(redis::Value::Int(us)) => u64::try_from(*us).unwrap_or(0),
        _ => return Err("SLOWLOG GET: no duration".into()),
    };
    Ok((v, us))
}

/// Counted keys (issue 54): `DUMP` bytes and time and `RESTORE` time beside `MEMORY USAGE`.
fn counted(con: &mut Connection) -> Result<()> {
    println!("\n## Counted compact keys: DUMP and RESTORE (issue 54)\n");
    println!("| requests | timestamps | `MEMORY USAGE` | `DUMP` | `DUMP` time | `RESTORE` time |");
    println!("|---|---|---|---|---|---|");
    redis::cmd("CONFIG")
        .arg(&["SET", "slowlog-log-slower-than", "0"][..])
        .exec(con)?;
    for total in [100_000_000u64, 1 << 33] {
        for k in [10u64, 10_000] {
            let runs: Vec<(u64, u64)> = (0..k)
                .map(|i| (T0 + i * 100, total / k + u64::from(i < total % k)))
                .collect();
            let (memory, _) = counted_bytes(con, "counted", &runs)?;
            let (dump, dump_us) = timed(con, redis::cmd("DUMP").arg("counted"))?;
            let redis::Value::BulkString(dump) = dump else {
                return Err("DUMP answered no payload".into());
            };
            let restore = redis::cmd("RESTORE")
                .arg("restored")
                .arg(0)
                .arg(&dump[..])
                .to_owned();
            let (_, restore_us) = timed(con, &mut restore.clone())?;
            println!(
                "| {total} | {k} | {memory} B | {} B | {dump_us} µs | {restore_us} µs |",
                dump.len()
            );
            redis::cmd("DEL")
                .arg(&["counted", "restored"][..])
                .exec(con)?;
        }
    }
    Ok(())
}

fn used_memory(con: &mut Connection) -> Result<f64> {
    let info: String = redis::cmd("INFO").arg("memory").query(con)?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "INFO memory has no used_memory".into())
}

/// What a row of the small-key table stores.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Zset,
    Compact,
    Gcra,
}

/// Bytes a key, from `used_memory` over `KEYS` fresh keys in database `db`, each given `n`
/// requests 1 s apart (a window of 1 h; the counter and GCRA take one command per request).
fn bytes_per_key(con: &mut Connection, db: u32, kind: Kind, n: u64) -> Result<f64> {
    let storage = match kind {
        Kind::Compact => Some("compact"),
        Kind::Zset => Some("zset"),
        _ => None,
    };
    if let Some(storage) = storage {
        redis::cmd("CONFIG")
            .arg(&["SET", "slidingwindow.storage", storage][..])
            .exec(con)?;
    }
    redis::cmd("SELECT").arg(db).exec(con)?;
    let before = used_memory(con)?;
    let key = |k: u64| format!("rate:user:{k:06}");
    let mut cmds: Vec<Vec<String>> = Vec::new();
    for i in 0..n {
        for k in 0..KEYS {
            let now = (T0 + i * 1000).to_string();
            match kind {
                Kind::Counter => {
                    cmds.push(vec!["INCRBY".into(), key(k), "1".into()]);
                    cmds.push(vec!["EXPIRE".into(), key(k), "3600".into()]);
                }
                Kind::Gcra => cmds.push(
                    // A burst of 100 at 100 an hour: each request moves the key's
                    // theoretical arrival time 36 s on, so that it is kept.
                    ["CL.THROTTLE", &key(k), "100", "100", "3600", "1"]
                        .map(String::from)
                        .to_vec(),
                ),
                Kind::Zset | Kind::Compact => cmds.push(
                    ["SLIDINGWINDOW.ALLOW", &key(k), "3600", "1000000", &now]
                        .map(String::from)
                        .to_vec(),
                ),
            }
        }
    }
    pipeline(con, &cmds)?;
    let size: u64 = redis::cmd("DBSIZE").query(con)?;
    if size != KEYS {
        return Err(format!("{size} keys where {KEYS} were written").into());
    }
    // A growing hash table holds its old and new tables until the server's cron has moved every
    // entry: read until two readings half a second apart agree within SETTLED bytes (`used_memory`
    // of a server at rest may still fall by a few hundred bytes a second).
    let mut after = used_memory(con)?;
    loop {
        sleep(Duration::from_millis(500));
        let now = used_memory(con)?;
        if (now - after).abs() < SETTLED {
            break;
        }
        after = now;
    }
    // GCRA's keys expire once their bucket is empty again (36 s a request at 100 an hour):
    // emptied here, they don't leave while a later row is read.
    redis::cmd("FLUSHDB").arg("SYNC").exec(con)?;
    Ok((after - before) / KEYS as f64)
}

pub fn run(main: &Server, cell: Option<&Server>) -> Result<()> {
    let mut con = main.connect()?;
    redis::cmd("CONFIG")
        .arg(&["SET", "slidingwindow.storage", "compact"][..])
        .exec(&mut con)?;
    println!("## Bytes per request, 1M-request compact logs (`MEMORY USAGE`)\n");
    println!("| arrivals | compact | bound | ratio | `DUMP` |");
    println!("|---|---|---|---|---|");
    for (name, ts) in patterns() {
        let w = ts.last().unwrap_or(&T0) - ts.first().unwrap_or(&T0) + 1;
        let (bytes, dump) = log_bytes(&mut con, "pattern", &ts)?;
        let per = bytes as f64 / ts.len() as f64;
        let b = bound(w, ts.len() as u64);
        let dump = dump as f64 / ts.len() as f64;
        println!(
            "| {name} | {per:.2} | {b:.2} | {:.1} | {dump:.2} |",
            per / b
        );
    }
    counted(&mut con)?;

    println!("\n## Bytes per key, {KEYS} keys, requests 1 s apart, window 1 h (`used_memory`)\n");
    // First runs grow the client's buffers and what the server and module allocate once.
    bytes_per_key(&mut con, 14, Kind::Counter, 1)?;
    bytes_per_key(&mut con, 15, Kind::Compact, 1)?;
    let mut cell_con = match cell {
        Some(cell) => {
            let mut c = cell.connect()?;
            bytes_per_key(&mut c, 15, Kind::Gcra, 1)?;
            Some(c)
        }
        None => None,
    };
    println!("| requests per key | compact | sorted set | redis-cell (GCRA) | counter |");
    println!("|---|---|---|---|---|");
    let mut db = 0;
    for n in [1u64, 5, 20] {
        let mut row = Vec::new();
        for kind in [Kind::Compact, Kind::Zset] {
            row.push(format!("{:.0}", bytes_per_key(&mut con, db, kind, n)?));
            db += 1;
        }
        row.push(match cell_con.as_mut() {
            Some(c) => format!("{:.0}", bytes_per_key(c, db, Kind::Gcra, n)?),
            None => "(not built)".into(),
        });
        row.push(format!(
            "{:.0}",
            bytes_per_key(&mut con, db, Kind::Counter, n)?
        ));
        db += 1;
        println!("| {n} | {} |", row.join(" | "));
    }
    crate::coarse::run(&mut con)
}
