//! Argument parsing for `SLIDINGWINDOW.ALLOW|PEEK key window max now [COST n] [LIMIT window max]...`,
//! free of Redis.

use super::error::{Arg, Error, MAX_EXACT, MAX_LIMITS, MAX_WINDOW_SECONDS, token};
use super::limits::{Limit, Limits};

/// Most words a well-formed call has: name, key, window, max, now, `COST n`, 15 `LIMIT w m`.
pub const MOST_WORDS: usize = 5 + 2 + 3 * (MAX_LIMITS - 1);

/// When the request happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Now {
    /// Unix time in ms, as the client sent it.
    At(u64),
    /// `*`: the server's clock.
    Server,
}

/// A parsed call, every number already checked against its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// The positional limit first, then each `LIMIT` option in the order given.
    pub limits: Limits,
    pub now: Now,
    pub cost: u64,
}

/// Parses the whole argv: command name, key, window, max, now, then options, left to right; the
/// first error wins.
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
    let mut limits = Limits::new(limit(window, max));
    let mut cost = None;
    let mut rest = options;
    while let [option, tail @ ..] = rest {
        if option.eq_ignore_ascii_case(b"COST") {
            if cost.is_some() {
                return Err(Error::RepeatedOption(token(option)));
            }
            let [value, tail @ ..] = tail else {
                return Err(Error::MissingValue(token(option)));
            };
            cost = Some(integer(value, 1, MAX_EXACT).ok_or(Error::Invalid(Arg::Cost))?);
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
        cost: cost.unwrap_or(1),
    })
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
        assert_eq!(line.split(' ').count(), MOST_WORDS);
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
}
