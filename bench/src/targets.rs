//! The targets, as ratios within this one run.

use crate::measure::{Measurement, Memory};
use crate::variants::{COMPACT, COMPACT_SPLIT, LUA, MODULE, MODULE_SPLIT, PING, Variant};
use crate::workload::WORKLOADS;
use crate::worst::Worst;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    AtLeast,
    AtMost,
}

pub struct Check {
    pub name: String,
    pub value: f64,
    pub bound: Bound,
    pub threshold: f64,
    pub holds: bool,
}

impl Check {
    fn new(name: String, value: f64, bound: Bound, threshold: f64) -> Check {
        // A NaN (missing figure) fails either bound.
        let holds = match bound {
            Bound::AtLeast => value >= threshold,
            Bound::AtMost => value <= threshold,
        };
        Check {
            name,
            value,
            bound,
            threshold,
            holds,
        }
    }
}

pub fn evaluate(results: &[Measurement], worst: &Worst) -> Vec<Check> {
    let mut checks = Vec::new();
    for (workload, min) in [("hot", 2.5), ("big", 2.2), ("wide", 1.8)] {
        let ratio = ratio(results, workload, &LUA, &MODULE, |m| Some(m.cpu_us_per_req));
        let name = format!("server CPU/request, lua / module, {workload}");
        checks.push(Check::new(name, ratio, Bound::AtLeast, min));
    }
    for (workload, min) in [("hot", 3.0), ("big", 2.3), ("wide", 2.0)] {
        let ratio = ratio(results, workload, &LUA, &MODULE, |m| {
            Some(m.in_command_us_per_req)
        });
        let name = format!("in-command µs/call, lua / module, {workload}");
        checks.push(Check::new(name, ratio, Bound::AtLeast, min));
    }
    let vs_ping = ratio(results, "hot", &MODULE, &PING, |m| Some(m.cpu_us_per_req));
    let name = "server CPU/request, module / ping, hot".to_string();
    checks.push(Check::new(name, vs_ping, Bound::AtMost, 2.8));
    let name = format!(
        "whole-window expiry of {} members, module, in-command µs (worst trial)",
        worst.members
    );
    checks.push(Check::new(
        name,
        worst.module_max() as f64,
        Bound::AtMost,
        2000.0,
    ));
    // Several limits: one call with all of them against one single-limit call, a call of
    // `module-split`'s (which makes one per limit).
    for workload in WORKLOADS.iter().filter(|w| !w.extra_limits.is_empty()) {
        let calls = workload.limits().count() as f64;
        for (one, split, max) in [
            (&MODULE, &MODULE_SPLIT, 2.0),
            (&COMPACT, &COMPACT_SPLIT, 1.3),
        ] {
            let per_call = ratio(results, workload.name, one, split, |m| {
                Some(m.cpu_us_per_req)
            }) * calls;
            let name = format!(
                "server CPU, one call with {calls} limits / one single-limit call \
                 ({} / ({} / {calls})), {}",
                one.name, split.name, workload.name
            );
            checks.push(Check::new(name, per_call, Bound::AtMost, max));
        }
    }
    for workload in ["hot", "wide", "big"] {
        let ratio = ratio(results, workload, &MODULE, &LUA, |m| {
            m.memory.as_ref().map(|mem: &Memory| mem.bytes_per_member)
        });
        let noise = level_noise(results, workload);
        let name = if noise > 0.0 {
            format!("bytes/member, module / lua, {workload} (skiplist levels are random: +3 sigma)")
        } else {
            format!("bytes/member, module / lua, {workload}")
        };
        checks.push(Check::new(name, ratio, Bound::AtMost, 1.0 + noise));
    }
    checks.extend(compact_checks(results, worst));
    checks
}

/// The compact storage's targets: memory per request, CPU against the sorted set.
fn compact_checks(results: &[Measurement], worst: &Worst) -> Vec<Check> {
    let mut checks = Vec::new();
    let memory = |workload: &str| {
        results
            .iter()
            .find(|m| m.workload == workload && *m.variant == COMPACT)
            .and_then(|m| m.memory.as_ref())
    };
    for workload in ["hot", "big"] {
        let Some(mem) = memory(workload) else {
            continue;
        };
        let name = format!("bytes/request (MEMORY USAGE), compact, {workload}");
        checks.push(Check::new(name, mem.bytes_per_member, Bound::AtMost, 8.0));
        // Both ways of counting agree: the keys' own view and the server's.
        let name = format!("used_memory delta / MEMORY USAGE, compact, {workload} (within 25%)");
        let agree = (mem.used_per_member / mem.bytes_per_member - 1.0).abs();
        checks.push(Check::new(name, agree, Bound::AtMost, 0.25));
    }
    let per_key = ratio(results, "wide", &COMPACT, &MODULE, |m| {
        m.memory.as_ref().map(|mem| mem.used_per_key)
    });
    let name = "used_memory per key, compact / module, wide".to_string();
    checks.push(Check::new(name, per_key, Bound::AtMost, 0.5));
    for (workload, max) in [("big", 0.6), ("hot", 0.85), ("wide", 0.85)] {
        let cpu = ratio(results, workload, &COMPACT, &MODULE, |m| {
            Some(m.cpu_us_per_req)
        });
        let name = format!("server CPU/request, compact / module, {workload}");
        checks.push(Check::new(name, cpu, Bound::AtMost, max));
    }
    let in_command = ratio(results, "big", &COMPACT, &MODULE, |m| {
        Some(m.in_command_us_per_req)
    });
    let name = "in-command µs/call, compact / module, big".to_string();
    checks.push(Check::new(name, in_command, Bound::AtMost, 0.5));
    let name = format!(
        "whole-window expiry of {} requests, compact, in-command µs (best trial)",
        worst.members
    );
    checks.push(Check::new(
        name,
        worst.compact_best() as f64,
        Bound::AtMost,
        2000.0,
    ));
    checks
}

/// Three standard deviations of the module/lua bytes-per-member ratio that random skiplist node
/// levels alone cause (0 for listpack-encoded sets, whose size is exact). A node's level is
/// geometric with p = 1/4 (std 2/3 level), each level 16 bytes; two independent sets differ by
/// sqrt(2) times one set's noise.
fn level_noise(results: &[Measurement], workload: &str) -> f64 {
    const LISTPACK_MAX: f64 = 128.0;
    const LEVEL_STD_BYTES: f64 = 16.0 * 2.0 / 3.0;
    let Some(mem) = results
        .iter()
        .find(|m| m.workload == workload && *m.variant == LUA)
        .and_then(|m| m.memory.as_ref())
    else {
        return 0.0;
    };
    if mem.members_per_key <= LISTPACK_MAX {
        return 0.0;
    }
    3.0 * 2f64.sqrt() * LEVEL_STD_BYTES / mem.members_per_key.sqrt() / mem.bytes_per_member
}

/// `figure(top) / figure(bottom)` on one workload; NaN when either is missing.
fn ratio(
    results: &[Measurement],
    workload: &str,
    top: &Variant,
    bottom: &Variant,
    figure: impl Fn(&Measurement) -> Option<f64>,
) -> f64 {
    let get = |variant: &Variant| {
        results
            .iter()
            .find(|m| m.workload == workload && m.variant == variant)
            .and_then(&figure)
    };
    match (get(top), get(bottom)) {
        (Some(t), Some(b)) => t / b,
        _ => f64::NAN,
    }
}
