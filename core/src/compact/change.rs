//! The change carried by the internal `SLIDINGWINDOW.APPLY`: what replicas and the AOF replay of a
//! call on a compact key. Pure: parsed and written here, applied by the storage.

use crate::args::integer;
use crate::error::{Error, MAX_EXACT};

/// The change carried by the internal `SLIDINGWINDOW.APPLY key change`, one argument of words
/// joined by single spaces, `cutoff pexpireat [ts n]...`: remove the timestamps at or before
/// `cutoff`, add `n` timestamps `ts` for each pair, then set the absolute expiry `pexpireat`
/// (ms; 0 leaves it alone). One argument, because replicating each number as an argument of its
/// own costs the master an allocation per number on every call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Apply {
    pub cutoff: i64,
    pub pexpireat: i64,
    pub adds: Vec<(u64, u64)>,
}

/// Parses `APPLY`'s change; at most `max_add` timestamps added in all.
pub fn apply(change: &[u8], max_add: u64) -> Result<Apply, Error> {
    let mut words = change.split(|b| *b == b' ');
    let limit = MAX_EXACT as i64;
    let cutoff = words
        .next()
        .and_then(|w| signed(w, -limit, limit))
        .ok_or(Error::BadApply(
            "cutoff must be an integer between -2^53 and 2^53",
        ))?;
    let pexpireat = words
        .next()
        .and_then(|w| signed(w, 0, i64::MAX))
        .ok_or(Error::BadApply("pexpireat must be a non-negative integer"))?;
    let mut adds = Vec::new();
    let mut total: u64 = 0;
    while let Some(ts) = words.next() {
        let ts = integer(ts, 0, MAX_EXACT)
            .ok_or(Error::BadApply("ts must be an integer between 0 and 2^53"))?;
        let n = words
            .next()
            .ok_or(Error::BadApply("timestamps come in pairs: ts n"))?;
        let n = integer(n, 1, max_add).ok_or(Error::BadApply(
            "n must be a positive integer within the per-call cap",
        ))?;
        total = total
            .checked_add(n)
            .filter(|t| *t <= max_add)
            .ok_or(Error::BadApply("more timestamps than one call may add"))?;
        adds.push((ts, n));
    }
    Ok(Apply {
        cutoff,
        pexpireat,
        adds,
    })
}

/// The word that opens a REFUND's change, `refund through n`: remove up to `n` of the newest
/// timestamps at or before `through`. No window change starts with a letter.
const REFUND: &[u8; 6] = b"refund";

/// A REFUND's change, if `change` is one: `(through, n)`, or what is wrong with it.
pub fn refund(change: &[u8]) -> Option<Result<(u64, u64), Error>> {
    let mut words = change.split(|b| *b == b' ');
    if words.next() != Some(&REFUND[..]) {
        return None;
    }
    let through = words.next().and_then(|w| integer(w, 0, MAX_EXACT));
    let n = words.next().and_then(|w| integer(w, 1, MAX_EXACT));
    Some(match (through, n, words.next()) {
        (Some(through), Some(n), None) => Ok((through, n)),
        _ => Err(Error::BadApply(
            "refund takes through (0 to 2^53) and n (1 to 2^53)",
        )),
    })
}

/// Most bytes one number of a change takes, its `-` included, and the space before it.
const NUMBER_BYTES: usize = 21;

/// Bytes enough for a window change of `pairs` pairs (`write_change`).
pub const fn change_bytes(pairs: usize) -> usize {
    (2 + 2 * pairs) * NUMBER_BYTES
}

/// Bytes enough for a REFUND's change (`write_refund`).
pub const REFUND_BYTES: usize = REFUND.len() + 2 * NUMBER_BYTES;

/// Writes a REFUND's change, `refund through n`, at the end of `out`; where it starts, or None
/// when `out` is shorter than `REFUND_BYTES`.
pub fn write_refund(out: &mut [u8], through: u64, n: u64) -> Option<usize> {
    let mut w = Cursor::new(out);
    w.decimal(n)?;
    w.byte(b' ')?;
    w.decimal(through)?;
    w.byte(b' ')?;
    w.bytes(REFUND)?;
    Some(w.start())
}

/// Writes `APPLY`'s change, `cutoff pexpireat [ts n]...`, at the end of `out`; where it starts,
/// or None when `out` is shorter than `change_bytes(adds.len())`. Every replicated call writes
/// one, so it is written from its last byte back to its first, each number's digits straight into
/// `out` (four a step, from a table of pairs), neither counted first nor copied.
pub fn write_change(
    out: &mut [u8],
    cutoff: i64,
    pexpireat: i64,
    adds: &[(u64, u64)],
) -> Option<usize> {
    let mut w = Cursor::new(out);
    for &(ts, n) in adds.iter().rev() {
        w.decimal(n)?;
        w.byte(b' ')?;
        w.decimal(ts)?;
        w.byte(b' ')?;
    }
    w.decimal(pexpireat.unsigned_abs())?;
    w.byte(b' ')?;
    w.decimal(cutoff.unsigned_abs())?;
    if cutoff < 0 {
        w.byte(b'-')?;
    }
    Some(w.start())
}

/// A change being written from its end: the part of its buffer before it, still free.
struct Cursor<'b> {
    free: &'b mut [u8],
}

impl<'b> Cursor<'b> {
    fn new(out: &'b mut [u8]) -> Self {
        Cursor { free: out }
    }

    /// Where the change starts in the buffer.
    fn start(&self) -> usize {
        self.free.len()
    }

    /// The last `N` free bytes, taken.
    fn take<const N: usize>(&mut self) -> Option<&'b mut [u8; N]> {
        let (free, taken) = std::mem::take(&mut self.free).split_last_chunk_mut::<N>()?;
        self.free = free;
        Some(taken)
    }

    fn byte(&mut self, b: u8) -> Option<()> {
        *self.take::<1>()? = [b];
        Some(())
    }

    fn bytes<const N: usize>(&mut self, bytes: &[u8; N]) -> Option<()> {
        *self.take::<N>()? = *bytes;
        Some(())
    }

    /// `v` in decimal, its last four digits first.
    #[inline]
    fn decimal(&mut self, mut v: u64) -> Option<()> {
        while v >= 10_000 {
            let r = (v % 10_000) as usize;
            v /= 10_000;
            let ([a, b], [c, d]) = (PAIRS[r / 100], PAIRS[r % 100]);
            *self.take::<4>()? = [a, b, c, d];
        }
        // One to four digits left.
        let v = v as usize;
        if v >= 100 {
            *self.take::<2>()? = PAIRS[v % 100];
            self.head(v / 100)
        } else {
            self.head(v)
        }
    }

    /// The leading one or two digits of a number, `v` below 100.
    fn head(&mut self, v: usize) -> Option<()> {
        match PAIRS.get(v) {
            Some(&pair) if v >= 10 => *self.take::<2>()? = pair,
            _ => self.byte(b'0' + (v % 10) as u8)?,
        }
        Some(())
    }
}

/// The two digits of each number below 100.
const PAIRS: [[u8; 2]; 100] = {
    let mut pairs = [[0; 2]; 100];
    let mut i = 0;
    while i < 100 {
        pairs[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    pairs
};

/// A decimal integer with an optional leading `-`, within `lo..=hi`.
fn signed(bytes: &[u8], lo: i64, hi: i64) -> Option<i64> {
    let value = match bytes {
        [b'-', digits @ ..] => {
            0i64.checked_sub(i64::try_from(integer(digits, 0, u64::MAX)?).ok()?)?
        }
        digits => i64::try_from(integer(digits, 0, u64::MAX)?).ok()?,
    };
    (lo..=hi).contains(&value).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_arguments() {
        let run = |change: &str| apply(change.as_bytes(), 10);
        let ok = |cutoff, pexpireat, adds: &[(u64, u64)]| {
            Ok(Apply {
                cutoff,
                pexpireat,
                adds: adds.to_vec(),
            })
        };
        let bad = |why| Err(Error::BadApply(why));
        let cutoff = "cutoff must be an integer between -2^53 and 2^53";
        let n = "n must be a positive integer within the per-call cap";
        let cases = [
            ("-1 0", ok(-1, 0, &[])),
            ("5 99 7 2 8 3", ok(5, 99, &[(7, 2), (8, 3)])),
            (
                "-9007199254740992 0 9007199254740992 10",
                ok(-9007199254740992, 0, &[(9007199254740992, 10)]),
            ),
            ("-9007199254740993 0", bad(cutoff)),
            ("- 0", bad(cutoff)),
            ("", bad(cutoff)),
            ("1", bad("pexpireat must be a non-negative integer")),
            ("1 -1", bad("pexpireat must be a non-negative integer")),
            ("1 0 5", bad("timestamps come in pairs: ts n")),
            ("1 0 5 0", bad(n)),
            ("1 0 5 11", bad(n)),
            ("1 0  5 1", bad("ts must be an integer between 0 and 2^53")),
            ("1 0 5 1 ", bad("ts must be an integer between 0 and 2^53")),
            ("1 0 5 6 7 5", bad("more timestamps than one call may add")),
            (
                "1 0 9007199254740993 1",
                bad("ts must be an integer between 0 and 2^53"),
            ),
        ];
        for (change, want) in cases {
            assert_eq!(run(change), want, "{change:?}");
        }
        let refunds = [
            ("refund 5 2", Some(Ok((5, 2)))),
            ("refund 9007199254740992 1", Some(Ok((MAX_EXACT, 1)))),
            ("refund 5 0", Some(Err(()))),
            ("refund 5", Some(Err(()))),
            ("refund 5 1 1", Some(Err(()))),
            ("refund -1 1", Some(Err(()))),
            ("5 0", None),
            ("-1 0 5 1", None),
        ];
        for (change, want) in refunds {
            let got = refund(change.as_bytes()).map(|r| r.map_err(|_| ()));
            assert_eq!(got, want, "{change:?}");
        }
        let mut out = [0u8; REFUND_BYTES];
        let start = write_refund(&mut out, MAX_EXACT, 3);
        assert_eq!(
            start.map(|at| refund(&out[at..])),
            Some(Some(Ok((MAX_EXACT, 3))))
        );
        assert_eq!(write_refund(&mut out[..20], MAX_EXACT, 3), None);
        let mut powers: Vec<u64> = (0..20).map(|e| 10u64.pow(e)).collect();
        powers.extend([1_700_000_000_000, MAX_EXACT, u64::MAX - 1, u64::MAX]);
        let numbers = (0..20_000)
            .chain((0..64).map(|i| 0x9E37_79B9_7F4A_7C15u64.rotate_left(i)))
            .chain(
                powers
                    .iter()
                    .flat_map(|&p| [p.saturating_sub(1), p, p.saturating_add(1), p / 2 + 7]),
            );
        let mut out = [0u8; NUMBER_BYTES];
        for v in numbers {
            let mut w = Cursor::new(&mut out);
            assert_eq!(w.decimal(v), Some(()), "{v}");
            let at = w.start();
            assert_eq!(&out[at..], v.to_string().as_bytes(), "{v}");
        }
        let written = |cutoff, pexpireat, adds: &[(u64, u64)]| {
            let mut out = vec![0u8; change_bytes(adds.len())];
            let start = write_change(&mut out, cutoff, pexpireat, adds);
            out.drain(..start.unwrap_or(out.len()));
            out
        };
        let out = written(-3, 0, &[(7, 2), (9, 1)]);
        assert_eq!(out, b"-3 0 7 2 9 1");
        assert_eq!(apply(&out, 10), ok(-3, 0, &[(7, 2), (9, 1)]));
        let (low, high) = (-(MAX_EXACT as i64), i64::MAX);
        let out = written(low, high, &[(0, 1), (MAX_EXACT, 10)]);
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("{low} {high} 0 1 {MAX_EXACT} 10")
        );
        let out = written(i64::MIN, i64::MAX, &[(u64::MAX, u64::MAX)]);
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("{} {} {} {}", i64::MIN, i64::MAX, u64::MAX, u64::MAX)
        );
        assert_eq!(write_change(&mut [0u8; 8], 1, 1_700_000_000_000, &[]), None);
    }
}
