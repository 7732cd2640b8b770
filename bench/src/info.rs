//! Reads the server's own accounting: `INFO cpu` and `INFO commandstats`.

use redis::Connection;

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

/// Zeroes commandstats so the next read covers only what follows.
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
