//! `SLIDINGWINDOW.TOP` (issue 40), run alone with `BENCH_TOP=1`: 1M refusals over 100,000 keys
//! drawn from Zipf(1.1), `slidingwindow.top-keys` 1024; whether the true top 10 are TOP's first
//! 10 and every listed estimate within its error of the truth. Prints one markdown table.

use redis::{Connection, Value};
use testkit::rng::Rng;
use testkit::zipf::Zipf;

use crate::Result;
use crate::server::Server;

const KEYS: usize = 100_000;
const REFUSALS: usize = 1_000_000;
const PIPELINE: usize = 500;

pub fn run(server: &Server) -> Result<()> {
    let mut con = server.connect()?;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("slidingwindow.top-keys")
        .arg(1024)
        .query::<()>(&mut con)?;
    let zipf = Zipf::new(KEYS, 1.1);
    let mut rng = Rng::new(40);
    let mut truth = vec![0u64; KEYS];
    let mut seen = vec![false; KEYS];
    let mut batch: Vec<usize> = Vec::with_capacity(PIPELINE);
    let mut refusals = 0;
    while refusals < REFUSALS {
        let k = zipf.sample(&mut rng);
        // A key's first call fills it (limit 1 an hour); every later one is refused.
        if seen[k] {
            truth[k] += 1;
            refusals += 1;
        }
        seen[k] = true;
        batch.push(k);
        if batch.len() == PIPELINE || refusals == REFUSALS {
            send(&mut con, &batch)?;
            batch.clear();
        }
    }
    send(&mut con, &batch)?;
    let listed = top(&mut con, 1024)?;
    let first: Vec<&String> = top_names(&listed, 10);
    let mut order: Vec<usize> = (0..KEYS).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(truth[k]));
    let true_top: Vec<String> = order[..10].iter().map(|k| format!("top:{k}")).collect();
    let found = true_top.iter().filter(|k| first.contains(k)).count();
    let within = listed
        .iter()
        .filter(|(name, refused, error)| {
            let k: usize = name["top:".len()..].parse().unwrap_or(0);
            *refused >= truth[k] && refused - error <= truth[k]
        })
        .count();
    let info: String = redis::cmd("INFO").arg("slidingwindow").query(&mut con)?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or("?")
            .trim()
            .to_string()
    };
    println!("| Zipf(1.1), {REFUSALS} refusals over {KEYS} keys, top-keys 1024 | figure |");
    println!("|---|---|");
    println!("| true top 10 among TOP's first 10 | {found} of 10 |");
    println!(
        "| estimates within their error | {within} of {} |",
        listed.len()
    );
    println!(
        "| top_keys_refusals | {} |",
        field("slidingwindow_top_keys_refusals")
    );
    println!(
        "| top_keys_bytes | {} |",
        field("slidingwindow_top_keys_bytes")
    );
    Ok(())
}

fn send(con: &mut Connection, keys: &[usize]) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let mut p = redis::pipe();
    for k in keys {
        p.cmd("SLIDINGWINDOW.ALLOW")
            .arg(format!("top:{k}"))
            .arg(3600)
            .arg(1)
            .arg("*");
    }
    let _: Vec<Value> = p.query(con)?;
    Ok(())
}

fn top(con: &mut Connection, k: usize) -> Result<Vec<(String, u64, u64)>> {
    let entries: Vec<(String, u64, u64)> = redis::cmd("SLIDINGWINDOW.TOP")
        .arg("COUNT")
        .arg(k)
        .query(con)?;
    Ok(entries)
}

fn top_names(entries: &[(String, u64, u64)], k: usize) -> Vec<&String> {
    entries.iter().take(k).map(|(name, _, _)| name).collect()
}
