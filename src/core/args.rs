//! Argument parsing for `SLIDINGWINDOW.ALLOW|PEEK key window max now [COST n]`, free of Redis.

use super::error::{Arg, Error, MAX_EXACT, MAX_WINDOW_SECONDS, token};

/// When the request happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Now {
    /// Unix time in ms, as the client sent it.
    At(u64),
    /// `*`: the server's clock.
    Server,
}

/// A parsed call, every number already checked against its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Args {
    pub window_ms: u64,
    pub max: u64,
    pub now: Now,
    pub cost: u64,
}

/// Parses the whole argv: command name, key, window, max, now, then options.
pub fn parse(argv: &[&[u8]]) -> Result<Args, Error> {
    let [name, _key, window, max, now, options @ ..] = argv else {
        let name = argv.first().copied().unwrap_or(b"slidingwindow");
        return Err(Error::WrongArity(token(name).to_ascii_lowercase()));
    };
    let _ = name;
    let window = integer(window, 1, MAX_WINDOW_SECONDS).ok_or(Error::Invalid(Arg::Window))?;
    let max = integer(max, 1, MAX_EXACT).ok_or(Error::Invalid(Arg::Max))?;
    let now = match *now {
        b"*" => Now::Server,
        n => Now::At(integer(n, 0, MAX_EXACT).ok_or(Error::Invalid(Arg::Now))?),
    };
    let mut cost = None;
    let mut rest = options;
    while let [option, tail @ ..] = rest {
        if !option.eq_ignore_ascii_case(b"COST") {
            return Err(Error::UnknownOption(token(option)));
        }
        if cost.is_some() {
            return Err(Error::RepeatedOption(token(option)));
        }
        let [value, tail @ ..] = tail else {
            return Err(Error::MissingValue(token(option)));
        };
        cost = Some(integer(value, 1, MAX_EXACT).ok_or(Error::Invalid(Arg::Cost))?);
        rest = tail;
    }
    Ok(Args {
        // Cannot overflow: window <= 2^53 / 1000.
        window_ms: window.saturating_mul(1000),
        max,
        now,
        cost: cost.unwrap_or(1),
    })
}

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

/// Writes `APPLY`'s change: `cutoff pexpireat [ts n]...`. Every replicated call writes one, so
/// the numbers are spelled by hand rather than through `fmt`, at a tenth of its cost.
pub fn write_change(
    out: &mut impl std::io::Write,
    cutoff: i64,
    pexpireat: i64,
    adds: &[(u64, u64)],
) -> std::io::Result<()> {
    let mut buf = [0u8; 21];
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

/// `v` in decimal, written at the end of `buf`.
fn decimal(mut v: u64, buf: &mut [u8; 21]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        if let Some(d) = buf.get_mut(at) {
            *d = b'0' + (v % 10) as u8;
        }
        v /= 10;
        if v == 0 || at == 0 {
            break;
        }
    }
    buf.get(at..).unwrap_or_default()
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

/// A plain decimal integer (ASCII digits only, no sign, no spaces) within `lo..=hi`.
fn integer(bytes: &[u8], lo: u64, hi: u64) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for &b in bytes {
        let digit = u64::from(b.checked_sub(b'0').filter(|d| *d <= 9)?);
        value = value.checked_mul(10)?.checked_add(digit)?;
    }
    (lo..=hi).contains(&value).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> Result<Args, Error> {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse(&words)
    }

    fn ok(window_ms: u64, max: u64, now: Now, cost: u64) -> Result<Args, Error> {
        Ok(Args {
            window_ms,
            max,
            now,
            cost,
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
}
