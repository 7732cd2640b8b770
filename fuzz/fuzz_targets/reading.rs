//! The contract's reading of a numeric argument and of the options ALLOW and ALLOWALL share,
//! shared by the parser targets: independent of the module's own parser, which they check
//! against it.

use crate::args::{Args, Now};
use crate::error::{self, Arg, Error};

/// 2^53: the largest value of any numeric argument.
pub const TOP: u128 = 1 << 53;

/// The contract's integer: ASCII digits only, value in `lo..=hi`. Leading zeros are fine.
pub fn integer(word: &[u8], lo: u128, hi: u128) -> Option<u64> {
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

/// A `now` argument: an integer in `0..=2^53`, or `*` for the server's clock.
pub fn now(word: &[u8]) -> Option<Now> {
    match word {
        b"*" => Some(Now::Server),
        w => integer(w, 0, TOP).map(Now::At),
    }
}

/// The error of a call with too few words, named by its first word.
pub fn arity(argv: &[&[u8]]) -> Error {
    let name = argv
        .first()
        .map_or("slidingwindow".into(), |n| error::token(n));
    Error::WrongArity(name.to_ascii_lowercase())
}

/// argv as readable text for assertion messages.
pub fn show(argv: &[&[u8]]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|w| format!("\"{}\"", w.escape_ascii()))
        .collect();
    words.join(" ")
}

/// Every error is one printable line starting with ERR, of under 400 bytes (user tokens are cut
/// to 64 bytes of at most 4 characters each).
pub fn check_error_line(err: &Error) {
    let text = err.to_string();
    assert!(text.starts_with("ERR"), "{text:?}");
    assert!(!text.contains(['\r', '\n']), "{text:?}");
    assert!(text.len() < 400, "{} bytes", text.len());
}

/// The options ALLOW and ALLOWALL share, as the contract reads them: `COST n` (1..=2^53),
/// `LEASE ms` (1..=2^53, and `now + ms <= 2^53`), `PRECISION p` (1..=2^53, and `now + ms`
/// rounded up to a multiple of `p` at most 2^53), both checked when read against `now`, or on
/// `*` against the earliest clock (1; the call checks the real one), and `DETAIL` (no value),
/// each at most once.
#[derive(Default)]
pub struct Shared {
    pub cost: Option<u64>,
    pub lease: Option<u64>,
    pub precision: Option<u64>,
    pub detail: bool,
}

impl Shared {
    /// Reads `options` left to right, the shared ones here and any other word by `other` (given
    /// it and the words after it: how many words it took, or its error); the first error wins.
    pub fn read_all(
        options: &[&[u8]],
        now: Now,
        mut other: impl FnMut(&[u8], &[&[u8]]) -> Result<usize, Error>,
    ) -> Result<Shared, Error> {
        let mut shared = Shared::default();
        let mut i = 0;
        while i < options.len() {
            let (word, values) = (options[i], &options[i + 1..]);
            i += match shared.read(word, values, now) {
                Some(taken) => taken?,
                None => other(word, values)?,
            };
        }
        Ok(shared)
    }

    /// The call's arguments: `limits` at `now` with these options.
    pub fn args<L>(self, limits: L, now: Now) -> Args<L> {
        Args {
            limits,
            now,
            cost: self.cost.unwrap_or(1),
            lease: self.lease,
            precision: self.precision,
            detail: self.detail,
        }
    }

    /// Reads `word` (`values` after it) if it is one of them: how many words it took, or its
    /// error; None for any other word.
    pub fn read(
        &mut self,
        word: &[u8],
        values: &[&[u8]],
        now: Now,
    ) -> Option<Result<usize, Error>> {
        let repeated = Err(Error::RepeatedOption(error::token(word)));
        if word.eq_ignore_ascii_case(b"DETAIL") {
            if self.detail {
                return Some(repeated);
            }
            self.detail = true;
            return Some(Ok(1));
        }
        let (slot, arg) = match word.to_ascii_uppercase().as_slice() {
            b"COST" => (&mut self.cost, Arg::Cost),
            b"LEASE" => (&mut self.lease, Arg::Lease),
            b"PRECISION" => (&mut self.precision, Arg::Precision),
            _ => return None,
        };
        if slot.is_some() {
            return Some(repeated);
        }
        let Some(value) = values.first() else {
            return Some(Err(Error::MissingValue(error::token(word))));
        };
        let Some(value) = integer(value, 1, TOP) else {
            return Some(Err(Error::Invalid(arg)));
        };
        *slot = Some(value);
        if matches!(arg, Arg::Lease | Arg::Precision) {
            let earliest = match now {
                Now::At(n) => n,
                Now::Server => 1,
            };
            let end = u128::from(earliest) + u128::from(self.lease.unwrap_or(0));
            if end > TOP {
                return Some(Err(Error::Invalid(Arg::Lease)));
            }
            let p = u128::from(self.precision.unwrap_or(1));
            if end.div_ceil(p) * p > TOP {
                return Some(Err(Error::Invalid(Arg::Precision)));
            }
        }
        Some(Ok(2))
    }
}
