//! The compact log's RDB encoding. Every later version loads every earlier one.
//!
//! Version 2 (written today), in runs: the number of distinct timestamps, then one buffer of
//! LEB128 varints: the first timestamp, then each next one's distance from the one before (at
//! least 1); a timestamp logged more than once is followed by a 0 and its copies beyond the
//! first (at least 1). So a timestamp costs what it cost in version 1 and a count of `n` costs
//! `1 + varint(n - 1)` bytes in place of `n - 1`: O(distinct timestamps), whatever the counts.
//!
//! Version 1 (loaded, no longer written): the number of timestamps, then one buffer of varints,
//! the first timestamp and then each one's distance from the one before (sorted, so never
//! negative). It costs O(requests).
//!
//! Loading trusts nothing: the count, every varint, every timestamp, every count, the total
//! (at most 2^53 requests, the most a key logs) and the buffer's end are checked, and a payload
//! that fails any check is refused whole. The timestamps arrive sorted, so the log's blocks are
//! packed as they come and its index built once.

use super::log::{Builder, CompactLog, MAX_TS, RunBuilder};
use std::fmt;

/// The encoding version written today.
pub const ENCODING: i32 = 2;

/// Requests a key logs at most.
pub const MAX_REQUESTS: u64 = 1 << 53;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// An encoding version this build does not know (written by a newer one).
    Version(i32),
    Empty,
    /// More timestamps announced than the buffer could hold.
    Count {
        count: u64,
        bytes: usize,
    },
    BadVarint {
        at: usize,
    },
    TooLarge {
        at: usize,
    },
    Short {
        count: u64,
        found: u64,
    },
    Trailing {
        at: usize,
    },
    /// Version 2: a timestamp not after the one before.
    Unordered {
        at: usize,
    },
    /// Version 2: a timestamp with no request.
    ZeroCount {
        at: usize,
    },
    /// Version 2: more requests than a key logs.
    TooMany {
        at: usize,
    },
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Version(v) => write!(
                f,
                "encoding version {v} is newer than this module knows ({ENCODING}): upgrade the module"
            ),
            Refused::Empty => write!(f, "an empty log (a compact key always holds a request)"),
            Refused::Count { count, bytes } => {
                write!(f, "{count} timestamps announced in {bytes} bytes")
            }
            Refused::BadVarint { at } => write!(f, "a malformed number at byte {at}"),
            Refused::TooLarge { at } => write!(f, "a timestamp above 2^53 at byte {at}"),
            Refused::Short { count, found } => {
                write!(f, "{count} timestamps announced, {found} found")
            }
            Refused::Trailing { at } => {
                write!(f, "unexpected bytes after the last timestamp, at {at}")
            }
            Refused::Unordered { at } => {
                write!(f, "a timestamp not after the one before, at byte {at}")
            }
            Refused::ZeroCount { at } => write!(f, "a timestamp with no request, at byte {at}"),
            Refused::TooMany { at } => {
                write!(f, "more than 2^53 requests in all, at byte {at}")
            }
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One varint from `bytes` at `*at`, advancing it.
fn get_varint(bytes: &[u8], at: &mut usize) -> Result<u64, Refused> {
    let start = *at;
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let Some(&b) = bytes.get(*at) else {
            return Err(Refused::BadVarint { at: start });
        };
        *at += 1;
        let part = u64::from(b & 0x7f);
        if shift == 63 && part > 1 {
            return Err(Refused::BadVarint { at: start });
        }
        v |= part << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(Refused::BadVarint { at: start })
}

/// The distinct timestamps' count and their buffer (version 2).
pub fn encode(log: &CompactLog) -> (u64, Vec<u8>) {
    let mut out = Vec::new();
    let (mut prev, mut runs) = (0, 0u64);
    for (ts, n) in log.runs() {
        put_varint(&mut out, ts - prev);
        if n > 1 {
            out.push(0);
            put_varint(&mut out, n - 1);
        }
        prev = ts;
        runs += 1;
    }
    (runs, out)
}

/// The timestamps' count and their buffer in version 1 (what older builds wrote).
pub fn encode_v1(log: &CompactLog) -> (u64, Vec<u8>) {
    let mut out = Vec::with_capacity(usize::try_from(log.len()).unwrap_or(0).saturating_mul(2));
    let mut prev = 0;
    for ts in log.iter() {
        put_varint(&mut out, ts - prev);
        prev = ts;
    }
    (log.len(), out)
}

/// Rebuilds a log from what `encode` (version 2) or `encode_v1` (version 1) wrote.
pub fn decode(encver: i32, count: u64, bytes: &[u8]) -> Result<CompactLog, Refused> {
    if encver != 1 && encver != 2 {
        return Err(Refused::Version(encver));
    }
    if count == 0 {
        return Err(Refused::Empty);
    }
    // Each timestamp takes at least one byte.
    if count > bytes.len() as u64 {
        return Err(Refused::Count {
            count,
            bytes: bytes.len(),
        });
    }
    if encver == 1 {
        decode_v1(count, bytes)
    } else {
        decode_v2(count, bytes)
    }
}

fn decode_v2(count: u64, bytes: &[u8]) -> Result<CompactLog, Refused> {
    let mut log = RunBuilder::default();
    // The current timestamp and its copies, whether its count was read, the totals.
    let (mut ts, mut n, mut counted) = (0u64, 0u64, false);
    let (mut at, mut found, mut total) = (0usize, 0u64, 0u64);
    while at < bytes.len() {
        let start = at;
        let v = get_varint(bytes, &mut at)?;
        if found > 0 && v == 0 {
            // The current timestamp's copies beyond the first, once.
            if counted {
                return Err(Refused::Unordered { at: start });
            }
            let start = at;
            let more = get_varint(bytes, &mut at)?;
            if more == 0 {
                return Err(Refused::ZeroCount { at: start });
            }
            total = total
                .checked_add(more)
                .filter(|t| *t <= MAX_REQUESTS)
                .ok_or(Refused::TooMany { at: start })?;
            (n, counted) = (1 + more, true);
            continue;
        }
        if found == count {
            return Err(Refused::Trailing { at: start });
        }
        log.push(ts, n);
        ts = ts
            .checked_add(v)
            .filter(|t| *t <= MAX_TS)
            .ok_or(Refused::TooLarge { at: start })?;
        total += 1;
        if total > MAX_REQUESTS {
            return Err(Refused::TooMany { at: start });
        }
        (n, counted, found) = (1, false, found + 1);
    }
    if found < count {
        return Err(Refused::Short { count, found });
    }
    log.push(ts, n);
    Ok(log.finish())
}

fn decode_v1(count: u64, bytes: &[u8]) -> Result<CompactLog, Refused> {
    // Sorted by construction (every distance is positive or zero): the blocks fill in one pass.
    let mut log = Builder::default();
    let (mut at, mut ts, mut found) = (0usize, 0u64, 0u64);
    while found < count {
        let start = at;
        ts = ts
            .checked_add(get_varint(bytes, &mut at)?)
            .filter(|t| *t <= MAX_TS)
            .ok_or(Refused::TooLarge { at: start })?;
        found += 1;
        log.push(ts);
        if at == bytes.len() && found < count {
            return Err(Refused::Short { count, found });
        }
    }
    if at != bytes.len() {
        return Err(Refused::Trailing { at });
    }
    Ok(log.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let cases: &[&[u64]] = &[
            &[0],
            &[MAX_TS],
            &[1_700_000_000_000, 1_700_000_000_000, 1_700_000_000_001],
            &[0, 127, 128, 16_383, 16_384, MAX_TS],
        ];
        for ts in cases {
            let log = CompactLog::of(ts);
            let (count, bytes) = encode(&log);
            assert_eq!(decode(2, count, &bytes), Ok(log.clone()), "{ts:?}");
            let (count, bytes) = encode_v1(&log);
            assert_eq!(decode(1, count, &bytes), Ok(log), "{ts:?}");
        }
    }

    /// Counts up to 2^53 on a few timestamps: a few bytes each, back equal.
    #[test]
    fn counted_logs_cost_their_timestamps() {
        let t = 1_700_000_000_000u64;
        // (count on each timestamp, timestamps, most bytes)
        for (n, k, most) in [
            (1u64, 100u64, 210usize),
            (10_000_000, 10, 80),
            (4_300_000_000, 10, 90),
            (MAX_REQUESTS / 10, 10, 120),
            (MAX_REQUESTS, 1, 20),
        ] {
            let mut log = CompactLog::default();
            for i in 0..k {
                log.add(t + i * 1000, n);
            }
            let (count, bytes) = encode(&log);
            assert_eq!(count, k);
            assert!(bytes.len() <= most, "{n} x {k}: {} bytes", bytes.len());
            let back = decode(2, count, &bytes).map(|l| l.runs().collect::<Vec<_>>());
            assert_eq!(back, Ok(log.runs().collect()), "{n} x {k}");
        }
    }

    #[test]
    fn the_encoding_is_stable() {
        // Version 1, byte for byte: 300 = ac 02; +0; +1; +16384 = 80 80 01.
        let log = CompactLog::of(&[300, 300, 301, 16_685]);
        let (count, bytes) = encode_v1(&log);
        assert_eq!(count, 4);
        assert_eq!(bytes, [0xac, 0x02, 0x00, 0x01, 0x80, 0x80, 0x01]);
        // Version 2: 300 = ac 02, one more copy = 00 01; +1; +16384 = 80 80 01.
        let (count, bytes) = encode(&log);
        assert_eq!(count, 3);
        assert_eq!(bytes, [0xac, 0x02, 0x00, 0x01, 0x01, 0x80, 0x80, 0x01]);
    }

    #[test]
    fn corrupt_payloads_are_refused() {
        let two_53 = {
            let mut b = Vec::new();
            put_varint(&mut b, MAX_TS + 1);
            b
        };
        let varint = |v: u64| {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            b
        };
        let half = varint(MAX_REQUESTS / 2);
        // (version, count, bytes, why)
        let cases: Vec<(i32, u64, Vec<u8>, Refused)> = vec![
            (3, 1, vec![0, 1], Refused::Version(3)),
            (0, 1, vec![0], Refused::Version(0)),
            (1, 0, vec![], Refused::Empty),
            (1, 3, vec![1, 1], Refused::Count { count: 3, bytes: 2 }),
            (
                1,
                u64::MAX,
                vec![1],
                Refused::Count {
                    count: u64::MAX,
                    bytes: 1,
                },
            ),
            (1, 1, vec![0x80], Refused::BadVarint { at: 0 }),
            (1, 1, vec![0xff; 11], Refused::BadVarint { at: 0 }),
            (1, 1, two_53.clone(), Refused::TooLarge { at: 0 }),
            (
                1,
                2,
                vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10, 0x7f, 0x7f],
                Refused::TooLarge { at: 8 },
            ),
            (
                1,
                2,
                vec![0x81, 0x01],
                Refused::Short { count: 2, found: 1 },
            ),
            (1, 1, vec![5, 5], Refused::Trailing { at: 1 }),
            // Version 2: distances, each copied timestamp followed by 0 and its extra copies.
            (2, 0, vec![], Refused::Empty),
            (2, 3, vec![1, 1], Refused::Count { count: 3, bytes: 2 }),
            (2, 1, vec![1, 0, 0], Refused::ZeroCount { at: 2 }),
            (2, 2, vec![1, 0, 1, 0, 1], Refused::Unordered { at: 3 }),
            (2, 1, vec![0x80], Refused::BadVarint { at: 0 }),
            (2, 1, vec![1, 0, 0x80], Refused::BadVarint { at: 2 }),
            (2, 1, two_53.clone(), Refused::TooLarge { at: 0 }),
            (
                2,
                2,
                [vec![5], two_53.clone()].concat(),
                Refused::TooLarge { at: 1 },
            ),
            (
                2,
                1,
                [vec![1, 0], varint(MAX_REQUESTS)].concat(),
                Refused::TooMany { at: 2 },
            ),
            (
                2,
                2,
                [vec![1, 0], half.clone(), vec![1, 0], half.clone()].concat(),
                Refused::TooMany { at: 12 },
            ),
            (2, 2, vec![1, 0, 1], Refused::Short { count: 2, found: 1 }),
            (2, 1, vec![1, 1], Refused::Trailing { at: 1 }),
        ];
        for (v, count, bytes, why) in cases {
            assert_eq!(decode(v, count, &bytes), Err(why), "{v} {count} {bytes:?}");
        }
    }
}
