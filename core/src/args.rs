//! Argument parsing for `SLIDINGWINDOW.ALLOW|PEEK key window max now [COST n] [LIMIT window max]...
//! [LEASE ms] [PRECISION p] [DETAIL]`, `SLIDINGWINDOW.ALLOWALL|PEEKALL numkeys key [key ...] now
//! [COST n] LIMIT keyno window max... [LEASE ms] [PRECISION p] [DETAIL]` and
//! `SLIDINGWINDOW.REFUND key n [AT ts]`, free of Redis.

use super::error::{Arg, Error, MAX_EXACT, MAX_KEYS, MAX_LIMITS, MAX_WINDOW_SECONDS, token};
use super::limits::{KeyedLimits, Limit, Limits};

/// Most words a well-formed call has: name, key, window, max, now, `COST n`, `LEASE ms`,
/// `PRECISION p`, `DETAIL`, 15 `LIMIT w m`.
pub const MOST_WORDS: usize = 5 + 2 + 2 + 2 + 1 + 3 * (MAX_LIMITS - 1);

/// A call of this many words is parsed without its command's name (word 0) by every parser
/// here: each reads the name only for a wrong arity, and none has one at five words.
pub const NAMELESS: usize = 5;

/// When the request happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Now {
    /// Unix time in ms, as the client sent it.
    At(u64),
    /// `*`: the server's clock.
    Server,
}

/// A parsed call, every number already checked against its range: ALLOW's and PEEK's with one
/// key's `Limits`, ALLOWALL's and PEEKALL's with `KeyedLimits`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args<L = Limits> {
    /// ALLOW: the positional limit first, then each `LIMIT` option in the order given; ALLOWALL:
    /// each `LIMIT` option in order, with its key.
    pub limits: L,
    pub now: Now,
    pub cost: u64,
    /// `LEASE ms`: admitted members are scored `now + ms`.
    pub lease: Option<u64>,
    /// `PRECISION p`: admitted members' score rounded up to a multiple of `p`.
    pub precision: Option<u64>,
    /// `DETAIL`: the reply lists every limit's state and the `now` used.
    pub detail: bool,
}

/// Parses the whole argv: command name, key, window, max, now, then options, left to right; the
/// first error wins.
#[inline]
pub fn parse(argv: &[&[u8]]) -> Result<Args, Error> {
    let [name, _key, window, max, now, options @ ..] = argv else {
        let name = argv.first().copied().unwrap_or(b"slidingwindow");
        return Err(Error::WrongArity(token(name).to_ascii_lowercase()));
    };
    let _ = name;
    let window = integer(window, 1, MAX_WINDOW_SECONDS).ok_or(Error::Invalid(Arg::Window))?;
    let max = integer(max, 1, MAX_EXACT).ok_or(Error::Invalid(Arg::Max))?;
    let now = time(now, Arg::Now)?;
    let mut limits = Limits::new(limit(window, max));
    let mut shared = Shared::default();
    let mut rest = options;
    while let [option, tail @ ..] = rest {
        if let Some(tail) = shared.option(option, tail, now)? {
            rest = tail;
        } else if option.eq_ignore_ascii_case(b"LIMIT") {
            // The 17th limit is refused on its name, whatever follows it.
            if limits.count() == MAX_LIMITS {
                return Err(Error::TooManyLimits);
            }
            let [window, max, tail @ ..] = tail else {
                return Err(Error::MissingValues(token(option)));
            };
            let window =
                integer(window, 1, MAX_WINDOW_SECONDS).ok_or(Error::Invalid(Arg::LimitWindow))?;
            let max = integer(max, 1, MAX_EXACT).ok_or(Error::Invalid(Arg::LimitMax))?;
            limits.push(limit(window, max));
            rest = tail;
        } else {
            return Err(Error::UnknownOption(token(option)));
        }
    }
    Ok(Args {
        limits,
        now,
        cost: shared.cost.unwrap_or(1),
        lease: shared.lease,
        precision: shared.precision,
        detail: shared.detail,
    })
}

/// Parses ALLOWALL's whole argv: numkeys, the keys (distinct), now, then options left to right;
/// the first error wins, and a key without a `LIMIT` is told last.
pub fn parse_all(argv: &[&[u8]]) -> Result<Args<KeyedLimits>, Error> {
    let [name, numkeys, rest @ ..] = argv else {
        let name = argv.first().copied().unwrap_or(b"slidingwindow");
        return Err(Error::WrongArity(token(name).to_ascii_lowercase()));
    };
    let _ = name;
    let numkeys = integer(numkeys, 1, MAX_KEYS as u64)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n < rest.len())
        .ok_or(Error::Invalid(Arg::NumKeys))?;
    let (keys, rest) = rest.split_at(numkeys);
    for (i, key) in keys.iter().enumerate() {
        if let Some(first) = keys.iter().take(i).position(|k| k == key) {
            return Err(Error::RepeatedKey(first + 1, i + 1));
        }
    }
    let [now, options @ ..] = rest else {
        return Err(Error::Invalid(Arg::NumKeys));
    };
    let now = time(now, Arg::Now)?;
    // Four words a LIMIT: one allocation of the right size for a well-formed call.
    let mut limits = KeyedLimits::with_capacity(numkeys, options.len() / 4);
    let mut shared = Shared::default();
    let mut rest = options;
    while let [option, tail @ ..] = rest {
        if let Some(tail) = shared.option(option, tail, now)? {
            rest = tail;
        } else if option.eq_ignore_ascii_case(b"LIMIT") {
            let [keyno, window, max, tail @ ..] = tail else {
                return Err(Error::MissingKeyedValues(token(option)));
            };
            let key = integer(keyno, 1, numkeys as u64)
                .and_then(|k| usize::try_from(k).ok())
                .ok_or(Error::Invalid(Arg::LimitKeyno(numkeys)))?;
            if limits.on_key(key - 1) == MAX_LIMITS {
                return Err(Error::TooManyKeyLimits(key));
            }
            let window =
                integer(window, 1, MAX_WINDOW_SECONDS).ok_or(Error::Invalid(Arg::LimitWindow))?;
            let max = integer(max, 1, MAX_EXACT).ok_or(Error::Invalid(Arg::LimitMax))?;
            limits.push(key - 1, limit(window, max));
            rest = tail;
        } else {
            return Err(Error::UnknownOption(token(option)));
        }
    }
    if let Some(key) = limits.first_unlimited() {
        return Err(Error::KeyWithoutLimit(key + 1));
    }
    Ok(Args {
        limits,
        now,
        cost: shared.cost.unwrap_or(1),
        lease: shared.lease,
        precision: shared.precision,
        detail: shared.detail,
    })
}

/// A parsed REFUND call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefundArgs {
    pub n: u64,
    /// `AT ts`: only members scored at or before it; None takes the newest, whatever their score.
    pub at: Option<Now>,
}

/// Parses `SLIDINGWINDOW.REFUND key n [AT ts]`.
pub fn parse_refund(argv: &[&[u8]]) -> Result<RefundArgs, Error> {
    let [_name, _key, n, options @ ..] = argv else {
        let name = argv.first().copied().unwrap_or(b"slidingwindow");
        return Err(Error::WrongArity(token(name).to_ascii_lowercase()));
    };
    let n = integer(n, 1, MAX_EXACT).ok_or(Error::Invalid(Arg::RefundN))?;
    let mut at = None;
    let mut rest = options;
    while let [option, tail @ ..] = rest {
        if !option.eq_ignore_ascii_case(b"AT") {
            return Err(Error::UnknownOption(token(option)));
        }
        if at.is_some() {
            return Err(Error::RepeatedOption(token(option)));
        }
        let [value, tail @ ..] = tail else {
            return Err(Error::MissingValue(token(option)));
        };
        at = Some(time(value, Arg::At)?);
        rest = tail;
    }
    Ok(RefundArgs { n, at })
}

/// A time in ms within `0..=2^53`, or `*` for the server's clock; `arg` names it in the error.
fn time(word: &[u8], arg: Arg) -> Result<Now, Error> {
    match word {
        b"*" => Ok(Now::Server),
        n => Ok(Now::At(
            integer(n, 0, MAX_EXACT).ok_or(Error::Invalid(arg))?,
        )),
    }
}

/// The options ALLOW and ALLOWALL share, each at most once: `COST n`, `LEASE ms`,
/// `PRECISION p`, `DETAIL`.
#[derive(Default)]
struct Shared {
    cost: Option<u64>,
    lease: Option<u64>,
    precision: Option<u64>,
    detail: bool,
}

impl Shared {
    /// Reads `option` if it is one of the shared ones: its value checked, and the words after
    /// it. None for any other option.
    fn option<'w>(
        &mut self,
        option: &[u8],
        tail: &'w [&'w [u8]],
        now: Now,
    ) -> Result<Option<&'w [&'w [u8]]>, Error> {
        if option.eq_ignore_ascii_case(b"DETAIL") {
            if std::mem::replace(&mut self.detail, true) {
                return Err(Error::RepeatedOption(token(option)));
            }
            return Ok(Some(tail));
        }
        let (slot, arg) = if option.eq_ignore_ascii_case(b"COST") {
            (&mut self.cost, Arg::Cost)
        } else if option.eq_ignore_ascii_case(b"LEASE") {
            (&mut self.lease, Arg::Lease)
        } else if option.eq_ignore_ascii_case(b"PRECISION") {
            (&mut self.precision, Arg::Precision)
        } else {
            return Ok(None);
        };
        if slot.is_some() {
            return Err(Error::RepeatedOption(token(option)));
        }
        let [value, tail @ ..] = tail else {
            return Err(Error::MissingValue(token(option)));
        };
        let value = integer(value, 1, MAX_EXACT).ok_or(Error::Invalid(arg))?;
        *slot = Some(value);
        // A lease and the score it and a precision give are checked when read, so the first
        // error read wins: on the caller's own clock exactly, on `*` against the earliest clock
        // there is (again once the clock is read).
        if matches!(arg, Arg::Lease | Arg::Precision) {
            score(earliest(now), self.lease, self.precision)?;
        }
        Ok(Some(tail))
    }
}

/// The earliest `now` a call can have: its own, or for `*` the server's clock, past 0.
fn earliest(now: Now) -> u64 {
    match now {
        Now::At(at) => at,
        Now::Server => 1,
    }
}

/// The ms a lease adds to `now` (0 without `LEASE`), if `now + ms <= 2^53`.
pub fn lease_ms(now: u64, lease: Option<u64>) -> Result<u64, Error> {
    let ms = lease.unwrap_or(0);
    match now.checked_add(ms) {
        Some(end) if end <= MAX_EXACT => Ok(ms),
        _ => Err(Error::Invalid(Arg::Lease)),
    }
}

/// The score an admitted call's members take: `s = now + ms` (`now` without a lease) rounded up
/// to a multiple of `p` (`s` itself without `PRECISION`). A lease past 2^53 is a `LEASE` error,
/// a score past 2^53 a `PRECISION` error.
pub fn score(now: u64, lease: Option<u64>, precision: Option<u64>) -> Result<u64, Error> {
    let s = now.saturating_add(lease_ms(now, lease)?);
    let Some(p) = precision else {
        return Ok(s);
    };
    match s.div_ceil(p.max(1)).checked_mul(p) {
        Some(t) if t <= MAX_EXACT => Ok(t),
        _ => Err(Error::Invalid(Arg::Precision)),
    }
}

fn limit(window_s: u64, max: u64) -> Limit {
    Limit {
        // Cannot overflow: window <= 2^53 / 1000.
        window_ms: window_s.saturating_mul(1000),
        max,
    }
}

/// A plain decimal integer (ASCII digits only, no sign, no spaces) within `lo..=hi`.
pub fn integer(bytes: &[u8], lo: u64, hi: u64) -> Option<u64> {
    let n = bytes.len();
    // Four or eight digits at a time: a word of at least four digits is read as its first and
    // last four (or eight) bytes, overlapping, the overlap counted once.
    let value = match (bytes.first_chunk::<8>(), bytes.last_chunk::<8>()) {
        (Some(head), _) if n == 8 => eight(*head, 0)?,
        (Some(head), Some(tail)) if n <= 16 => eight(*head, 0)?
            .wrapping_mul(POW10[n - 8])
            .wrapping_add(eight(*tail, 16 - n)?),
        (Some(_), Some(_)) => long(bytes)?,
        _ => match (bytes.first_chunk::<4>(), bytes.last_chunk::<4>()) {
            (Some(head), _) if n == 4 => four(*head, 0)?,
            (Some(head), Some(tail)) => four(*head, 0)?
                .wrapping_mul(POW10[n - 4])
                .wrapping_add(four(*tail, 8 - n)?),
            _ => long(bytes)?,
        },
    };
    (lo..=hi).contains(&value).then_some(value)
}

/// 10^k for every k a word of 4 to 16 digits needs.
const POW10: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// Each byte of a word.
const BYTES8: u64 = 0x0101_0101_0101_0101;

/// Eight ASCII digits, the first `skip` of them counted as 0; None if any byte is not a digit.
fn eight(chunk: [u8; 8], skip: usize) -> Option<u64> {
    let x = u64::from_le_bytes(chunk);
    // Each byte's high half is 3, and adding 6 keeps it 3 (the low half at most 9).
    let high = 0xF0 * BYTES8;
    if x & high != 0x30 * BYTES8 || x.wrapping_add(6 * BYTES8) & high != 0x30 * BYTES8 {
        return None;
    }
    // The first digit is the lowest byte: pairs, then fours, then the eight.
    let d = (x - 0x30 * BYTES8) & u64::MAX.checked_shl(8 * skip as u32).unwrap_or(0);
    let d = (d.wrapping_mul(10) + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    let d = (d.wrapping_mul(100) + (d >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some((d.wrapping_mul(10_000) + (d >> 32)) & 0xFFFF_FFFF)
}

/// Four ASCII digits, the first `skip` of them counted as 0; None if any byte is not a digit.
fn four(chunk: [u8; 4], skip: usize) -> Option<u64> {
    let x = u32::from_le_bytes(chunk);
    let high = 0xF0F0_F0F0;
    if x & high != 0x3030_3030 || x.wrapping_add(0x0606_0606) & high != 0x3030_3030 {
        return None;
    }
    let d = (x - 0x3030_3030) & u32::MAX.checked_shl(8 * skip as u32).unwrap_or(0);
    let d = (d.wrapping_mul(10) + (d >> 8)) & 0x00FF_00FF;
    Some(u64::from((d.wrapping_mul(100) + (d >> 16)) & 0xFFFF))
}

/// A word of any length, a digit at a time.
fn long(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    if bytes.len() <= 19 {
        // Nineteen digits stay below 10^19 < 2^64: no step can overflow.
        for &b in bytes {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            value = value * 10 + u64::from(digit);
        }
    } else {
        for &b in bytes {
            let digit = u64::from(b.checked_sub(b'0').filter(|d| *d <= 9)?);
            value = value.checked_mul(10)?.checked_add(digit)?;
        }
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> Result<Args, Error> {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse(&words)
    }

    fn ok(window_ms: u64, max: u64, now: Now, cost: u64) -> Result<Args, Error> {
        multi(&[(window_ms, max)], now, cost)
    }

    /// Limits as (window ms, max), the positional one first.
    fn multi(limits: &[(u64, u64)], now: Now, cost: u64) -> Result<Args, Error> {
        let mut all = Limits::new(Limit {
            window_ms: limits[0].0,
            max: limits[0].1,
        });
        for &(window_ms, max) in &limits[1..] {
            assert!(all.push(Limit { window_ms, max }));
        }
        Ok(Args {
            limits: all,
            now,
            cost,
            lease: None,
            precision: None,
            detail: false,
        })
    }

    #[test]
    fn valid_forms() {
        let cases = [
            ("ALLOW k 10 5 1000", ok(10_000, 5, Now::At(1000), 1)),
            ("ALLOW k 1 1 0", ok(1000, 1, Now::At(0), 1)),
            ("ALLOW k 60 100 *", ok(60_000, 100, Now::Server, 1)),
            ("ALLOW k 60 100 5 COST 3", ok(60_000, 100, Now::At(5), 3)),
            ("ALLOW k 60 100 5 cost 3", ok(60_000, 100, Now::At(5), 3)),
            ("ALLOW k 60 100 5 CoSt 1", ok(60_000, 100, Now::At(5), 1)),
            (
                "ALLOW k 60 100 * COST 9007199254740992",
                ok(60_000, 100, Now::Server, MAX_EXACT),
            ),
            (
                "ALLOW k 9007199254740 9007199254740992 9007199254740992",
                ok(9_007_199_254_740_000, MAX_EXACT, Now::At(MAX_EXACT), 1),
            ),
            ("ALLOW k 010 05 007", ok(10_000, 5, Now::At(7), 1)),
        ];
        for (line, want) in cases {
            assert_eq!(run(line), want, "{line}");
        }
    }

    #[test]
    fn integers_of_any_length_parse_exactly() {
        let max = u64::MAX;
        assert_eq!(
            integer(b"9999999999999999999", 0, max),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(integer(b"18446744073709551615", 0, max), Some(max));
        assert_eq!(integer(b"18446744073709551616", 0, max), None);
        assert_eq!(integer(b"0000000000000000000000001", 0, max), Some(1));
        assert_eq!(integer(b"000000000000000000:", 0, max), None);
        assert_eq!(integer(b"/", 0, max), None);
        assert_eq!(integer(b"7", 8, max), None);
    }

    #[test]
    fn integers_read_in_chunks_agree_with_a_digit_at_a_time() {
        let mut rng = crate::rng::Rng::new(58);
        // Every length a chunk covers, and past it; one byte in a few not a digit, at any place.
        for _ in 0..20_000 {
            let n = rng.range(0, 21) as usize;
            let mut word: Vec<u8> = (0..n).map(|_| b'0' + rng.range(0, 9) as u8).collect();
            if n > 0 && rng.chance(30) {
                let at = rng.range(0, n as u64 - 1) as usize;
                word[at] = rng.pick(b"/:0a \xff\x00-+.9".as_slice());
            }
            let want = long(&word);
            assert_eq!(integer(&word, 0, u64::MAX), want, "{word:?}");
            if let Some(v) = want {
                assert_eq!(integer(&word, v, v), Some(v));
                assert_eq!(integer(&word, v.saturating_add(1), u64::MAX), None);
            }
        }
        for (word, want) in [
            ("3600", Some(3600)),
            ("1000000000", Some(1_000_000_000)),
            ("1700000001000", Some(1_700_000_001_000)),
            ("12345678", Some(12_345_678)),
            ("1234567890123456", Some(1_234_567_890_123_456)),
            ("00000000", Some(0)),
            ("9999999999999999", Some(9_999_999_999_999_999)),
            ("1234567/", None),
            ("123:", None),
            ("123456789012345\u{7f}", None),
        ] {
            assert_eq!(integer(word.as_bytes(), 0, u64::MAX), want, "{word}");
        }
    }

    #[test]
    fn no_parser_reads_the_name_of_a_call_of_five_words() {
        let lines = [
            "ALLOW k 10 5 1000",
            "ALLOW k 10 5 *",
            "ALLOW k x 5 1000",
            "ALLOWALL 1 k 5 LIMIT",
            "ALLOWALL 2 a b 5",
            "ALLOWALL 3 a b c",
            "ALLOWALL 9 a b c",
            "REFUND k 1 AT 5",
            "REFUND k 1 AT x",
            "REFUND k x y z",
        ];
        for line in lines {
            let named: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            assert_eq!(named.len(), NAMELESS);
            let mut nameless = named.clone();
            nameless[0] = b"";
            assert_eq!(parse(&named), parse(&nameless), "{line}");
            assert_eq!(parse_all(&named), parse_all(&nameless), "{line}");
            assert_eq!(parse_refund(&named), parse_refund(&nameless), "{line}");
        }
    }

    #[test]
    fn invalid_numbers_name_their_argument() {
        let bad = [
            "",
            "-1",
            "+1",
            "1.5",
            "1e3",
            "inf",
            "-inf",
            "nan",
            " 1",
            "1 ",
            "0x10",
            "**",
            "99999999999999999999999",
            "18446744073709551616",
            "18446744073709551615",
            "9007199254740993",
            "１",
        ];
        for b in bad {
            let w = [b"ALLOW".as_slice(), b"k", b.as_bytes(), b"5", b"1000"];
            assert_eq!(parse(&w), Err(Error::Invalid(Arg::Window)), "window {b:?}");
            let m = [b"ALLOW".as_slice(), b"k", b"10", b.as_bytes(), b"1000"];
            assert_eq!(parse(&m), Err(Error::Invalid(Arg::Max)), "max {b:?}");
            if b != "*" {
                let n = [b"ALLOW".as_slice(), b"k", b"10", b"5", b.as_bytes()];
                assert_eq!(parse(&n), Err(Error::Invalid(Arg::Now)), "now {b:?}");
            }
            let c = [
                b"ALLOW".as_slice(),
                b"k",
                b"10",
                b"5",
                b"1",
                b"COST",
                b.as_bytes(),
            ];
            assert_eq!(parse(&c), Err(Error::Invalid(Arg::Cost)), "cost {b:?}");
        }
        let range = [
            ("ALLOW k 0 5 1", Arg::Window),
            ("ALLOW k 9007199254741 5 1", Arg::Window),
            ("ALLOW k 10 0 1", Arg::Max),
            ("ALLOW k 10 9007199254740993 1", Arg::Max),
            ("ALLOW k 10 5 9007199254740993", Arg::Now),
            ("ALLOW k 10 5 1 COST 0", Arg::Cost),
            ("ALLOW k 10 5 1 COST 9007199254740993", Arg::Cost),
        ];
        for (line, arg) in range {
            assert_eq!(run(line), Err(Error::Invalid(arg)), "{line}");
        }
    }

    #[test]
    fn arguments_are_checked_in_order() {
        assert_eq!(run("ALLOW k x y z"), Err(Error::Invalid(Arg::Window)));
        assert_eq!(run("ALLOW k 1 y z"), Err(Error::Invalid(Arg::Max)));
        assert_eq!(run("ALLOW k 1 1 z COST 0"), Err(Error::Invalid(Arg::Now)));
    }

    #[test]
    fn options() {
        let cases = [
            ("ALLOW k 10 5 1 FOO 1", Error::UnknownOption("FOO".into())),
            (
                "ALLOW k 10 5 1 COST 1 COST 2",
                Error::RepeatedOption("COST".into()),
            ),
            (
                "ALLOW k 10 5 1 COST 1 cost 2",
                Error::RepeatedOption("cost".into()),
            ),
            ("ALLOW k 10 5 1 COST", Error::MissingValue("COST".into())),
            (
                "ALLOW k 10 5 1 COST 1 COST",
                Error::RepeatedOption("COST".into()),
            ),
            ("ALLOW k 10 5 1 COST 1 X", Error::UnknownOption("X".into())),
            (
                "ALLOW k 10 5 1 COSTS 1",
                Error::UnknownOption("COSTS".into()),
            ),
            ("ALLOW k 10 5 1 COST x", Error::Invalid(Arg::Cost)),
        ];
        for (line, want) in cases {
            assert_eq!(run(line), Err(want), "{line}");
        }
        let binary = [b"ALLOW".as_slice(), b"k", b"1", b"1", b"1", b"\r\n\x00"];
        assert_eq!(
            parse(&binary),
            Err(Error::UnknownOption("\\x0d\\x0a\\x00".into()))
        );
    }

    #[test]
    fn limit_options() {
        let at = Now::At(5);
        let cases = [
            (
                "ALLOW k 1 20 5 LIMIT 60 600",
                multi(&[(1000, 20), (60_000, 600)], at, 1),
            ),
            // Any order, any case, COST anywhere among them.
            (
                "ALLOW k 1 20 5 limit 60 600 COST 2 LiMiT 3600 20000",
                multi(&[(1000, 20), (60_000, 600), (3_600_000, 20_000)], at, 2),
            ),
            (
                "ALLOW k 1 20 5 COST 2 LIMIT 60 600",
                multi(&[(1000, 20), (60_000, 600)], at, 2),
            ),
            // Equal to the positional one, or repeated: each is a limit of its own.
            (
                "ALLOW k 10 3 5 LIMIT 10 3 LIMIT 10 3",
                multi(&[(10_000, 3), (10_000, 3), (10_000, 3)], at, 1),
            ),
            // A limit longer than the positional one.
            (
                "ALLOW k 1 1 * LIMIT 9007199254740 9007199254740992",
                multi(
                    &[(1000, 1), (9_007_199_254_740_000, MAX_EXACT)],
                    Now::Server,
                    1,
                ),
            ),
            (
                "ALLOW k 1 1 5 LIMIT 010 05",
                multi(&[(1000, 1), (10_000, 5)], at, 1),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(run(line), want, "{line}");
        }
        let windows =
            |n: usize| -> String { (0..n).map(|i| format!(" LIMIT {} 7", i + 2)).collect() };
        // 16 limits in all: 15 options.
        let sixteen: Vec<(u64, u64)> = std::iter::once((1000, 1))
            .chain((0..15).map(|i| ((i + 2) * 1000, 7)))
            .collect();
        let line = format!("ALLOW k 1 1 5{}", windows(15));
        assert_eq!(run(&line), multi(&sixteen, at, 1));
        let line = format!("ALLOW k 1 1 5{} COST 3", windows(15));
        assert_eq!(run(&line), multi(&sixteen, at, 3));
    }

    #[test]
    fn limit_errors_first_one_wins() {
        let many = |n: usize, tail: &str| -> String {
            let options: String = (0..n).map(|_| " LIMIT 2 7").collect();
            format!("ALLOW k 1 1 5{options}{tail}")
        };
        let cases = [
            ("ALLOW k 1 1 5 LIMIT", Error::MissingValues("LIMIT".into())),
            (
                "ALLOW k 1 1 5 limit 10",
                Error::MissingValues("limit".into()),
            ),
            ("ALLOW k 1 1 5 LIMIT 0 1", Error::Invalid(Arg::LimitWindow)),
            (
                "ALLOW k 1 1 5 LIMIT 9007199254741 1",
                Error::Invalid(Arg::LimitWindow),
            ),
            ("ALLOW k 1 1 5 LIMIT x 1", Error::Invalid(Arg::LimitWindow)),
            ("ALLOW k 1 1 5 LIMIT 1 0", Error::Invalid(Arg::LimitMax)),
            (
                "ALLOW k 1 1 5 LIMIT 1 9007199254740993",
                Error::Invalid(Arg::LimitMax),
            ),
            // The window is checked before the max.
            ("ALLOW k 1 1 5 LIMIT 0 0", Error::Invalid(Arg::LimitWindow)),
            // Two words follow, so it is not missing values: the second is a bad max.
            (
                "ALLOW k 1 1 5 LIMIT 10 COST 3",
                Error::Invalid(Arg::LimitMax),
            ),
            // Left to right: the first bad option decides.
            (
                "ALLOW k 1 1 5 LIMIT 0 1 COST 0",
                Error::Invalid(Arg::LimitWindow),
            ),
            ("ALLOW k 1 1 5 COST 0 LIMIT 0 1", Error::Invalid(Arg::Cost)),
            (
                "ALLOW k 1 1 5 LIMIT 1 1 FOO",
                Error::UnknownOption("FOO".into()),
            ),
            (
                "ALLOW k 1 1 5 FOO LIMIT 0 1",
                Error::UnknownOption("FOO".into()),
            ),
            (
                "ALLOW k 1 1 5 LIMIT 1 1 COST 1 COST 2",
                Error::RepeatedOption("COST".into()),
            ),
            (
                "ALLOW k 1 1 5 LIMITS 1 1",
                Error::UnknownOption("LIMITS".into()),
            ),
            // Positional arguments are checked before any option.
            ("ALLOW k 0 1 5 LIMIT 0 1", Error::Invalid(Arg::Window)),
        ];
        for (line, want) in cases {
            assert_eq!(run(line), Err(want), "{line}");
        }
        // The 17th limit is refused on its name, before its values (or their absence).
        for tail in ["", " 1", " 0 0", " 1 1", " x y"] {
            let line = many(16, &format!(" LIMIT{tail}"));
            assert_eq!(run(&line), Err(Error::TooManyLimits), "{line}");
        }
        // A bad value among the first 16 is reported before the count is exceeded.
        let line = format!(
            "ALLOW k 1 1 5 LIMIT 0 1{}",
            many(16, "").trim_start_matches("ALLOW k 1 1 5")
        );
        assert_eq!(run(&line), Err(Error::Invalid(Arg::LimitWindow)));
        assert!(run(&many(15, "")).is_ok());
    }

    #[test]
    fn arity() {
        let cases: &[&[&[u8]]] = &[
            &[],
            &[b"SLIDINGWINDOW.ALLOW"],
            &[b"SLIDINGWINDOW.ALLOW", b"k"],
            &[b"SlidingWindow.Allow", b"k", b"1", b"1"],
        ];
        for argv in cases {
            let Err(Error::WrongArity(name)) = parse(argv) else {
                panic!("{argv:?} should be a wrong arity");
            };
            if !argv.is_empty() {
                assert_eq!(name, "slidingwindow.allow");
            }
        }
    }

    fn all(line: &str) -> Result<Args<KeyedLimits>, Error> {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse_all(&words)
    }

    /// Limits as (key 0-based, window s, max).
    fn keyed(
        numkeys: usize,
        limits: &[(usize, u64, u64)],
        now: Now,
        cost: u64,
    ) -> Args<KeyedLimits> {
        let mut all = KeyedLimits::with_capacity(numkeys, 0);
        for &(k, w, m) in limits {
            assert!(all.push(k, limit(w, m)));
        }
        Args {
            limits: all,
            now,
            cost,
            lease: None,
            precision: None,
            detail: false,
        }
    }

    #[test]
    fn allowall_valid_forms() {
        let at = Now::At(5);
        let cases = [
            (
                "ALLOWALL 1 k 5 LIMIT 1 10 3",
                keyed(1, &[(0, 10, 3)], at, 1),
            ),
            (
                "ALLOWALL 2 u t * limit 2 60 1000 COST 3 LIMIT 1 1 10 Limit 1 60 100",
                keyed(
                    2,
                    &[(1, 60, 1000), (0, 1, 10), (0, 60, 100)],
                    Now::Server,
                    3,
                ),
            ),
            (
                "ALLOWALL 2 a b 0 COST 1 LIMIT 02 9007199254740 9007199254740992 LIMIT 1 1 1",
                keyed(
                    2,
                    &[(1, MAX_WINDOW_SECONDS, MAX_EXACT), (0, 1, 1)],
                    Now::At(0),
                    1,
                ),
            ),
            // A key that looks like an option or a number is still a key.
            (
                "ALLOWALL 3 LIMIT COST 7 5 LIMIT 3 1 1 LIMIT 2 1 1 LIMIT 1 1 1",
                keyed(3, &[(2, 1, 1), (1, 1, 1), (0, 1, 1)], at, 1),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(all(line), Ok(want), "{line}");
        }
        // 16 keys with 16 limits each.
        let keys: String = (0..16).map(|k| format!(" k{k}")).collect();
        let limits: String = (1..=16)
            .flat_map(|k| (1..=16).map(move |w| format!(" LIMIT {k} {w} 9")))
            .collect();
        let line = format!("ALLOWALL 16{keys} 5{limits}");
        let Ok(parsed) = all(&line) else {
            panic!("{line}");
        };
        assert_eq!(parsed.limits.count(), 256);
        assert_eq!(parsed.limits.longest_window_ms(15), 16_000);
    }

    #[test]
    fn allowall_errors_first_one_wins() {
        let limits17 = (0..17).map(|_| " LIMIT 2 1 1").collect::<String>();
        let cases = [
            ("ALLOWALL 0 k 5 LIMIT 1 1 1", Error::Invalid(Arg::NumKeys)),
            ("ALLOWALL 17 k 5 LIMIT 1 1 1", Error::Invalid(Arg::NumKeys)),
            ("ALLOWALL x k 5 LIMIT 1 1 1", Error::Invalid(Arg::NumKeys)),
            ("ALLOWALL -1 k 5 LIMIT 1 1 1", Error::Invalid(Arg::NumKeys)),
            // More keys than words left for them and now.
            ("ALLOWALL 4 a b c", Error::Invalid(Arg::NumKeys)),
            ("ALLOWALL 2 a b", Error::Invalid(Arg::NumKeys)),
            ("ALLOWALL 1 a", Error::Invalid(Arg::NumKeys)),
            ("ALLOWALL 3 a b a 5 LIMIT 1 1 1", Error::RepeatedKey(1, 3)),
            ("ALLOWALL 3 a b b x", Error::RepeatedKey(2, 3)),
            ("ALLOWALL 1 a x LIMIT 1 1 1", Error::Invalid(Arg::Now)),
            ("ALLOWALL 1 a 9007199254740993", Error::Invalid(Arg::Now)),
            ("ALLOWALL 1 a 5", Error::KeyWithoutLimit(1)),
            ("ALLOWALL 2 a b 5 LIMIT 1 1 1", Error::KeyWithoutLimit(2)),
            ("ALLOWALL 2 a b 5 COST 2", Error::KeyWithoutLimit(1)),
            (
                "ALLOWALL 2 a b 5 LIMIT 1 1",
                Error::MissingKeyedValues("LIMIT".into()),
            ),
            (
                "ALLOWALL 2 a b 5 LIMIT 3 1 1",
                Error::Invalid(Arg::LimitKeyno(2)),
            ),
            (
                "ALLOWALL 2 a b 5 LIMIT 0 1 1",
                Error::Invalid(Arg::LimitKeyno(2)),
            ),
            (
                "ALLOWALL 2 a b 5 LIMIT 1 0 1",
                Error::Invalid(Arg::LimitWindow),
            ),
            (
                "ALLOWALL 2 a b 5 LIMIT 1 1 0",
                Error::Invalid(Arg::LimitMax),
            ),
            // keyno, then window, then max.
            (
                "ALLOWALL 2 a b 5 LIMIT x 0 0",
                Error::Invalid(Arg::LimitKeyno(2)),
            ),
            (
                "ALLOWALL 1 a 5 LIMIT 1 1 1 COST 0",
                Error::Invalid(Arg::Cost),
            ),
            (
                "ALLOWALL 1 a 5 COST 1 LIMIT 1 1 1 cost 2",
                Error::RepeatedOption("cost".into()),
            ),
            ("ALLOWALL 1 a 5 COST", Error::MissingValue("COST".into())),
            (
                "ALLOWALL 1 a 5 LIMIT 1 1 1 FOO",
                Error::UnknownOption("FOO".into()),
            ),
            // An option error comes before a key without a LIMIT.
            ("ALLOWALL 2 a b 5 FOO", Error::UnknownOption("FOO".into())),
        ];
        for (line, want) in cases {
            assert_eq!(all(line), Err(want), "{line}");
        }
        // The 17th limit on one key, whatever follows its keyno.
        let line = format!("ALLOWALL 2 a b 5 LIMIT 1 1 1{limits17}");
        assert_eq!(all(&line), Err(Error::TooManyKeyLimits(2)));
        let line = format!("ALLOWALL 2 a b 5{} LIMIT 2 0 0", &limits17[..16 * 12]);
        assert_eq!(all(&line), Err(Error::TooManyKeyLimits(2)));
        for argv in [&[][..], &[b"SLIDINGWINDOW.ALLOWALL".as_slice()][..]] {
            let Err(Error::WrongArity(_)) = parse_all(argv) else {
                panic!("{argv:?} should be a wrong arity");
            };
        }
    }

    #[test]
    fn lease_and_detail() {
        let with = |lease: Option<u64>, detail: bool, cost: u64, now: Now| {
            ok(10_000, 5, now, cost).map(|a| Args { lease, detail, ..a })
        };
        let top = MAX_EXACT;
        let cases = [
            (
                "ALLOW k 10 5 1000 LEASE 1",
                with(Some(1), false, 1, Now::At(1000)),
            ),
            (
                "ALLOW k 10 5 1000 lease 250 DETAIL",
                with(Some(250), true, 1, Now::At(1000)),
            ),
            (
                "ALLOW k 10 5 1000 detail",
                with(None, true, 1, Now::At(1000)),
            ),
            (
                "ALLOW k 10 5 1000 DeTaIl COST 3 LeAsE 7",
                with(Some(7), true, 3, Now::At(1000)),
            ),
            // now + ms = 2^53 exactly.
            (
                "ALLOW k 10 5 1000 LEASE 9007199254739992",
                with(Some(top - 1000), false, 1, Now::At(1000)),
            ),
            // With `*` the server's clock is past 0: 2^53 is out of range at any clock, and said
            // before a later error.
            (
                "ALLOW k 10 5 * LEASE 9007199254740991",
                with(Some(top - 1), false, 1, Now::Server),
            ),
            (
                "ALLOW k 10 5 * LEASE 9007199254740992",
                Err(Error::Invalid(Arg::Lease)),
            ),
            (
                "ALLOW k 1 1 * LEASE 9007199254740992 FOO",
                Err(Error::Invalid(Arg::Lease)),
            ),
            (
                "ALLOW k 1 1 5 LEASE 9007199254740992 FOO",
                Err(Error::Invalid(Arg::Lease)),
            ),
            ("ALLOW k 10 5 1000 LEASE 0", Err(Error::Invalid(Arg::Lease))),
            (
                "ALLOW k 10 5 1000 LEASE -1",
                Err(Error::Invalid(Arg::Lease)),
            ),
            (
                "ALLOW k 10 5 1000 LEASE 1.5",
                Err(Error::Invalid(Arg::Lease)),
            ),
            (
                "ALLOW k 10 5 1000 LEASE 9007199254739993",
                Err(Error::Invalid(Arg::Lease)),
            ),
            (
                "ALLOW k 10 5 * LEASE 9007199254740993",
                Err(Error::Invalid(Arg::Lease)),
            ),
            (
                "ALLOW k 10 5 1000 LEASE",
                Err(Error::MissingValue("LEASE".into())),
            ),
            (
                "ALLOW k 10 5 1000 LEASE 5 lease 6",
                Err(Error::RepeatedOption("lease".into())),
            ),
            (
                "ALLOW k 10 5 1000 DETAIL detail",
                Err(Error::RepeatedOption("detail".into())),
            ),
            // DETAIL takes no value: the word after it is the next option.
            (
                "ALLOW k 10 5 1000 DETAIL 5",
                Err(Error::UnknownOption("5".into())),
            ),
            (
                "ALLOW k 10 5 1000 DETAILS",
                Err(Error::UnknownOption("DETAILS".into())),
            ),
            // Left to right: the first bad option decides.
            (
                "ALLOW k 10 5 1000 LEASE 0 COST 0",
                Err(Error::Invalid(Arg::Lease)),
            ),
            (
                "ALLOW k 10 5 1000 COST 0 LEASE 0",
                Err(Error::Invalid(Arg::Cost)),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(run(line), want, "{line}");
        }
        // With LIMIT options in between, and on ALLOWALL.
        let Ok(a) = run("ALLOW k 1 2 5 LIMIT 60 10 LEASE 100 LIMIT 5 3 DETAIL") else {
            panic!("LEASE among LIMIT options");
        };
        assert_eq!((a.lease, a.detail, a.limits.count()), (Some(100), true, 3));
        let Ok(a) = all("ALLOWALL 2 a b 5 LEASE 100 LIMIT 1 1 1 DETAIL LIMIT 2 1 1") else {
            panic!("ALLOWALL with LEASE and DETAIL");
        };
        assert_eq!((a.lease, a.detail, a.limits.count()), (Some(100), true, 2));
        let cases = [
            (
                "ALLOWALL 1 a 5 LIMIT 1 1 1 LEASE 0",
                Error::Invalid(Arg::Lease),
            ),
            (
                "ALLOWALL 1 a 9007199254740992 LIMIT 1 1 1 LEASE 1",
                Error::Invalid(Arg::Lease),
            ),
            (
                "ALLOWALL 1 a 5 DETAIL LIMIT 1 1 1 DETAIL",
                Error::RepeatedOption("DETAIL".into()),
            ),
            // An option error comes before a key without a LIMIT.
            (
                "ALLOWALL 2 a b 5 LIMIT 1 1 1 LEASE x",
                Error::Invalid(Arg::Lease),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(all(line), Err(want), "{line}");
        }
        assert_eq!(lease_ms(5, None), Ok(0));
        assert_eq!(lease_ms(top - 5, Some(5)), Ok(5));
        assert_eq!(lease_ms(top - 5, Some(6)), Err(Error::Invalid(Arg::Lease)));
        assert_eq!(lease_ms(u64::MAX, Some(1)), Err(Error::Invalid(Arg::Lease)));
    }

    #[test]
    fn precision_and_its_score() {
        let with = |precision: Option<u64>, lease: Option<u64>, now: Now| {
            ok(10_000, 5, now, 1).map(|a| Args {
                precision,
                lease,
                ..a
            })
        };
        let top = MAX_EXACT;
        let bad = Err(Error::Invalid(Arg::Precision));
        let cases = [
            (
                "ALLOW k 10 5 1000 PRECISION 1000",
                with(Some(1000), None, Now::At(1000)),
            ),
            (
                "ALLOW k 10 5 * precision 1",
                with(Some(1), None, Now::Server),
            ),
            (
                "ALLOW k 10 5 1000 PrEcIsIoN 7 LEASE 9",
                with(Some(7), Some(9), Now::At(1000)),
            ),
            // The score at 2^53 exactly.
            (
                "ALLOW k 10 5 9007199254740992 PRECISION 9007199254740992",
                with(Some(top), None, Now::At(top)),
            ),
            (
                "ALLOW k 10 5 9007199254740991 PRECISION 2",
                with(Some(2), None, Now::At(top - 1)),
            ),
            (
                "ALLOW k 10 5 * PRECISION 9007199254740992",
                with(Some(top), None, Now::Server),
            ),
            ("ALLOW k 10 5 1000 PRECISION 0", bad.clone()),
            ("ALLOW k 10 5 1000 PRECISION -1", bad.clone()),
            ("ALLOW k 10 5 1000 PRECISION 1.5", bad.clone()),
            ("ALLOW k 10 5 1000 PRECISION 9007199254740993", bad.clone()),
            (
                "ALLOW k 10 5 1000 PRECISION",
                Err(Error::MissingValue("PRECISION".into())),
            ),
            (
                "ALLOW k 10 5 1000 PRECISION 5 precision 6",
                Err(Error::RepeatedOption("precision".into())),
            ),
            // The score past 2^53: a PRECISION error, when read (before a later error), whether
            // the lease comes before or after it.
            ("ALLOW k 10 5 9007199254740991 PRECISION 3", bad.clone()),
            ("ALLOW k 10 5 9007199254740991 PRECISION 3 FOO", bad.clone()),
            (
                "ALLOW k 10 5 1000 PRECISION 3 LEASE 9007199254739991 FOO",
                bad.clone(),
            ),
            (
                "ALLOW k 10 5 1000 LEASE 9007199254739991 PRECISION 3 FOO",
                bad.clone(),
            ),
            (
                "ALLOW k 10 5 1000 PRECISION 3 LEASE 9007199254739993",
                Err(Error::Invalid(Arg::Lease)),
            ),
            // On `*`, against the earliest clock there is.
            (
                "ALLOW k 10 5 * LEASE 4503599627370497 PRECISION 4503599627370497 FOO",
                bad.clone(),
            ),
            (
                "ALLOW k 10 5 * PRECISION 4503599627370497 FOO",
                Err(Error::UnknownOption("FOO".into())),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(run(line), want, "{line}");
        }
        let Ok(a) = all("ALLOWALL 2 a b 5 PRECISION 100 LIMIT 1 1 1 LIMIT 2 1 1") else {
            panic!("ALLOWALL with PRECISION");
        };
        assert_eq!(a.precision, Some(100));
        assert_eq!(
            all("ALLOWALL 1 a 5 LIMIT 1 1 1 PRECISION 0"),
            Err(Error::Invalid(Arg::Precision))
        );
        assert_eq!(score(1000, None, Some(1000)), Ok(1000));
        assert_eq!(score(1001, None, Some(1000)), Ok(2000));
        assert_eq!(score(1001, Some(500), Some(1000)), Ok(2000));
        assert_eq!(score(1001, Some(500), None), Ok(1501));
        assert_eq!(score(0, None, Some(7)), Ok(0));
        assert_eq!(score(top - 1, None, Some(2)), Ok(top));
        assert_eq!(score(top - 1, None, Some(1)), Ok(top - 1));
        assert_eq!(
            score(top - 1, None, Some(3)),
            Err(Error::Invalid(Arg::Precision))
        );
        assert_eq!(
            score(top, Some(1), Some(3)),
            Err(Error::Invalid(Arg::Lease))
        );
        let longest = format!(
            "ALLOW k 1 1 5{} COST 3 LEASE 9 PRECISION 10 DETAIL",
            (0..15)
                .map(|i| format!(" LIMIT {} 7", i + 2))
                .collect::<String>()
        );
        assert!(run(&longest).is_ok());
        assert_eq!(longest.split(' ').count(), MOST_WORDS);
    }

    #[test]
    fn refund_forms_and_errors() {
        let refund = |line: &str| {
            let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            parse_refund(&words)
        };
        let ok = |n, at| Ok(RefundArgs { n, at });
        let cases = [
            ("REFUND k 1", ok(1, None)),
            ("REFUND k 9007199254740992", ok(MAX_EXACT, None)),
            ("REFUND k 3 AT 1000", ok(3, Some(Now::At(1000)))),
            ("REFUND k 3 at *", ok(3, Some(Now::Server))),
            ("REFUND k 3 At 0", ok(3, Some(Now::At(0)))),
            ("REFUND k 0", Err(Error::Invalid(Arg::RefundN))),
            (
                "REFUND k 9007199254740993",
                Err(Error::Invalid(Arg::RefundN)),
            ),
            ("REFUND k x AT y", Err(Error::Invalid(Arg::RefundN))),
            ("REFUND k 1 AT -1", Err(Error::Invalid(Arg::At))),
            (
                "REFUND k 1 AT 9007199254740993",
                Err(Error::Invalid(Arg::At)),
            ),
            ("REFUND k 1 AT", Err(Error::MissingValue("AT".into()))),
            (
                "REFUND k 1 AT 5 AT 6",
                Err(Error::RepeatedOption("AT".into())),
            ),
            (
                "REFUND k 1 COST 5",
                Err(Error::UnknownOption("COST".into())),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(refund(line), want, "{line}");
        }
        let Err(Error::WrongArity(name)) = parse_refund(&[b"SLIDINGWINDOW.REFUND", b"k"]) else {
            panic!("arity");
        };
        assert_eq!(name, "slidingwindow.refund");
    }
}
