//! What the Rust client's and the services' tests read back from a run: the module's INFO
//! counters, and the most requests any window held.

use crate::harness::Server;
use std::collections::BTreeMap;

/// One number of `INFO slidingwindow` (`slidingwindow_<name>`, or `<name>` on servers that do
/// not prefix it).
pub fn stat(s: &Server, name: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("slidingwindow")
        .query(&mut s.client())
        .expect("INFO");
    info.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k == name || k.strip_prefix("slidingwindow_") == Some(name))
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {name} in INFO slidingwindow:\n{info}"))
}

/// The calls each command has had (`INFO commandstats`), by its lowercase name
/// (`slidingwindow.allow`); a command never called has no entry.
pub fn command_calls(s: &Server) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut s.client())
        .expect("INFO");
    info.lines()
        .filter_map(|l| {
            let (name, fields) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = fields.split_once("calls=")?.1.split(',').next()?;
            Some((name.to_ascii_lowercase(), calls.parse().ok()?))
        })
        .collect()
}

/// The most of `times` that any window `(a, a + window_ms]` holds.
pub fn most_in_window(times: &[u64], window_ms: u64) -> usize {
    let mut t = times.to_vec();
    t.sort_unstable();
    let mut first = 0;
    let mut most = 0;
    for (i, &end) in t.iter().enumerate() {
        while t[first] + window_ms <= end {
            first += 1;
        }
        most = most.max(i + 1 - first);
    }
    most
}

#[test]
fn windows_are_counted() {
    assert_eq!(most_in_window(&[], 1000), 0);
    assert_eq!(most_in_window(&[5, 1005, 2005], 1000), 1);
    assert_eq!(most_in_window(&[5, 1004, 2005], 1000), 2);
    assert_eq!(most_in_window(&[7, 7, 7, 1006], 1000), 4);
}
