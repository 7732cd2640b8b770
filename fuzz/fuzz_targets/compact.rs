//! Fuzzes the compact storage's log (`slidingwindow_core::compact`): the log against a plain
//! sorted vector through any sequence of adds (anywhere in time, any width), trims and refunds,
//! checking counts and k-th oldest after each; its RDB encoding round trip; and the decoder on
//! arbitrary bytes, which must refuse or rebuild, never panic, never loop; and a log built in one
//! pass from the model's timestamps, which must hold the same. `cargo fuzz` builds with
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

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
