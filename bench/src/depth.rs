//! The pipeline depth sweep: server CPU per request of the module and of PING on `hot` at
//! several depths, since the module/ping ratio depends mostly on how many requests share the
//! fixed cost of one round trip (read, write, event loop wake-up).

use redis::Connection;

use crate::Result;
use crate::measure;
use crate::variants::{Sender, Variant};
use crate::workload::{Stream, WORKLOADS, Workload};

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

/// One variant's sender and request stream, kept across depths so that the module's simulated
/// clock keeps advancing and its key stays in its steady state.
struct Lane<'a> {
    variant: Variant,
    sender: Sender<'a>,
    stream: Stream<'a>,
}

impl<'a> Lane<'a> {
    fn warmed(
        con: &mut Connection,
        variant: Variant,
        workload: &'a Workload,
        sha: &'a str,
    ) -> Result<Lane<'a>> {
        let mut lane = Lane {
            variant,
            sender: Sender::new(variant, workload, sha),
            stream: workload.stream(),
        };
        measure::warm_up(con, &mut lane.sender, &mut lane.stream, workload, variant)?;
        Ok(lane)
    }

    fn measure(&mut self, con: &mut Connection, step: &Step) -> Result<measure::Batch> {
        measure::measure_batch(
            con,
            &mut self.sender,
            &mut self.stream,
            self.variant,
            step.requests,
            step.depth,
        )
    }
}

/// The module's and PING's lanes on `hot`, warmed once on a flushed server.
pub struct Sweep<'a> {
    module: Lane<'a>,
    ping: Lane<'a>,
}

impl<'a> Sweep<'a> {
    pub fn start(con: &mut Connection, sha: &'a str) -> Result<Sweep<'a>> {
        let workload = WORKLOADS
            .iter()
            .find(|w| w.name == WORKLOAD)
            .ok_or_else(|| format!("no workload named {WORKLOAD}"))?;
        redis::cmd("FLUSHALL").exec(con)?;
        Ok(Sweep {
            module: Lane::warmed(con, Variant::Module, workload, sha)?,
            ping: Lane::warmed(con, Variant::Ping, workload, sha)?,
        })
    }

    /// Module then PING at one depth, so that both figures are taken close together in time.
    pub fn measure(&mut self, con: &mut Connection, step: &Step) -> Result<DepthPoint> {
        let module = self.module.measure(con, step)?;
        let ping = self.ping.measure(con, step)?;
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
