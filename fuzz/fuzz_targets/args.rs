//! Fuzzes `args::parse`: input byte 0 is the separator, the rest splits on it into argv words.
//! Every answer is checked against an independent reading of the contract: its ranges, and its
//! options (`COST n`, `LEASE ms` with `now + ms <= 2^53` and `DETAIL` once each, `LIMIT window
//! max` up to 16 limits in all, left to right, the first error wins).

#![no_main]

// The module's pure logic (crate `slidingwindow-core`).
use slidingwindow_core::{args, error, limits};
mod reading;

use args::{Args, Now};
use error::{Arg, Error};
use libfuzzer_sys::fuzz_target;
use limits::{Limit, Limits};

use reading::{Shared, TOP, arity, check_error_line, integer, now, show};

fn window(word: &[u8]) -> Option<u64> {
    integer(word, 1, TOP / 1000)
}

fn max(word: &[u8]) -> Option<u64> {
    integer(word, 1, TOP)
}

/// What the contract says the call means, or the error it must get: options read left to right
/// by position, the first error winning.
fn expected(argv: &[&[u8]]) -> Result<Args, Error> {
    let [_, _, w, m, n, options @ ..] = argv else {
        return Err(arity(argv));
    };
    let window_s = window(w).ok_or(Error::Invalid(Arg::Window))?;
    let max_v = max(m).ok_or(Error::Invalid(Arg::Max))?;
    let now = now(n).ok_or(Error::Invalid(Arg::Now))?;
    let ms = |s: u64| s * 1000;
    let mut limits = vec![(ms(window_s), max_v)];
    let shared = Shared::read_all(options, now, |word, values| {
        if !word.eq_ignore_ascii_case(b"LIMIT") {
            return Err(Error::UnknownOption(error::token(word)));
        }
        if limits.len() >= 16 {
            return Err(Error::TooManyLimits);
        }
        if values.len() < 2 {
            return Err(Error::MissingValues(error::token(word)));
        }
        let w = window(values[0]).ok_or(Error::Invalid(Arg::LimitWindow))?;
        let m = max(values[1]).ok_or(Error::Invalid(Arg::LimitMax))?;
        limits.push((ms(w), m));
        Ok(3)
    })?;
    let limit = |(window_ms, max)| Limit { window_ms, max };
    let mut all = Limits::new(limit(limits[0]));
    for l in &limits[1..] {
        assert!(all.push(limit(*l)));
    }
    Ok(shared.args(all, now))
}

/// Every error is one printable line starting with ERR, and names the argument or token.
fn check_error(argv: &[&[u8]], err: &Error) {
    check_error_line(err);
    if let Error::WrongArity(name) = err {
        assert!(argv.len() < 5, "{}", show(argv));
        assert!(!name.chars().any(|c| c.is_ascii_uppercase()), "{name:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&separator, rest)) = data.split_first() else {
        return;
    };
    let argv: Vec<&[u8]> = rest.split(|b| *b == separator).collect();
    let got = args::parse(&argv);
    assert_eq!(got, expected(&argv), "{}", show(&argv));
    match &got {
        Ok(got) => {
            assert!((1..=16).contains(&got.limits.count()));
            assert_eq!(got.limits.has_options(), got.limits.count() > 1);
            for l in got.limits.iter() {
                assert!(l.window_ms >= 1000 && l.window_ms % 1000 == 0);
                assert!(u128::from(l.window_ms) <= TOP);
                assert!((1..=TOP).contains(&u128::from(l.max)));
            }
            assert!((1..=TOP).contains(&u128::from(got.cost)));
            if let Now::At(n) = got.now {
                assert!(u128::from(n) <= TOP);
                let end = u128::from(n) + u128::from(got.lease.unwrap_or(0));
                assert!(end <= TOP);
            }
            if let Some(ms) = got.lease {
                assert!((1..=TOP).contains(&u128::from(ms)));
                // The module's own check agrees: any `now` the lease fits resolves.
                let at = match got.now {
                    Now::At(n) => n,
                    Now::Server => 1,
                };
                assert_eq!(args::lease_ms(at, got.lease), Ok(ms));
                assert!(args::score(at, got.lease, got.precision).is_ok());
            }
        }
        Err(err) => check_error(&argv, err),
    }
});
