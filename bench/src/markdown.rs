//! The human-readable results: docs/bench.md, the table and the machine it ran on.

use std::path::Path;

use crate::Result;
use crate::lanes::{PAIRED_TURN, PING_WARMUP, PIPELINE_DEPTH, ROUND_TRIPS_PER_TURN};
use crate::measure::{COPIES, LATENCY_REQUESTS, MEASURED_REQUESTS, MEMORY_SAMPLE_KEYS};
use crate::report::{
    DEPTH_HEADER, HEADER, Run, check_line, churn_lines, depth_row, late_lines, lease_line,
    refund_line, row, source_line, tally, worst_line,
};
use crate::workload::WORKLOADS;
use crate::{depth, late, lease, refund, vscell};

/// The redis-cell that scripts/redis-cell.sh builds from crates.io.
const CELL_VERSION: &str = "0.2.2";

/// The redis-cell the bench loaded, by version: from the `redis-cell-<version>` directory
/// scripts/redis-cell.sh builds it in (`CELL_VERSION` when no module is named).
fn cell_version() -> String {
    let Ok(path) = std::env::var("REDIS_CELL_MODULE") else {
        return format!("redis-cell {CELL_VERSION}");
    };
    path.rsplit_once("redis-cell-")
        .and_then(|(_, after)| after.split('/').next())
        .filter(|v| !v.is_empty())
        .map_or_else(
            || "a redis-cell of unknown version".to_string(),
            |v| format!("redis-cell {v}"),
        )
}

pub fn write(run: &Run, path: &Path) -> Result<()> {
    let rows: Vec<Vec<String>> = run.results.iter().map(row).collect();
    let mut out =
        String::from("# Benchmark: SLIDINGWINDOW.ALLOW against the seed's Lua script\n\n");
    out += &machine_text(run);
    out += &method_text();
    out += &markdown_table(&HEADER, &rows);
    out += &format!("\n{}.\n\n", source_line(&run.results));
    out += &format!("{}.\n\n", worst_line(&run.worst));
    out += &late_text(run);
    out += &format!(
        "REFUND: one key per storage warmed as `hot` is, then {} REFUNDs of one request, each \
         after two ALLOWs (the second's `now` as `AT`), in pipelines; `INFO commandstats` keeps \
         the two commands apart. {}.\n\n",
        refund::REFUNDS,
        refund_line(run.refund.as_deref())
    );
    out += &format!(
        "LEASE: one key per kind and storage, a window logged, every call admitted; {} rounds of \
         a batch of {} ALLOWs without LEASE, then the same calls with `LEASE {}` on its own key; \
         the median per kind, and the median of each round's ratio. {}.\n\n",
        lease::ROUNDS,
        lease::BATCH,
        lease::LEASE_MS,
        lease_line(&run.lease)
    );
    out += &churn_text(run);
    out += &vs_cell_text(run);
    out += &targets_text(run);
    out += "\n![server CPU per request by variant and workload](bench.svg)\n";
    out += &depth_text(run);
    std::fs::write(path, out)?;
    Ok(())
}

fn machine_text(run: &Run) -> String {
    let m = &run.machine;
    format!(
        "Latest run (`make bench`), {}, took {:.0} s on:\n\n\
         - `nproc`: {}\n\
         - CPU: {}\n\
         - redis-server {}\n\
         - 1-minute load average at the start: {}, at the end: {} (other work on the machine \
         skews the figures)\n\n",
        m.date,
        run.seconds,
        m.nproc,
        m.cpu_model,
        m.redis_version,
        m.load_at_start,
        run.load_at_end
    )
}

fn targets_text(run: &Run) -> String {
    let mut out = format!("## Targets: {}\n\n", tally(&run.checks));
    for check in &run.checks {
        out += &format!("- {}\n", check_line(check));
    }
    out
}

/// `1 s / 10, 60 s / 100`
fn limits_text(limits: impl Iterator<Item = (u64, u64)>) -> String {
    let parts: Vec<String> = limits.map(|(w, m)| format!("{w} s / {m}")).collect();
    parts.join(", ")
}

fn method_text() -> String {
    let tenant = WORKLOADS
        .iter()
        .find(|w| w.has_tenant())
        .unwrap_or(&WORKLOADS[0]);
    format!(
        "Each workload runs on one private server with a simulated clock (the client sends \
         `now`), in two passes.\n\n\
         1. Each variant alone, one after the other, on a flushed server: one full window of \
         requests as warm-up ({PING_WARMUP} for `ping`), then a batch of {MEASURED_REQUESTS} \
         requests in pipelines of {PIPELINE_DEPTH} after `CONFIG RESETSTAT`. The in-command \
         p50/p99/p99.9 are from `INFO latencystats` over that batch (`latency-tracking yes`), \
         and so are throughput and the admitted share; memory is read after it. Alone, because \
         latencystats are server-wide histograms kept per command name, and the script's \
         `redis.call`s and the module's own `RedisModule_Call`s are counted under their own \
         names (`zadd`, `zremrangebyscore`, ...). For `commands` the percentiles are each \
         command's, joined by `+` (zremrangebyscore+zcard+zadd+expire): the percentile of a \
         request's total is not measured. Redis 7.0 times a call in whole µs, so 0 is under a \
         µs and small figures are coarse. bytes/member is `MEMORY USAGE key SAMPLES 0` over \
         the members stored (`ZCARD`; for the module `SLIDINGWINDOW.PEEK` at time 0, which any \
         of its storages answers), summed over up to {MEMORY_SAMPLE_KEYS} keys. \
         used_memory/key is what the keys cost the server, TTLs and allocator slack included: \
         the fall of `used_memory` when a workload of many keys is flushed, or its rise when a \
         one-key workload's key is copied {COPIES} times (Redis's own bookkeeping moves `used_memory` \
         by tens of KB between readings, more than one small key weighs).\n\
         2. All variants side by side, each on a database of its own, on a flushed server: the \
         same warm-up, the variants taking turns of one pipeline. Then the paired measurement: \
         {MEASURED_REQUESTS} more requests per variant in pipelines of {PIPELINE_DEPTH}, the \
         variants taking turns of {PAIRED_TURN} with the first of each turn rotating, `INFO \
         cpu` and `INFO commandstats` read around every turn. A turn is one variant alone on \
         the server, so its deltas are that variant's; taking turns, a slower or faster spell \
         of the machine (other tenants, clock frequency) falls on every variant alike, where \
         batches run a minute apart moved ratios by up to 0.15 here. Server CPU (the `INFO \
         cpu` delta) and in-command µs/call (`INFO commandstats`; for `commands`, the four \
         commands' usec summed per request) in the table are these turns' totals per request, \
         unless more than 1% of the workload's keys expired by then (a variant taking turns \
         touches its keys less often than alone): then they are the first pass's, as the line \
         under the table says. `bench.json` has both passes' figures. Last, {LATENCY_REQUESTS} \
         sequential round trips per variant (pipeline depth 1) timed by the client, the \
         variants taking turns of {ROUND_TRIPS_PER_TURN} the same way. A round trip is mostly \
         the kernel and the event loop, not the command: compare with the in-command \
         percentiles.\n\n\
         Keys expire on the server's clock (the TTL is the window, in real seconds), so a variant \
         idle for that long loses its state: the run stops if more than 1% of a workload's keys \
         expire in the first pass, and says so if any do in the second. `commands` (the script's four commands, pipelined, \
         always adding) and `ping` are cost floors, not rate limiters. Identical sets differ by \
         a fraction of a byte per member, as skiplist node heights are random.\n\n\
         `multi` gives every request three limits: the module checks them in one call (`LIMIT` \
         options, one log); `module-split` makes one single-limit call per limit, each on a key \
         of its own, as callers do without `LIMIT` (not atomic); `lua-split` runs the seed \
         script the same way. A request of the split variants is its three calls: their CPU, \
         in-command time and memory are per request, summed over the calls and keys, and a \
         request is admitted when all three calls are. `lua` and `commands` know one limit and \
         do not run `multi`; the split variants run only there. Warm-ups span the longest \
         window.\n\n\
         `tenant` gives every request two keys: a user's (one of {tenant_users}, limits {user}) \
         and their tenant's (one for all, limits {tenant}). `module` and `compact` send one \
         `SLIDINGWINDOW.ALLOWALL 2 user tenant now LIMIT 1 ... LIMIT 2 ...`; `module-split` \
         and `compact-split` one ALLOW per key, each with its key's limits (not atomic: the \
         user is charged when the tenant refuses); `lua-split` the seed script once per key, \
         with the key's longest limit. Where the module has no ALLOWALL, its rows are missing \
         and the targets on them say unavailable.\n\n\
         `redis-cell` is {cell}'s `CL.THROTTLE key max-1 max window 1` \
         (GCRA: one timestamp per key, the same rate), built under `target/` by \
         `scripts/redis-cell.sh` (never committed; from crates.io, which serves \
         {CELL_VERSION}, or from the source tree `REDIS_CELL_SRC` names) and loaded into a server of its own, same \
         binary and flags, which takes its turns with the others. It keeps time on the \
         server's clock, not the simulated one, so its admitted share says little and its \
         keys expire by design (not counted as expired). Without it (no network, a failed \
         build) its rows are missing and its targets say unavailable.\n\n",
        tenant_users = tenant.keys,
        cell = cell_version(),
        user = limits_text(tenant.limits()),
        tenant = limits_text(tenant.tenant_limits.iter().copied()),
    )
}

fn churn_text(run: &Run) -> String {
    let lines = churn_lines(run.churn.as_ref());
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "`churn`: the compact log's block edges on large logs, each against the same calls \
         inside a block with room (the two taking turns, 5 rounds, the median): at the tail, \
         `ALLOW` one ms past a full last block then `REFUND 1`; in the middle (a log RESTOREd \
         from requests a ms apart), `REFUND 2 AT b`, `ALLOW b-1`, `ALLOW b` at a block's first \
         timestamp `b`; a block opened by each `ALLOW ... COST 4096`; `RESTORE` (the median of 3); \
         and `MEMORY USAGE` per request after refunds of half of every block-sized run and of \
         3000 random ones:\n\n",
    );
    for line in lines {
        out += &format!("- {line}\n");
    }
    out + "\n"
}

fn vs_cell_text(run: &Run) -> String {
    if run.vs_cell.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = run.vs_cell.iter().map(vscell::row).collect();
    format!(
        "{}\n\n{}\n",
        vscell::method(),
        markdown_table(&vscell::HEADER, &rows)
    )
}

fn late_text(run: &Run) -> String {
    let mut out = format!(
        "`late`: one key logging {} requests, one every {} ms, in a {}-s window; then {} rounds \
         of a batch of calls on time (appends), then a batch of calls from each kind of late \
         caller, the clock running on through all of them; every call is admitted and logged \
         where its time falls. In-command µs/call from `INFO commandstats` deltas around each \
         batch, by kind (the median of the rounds, so that one stall does not decide it):\n\n",
        late::LOGGED,
        late::STEP_MS,
        late::WINDOW_S,
        late::ROUNDS
    );
    for line in late_lines(&run.late) {
        out += &format!("- {line}\n");
    }
    out + "\n"
}

fn depth_text(run: &Run) -> String {
    let counts: Vec<String> = depth::STEPS
        .iter()
        .map(|s| format!("{} at depth {}", s.requests, s.depth))
        .collect();
    let rows: Vec<Vec<String>> = run.depths.iter().map(depth_row).collect();
    let mut out = format!(
        "\n## Pipeline depth sweep: module and ping on `{}`\n\n\
         Server CPU per request (the `INFO cpu` delta, as in the table above) of the module and of \
         PING at several pipeline depths, on one key warmed by a full window, with the simulated \
         clock running on from one depth to the next; module then PING at each depth. Requests: \
         {}. What a round trip costs the server (reading, parsing, replying, waking the event \
         loop) is shared by the requests of one pipeline, and is most of PING's cost, so the \
         module/ping ratio depends on the depth, and measures Redis's protocol more than the \
         module: it is no longer a target (the table's depth is {PIPELINE_DEPTH}). At low depths both figures are mostly that per-round-trip \
         cost, which varies from run to run with the machine's load: compare module and ping \
         within one run.\n\n",
        depth::WORKLOAD,
        counts.join(", ")
    );
    out += &markdown_table(&DEPTH_HEADER, &rows);
    out
}

fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    out += &format!("|{}\n", "---|".repeat(header.len()));
    for r in rows {
        out += &format!("| {} |\n", r.join(" | "));
    }
    out
}
