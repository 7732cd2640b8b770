//! The compact log's RDB encoding, version 1 (a promise: every later version loads it):
//! the number of timestamps, then one buffer of LEB128 varints, the first timestamp and then
//! each one's distance from the one before (sorted, so never negative).
//!
//! Loading trusts nothing: the count, every varint, every timestamp and the buffer's end are
//! checked, and a payload that fails any check is refused whole. It costs O(N): the timestamps
//! arrive sorted, so the log's blocks are packed as they come and its index built once.

use super::log::{Builder, CompactLog, MAX_TS};
use std::fmt;

/// The encoding version written today.
pub const ENCODING: i32 = 1;

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

/// The timestamps' count and their buffer.
pub fn encode(log: &CompactLog) -> (u64, Vec<u8>) {
    let mut out = Vec::with_capacity(usize::try_from(log.len()).unwrap_or(0).saturating_mul(2));
    let mut prev = 0;
    for ts in log.iter() {
        put_varint(&mut out, ts - prev);
        prev = ts;
    }
    (log.len(), out)
}

/// Rebuilds a log from what `encode` wrote.
pub fn decode(encver: i32, count: u64, bytes: &[u8]) -> Result<CompactLog, Refused> {
    if encver != ENCODING {
        return Err(Refused::Version(encver));
    }
    if count == 0 {
        return Err(Refused::Empty);
    }
    // Each varint takes at least one byte.
    if count > bytes.len() as u64 {
        return Err(Refused::Count {
            count,
            bytes: bytes.len(),
        });
    }
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
            assert_eq!(decode(ENCODING, count, &bytes), Ok(log), "{ts:?}");
        }
    }

    #[test]
    fn the_encoding_is_stable() {
        // Version 1, byte for byte: 300 = ac 02; +0; +1; +16384 = 80 80 01.
        let (count, bytes) = encode(&CompactLog::of(&[300, 300, 301, 16_685]));
        assert_eq!(count, 4);
        assert_eq!(bytes, [0xac, 0x02, 0x00, 0x01, 0x80, 0x80, 0x01]);
    }

    #[test]
    fn corrupt_payloads_are_refused() {
        let two_53 = {
            let mut b = Vec::new();
            put_varint(&mut b, MAX_TS + 1);
            b
        };
        // (version, count, bytes, why)
        let cases: Vec<(i32, u64, Vec<u8>, Refused)> = vec![
            (2, 1, vec![0], Refused::Version(2)),
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
            (1, 1, two_53, Refused::TooLarge { at: 0 }),
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
        ];
        for (v, count, bytes, why) in cases {
            assert_eq!(decode(v, count, &bytes), Err(why), "{v} {count} {bytes:?}");
        }
    }
}
