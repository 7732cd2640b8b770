//! A duration flag: a number and its unit.

use std::time::Duration;

/// `30s` as `(30, "s")`: digits, then the rest.
pub fn number_and_unit(s: &str) -> Option<(u64, &str)> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    Some((digits.parse().ok()?, unit))
}

/// `0`, or a number and its unit: `500ms`, `30s`, `2m`; at most the module's `MAX_EXACT` ms.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?}: expected a duration such as 500ms, 30s or 2m");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let (n, unit) = number_and_unit(s).ok_or_else(bad)?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        _ => return Err(bad()),
    };
    n.checked_mul(ms)
        .filter(|&ms| ms <= slidingwindow_client::MAX_EXACT)
        .map(Duration::from_millis)
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        for bad in ["", "30", "s", "1.5s", "-1s", "1h", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
