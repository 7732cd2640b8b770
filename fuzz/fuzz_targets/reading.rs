//! The contract's reading of a numeric argument, shared by the parser targets: independent of
//! the module's own parser, which they check against it.

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
