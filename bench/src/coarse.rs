//! Coarse times (issue 36, `PRECISION`), run by `make bench-memory` after the memory tables: one
//! compact key called 10,000 times a simulated second for 120 s (10 calls each ms), window 60 s,
//! max 300,000, with and without `PRECISION 1000`. Prints the largest `MEMORY USAGE` read after
//! each simulated second, the admissions, and the largest count of admissions whose `now` falls
//! in one window `(t - 60,000, t]`, which must not pass max.

use redis::Connection;

use crate::Result;

const T0: u64 = 1_700_000_000_000;
const WINDOW_S: u64 = 60;
const MAX: u64 = 300_000;
/// Calls each simulated ms.
const PER_MS: u64 = 10;
const SECONDS: u64 = 120;

/// What one stream measured.
struct Stream {
    largest_bytes: u64,
    admitted: u64,
    fullest_window: u64,
}

/// Calls each simulated second in one pipeline, then `MEMORY USAGE`.
fn stream(con: &mut Connection, key: &str, precision: Option<u64>) -> Result<Stream> {
    redis::cmd("DEL").arg(key).exec(con)?;
    let mut admitted_at: Vec<u64> = Vec::new();
    let mut largest_bytes = 0;
    for s in 0..SECONDS {
        let mut p = redis::pipe();
        for ms in s * 1000..(s + 1) * 1000 {
            for _ in 0..PER_MS {
                let c = p
                    .cmd("SLIDINGWINDOW.ALLOW")
                    .arg(key)
                    .arg(WINDOW_S)
                    .arg(MAX)
                    .arg(T0 + ms);
                if let Some(p) = precision {
                    c.arg("PRECISION").arg(p);
                }
            }
        }
        let replies: Vec<Vec<i64>> = p.query(con)?;
        for (i, r) in replies.iter().enumerate() {
            match r.first() {
                Some(1) => admitted_at.push(T0 + s * 1000 + i as u64 / PER_MS),
                Some(0) => {}
                _ => return Err(format!("unexpected reply {r:?}").into()),
            }
        }
        let bytes: u64 = redis::cmd("MEMORY")
            .arg(&["USAGE", key, "SAMPLES", "0"][..])
            .query(con)?;
        largest_bytes = largest_bytes.max(bytes);
    }
    redis::cmd("DEL").arg(key).exec(con)?;
    // Two pointers over the admissions' `now`, in call order (sorted).
    let (mut start, mut fullest_window) = (0, 0);
    for (end, &t) in admitted_at.iter().enumerate() {
        while admitted_at[start] + WINDOW_S * 1000 <= t {
            start += 1;
        }
        fullest_window = fullest_window.max((end + 1 - start) as u64);
    }
    Ok(Stream {
        largest_bytes,
        admitted: admitted_at.len() as u64,
        fullest_window,
    })
}

pub fn run(con: &mut Connection) -> Result<()> {
    redis::cmd("CONFIG")
        .arg(&["SET", "slidingwindow.storage", "compact"][..])
        .exec(con)?;
    println!(
        "\n## One key at {} calls/s for {SECONDS} s of simulated clock, window {WINDOW_S} s, \
         max {MAX} (compact, `MEMORY USAGE` after each second)\n",
        PER_MS * 1000
    );
    println!("| calls | largest MEMORY USAGE (B) | admitted | most admitted in one window |");
    println!("|---|---|---|---|");
    for precision in [None, Some(1000)] {
        let s = stream(con, "coarse", precision)?;
        let name = match precision {
            Some(p) => format!("`PRECISION {p}`"),
            None => "exact".into(),
        };
        println!(
            "| {name} | {} | {} | {} |",
            s.largest_bytes, s.admitted, s.fullest_window
        );
        if s.fullest_window > MAX {
            return Err(format!("{name}: {} admitted in one window", s.fullest_window).into());
        }
    }
    Ok(())
}
