//! The workloads and their simulated request streams.

use testkit::rng::Rng;

/// A fixed start time (Unix ms), so every run sends the same `now` values.
const START_MS: u64 = 1_700_000_000_000;
/// Same seed for every variant: they all see the same keys in the same order.
const KEY_SEED: u64 = 0x5EED;

pub struct Workload {
    pub name: &'static str,
    pub keys: u64,
    pub window_s: u64,
    pub max: u64,
    /// The simulated clock advances `step_num / step_den` ms per request.
    pub step_num: u64,
    pub step_den: u64,
    /// `LIMIT window max` pairs sent after the positional limit; only variants whose
    /// `Shape::serves` the workload run it (the seed script knows one limit).
    pub extra_limits: &'static [(u64, u64)],
    /// Limits of a second key, the request key's tenant (one for all), checked with the
    /// request key's: non-empty makes every request a request on two keys.
    pub tenant_limits: &'static [(u64, u64)],
}

pub const WORKLOADS: [Workload; 5] = [
    // 2000 requests per 10 s window against max 1000: about half rejected.
    Workload {
        name: "hot",
        keys: 1,
        window_s: 10,
        max: 1000,
        step_num: 5,
        step_den: 1,
        extra_limits: &[],
        tenant_limits: &[],
    },
    // 100k keys, one request per key every 3 s on average: 20 per 60 s window against max 10.
    Workload {
        name: "wide",
        keys: 100_000,
        window_s: 60,
        max: 10,
        step_num: 3000,
        step_den: 100_000,
        extra_limits: &[],
        tenant_limits: &[],
    },
    // One request per ms: 60,000 members in the window, all admitted.
    Workload {
        name: "big",
        keys: 1,
        window_s: 60,
        max: 100_000,
        step_num: 1,
        step_den: 1,
        extra_limits: &[],
        tenant_limits: &[],
    },
    // One hot key with a burst, a minute and an hour limit, offered 25 requests/s: each limit
    // binds in turn, and the hour's log holds up to 20,000 members.
    Workload {
        name: "multi",
        keys: 1,
        window_s: 1,
        max: 20,
        step_num: 40,
        step_den: 1,
        extra_limits: &[(60, 600), (3600, 20_000)],
        tenant_limits: &[],
    },
    // 100 users at 10/s and 100/min inside one tenant at 150/s and 6000/min, offered 200
    // requests/s in all (2/s per user): the tenant's limits bind, the user's minute at times.
    Workload {
        name: "tenant",
        keys: 100,
        window_s: 1,
        max: 10,
        step_num: 5,
        step_den: 1,
        extra_limits: &[(60, 100)],
        tenant_limits: &[(1, 150), (60, 6000)],
    },
];

impl Workload {
    pub fn window_ms(&self) -> u64 {
        self.window_s * 1000
    }

    /// Every limit as (window s, max): the positional one, then the `LIMIT` options.
    pub fn limits(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        std::iter::once((self.window_s, self.max)).chain(self.extra_limits.iter().copied())
    }

    /// Whether a request also counts against the tenant's key.
    pub fn has_tenant(&self) -> bool {
        !self.tenant_limits.is_empty()
    }

    /// Requests that span one full simulated window, the longest one (of either key).
    pub fn requests_per_window(&self) -> u64 {
        let longest_ms = self
            .limits()
            .chain(self.tenant_limits.iter().copied())
            .map(|(w, _)| w * 1000)
            .max()
            .unwrap_or(0);
        longest_ms * self.step_den / self.step_num
    }

    pub fn stream(&self) -> Stream<'_> {
        Stream {
            workload: self,
            index: 0,
            rng: Rng::new(KEY_SEED),
        }
    }
}

/// One request: which key (by index) and the client-supplied time.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub key: u64,
    pub now: u64,
}

pub struct Stream<'a> {
    workload: &'a Workload,
    index: u64,
    rng: Rng,
}

impl Iterator for Stream<'_> {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let w = self.workload;
        let now = START_MS + self.index * w.step_num / w.step_den;
        self.index += 1;
        let key = if w.keys == 1 {
            0
        } else {
            self.rng.range(0, w.keys - 1)
        };
        Some(Request { key, now })
    }
}
