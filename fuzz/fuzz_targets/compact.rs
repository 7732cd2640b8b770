//! Fuzzes the compact storage's log (`slidingwindow_core::compact`): the log against a plain
//! sorted vector through any sequence of adds (anywhere in time, any width), trims and refunds,
//! checking counts and k-th oldest after each; its RDB encoding round trip; and the decoder on
//! arbitrary bytes, which must refuse or rebuild, never panic, never loop; and a log built in one
//! pass from the model's timestamps, which must hold the same; and, against runs, counts in the
//! billions and up to 2^53 on a timestamp (`run_counts`). `cargo fuzz` builds with
//! `--cfg fuzzing`, where the log's blocks hold 32 bytes and its index's nodes 8 children, so that
//! short inputs split, merge and re-lay out many blocks in a tree of several levels.

#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use slidingwindow_core::compact::codec;
use slidingwindow_core::compact::log::{self, CompactLog, MAX_TS};

/// The next timestamp: near the last one either way, or anywhere.
fn next_ts(u: &mut Unstructured, ts: u64) -> Result<u64> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => u.int_in_range(0..=MAX_TS)?,
        1 => ts.saturating_sub(u.int_in_range(0..=1 << 36)?),
        2 => ts.saturating_add(u.int_in_range(0..=1 << 36)?).min(MAX_TS),
        3 => [0, 1, MAX_TS - 1, MAX_TS][usize::from(u.int_in_range(0..=3u8)?)],
        4 => ts.saturating_sub(u.int_in_range(0..=100)?),
        _ => ts.saturating_add(u.int_in_range(0..=100)?).min(MAX_TS),
    })
}

fn check(log: &CompactLog, model: &[u64], u: &mut Unstructured) -> Result<()> {
    assert_eq!(log.len(), model.len() as u64);
    // A log kept as a word (copies of one timestamp) comes back whole from it.
    if let Some(word) = log.word() {
        assert!(word < 1 << 62);
        assert_eq!(CompactLog::from_word(word).as_ref(), Some(log));
    }
    assert_eq!(log.newest(), model.last().copied());
    let k: u64 = u.int_in_range(0..=model.len() as u64 + 1)?;
    let want = usize::try_from(k)
        .ok()
        .and_then(|k| k.checked_sub(1))
        .and_then(|i| model.get(i).copied());
    assert_eq!(log.kth_oldest(k), want);
    let score = f64::from_bits(u.arbitrary()?);
    if !score.is_nan() {
        let want = model.iter().filter(|t| **t as f64 <= score).count() as u64;
        assert_eq!(log.count_through(score), want, "count through {score}");
    }
    Ok(())
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    // Arbitrary bytes through the decoder first.
    let raw_count: u64 = u.arbitrary()?;
    let raw: Vec<u8> = u.arbitrary()?;
    if let Ok(log) = codec::decode(codec::ENCODING, raw_count, &raw) {
        // Whatever decodes survives a round trip (its bytes may have held redundant varints).
        let (count, bytes) = codec::encode(&log);
        assert_eq!(count, raw_count);
        assert_eq!(codec::decode(codec::ENCODING, count, &bytes), Ok(log));
    }
    if let Ok(log) = codec::decode(1, raw_count, &raw) {
        let (count, bytes) = codec::encode_v1(&log);
        assert_eq!(count, raw_count);
        assert_eq!(codec::decode(1, count, &bytes), Ok(log));
    }
    let mut log = CompactLog::default();
    let mut model: Vec<u64> = Vec::new();
    let mut ts = u.int_in_range(0..=MAX_TS)?;
    for _ in 0..u.int_in_range(0..=255u8)? {
        match u.int_in_range(0..=5u8)? {
            0..=2 => {
                ts = next_ts(&mut u, ts)?;
                let n = match u.int_in_range(0..=15u8)? {
                    0 => u.int_in_range(1..=300u64)?,
                    _ => u.int_in_range(1..=3u64)?,
                };
                log.add(ts, n);
                let at = model.partition_point(|t| *t <= ts);
                model.splice(at..at, std::iter::repeat_n(ts, n as usize));
            }
            3 => {
                let through = match u.arbitrary()? {
                    true => MAX_TS,
                    false => next_ts(&mut u, ts)?,
                };
                let n = u.int_in_range(0..=40u64)?;
                let end = model.partition_point(|t| *t <= through);
                let m = (n as usize).min(end);
                model.drain(end - m..end);
                assert_eq!(
                    log.refund(through, n),
                    m as u64,
                    "refund {n} through {through}"
                );
            }
            _ => {
                let cutoff = i64::try_from(next_ts(&mut u, ts)?).unwrap_or(i64::MAX)
                    - u.int_in_range(0..=2i64)?;
                let gone = log.trim(cutoff);
                let keep = model.partition_point(|t| (*t as i64) <= cutoff);
                model.drain(..keep);
                assert_eq!(gone, keep as u64);
            }
        }
        check(&log, &model, &mut u)?;
    }
    assert_eq!(log.iter().collect::<Vec<_>>(), model);
    let mut built = log::Builder::default();
    for &t in &model {
        built.push(t);
    }
    assert_eq!(built.finish(), log);
    if !model.is_empty() {
        let (count, bytes) = codec::encode(&log);
        assert_eq!(codec::decode(codec::ENCODING, count, &bytes), Ok(log));
    }
    Ok(())
}

/// A count: small, or around 2^32, 2^48 (a block's most) or up to 2^52.
fn count(u: &mut Unstructured) -> Result<u64> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => u.int_in_range(1..=3u64)?,
        1 => u.int_in_range(1..=1_000_000_000u64)?,
        2 => (1u64 << 32) - 2 + u.int_in_range(0..=4u64)?,
        3 => (1u64 << 48) - 2 + u.int_in_range(0..=4u64)?,
        _ => u.int_in_range(1..=1u64 << 52)?,
    })
}

/// The log against runs `(timestamp, count)` with counts in the billions and up to 2^53 in all
/// (COST and PRECISION put that many on one timestamp): adds, refunds and trims cut and merge
/// blocks of huge counts; the counts, ranks and the encoding in runs must never wrap.
fn run_counts(u: &mut Unstructured) -> Result<()> {
    let mut log = CompactLog::default();
    let mut model: Vec<(u64, u64)> = Vec::new();
    let mut ts = u.int_in_range(0..=MAX_TS)?;
    for _ in 0..u.int_in_range(0..=64u8)? {
        let total: u64 = model.iter().map(|r| r.1).sum();
        match u.int_in_range(0..=3u8)? {
            0 | 1 => {
                ts = next_ts(u, ts)?;
                let n = count(u)?.min(codec::MAX_REQUESTS - total);
                if n == 0 {
                    continue;
                }
                log.add(ts, n);
                match model.binary_search_by_key(&ts, |r| r.0) {
                    Ok(i) => model[i].1 += n,
                    Err(i) => model.insert(i, (ts, n)),
                }
            }
            2 => {
                let through = next_ts(u, ts)?;
                let n = count(u)?;
                let mut left = n;
                for r in model.iter_mut().rev().filter(|r| r.0 <= through) {
                    let cut = left.min(r.1);
                    r.1 -= cut;
                    left -= cut;
                }
                model.retain(|r| r.1 > 0);
                assert_eq!(
                    log.refund(through, n),
                    n - left,
                    "refund {n} through {through}"
                );
            }
            _ => {
                let cutoff = next_ts(u, ts)?;
                let gone: u64 = model.iter().filter(|r| r.0 <= cutoff).map(|r| r.1).sum();
                model.retain(|r| r.0 > cutoff);
                assert_eq!(log.trim(cutoff as i64), gone, "trim through {cutoff}");
            }
        }
        let total: u64 = model.iter().map(|r| r.1).sum();
        assert_eq!(log.len(), total);
        assert_eq!(log.runs().collect::<Vec<_>>(), model);
        let k = u.int_in_range(0..=total + 1)?;
        let mut before = 0;
        let want = model.iter().find_map(|r| {
            before += r.1;
            (k >= 1 && k <= before).then_some(r.0)
        });
        assert_eq!(log.kth_oldest(k), want, "{k}-th oldest");
        let t = next_ts(u, ts)?;
        let want: u64 = model.iter().filter(|r| r.0 <= t).map(|r| r.1).sum();
        assert_eq!(log.count_through(t as f64), want, "count through {t}");
    }
    if !model.is_empty() {
        let (count, bytes) = codec::encode(&log);
        let back = codec::decode(codec::ENCODING, count, &bytes).map(|l| l.runs().collect());
        assert_eq!(back, Ok(model.clone()));
        let mut built = log::RunBuilder::default();
        for &(t, n) in &model {
            built.push(t, n);
        }
        assert_eq!(built.finish().runs().collect::<Vec<_>>(), model);
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = match u.arbitrary::<bool>() {
        Ok(true) => run_counts(&mut u),
        _ => run(u.take_rest()),
    };
});
