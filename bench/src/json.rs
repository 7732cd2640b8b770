//! The machine-readable results: docs/bench.json.

use std::path::Path;

use serde_json::{Value, json};

use crate::Result;
use crate::depth::{self, DepthPoint};
use crate::info::PERCENTILES;
use crate::lanes::{PIPELINE_DEPTH, ROUND_TRIPS_PER_TURN};
use crate::measure::{CommandLatency, LATENCY_REQUESTS, MEASURED_REQUESTS, Measurement};
use crate::report::Run;
use crate::targets::{Bound, Check};
use crate::workload::WORKLOADS;
use crate::{churn, late, lease, refund, vscell};

pub fn write(run: &Run, path: &Path) -> Result<()> {
    let doc = json!({
        "machine": {
            "nproc": run.machine.nproc,
            "cpu_model": run.machine.cpu_model,
            "redis_version": run.machine.redis_version,
            "date": run.machine.date,
            "load_average_at_start": run.machine.load_at_start,
            "load_average_at_end": run.load_at_end,
        },
        "run_seconds": run.seconds,
        "config": config_json(),
        "results": run.results.iter().map(result_json).collect::<Vec<_>>(),
        "pipeline_depth_sweep": run.depths.iter().map(depth_json).collect::<Vec<_>>(),
        "worst_call": {
            "members": run.worst.members,
            "module_in_command_us": run.worst.module_us,
            "compact_in_command_us": run.worst.compact_us,
            "lua_in_command_us": run.worst.lua_us,
        },
        "late": {
            "logged_requests": late::LOGGED,
            "window_s": late::WINDOW_S,
            "ms_per_request": late::STEP_MS,
            "lags_ms": late::LAGS.iter().map(|(label, lag)| json!({"kind": label, "lag_ms": lag})).collect::<Vec<_>>(),
            "results": run.late.iter().map(|r| json!({
                "storage": r.storage,
                "calls": r.calls,
                "in_command_us_per_call": r.us_per_call,
            })).collect::<Vec<_>>(),
        },
        // null when the module has no SLIDINGWINDOW.REFUND.
        "refund": run.refund.as_ref().map(|rs| rs.iter().map(|r| json!({
            "storage": r.storage,
            "refund_calls": refund::REFUNDS,
            "refunded": r.refunded,
            "allow_in_command_us_per_call": r.allow_us,
            "refund_in_command_us_per_call": r.refund_us,
        })).collect::<Vec<_>>()),
        "lease": {
            "lease_ms": lease::LEASE_MS,
            "rounds": lease::ROUNDS,
            "calls_per_batch": lease::BATCH,
            "results": run.lease.iter().map(|r| json!({
                "storage": r.storage,
                "kinds": lease::KINDS,
                "in_command_us_per_call": r.us_per_call,
                "median_ratio_lease_over_plain": r.ratio,
            })).collect::<Vec<_>>(),
        },
        // null when `churn` did not run.
        "churn": run.churn.as_ref().map(|c| json!({
            "tail_log_requests": churn::BURSTS * churn::BURST,
            "tail_edge_in_command_us_per_pair": c.tail_edge_us,
            "tail_inside_in_command_us_per_pair": c.tail_inside_us,
            "middle_log_requests": churn::MIDDLE,
            "middle_edge_in_command_us_per_loop": c.middle_edge_us,
            "middle_inside_in_command_us_per_loop": c.middle_inside_us,
            "opening_log_requests": churn::OPENING_LOGS,
            "opening_in_command_us_per_call": c.opening_us,
            "restore_requests": churn::RESTORES,
            "restore_in_command_ms": c.restore_ms,
            "bytes_spans_ms": churn::SPANS,
            "bytes_per_request_after_refunds": c.bytes,
        })),
        // Empty when `vs-cell` did not run or redis-cell was not built.
        "vs_cell": {
            "rounds": vscell::ROUNDS,
            "requests_per_round": vscell::ROUND_REQUESTS,
            "results": run.vs_cell.iter().map(|r| json!({
                "workload": r.workload,
                "compact_cpu_us_per_req_rounds": r.compact_us,
                "cell_cpu_us_per_req_rounds": r.cell_us,
                "compact_cpu_us_per_req": r.compact(),
                "cell_cpu_us_per_req": r.cell(),
                "ratio_compact_over_cell": r.ratio(),
            })).collect::<Vec<_>>(),
        },
        "targets": run.checks.iter().map(check_json).collect::<Vec<_>>(),
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")?;
    Ok(())
}

fn config_json() -> Value {
    json!({
        "measured_requests": MEASURED_REQUESTS,
        "pipeline_depth": PIPELINE_DEPTH,
        "latency_requests": LATENCY_REQUESTS,
        "latency_round_trips_per_turn": ROUND_TRIPS_PER_TURN,
        "workloads": WORKLOADS.iter().map(|w| json!({
            "name": w.name,
            "keys": w.keys,
            "window_s": w.window_s,
            "max": w.max,
            "ms_per_request": w.step_num as f64 / w.step_den as f64,
            "warmup_requests": w.requests_per_window(),
            "extra_limits": w.extra_limits,
            "tenant_limits": w.tenant_limits,
        })).collect::<Vec<_>>(),
    })
}

fn result_json(m: &Measurement) -> Value {
    json!({
        "workload": m.workload,
        "variant": m.variant.name,
        "server_cpu_us_per_request": m.cpu_us_per_req,
        "in_command_us_per_call": m.in_command_us_per_req,
        // "paired": the two figures above are from the paired turns (second pass); "alone":
        // keys expired while the variants took turns, and they are the first pass's.
        "cpu_source": if m.paired { "paired" } else { "alone" },
        // The same over the batch each variant ran alone (the first pass), for comparison.
        "alone_server_cpu_us_per_request": m.alone_cpu_us_per_req,
        "alone_in_command_us_per_call": m.alone_in_command_us_per_req,
        // One entry per command of a request (four for `commands`), as INFO latencystats
        // reports them over the measured batch.
        "in_command_percentiles_us": m.in_command_percentiles.iter().map(latency_json).collect::<Vec<_>>(),
        "throughput_rps": m.throughput_rps,
        "round_trip_p50_us": m.round_trip_p50_us,
        "round_trip_p99_us": m.round_trip_p99_us,
        "members_per_key": m.memory.as_ref().map(|mem| mem.members_per_key),
        "bytes_per_member": m.memory.as_ref().map(|mem| mem.bytes_per_member),
        "used_memory_per_member": m.memory.as_ref().map(|mem| mem.used_per_member),
        "used_memory_per_key": m.memory.as_ref().map(|mem| mem.used_per_key),
        "admitted_fraction": m.admitted,
    })
}

fn latency_json(c: &CommandLatency) -> Value {
    let mut entry = serde_json::Map::new();
    entry.insert("command".to_string(), json!(c.command));
    for (label, usec) in PERCENTILES.iter().zip(c.usec) {
        entry.insert(label.to_string(), json!(usec));
    }
    Value::Object(entry)
}

fn depth_json(p: &DepthPoint) -> Value {
    json!({
        "workload": depth::WORKLOAD,
        "pipeline_depth": p.depth,
        "requests": p.requests,
        "module_server_cpu_us_per_request": p.module_cpu_us_per_req,
        "ping_server_cpu_us_per_request": p.ping_cpu_us_per_req,
        "module_over_ping": p.module_over_ping(),
        "module_admitted_fraction": p.module_admitted,
    })
}

fn check_json(c: &Check) -> Value {
    json!({
        "name": c.name,
        // NaN is not JSON: a missing figure becomes null.
        "value": if c.value.is_finite() { Some(c.value) } else { None },
        "bound": match c.bound { Bound::AtLeast => ">=", Bound::AtMost => "<=" },
        "threshold": c.threshold,
        "holds": c.holds,
        "unavailable": c.unavailable,
    })
}
