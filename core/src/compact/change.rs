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
const REFUND: &[u8] = b"refund";

/// A REFUND's change, if `change` is one: `(through, n)`, or what is wrong with it.
pub fn refund(change: &[u8]) -> Option<Result<(u64, u64), Error>> {
    let mut words = change.split(|b| *b == b' ');
    if words.next() != Some(REFUND) {
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

/// Writes a REFUND's change: `refund through n`.
pub fn write_refund(out: &mut impl std::io::Write, through: u64, n: u64) -> std::io::Result<()> {
    let mut buf = itoa::Buffer::new();
    out.write_all(REFUND)?;
    out.write_all(b" ")?;
    out.write_all(decimal(through, &mut buf))?;
    out.write_all(b" ")?;
    out.write_all(decimal(n, &mut buf))
}

/// Writes `APPLY`'s change: `cutoff pexpireat [ts n]...`. Every replicated call writes one, so
/// the numbers are spelled by hand rather than through `fmt`, at a tenth of its cost.
pub fn write_change(
    out: &mut impl std::io::Write,
    cutoff: i64,
    pexpireat: i64,
    adds: &[(u64, u64)],
) -> std::io::Result<()> {
    let mut buf = itoa::Buffer::new();
    if cutoff < 0 {
        out.write_all(b"-")?;
    }
    out.write_all(decimal(cutoff.unsigned_abs(), &mut buf))?;
    out.write_all(b" ")?;
    out.write_all(decimal(pexpireat.unsigned_abs(), &mut buf))?;
    for &(ts, n) in adds {
        out.write_all(b" ")?;
        out.write_all(decimal(ts, &mut buf))?;
        out.write_all(b" ")?;
        out.write_all(decimal(n, &mut buf))?;
    }
    Ok(())
}

/// `v` in decimal (`itoa`: four digits a step from a table of pairs; a timestamp has 13).
fn decimal(v: u64, buf: &mut itoa::Buffer) -> &[u8] {
    buf.format(v).as_bytes()
}

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
        let mut out = Vec::new();
        assert!(write_refund(&mut out, MAX_EXACT, 3).is_ok());
        assert_eq!(refund(&out), Some(Ok((MAX_EXACT, 3))));
        let mut buf = itoa::Buffer::new();
        let mut powers: Vec<u64> = (0..20).map(|e| 10u64.pow(e)).collect();
        powers.extend([1_700_000_000_000, MAX_EXACT, u64::MAX - 1, u64::MAX]);
        for v in (0..20_000).chain((0..64).map(|i| 0x9E37_79B9_7F4A_7C15u64.rotate_left(i))) {
            assert_eq!(decimal(v, &mut buf), v.to_string().as_bytes(), "{v}");
        }
        for p in powers {
            for v in [p.saturating_sub(1), p, p.saturating_add(1), p / 2 + 7] {
                assert_eq!(decimal(v, &mut buf), v.to_string().as_bytes(), "{v}");
            }
        }
        let mut out = Vec::new();
        assert!(write_change(&mut out, -3, 0, &[(7, 2), (9, 1)]).is_ok());
        assert_eq!(out, b"-3 0 7 2 9 1");
        assert_eq!(apply(&out, 10), ok(-3, 0, &[(7, 2), (9, 1)]));
        let (low, high) = (-(MAX_EXACT as i64), i64::MAX);
        let mut out = Vec::new();
        assert!(write_change(&mut out, low, high, &[(0, 1), (MAX_EXACT, 10)]).is_ok());
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("{low} {high} 0 1 {MAX_EXACT} 10")
        );
    }
}
