//! The module's version, from Cargo.toml alone: the text INFO shows, and the number `MODULE LIST`
//! reports (`major*10000 + minor*100 + patch`).

/// `0.1.0`, as Cargo.toml says.
pub const TEXT: &str = env!("CARGO_PKG_VERSION");

/// `MODULE LIST`'s number: 0.1.0 is 100, 1.2.3 is 10203.
pub const NUMBER: i32 = number(
    env!("CARGO_PKG_VERSION_MAJOR"),
    env!("CARGO_PKG_VERSION_MINOR"),
    env!("CARGO_PKG_VERSION_PATCH"),
);

const fn number(major: &str, minor: &str, patch: &str) -> i32 {
    let (major, minor, patch) = (digits(major), digits(minor), digits(patch));
    // Minor and patch take two digits each in the number; more would read as the next part.
    assert!(
        minor < 100 && patch < 100,
        "minor and patch must stay below 100"
    );
    major * 10_000 + minor * 100 + patch
}

/// A version part as Cargo writes it (decimal digits); evaluated at compile time only.
const fn digits(s: &str) -> i32 {
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut n = 0;
    while i < bytes.len() {
        assert!(bytes[i].is_ascii_digit(), "a version part is digits");
        n = n * 10 + (bytes[i] - b'0') as i32;
        i += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_number_spells_the_version() {
        assert_eq!(number("0", "1", "0"), 100);
        assert_eq!(number("1", "2", "3"), 10203);
        assert_eq!(number("12", "34", "56"), 123456);
        let parts: Vec<i32> = TEXT.split('.').map(|p| p.parse().unwrap_or(-1)).collect();
        assert_eq!(NUMBER, parts[0] * 10_000 + parts[1] * 100 + parts[2]);
    }
}
