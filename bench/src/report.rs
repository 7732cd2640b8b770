//! The run's results, and their rendering as text: the stdout table and its pieces.

use crate::churn::{self, ChurnResult};
use crate::depth::{self, DepthPoint};
use crate::info;
use crate::late::{LAGS, LateResult};
use crate::lease::{LEASE_MS, LeaseResult};
use crate::machine::Machine;
use crate::measure::Measurement;
use crate::refund::RefundResult;
use crate::targets::{Bound, Check};
use crate::vscell::{self, VsCell};
use crate::worst::Worst;

pub struct Run {
    pub machine: Machine,
    pub results: Vec<Measurement>,
    /// The pipeline depth sweep on `hot`, module and ping, shallowest first.
    pub depths: Vec<DepthPoint>,
    pub worst: Worst,
    pub late: Vec<LateResult>,
    /// None when the module has no SLIDINGWINDOW.REFUND.
    pub refund: Option<Vec<RefundResult>>,
    /// Empty when the part did not run or the module has no LEASE.
    pub lease: Vec<LeaseResult>,
    /// None when `churn` did not run (BENCH_ONLY).
    pub churn: Option<ChurnResult>,
    /// Empty when the part did not run or redis-cell was not built.
    pub vs_cell: Vec<VsCell>,
    pub checks: Vec<Check>,
    pub seconds: f64,
    /// 1-minute load average when the run ended (the machine's at the start).
    pub load_at_end: String,
}

pub const HEADER: [&str; 14] = [
    "workload",
    "variant",
    "server CPU µs/req",
    "in-command µs/call",
    "in-command p50 µs",
    "in-command p99 µs",
    "in-command p99.9 µs",
    "throughput req/s",
    "round-trip p50 µs",
    "round-trip p99 µs",
    "members/key",
    "bytes/member",
    "used_memory/key",
    "admitted",
];

pub fn row(m: &Measurement) -> Vec<String> {
    let opt = |v: Option<f64>, digits: usize| match v {
        Some(v) => format!("{v:.digits$}"),
        None => "-".to_string(),
    };
    let mut cells = vec![
        m.workload.to_string(),
        m.variant.name.to_string(),
        format!("{:.2}", m.cpu_us_per_req),
        format!("{:.2}", m.in_command_us_per_req),
    ];
    cells.extend((0..info::PERCENTILES.len()).map(|i| in_command_percentile(m, i)));
    cells.extend([
        format!("{:.0}", m.throughput_rps),
        format!("{:.1}", m.round_trip_p50_us),
        format!("{:.1}", m.round_trip_p99_us),
        opt(m.memory.as_ref().map(|mem| mem.members_per_key), 1),
        opt(m.memory.as_ref().map(|mem| mem.bytes_per_member), 1),
        opt(m.memory.as_ref().map(|mem| mem.used_per_key), 0),
        match m.admitted {
            Some(a) => format!("{:.1}%", a * 100.0),
            None => "-".to_string(),
        },
    ]);
    cells
}

/// Percentile `i` of each of the variant's commands, joined by `+` where a request is several
/// commands: the percentile of their sum is not known, only each command's. Whole µs, as Redis
/// 7.0 times a call in whole µs.
fn in_command_percentile(m: &Measurement, i: usize) -> String {
    let values: Vec<String> = m
        .in_command_percentiles
        .iter()
        .map(|c| format!("{:.0}", c.usec[i]))
        .collect();
    values.join("+")
}

pub fn print_progress(m: &Measurement) {
    println!(
        "  {:<5} {:<12} cpu {:>6.2} µs/req  in-command {:>6.2} µs/call ({} µs)  {:>8.0} req/s",
        m.workload,
        m.variant.name,
        m.cpu_us_per_req,
        m.in_command_us_per_req,
        percentiles_text(m),
        m.throughput_rps
    );
}

/// `p50 1, p99 4, p99.9 14`
fn percentiles_text(m: &Measurement) -> String {
    let parts: Vec<String> = info::PERCENTILES
        .iter()
        .enumerate()
        .map(|(i, label)| format!("{label} {}", in_command_percentile(m, i)))
        .collect();
    parts.join(", ")
}

pub const DEPTH_HEADER: [&str; 4] = [
    "depth",
    "module CPU µs/req",
    "ping CPU µs/req",
    "module/ping",
];

pub fn depth_row(p: &DepthPoint) -> Vec<String> {
    vec![
        p.depth.to_string(),
        format!("{:.2}", p.module_cpu_us_per_req),
        format!("{:.2}", p.ping_cpu_us_per_req),
        format!("{:.2}", p.module_over_ping()),
    ]
}

pub fn print_depth(p: &DepthPoint) {
    println!(
        "  {:<5} depth {:>4}  module cpu {:>6.2} µs/req  ping cpu {:>6.2} µs/req  module/ping {:>5.2}",
        depth::WORKLOAD,
        p.depth,
        p.module_cpu_us_per_req,
        p.ping_cpu_us_per_req,
        p.module_over_ping()
    );
}

pub fn print(run: &Run) {
    let rows: Vec<Vec<String>> = run.results.iter().map(row).collect();
    println!();
    print!("{}", text_table(&HEADER, &rows));
    println!();
    println!("{}", source_line(&run.results));
    println!("{}", worst_line(&run.worst));
    for line in late_lines(&run.late) {
        println!("{line}");
    }
    println!("{}", refund_line(run.refund.as_deref()));
    println!("{}", lease_line(&run.lease));
    for line in churn_lines(run.churn.as_ref()) {
        println!("{line}");
    }
    if !run.vs_cell.is_empty() {
        let rows: Vec<Vec<String>> = run.vs_cell.iter().map(vscell::row).collect();
        println!(
            "\nvs-cell (server CPU a request, medians of {} rounds):",
            vscell::ROUNDS
        );
        print!("{}", text_table(&vscell::HEADER, &rows));
    }
    println!();
    for check in &run.checks {
        println!("{}", check_line(check));
    }
    println!("\n{}; run took {:.1} s", tally(&run.checks), run.seconds);
}

fn text_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        padded.join("  ") + "\n"
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out += &line(r.iter().map(String::as_str).collect());
    }
    out
}

/// Which pass each workload's CPU and in-command figures come from.
pub fn source_line(results: &[Measurement]) -> String {
    let mut paired: Vec<&str> = Vec::new();
    let mut alone: Vec<&str> = Vec::new();
    for m in results {
        let list = if m.paired { &mut paired } else { &mut alone };
        if !list.contains(&m.workload) {
            list.push(m.workload);
        }
    }
    let mut line = format!(
        "Server CPU and in-command µs/call are from the paired turns (second pass) on: {}",
        list_or_none(&paired)
    );
    if !alone.is_empty() {
        line += &format!(
            "; from the variants run alone (first pass) on: {} (keys expired while the \
             variants took turns)",
            alone.join(", ")
        );
    }
    line
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

pub fn worst_line(worst: &Worst) -> String {
    let ms = |us: u64| us as f64 / 1000.0;
    format!(
        "Worst call (one request on {} members whose whole window has expired), in-command \
         time: module median {:.3} ms, worst {:.3} ms; compact median {:.3} ms, best {:.3} ms; \
         lua median {:.1} ms, worst {:.1} ms (µs per trial: module {:?}, compact {:?}, lua {:?})",
        worst.members,
        ms(worst.module_median()),
        ms(worst.module_max()),
        ms(worst.compact_median()),
        ms(worst.compact_best()),
        ms(worst.lua_median()),
        ms(worst.lua_max()),
        worst.module_us,
        worst.compact_us,
        worst.lua_us
    )
}

/// One line per storage: in-command µs per call of each kind of caller of `late`.
pub fn late_lines(late: &[LateResult]) -> Vec<String> {
    late.iter()
        .map(|r| {
            let parts: Vec<String> = LAGS
                .iter()
                .zip(&r.us_per_call)
                .zip(&r.calls)
                .map(|(((label, _), us), calls)| format!("{label} {us:.2} µs ({calls} calls)"))
                .collect();
            format!("late, {}: {}", r.storage, parts.join(", "))
        })
        .collect()
}

pub fn refund_line(refund: Option<&[RefundResult]>) -> String {
    let Some(results) = refund else {
        return "REFUND: unavailable (the module has no SLIDINGWINDOW.REFUND)".to_string();
    };
    let parts = each(results, |r| {
        format!(
            "{}: ALLOW {:.2} µs, REFUND {:.2} µs ({} requests taken back)",
            r.storage, r.allow_us, r.refund_us, r.refunded
        )
    });
    format!("REFUND of one request against ALLOW, in-command µs/call: {parts}")
}

/// Each storage's ALLOW with and without LEASE, in-command µs per call.
pub fn lease_line(lease: &[LeaseResult]) -> String {
    if lease.is_empty() {
        return "LEASE: not measured".to_string();
    }
    let parts = each(lease, |r| {
        format!(
            "{}: without {:.3} µs, with LEASE {LEASE_MS} {:.3} µs ({:.3}x)",
            r.storage,
            r.us_per_call[0],
            r.us_per_call[1],
            r.ratio()
        )
    });
    format!("ALLOW with LEASE against without, in-command µs/call: {parts}")
}

/// `show` of each item, joined by `; `.
fn each<T>(items: &[T], show: impl Fn(&T) -> String) -> String {
    let parts: Vec<String> = items.iter().map(show).collect();
    parts.join("; ")
}

/// The `churn` figures, a line each (none when it did not run).
pub fn churn_lines(churn: Option<&ChurnResult>) -> Vec<String> {
    let Some(c) = churn else {
        return Vec::new();
    };
    let mut lines = vec![
        format!(
            "churn, tail ({}M requests): in-command µs per ALLOW + REFUND {:.2} past a full last \
             block, {:.2} inside one with room",
            churn::BURSTS * churn::BURST / 1_000_000,
            c.tail_edge_us,
            c.tail_inside_us
        ),
        format!(
            "churn, middle ({}M requests a ms apart): in-command µs per REFUND 2 + 2 ALLOWs {:.2} \
             across a block edge, {:.2} inside a block",
            churn::MIDDLE / 1_000_000,
            c.middle_edge_us,
            c.middle_inside_us
        ),
    ];
    for (size, us) in churn::OPENING_LOGS.iter().zip(&c.opening_us) {
        lines.push(format!(
            "churn, block opening on {}M requests: {us:.2} in-command µs per ALLOW COST 4096",
            size / 1_000_000
        ));
    }
    for (size, ms) in churn::RESTORES.iter().zip(&c.restore_ms) {
        lines.push(format!(
            "churn, RESTORE of {}M requests a ms apart: {ms:.0} in-command ms",
            size / 1_000_000
        ));
    }
    for (span, bytes) in churn::SPANS.iter().zip(&c.bytes) {
        lines.push(format!(
            "churn, bytes/request after refunds over {span} ms: {bytes:.2} (bound {})",
            ChurnResult::bound(*span)
        ));
    }
    lines
}

pub fn check_line(check: &Check) -> String {
    let op = match check.bound {
        Bound::AtLeast => ">=",
        Bound::AtMost => "<=",
    };
    if let Some(why) = &check.unavailable {
        return format!(
            "[UNAVAILABLE] {}: {why} (target {op} {:.3})",
            check.name, check.threshold
        );
    }
    format!(
        "[{}] {}: {:.3} (target {op} {:.3})",
        if check.holds { "ok" } else { "MISSED" },
        check.name,
        check.value,
        check.threshold
    )
}

/// `18 of 22 targets hold, 2 unavailable`
pub fn tally(checks: &[Check]) -> String {
    let held = checks.iter().filter(|c| c.holds).count();
    let unavailable = checks.iter().filter(|c| c.unavailable.is_some()).count();
    let mut text = format!("{held} of {} targets hold", checks.len());
    if unavailable > 0 {
        text += &format!(", {unavailable} unavailable");
    }
    text
}
