//! What the benchmark ran on, for the report.

use std::time::{SystemTime, UNIX_EPOCH};

use redis::Connection;

use crate::Result;
use crate::info::info_field;

pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub redis_version: String,
    /// UTC, `YYYY-MM-DD HH:MM:SSZ`.
    pub date: String,
    /// 1-minute load average when the run started: other work on the machine skews the figures.
    pub load_at_start: String,
}

impl Machine {
    pub fn probe(con: &mut Connection) -> Result<Machine> {
        let server: String = redis::cmd("INFO").arg("server").query(con)?;
        Ok(Machine {
            nproc: std::thread::available_parallelism()?.get(),
            cpu_model: cpu_model(),
            redis_version: info_field(&server, "redis_version")
                .unwrap_or("unknown")
                .to_string(),
            date: utc_now()?,
            load_at_start: load_average(),
        })
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(key, _)| key.trim() == "model name")
                .map(|(_, value)| value.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// The 1-minute load average now.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string())
}

fn utc_now() -> Result<String> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let t = secs % 86_400;
    Ok(format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        t / 3600,
        t / 60 % 60,
        t % 60
    ))
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm),
/// to avoid a date crate for one timestamp.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
