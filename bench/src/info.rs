//! Reads the server's own accounting: `INFO cpu`, `INFO commandstats`, `INFO latencystats`
//! and `INFO stats`.

use redis::{Connection, Value};

use crate::Result;

/// Server process CPU time so far (user + system), in microseconds.
pub fn cpu_us(con: &mut Connection) -> Result<f64> {
    let text: String = redis::cmd("INFO").arg("cpu").query(con)?;
    let field = |name: &str| -> Result<f64> {
        Ok(info_field(&text, name)
            .ok_or_else(|| format!("INFO cpu has no {name}"))?
            .parse::<f64>()?)
    };
    Ok((field("used_cpu_user")? + field("used_cpu_sys")?) * 1e6)
}

/// The percentiles `INFO latencystats` reports, labelled as Redis labels them.
pub const PERCENTILES: [&str; 3] = ["p50", "p99", "p99.9"];

/// Turns on the per-command latency histograms and asks for PERCENTILES.
pub fn track_latency(con: &mut Connection) -> Result<()> {
    let list: Vec<&str> = PERCENTILES
        .iter()
        .map(|label| label.trim_start_matches('p'))
        .collect();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("latency-tracking")
        .arg("yes")
        .arg("latency-tracking-info-percentiles")
        .arg(list.join(" "))
        .exec(con)?;
    Ok(())
}

/// Zeroes commandstats, latencystats and the other INFO counters, so the next read covers
/// only what follows.
pub fn reset_stats(con: &mut Connection) -> Result<()> {
    redis::cmd("CONFIG").arg("RESETSTAT").exec(con)?;
    Ok(())
}

/// One command's line of `INFO commandstats`.
#[derive(Debug, Default, Clone, Copy)]
pub struct CmdStat {
    pub calls: u64,
    pub usec: u64,
    pub failed: u64,
}

/// Stats of each named command (lower case, as Redis names them); zero if never called.
pub fn command_stats(con: &mut Connection, names: &[&str]) -> Result<Vec<CmdStat>> {
    let text: String = redis::cmd("INFO").arg("commandstats").query(con)?;
    names
        .iter()
        .map(|name| match info_field(&text, &format!("cmdstat_{name}")) {
            Some(line) => parse_cmdstat(line),
            None => Ok(CmdStat::default()),
        })
        .collect()
}

/// Each named command's PERCENTILES in µs since the last reset, from `INFO latencystats`.
pub fn latency_percentiles(con: &mut Connection, names: &[&str]) -> Result<Vec<[f64; 3]>> {
    let text: String = redis::cmd("INFO").arg("latencystats").query(con)?;
    names
        .iter()
        .map(|name| {
            let line = info_field(&text, &format!("latency_percentiles_usec_{name}"))
                .ok_or_else(|| format!("INFO latencystats has no {name}: never called?"))?;
            parse_percentiles(line)
        })
        .collect()
}

/// `p50=1.003,p99=4.015,p99.9=14.015`
fn parse_percentiles(line: &str) -> Result<[f64; 3]> {
    let mut values = [f64::NAN; 3];
    for pair in line.split(',') {
        if let Some((label, value)) = pair.split_once('=')
            && let Some(i) = PERCENTILES.iter().position(|p| *p == label)
        {
            values[i] = value.parse()?;
        }
    }
    if values.iter().any(|v| v.is_nan()) {
        return Err(format!("latencystats line lacks one of {PERCENTILES:?}: {line}").into());
    }
    Ok(values)
}

/// Keys the server expired on its own clock since the last reset (lazily or actively).
pub fn expired_keys(con: &mut Connection) -> Result<u64> {
    let text: String = redis::cmd("INFO").arg("stats").query(con)?;
    Ok(info_field(&text, "expired_keys")
        .ok_or("INFO stats has no expired_keys")?
        .parse()?)
}

/// The server's `used_memory` in bytes.
pub fn used_memory(con: &mut Connection) -> Result<u64> {
    let text: String = redis::cmd("INFO").arg("memory").query(con)?;
    Ok(info_field(&text, "used_memory")
        .ok_or("INFO memory has no used_memory")?
        .parse()?)
}

/// `calls=3,usec=12,usec_per_call=4.00,rejected_calls=0,failed_calls=0`
fn parse_cmdstat(line: &str) -> Result<CmdStat> {
    let mut stat = CmdStat::default();
    for pair in line.split(',') {
        match pair.split_once('=') {
            Some(("calls", v)) => stat.calls = v.parse()?,
            Some(("usec", v)) => stat.usec = v.parse()?,
            Some(("failed_calls", v)) => stat.failed = v.parse()?,
            _ => {}
        }
    }
    Ok(stat)
}

/// The value of `name:value` in an INFO reply.
pub fn info_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Sends `pipe`, `n` ALLOW calls that must all be admitted: the calls and µs `INFO commandstats`
/// counted for `slidingwindow.allow` meanwhile, or an error naming `what`.
pub fn admitted_batch(
    con: &mut Connection,
    pipe: &redis::Pipeline,
    n: u64,
    what: &str,
) -> Result<(u64, u64)> {
    let before = command_stats(con, &["slidingwindow.allow"])?[0];
    let replies: Vec<Value> = pipe.query(con)?;
    let after = command_stats(con, &["slidingwindow.allow"])?[0];
    let admitted = replies
        .iter()
        .filter(|r| matches!(r, Value::Array(f) if f.first() == Some(&Value::Int(1))))
        .count() as u64;
    if after.failed > before.failed || admitted != n {
        return Err(format!("{what}: {admitted} of {n} calls admitted").into());
    }
    Ok((
        after.calls.saturating_sub(before.calls),
        after.usec.saturating_sub(before.usec),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_parse_in_label_order() {
        let values = parse_percentiles("p99.9=14.015,p50=1.003,p99=4.015").unwrap();
        assert_eq!(values, [1.003, 4.015, 14.015]);
    }

    #[test]
    fn missing_percentile_is_an_error() {
        assert!(parse_percentiles("p50=1.003,p99=4.015").is_err());
    }
}
