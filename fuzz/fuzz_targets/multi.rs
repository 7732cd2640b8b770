//! Fuzzes `args::parse_all` (ALLOWALL / PEEKALL) and `args::parse_refund` (REFUND): input byte 0
//! is the separator, byte 1 picks the parser (odd: REFUND), the rest splits into argv words.
//! Every answer is checked against an independent reading of the contract: numkeys 1..=16 with
//! that many distinct keys and `now` after it, `COST n`, `LEASE ms` (`now + ms <= 2^53`) and
//! `DETAIL` once each, `LIMIT keyno window max` with at most 16 on a key, every key limited; `n`
//! and `AT ts` for REFUND; left to right, the first error wins, a key without a LIMIT told last.

#![no_main]

// The module's pure logic (crate `slidingwindow-core`).
use slidingwindow_core::{args, error, limits};
mod reading;

use args::{Args, RefundArgs};
use error::{Arg, Error};
use libfuzzer_sys::fuzz_target;
use limits::{KeyedLimits, Limit, Scope};

use reading::{Shared, TOP, arity, check_error_line, integer, now as time, show};

fn expected_all(argv: &[&[u8]]) -> Result<Args<KeyedLimits>, Error> {
    if argv.len() < 2 {
        return Err(arity(argv));
    }
    let numkeys = integer(argv[1], 1, 16).ok_or(Error::Invalid(Arg::NumKeys))? as usize;
    // The keys, then now.
    if argv.len() < 2 + numkeys + 1 {
        return Err(Error::Invalid(Arg::NumKeys));
    }
    let keys = &argv[2..2 + numkeys];
    for j in 0..numkeys {
        for i in 0..j {
            if keys[i] == keys[j] {
                return Err(Error::RepeatedKey(i + 1, j + 1));
            }
        }
    }
    let now = time(argv[2 + numkeys]).ok_or(Error::Invalid(Arg::Now))?;
    let options = &argv[3 + numkeys..];
    let mut limits: Vec<(usize, u64, u64)> = Vec::new();
    let shared = Shared::read_all(options, now, |word, values| {
        if !word.eq_ignore_ascii_case(b"LIMIT") {
            return Err(Error::UnknownOption(error::token(word)));
        }
        if values.len() < 3 {
            return Err(Error::MissingKeyedValues(error::token(word)));
        }
        let k = integer(values[0], 1, numkeys as u128)
            .ok_or(Error::Invalid(Arg::LimitKeyno(numkeys)))? as usize;
        if limits.iter().filter(|l| l.0 == k - 1).count() == 16 {
            return Err(Error::TooManyKeyLimits(k));
        }
        let w = integer(values[1], 1, TOP / 1000).ok_or(Error::Invalid(Arg::LimitWindow))?;
        let m = integer(values[2], 1, TOP).ok_or(Error::Invalid(Arg::LimitMax))?;
        limits.push((k - 1, w * 1000, m));
        Ok(4)
    })?;
    if let Some(k) = (0..numkeys).find(|k| !limits.iter().any(|l| l.0 == *k)) {
        return Err(Error::KeyWithoutLimit(k + 1));
    }
    let mut all = KeyedLimits::with_capacity(numkeys, 0);
    for &(k, window_ms, max) in &limits {
        assert!(all.push(k, Limit { window_ms, max }));
    }
    Ok(shared.args(all, now))
}

fn expected_refund(argv: &[&[u8]]) -> Result<RefundArgs, Error> {
    if argv.len() < 3 {
        return Err(arity(argv));
    }
    let n = integer(argv[2], 1, TOP).ok_or(Error::Invalid(Arg::RefundN))?;
    let mut at = None;
    let mut i = 3;
    while i < argv.len() {
        let word = argv[i];
        if !word.eq_ignore_ascii_case(b"AT") {
            return Err(Error::UnknownOption(error::token(word)));
        }
        if at.is_some() {
            return Err(Error::RepeatedOption(error::token(word)));
        }
        let v = argv
            .get(i + 1)
            .ok_or(Error::MissingValue(error::token(word)))?;
        at = Some(time(v).ok_or(Error::Invalid(Arg::At))?);
        i += 2;
    }
    Ok(RefundArgs { n, at })
}

fuzz_target!(|data: &[u8]| {
    let Some((&separator, rest)) = data.split_first() else {
        return;
    };
    let Some((&which, rest)) = rest.split_first() else {
        return;
    };
    let argv: Vec<&[u8]> = rest.split(|b| *b == separator).collect();
    if which % 2 == 1 {
        let got = args::parse_refund(&argv);
        assert_eq!(got, expected_refund(&argv), "{}", show(&argv));
        if let Err(err) = &got {
            check_error_line(err);
        }
        return;
    }
    let got = args::parse_all(&argv);
    assert_eq!(got, expected_all(&argv), "{}", show(&argv));
    match &got {
        Ok(got) => {
            assert!((1..=16).contains(&got.limits.keys()));
            for k in 0..got.limits.keys() {
                assert!((1..=16).contains(&got.limits.on_key(k)));
            }
            assert!((1..=TOP).contains(&u128::from(got.cost)));
        }
        Err(err) => check_error_line(err),
    }
});
