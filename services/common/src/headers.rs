//! The rate-limit headers' syntax (IETF httpapi RateLimit draft): `RateLimit-Policy` items
//! `"name";q=<max>;w=<window s>`, `RateLimit` as `"name";r=<remaining>;t=<s>`, `Retry-After`
//! in whole seconds.

use std::fmt::Write;

/// ms to whole seconds, rounded up (a client that waits that long is admitted).
pub fn seconds_up(ms: i64) -> i64 {
    if ms <= 0 {
        0
    } else {
        ms / 1000 + i64::from(ms % 1000 != 0)
    }
}

/// Appends `name` as a structured-field string: printable ASCII, `"` and `\` escaped, any
/// other character as `_`.
pub fn quote(out: &mut String, name: &str) {
    out.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
}

/// Appends one `RateLimit-Policy` item: `"name";q=<max>;w=<window s>`.
pub fn policy_item(out: &mut String, name: &str, max: u64, window_s: u64) {
    quote(out, name);
    let _ = write!(out, ";q={max};w={window_s}");
}

/// Appends the `RateLimit` value's parameters after the name: `;r=<remaining>;t=<s>` (the
/// reset in ms, rounded up to seconds).
pub fn remaining_and_reset(out: &mut String, remaining: i64, reset_ms: i64) {
    let _ = write!(out, ";r={remaining};t={}", seconds_up(reset_ms));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders() {
        assert_eq!(
            [-5, 0, 1, 999, 1000, 1001].map(seconds_up),
            [0, 0, 1, 1, 1, 2]
        );
        let mut s = String::new();
        quote(&mut s, "a\"b\\c\u{e9}");
        assert_eq!(s, "\"a\\\"b\\\\c_\"");
        let mut s = String::new();
        policy_item(&mut s, "l0", 10, 60);
        s.push(',');
        quote(&mut s, "d1");
        remaining_and_reset(&mut s, 4, 1001);
        assert_eq!(s, "\"l0\";q=10;w=60,\"d1\";r=4;t=2");
    }
}
