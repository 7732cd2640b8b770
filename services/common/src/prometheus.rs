//! The Prometheus text both services' `/metrics` share: label escaping, one counter, and the top
//! refused names (identities, descriptor keys) over slidingwindow-core's Space-Saving summary,
//! bounded to `--metrics-top N` series.

use slidingwindow_core::top::{Entry, Summary};
use std::fmt::Write;
use std::sync::Mutex;

/// One number of a summary's entry.
type EntryField = fn(&Entry) -> u64;

/// The default of `--metrics-top`.
pub const DEFAULT_TOP: usize = 10;

/// A label value with `\`, `"` and newlines escaped.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `# HELP`, `# TYPE name counter` and one unlabelled sample.
pub fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} counter");
    let _ = writeln!(out, "{name} {value}");
}

/// The names refused most since the start: a summary of at most `n` names (`n` = 0 counts
/// nothing), so at most `n` series, each an estimate never below the name's true refusals and
/// above it by at most its error.
pub struct TopRefused {
    summary: Mutex<Summary>,
}

impl std::fmt::Debug for TopRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopRefused").finish_non_exhaustive()
    }
}

impl Default for TopRefused {
    fn default() -> TopRefused {
        TopRefused::new(DEFAULT_TOP)
    }
}

impl TopRefused {
    pub fn new(n: usize) -> TopRefused {
        TopRefused {
            summary: Mutex::new(Summary::new(n)),
        }
    }

    /// One refusal of `name`.
    pub fn count(&self, name: &[u8]) {
        self.summary
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .count(name);
    }

    /// `<metric>{<label>="name"}` and `<metric>_error{<label>="name"}` gauges, most refused
    /// first; names as text (invalid UTF-8 replaced), escaped.
    pub fn render(&self, out: &mut String, metric: &str, label: &str) {
        let (entries, total) = {
            let s = self.summary.lock().unwrap_or_else(|p| p.into_inner());
            (s.top(s.capacity(), |_| true), s.total())
        };
        let gauges: [(String, &str, EntryField); 2] = [
            (
                metric.to_string(),
                "Refusals of the names refused most (Space-Saving estimate, never below the truth)",
                |e| e.count,
            ),
            (
                format!("{metric}_error"),
                "How far above the truth each estimate may be",
                |e| e.error,
            ),
        ];
        for (gauge, help, value) in gauges {
            let _ = writeln!(out, "# HELP {gauge} {help}");
            let _ = writeln!(out, "# TYPE {gauge} gauge");
            for e in &entries {
                let name = escape(&String::from_utf8_lossy(&e.name));
                let _ = writeln!(out, "{gauge}{{{label}=\"{name}\"}} {}", value(e));
            }
        }
        counter(
            out,
            &format!("{metric}_counted_total"),
            "Refusals the summary counted",
            total,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_n_series_most_refused_first() {
        let top = TopRefused::new(2);
        for name in ["a", "b\"x", "a", "c", "a"] {
            top.count(name.as_bytes());
        }
        let mut out = String::new();
        top.render(&mut out, "t", "who");
        let samples: Vec<&str> = out.lines().filter(|l| l.starts_with("t{")).collect();
        // "c" took the place of "b\"x" (count 1): its estimate 2, error 1.
        assert_eq!(samples, ["t{who=\"a\"} 3", "t{who=\"c\"} 2"]);
        assert!(out.contains("t_error{who=\"c\"} 1\n"));
        assert!(out.contains("t_counted_total 5\n"));
        let off = TopRefused::new(0);
        off.count(b"a");
        let mut out = String::new();
        off.render(&mut out, "t", "who");
        assert!(!out.contains("t{"));
        assert_eq!(escape("a\\\"\n"), "a\\\\\\\"\\n");
    }
}
