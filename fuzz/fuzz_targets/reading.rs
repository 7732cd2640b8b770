//! The contract's reading of a numeric argument and of the options ALLOW and ALLOWALL share,
//! shared by the parser targets: independent of the module's own parser, which they check
//! against it.

use crate::args::Now;
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
        let (slot, arg) = if word.eq_ignore_ascii_case(b"COST") {
            (&mut self.cost, Arg::Cost)
        } else if word.eq_ignore_ascii_case(b"LEASE") {
            (&mut self.lease, Arg::Lease)
        } else if word.eq_ignore_ascii_case(b"PRECISION") {
            (&mut self.precision, Arg::Precision)
        } else {
            return None;
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
