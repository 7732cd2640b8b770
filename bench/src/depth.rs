//! The pipeline depth sweep: server CPU per request of the module and of PING on `hot` at
//! several depths, since the module/ping ratio depends mostly on how many requests share the
//! fixed cost of one round trip (read, write, event loop wake-up).

use crate::Result;
use crate::lanes::{self, Lane};
use crate::measure::measure_batch;
use crate::server::Servers;
use crate::settings::Settings;
use crate::variants::{MODULE, PING};
use crate::workload::WORKLOADS;

pub const WORKLOAD: &str = "hot";

pub struct Step {
    pub depth: u64,
    pub requests: u64,
}

/// Fewer requests at depth 1, where each is a round trip of its own, to keep the sweep short.
pub const STEPS: [Step; 4] = [
    Step {
        depth: 1,
        requests: 20_000,
    },
    Step {
        depth: 10,
        requests: 100_000,
    },
    Step {
        depth: 100,
        requests: 100_000,
    },
    Step {
        depth: 1000,
        requests: 100_000,
    },
];

pub struct DepthPoint {
    pub depth: u64,
    pub requests: u64,
    pub module_cpu_us_per_req: f64,
    pub ping_cpu_us_per_req: f64,
    /// Share of the module's requests admitted: about half shows its key is in steady state.
    pub module_admitted: Option<f64>,
}

impl DepthPoint {
    pub fn module_over_ping(&self) -> f64 {
        self.module_cpu_us_per_req / self.ping_cpu_us_per_req
    }
}

/// The module's and PING's lanes on `hot`, warmed once on a flushed server and kept across
/// depths, so that the module's simulated clock keeps advancing and its key stays in its
/// steady state.
pub struct Sweep<'a> {
    module: Lane<'a>,
    ping: Lane<'a>,
}

impl<'a> Sweep<'a> {
    pub fn start(servers: &Servers, sha: &'a str, settings: &mut Settings) -> Result<Sweep<'a>> {
        let workload = WORKLOADS
            .iter()
            .find(|w| w.name == WORKLOAD)
            .ok_or_else(|| format!("no workload named {WORKLOAD}"))?;
        let mut lanes = [
            Lane::open(servers, &MODULE, workload, sha)?,
            Lane::open(servers, &PING, workload, sha)?,
        ];
        redis::cmd("FLUSHALL").exec(&mut lanes[0].con)?;
        lanes::warm_up(&mut lanes, settings)?;
        let [module, ping] = lanes;
        Ok(Sweep { module, ping })
    }

    /// Module then PING at one depth, so that both figures are taken close together in time.
    pub fn measure(&mut self, step: &Step, settings: &mut Settings) -> Result<DepthPoint> {
        let module = measure_batch(&mut self.module, settings, step.requests, step.depth)?;
        let ping = measure_batch(&mut self.ping, settings, step.requests, step.depth)?;
        let per_req = |n: f64| n / step.requests as f64;
        Ok(DepthPoint {
            depth: step.depth,
            requests: step.requests,
            module_cpu_us_per_req: per_req(module.cpu_us),
            ping_cpu_us_per_req: per_req(ping.cpu_us),
            module_admitted: module.admitted.map(|n| per_req(n as f64)),
        })
    }
}
