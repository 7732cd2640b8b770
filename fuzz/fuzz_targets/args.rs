//! Fuzzes `args::parse`: input byte 0 is the separator, the rest splits on it into argv words.
//! Every answer is checked against an independent reading of the contract's ranges.

#![no_main]

// The module's pure files, included by path (the module crate itself is a cdylib, see Cargo.toml).
#[allow(dead_code)]
#[path = "../../src/core/args.rs"]
mod args;
#[allow(dead_code)]
#[path = "../../src/core/error.rs"]
mod error;

use args::{Args, Now};
use error::{Arg, Error};
use libfuzzer_sys::fuzz_target;

const TOP: u128 = 1 << 53;

/// The contract's integer: ASCII digits only, value in `lo..=hi`. Leading zeros are fine.
fn integer(word: &[u8], lo: u128, hi: u128) -> Option<u64> {
    if word.is_empty() || !word.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let digits = &word[word.iter().take_while(|b| **b == b'0').count()..];
    if digits.len() > 20 {
        return None;
    }
    // At most 20 digits always fit a u128; all zeros leave no digits, which is 0.
    let value = match digits {
        [] => 0,
        d => std::str::from_utf8(d).ok()?.parse::<u128>().ok()?,
    };
    (lo..=hi).contains(&value).then_some(value as u64)
}

fn window(word: &[u8]) -> Option<u64> {
    integer(word, 1, TOP / 1000)
}

fn max(word: &[u8]) -> Option<u64> {
    integer(word, 1, TOP)
}

fn now(word: &[u8]) -> Option<Now> {
    match word {
        b"*" => Some(Now::Server),
        w => integer(w, 0, TOP).map(Now::At),
    }
}

fn cost(word: &[u8]) -> Option<u64> {
    integer(word, 1, TOP)
}

/// What the contract says the call means, or `None` if it must be refused.
fn expected(argv: &[&[u8]]) -> Option<Args> {
    let [_, _, w, m, n, options @ ..] = argv else {
        return None;
    };
    // Options: exactly zero or one `COST n` pair.
    let c = match options {
        [] => 1,
        [name, value] if name.eq_ignore_ascii_case(b"COST") => cost(value)?,
        _ => return None,
    };
    Some(Args {
        window_ms: window(w)? * 1000,
        max: max(m)?,
        now: now(n)?,
        cost: c,
    })
}

/// argv as readable text for assertion messages.
fn show(argv: &[&[u8]]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|w| format!("\"{}\"", w.escape_ascii()))
        .collect();
    words.join(" ")
}

/// An error must name something that is actually wrong with `argv`.
fn check_error(argv: &[&[u8]], err: &Error) {
    let text = err.to_string();
    assert!(text.starts_with("ERR"), "{text:?}");
    assert!(!text.contains(['\r', '\n']), "{text:?}");
    // User tokens are cut to 64 bytes of at most 4 characters each.
    assert!(text.len() < 400, "{} bytes", text.len());
    let option_words = argv.get(5..).unwrap_or_default();
    match err {
        Error::WrongArity(name) => {
            assert!(argv.len() < 5, "{}", show(argv));
            assert!(!name.chars().any(|c| c.is_ascii_uppercase()), "{name:?}");
        }
        Error::Invalid(Arg::Window) => assert!(window(argv[2]).is_none()),
        Error::Invalid(Arg::Max) => assert!(max(argv[3]).is_none()),
        Error::Invalid(Arg::Now) => assert!(now(argv[4]).is_none()),
        Error::Invalid(Arg::Cost) => assert!(
            option_words
                .windows(2)
                .any(|pair| pair[0].eq_ignore_ascii_case(b"COST") && cost(pair[1]).is_none()),
            "{}",
            show(argv)
        ),
        Error::UnknownOption(_) => assert!(
            option_words
                .iter()
                .any(|w| !w.eq_ignore_ascii_case(b"COST")),
            "{}",
            show(argv)
        ),
        Error::RepeatedOption(_) => assert!(
            option_words
                .iter()
                .filter(|w| w.eq_ignore_ascii_case(b"COST"))
                .count()
                >= 2,
            "{}",
            show(argv)
        ),
        Error::MissingValue(_) => assert!(option_words.len() % 2 == 1, "{}", show(argv)),
        other => panic!("parse cannot produce {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&separator, rest)) = data.split_first() else {
        return;
    };
    let argv: Vec<&[u8]> = rest.split(|b| *b == separator).collect();
    let got = args::parse(&argv);
    match (&got, expected(&argv)) {
        (Ok(got), Some(want)) => {
            assert_eq!(*got, want, "{}", show(&argv));
            assert!(got.window_ms >= 1000 && got.window_ms % 1000 == 0);
            assert!(u128::from(got.window_ms) <= TOP);
            assert!((1..=TOP).contains(&u128::from(got.max)));
            assert!((1..=TOP).contains(&u128::from(got.cost)));
            if let Now::At(n) = got.now {
                assert!(u128::from(n) <= TOP);
            }
        }
        (Err(err), None) => check_error(&argv, err),
        (got, want) => panic!("{}: parsed {got:?}, contract says {want:?}", show(&argv)),
    }
});
