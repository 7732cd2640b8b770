//! The verdict on each request. Its keys are the identity's (`--limit`), its tenant's
//! (`--tenant-limit`) and the global one (`--global-limit`). Every call is decided on Redis's
//! clock (`now` = `*`, with DETAIL for the `now` it used), so any number of gateways stays exact
//! with the module's default `slidingwindow.lateness 0`. With `--lease`, a busy tenant or global
//! key gives its permit (or a remembered refusal) from memory first; the keys left go in one
//! exact call (SLIDINGWINDOW.ALLOW on one key, ALLOWALL on several), and if that call refuses,
//! the permits go back into their leases: a request is charged to every key or to none. A permit
//! is only good until its lease's end: if the exact call was decided at or after it, the request
//! is taken back and decided again by exact calls alone. Then the deny cache, the admission log
//! and the refunds.

use crate::abandoned::Abandoned;
use crate::admissions::AdmissionLog;
use crate::config::{Config, Limit, OnRedisError, Switch};
use crate::deny_cache::{DenyCache, Refusal};
use crate::metrics::Metrics;
use slidingwindow_client::{
    Client, Error, ErrorLog, LeaseConfig, LeaseMap, LeaseMapConfig, Ledger, Options, Pass,
};
use slidingwindow_service::backend::Misconfigured;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

mod decision;
mod exact;
mod keys;
mod leased;
mod settle;

pub use decision::{Decision, Named};
pub use keys::Keys;
use keys::{PARTS, Part, SHARED};
pub use settle::Settle;

/// A request does not wait longer than this for Redis (its exact call, or a lease call it waits
/// for); then the --on-redis-error policy decides (and the call goes on, see abandoned.rs).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(1);
/// Connecting gives up after this (a request's own deadline is the one above).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a reply is awaited at all. A request stops waiting long before (its deadline), but
/// its call goes on so that a late "admitted" can be refunded.
const REPLY_WAIT: Duration = Duration::from_secs(30);
/// The key of `--global-limit`: no identity or tenant key has this form (theirs start `rl:{`).
pub const GLOBAL_KEY: &[u8] = b"rl:global";

/// What an admitted request cost: its keys, and its ledger (the charges its exact calls logged,
/// each at the `now` its call used, Redis's clock from DETAIL, and the permits it took from
/// leases).
#[derive(Debug)]
pub struct Charge {
    keys: Keys,
    ledger: Ledger,
}

#[derive(Debug)]
pub enum Verdict {
    Admit(Decision, Charge),
    /// `--reserve`'s N charged: settled when the upstream answers.
    Reserved(Decision, Box<slidingwindow_client::Reservation>),
    /// Refused by Redis, or from the deny cache.
    Refuse(Decision),
    /// Redis failed and --on-redis-error is open: let the request through, without headers.
    Unchecked,
    /// Redis failed and --on-redis-error is closed: 503.
    Unavailable,
}

/// [`Limiter::start`]'s answer.
pub enum Start {
    Done(Verdict),
    /// Needs [`Limiter::finish`].
    Pending(Box<Started>),
}

/// A request [`Limiter::start`] could not decide from memory: the permits its first pass over
/// the leases took (each key's index its [`Part`]), and how that pass ended.
pub struct Started {
    keys: Keys,
    at: Instant,
    ledger: Ledger,
    pass: Pass,
}

/// How [`Limiter::settle`] ended.
enum Settled {
    Done(Verdict),
    /// A permit's lease ended before the exact call's `now`: everything was taken back.
    Late,
}

pub struct Limiter {
    client: Client,
    /// The identity's limits, then the tenant's, then the global ones.
    limits: Vec<Named>,
    /// Each part's limits as the commands carry them, and where they start in `limits`.
    parts: [Vec<slidingwindow_client::Limit>; 3],
    offsets: [usize; 3],
    tenants: bool,
    /// `--precision`: `PRECISION p` on every call, and refunds at the rounded score.
    precision: Option<u64>,
    leases: Option<LeaseMap>,
    deny: Option<Arc<DenyCache>>,
    on_error: OnRedisError,
    log: ErrorLog,
    /// The last call met a configuration error: the health path answers 503.
    pub misconfigured: Misconfigured,
    metrics: Arc<Metrics>,
    abandoned: Arc<Abandoned>,
    admissions: Option<AdmissionLog>,
    tasks: Arc<Tasks>,
}

/// Work the gateway started for a request that must end before it shuts down (refunds).
#[derive(Default)]
struct Tasks {
    running: AtomicUsize,
    done: Notify,
}

impl Limiter {
    /// Never waits for Redis: connections are made on first use and remade after failures.
    pub fn new(cfg: &Config, metrics: Arc<Metrics>) -> Result<Limiter, Box<dyn std::error::Error>> {
        let named = |prefix: &str, limits: &[Limit]| {
            limits
                .iter()
                .enumerate()
                .map(|(i, &limit)| Named {
                    name: format!("{prefix}{i}"),
                    limit,
                })
                .collect::<Vec<_>>()
        };
        let checked = |limits: &[Limit]| {
            limits
                .iter()
                .map(|l| slidingwindow_client::Limit::new(l.window_s, l.max))
                .collect::<Result<Vec<_>, _>>()
        };
        let mut limits = named("l", &cfg.limits);
        limits.extend(named("t", &cfg.tenant_limits));
        limits.extend(named("g", &cfg.global_limits));
        let options = Options::from_urls(&cfg.redis, cfg.cluster)?
            .connect_timeout(CONNECT_TIMEOUT)
            .response_timeout(REPLY_WAIT)
            .backend(cfg.backend);
        let client = Client::new(&options)?;
        let deny = (cfg.deny_cache == Switch::On).then(|| {
            let bytes = usize::try_from(cfg.deny_cache_bytes).unwrap_or(usize::MAX);
            Arc::new(DenyCache::new(cfg.deny_cache_size as usize, bytes))
        });
        let leases = match cfg.lease {
            None => None,
            Some(spec) => {
                // The leases' own refunds (unused permits at a lease's end) make room too.
                let cache = deny.clone();
                // On Redis's clock (the default): no lateness needed however many gateways.
                let lease = LeaseConfig::new(spec.size, spec.duration_ms)
                    .when_busy(true)
                    .precision(cfg.precision)
                    .synced_within(cfg.lease_clock_bound)
                    .on_refund(Arc::new(move |key: &[u8]| {
                        if let Some(c) = &cache {
                            c.refunded_shared(key);
                        }
                    }));
                let map = LeaseMapConfig::new(spec.size, spec.duration_ms).lease(lease);
                Some(LeaseMap::new(client.clone(), map)?)
            }
        };
        let admissions = match &cfg.admission_log {
            Some(path) => Some(
                AdmissionLog::open(path)
                    .map_err(|e| format!("--admission-log {}: {e}", path.display()))?,
            ),
            None => None,
        };
        let n_identity = cfg.limits.len();
        let n_tenant = cfg.tenant_limits.len();
        Ok(Limiter {
            client,
            limits,
            parts: [
                checked(&cfg.limits)?,
                checked(&cfg.tenant_limits)?,
                checked(&cfg.global_limits)?,
            ],
            offsets: [0, n_identity, n_identity + n_tenant],
            tenants: cfg.tenant_header.is_some(),
            precision: cfg.precision,
            leases,
            deny,
            on_error: cfg.on_redis_error,
            log: ErrorLog::new("gateway", "redis"),
            misconfigured: Misconfigured::new("gateway"),
            metrics,
            abandoned: Arc::default(),
            admissions,
            tasks: Arc::default(),
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn limits(&self) -> &[Named] {
        &self.limits
    }

    /// The verdict on one request without waiting when it needs no Redis call: from the deny cache, or from
    /// the leases when every key of the request has a permit in memory. Else the request as
    /// far as it went, for [`Limiter::finish`] (a future the caller may box: a request served
    /// from memory then never allocates the room Redis calls need).
    pub fn start(&self, identity: &[u8], tenant: Option<&[u8]>) -> Start {
        let at = Instant::now();
        let keys = self.keys(identity, tenant);
        if let Some(r) = self.deny.as_ref().and_then(|c| c.get(keys.first(), at)) {
            return Start::Done(Verdict::Refuse(Decision::cached(&r, at)));
        }
        if self.abandoned.full() {
            return Start::Done(self.failed(&"too many calls still waiting for Redis"));
        }
        let mut ledger = Ledger::new("gateway");
        let pass = self.try_leases(&keys, &mut ledger);
        if let Pass::Taken = pass
            && !PARTS
                .iter()
                .any(|&p| keys.get(p).is_some() && !ledger.holds(p as usize))
            && let Some(decision) = self.leased_decision(&ledger)
        {
            return Start::Done(self.admit(keys, decision, ledger));
        }
        Start::Pending(Box::new(Started {
            keys,
            at,
            ledger,
            pass,
        }))
    }

    /// The rest of [`Limiter::start`]'s request: a lease call to wait for, the exact call.
    pub async fn finish(&self, started: Box<Started>) -> Verdict {
        let Started {
            keys,
            at,
            mut ledger,
            pass,
        } = *started;
        let deadline = at + REQUEST_DEADLINE;
        if let Err(verdict) = self.take_leased(&keys, deadline, &mut ledger, pass).await {
            return verdict;
        }
        match self.settle(&keys, at, deadline, ledger).await {
            Settled::Done(verdict) => verdict,
            // Without permits every key is in the exact calls: never late again.
            Settled::Late => match self
                .settle(&keys, at, deadline, Ledger::new("gateway"))
                .await
            {
                Settled::Done(verdict) => verdict,
                Settled::Late => unreachable!("no permit to be late for"),
            },
        }
    }

    /// What the leases gave, then the keys they did not cover: one exact call on Redis's clock
    /// (two in a cluster, the global key's slot apart). A permit whose lease ended at or before
    /// that call's `now` was handed out too late for it: everything is taken back ([`Settled::Late`]).
    async fn settle(
        &self,
        keys: &Keys,
        at: Instant,
        deadline: Instant,
        mut ledger: Ledger,
    ) -> Settled {
        let mut decision = self.leased_decision(&ledger);
        let mut parts = [Part::Identity; 3];
        let mut n = 0;
        for p in PARTS {
            if keys.get(p).is_some() && !ledger.holds(p as usize) {
                parts[n] = p;
                n += 1;
            }
        }
        let parts = &parts[..n];
        // In a cluster the global key has a slot of its own: it gets a call of its own, first,
        // taken back if the others then refuse.
        let split = self.client.is_cluster() && n > 1 && parts.last() == Some(&Part::Global);
        let groups: [&[Part]; 2] = match split {
            true => [&parts[n - 1..], &parts[..n - 1]],
            false => [parts, &[]],
        };
        for (g, group) in groups
            .into_iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
        {
            let (reply, now_ms) = match self.exact(keys, group, deadline).await {
                Ok(answer) => answer,
                Err(verdict) => {
                    Box::pin(self.undo(keys, &mut ledger)).await;
                    return Settled::Done(verdict);
                }
            };
            let d = self.decision(group, &reply);
            decision = Some(decision.map_or(d, |prev| prev.and(d)));
            if !reply.allowed {
                Box::pin(self.undo(keys, &mut ledger)).await;
                let d = decision.map_or(d, |all| Decision {
                    allowed: false,
                    ..all
                });
                self.remember(keys, at, &d);
                return Settled::Done(Verdict::Refuse(d));
            }
            for &p in group {
                ledger.charged(p as usize, g, now_ms, 1, self.precision);
            }
        }
        if ledger.late() {
            Box::pin(self.undo(keys, &mut ledger)).await;
            return Settled::Late;
        }
        let Some(decision) = decision else {
            // No key at all: the layer is only installed with limits.
            return Settled::Done(Verdict::Unchecked);
        };
        Settled::Done(self.admit(keys.clone(), decision, ledger))
    }

    /// An admitted request: its line in the admission log (at its exact call's `now`, else at the
    /// latest of its permits' handout times: Redis's clock), and what it cost.
    fn admit(&self, keys: Keys, decision: Decision, ledger: Ledger) -> Verdict {
        if let Some(log) = &self.admissions {
            let at_ms = ledger
                .latest()
                .or_else(|| ledger.permits().iter().map(|p| p.reply.at_ms).max())
                .unwrap_or(0);
            log.admitted(at_ms, keys.first());
        }
        Verdict::Admit(decision, Charge { keys, ledger })
    }

    /// Remembers a refusal under the request's first key, depending on its shared keys.
    fn remember(&self, keys: &Keys, at: Instant, d: &Decision) {
        let Some(c) = &self.deny else { return };
        if let Some(r) = Refusal::new(at, d.retry_after_ms, d.reset_after_ms, d.limit) {
            c.insert(
                keys.first(),
                r,
                [keys.get(Part::Tenant), keys.get(Part::Global)],
            );
        }
    }

    /// Takes an admitted request back: its leases' permits given back, `REFUND key 1 AT now` on
    /// each key its exact calls charged (at that call's `now`, rounded up to the `--precision`);
    /// the deny cache forgets what the charge may have caused.
    pub async fn refund(&self, charge: Charge) {
        let Charge { keys, mut ledger } = charge;
        if let Some(c) = &self.deny {
            c.remove(keys.first());
            for p in SHARED {
                if let Some(k) = keys.get(p) {
                    c.refunded_shared(k);
                }
            }
        }
        self.undo(&keys, &mut ledger).await;
    }

    /// Runs `work` in a task of its own that shutdown waits for.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let tasks = self.tasks.clone();
        tasks.running.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            work.await;
            tasks.running.fetch_sub(1, Ordering::AcqRel);
            tasks.done.notify_waiters();
        });
    }

    /// After the last request: waits (at most `wait`) for the refunds under way, then every
    /// lease's unused permits go back.
    pub async fn shutdown(&self, wait: Duration) {
        let tasks = async {
            loop {
                let done = self.tasks.done.notified();
                tokio::pin!(done);
                done.as_mut().enable();
                if self.tasks.running.load(Ordering::Acquire) == 0 {
                    return;
                }
                done.await;
            }
        };
        if tokio::time::timeout(wait, tasks).await.is_err() {
            eprintln!("gateway: shutting down with refunds still under way");
        }
        if let Some(map) = &self.leases {
            match map.close_all().await {
                Ok(n) => eprintln!("gateway: leases closed, {n} unused permits given back"),
                Err(e) => eprintln!("gateway: leases closed, a refund failed: {e}"),
            }
        }
    }

    /// A call's error: a configuration error answers 503 whatever `--on-redis-error` says.
    fn error(&self, e: &Error) -> Verdict {
        let action = "answering 503 and 503 on the health path";
        match self
            .misconfigured
            .found(e, action, &self.metrics.redis_config_errors)
        {
            true => Verdict::Unavailable,
            false => self.failed(e),
        }
    }

    /// A call was answered.
    fn answered(&self) {
        self.log.succeeded();
        self.misconfigured.answered();
    }

    fn failed(&self, err: &dyn std::fmt::Display) -> Verdict {
        match self.on_error {
            OnRedisError::Open => {
                self.log.failed("letting requests through unlimited", err);
                Verdict::Unchecked
            }
            OnRedisError::Closed => {
                self.log.failed("answering 503", err);
                Verdict::Unavailable
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use slidingwindow_client::Reply;

    #[test]
    fn decisions_from_replies() {
        let reply = Reply {
            allowed: false,
            count: 5,
            remaining: 0,
            retry_after: slidingwindow_client::RetryAfter::Never,
            reset_after_ms: 60_000,
            limit: 1,
            detail: None,
        };
        assert_eq!(
            Decision::from(&reply),
            Decision {
                allowed: false,
                remaining: 0,
                retry_after_ms: -1,
                reset_after_ms: 60_000,
                limit: 1,
            }
        );
    }

    #[test]
    fn decisions_combine() {
        let a = Decision {
            allowed: true,
            remaining: 5,
            retry_after_ms: 0,
            reset_after_ms: 1000,
            limit: 0,
        };
        let b = Decision {
            allowed: false,
            remaining: 0,
            retry_after_ms: 300,
            reset_after_ms: 900,
            limit: 3,
        };
        assert_eq!(
            a.and(b),
            Decision {
                allowed: false,
                ..b
            }
        );
        assert_eq!(b.and(a), b);
        let never = Decision {
            retry_after_ms: -1,
            ..a
        };
        assert_eq!(b.and(never).retry_after_ms, -1);
    }

    #[test]
    fn a_cached_refusal_counts_down() {
        let at = Instant::now();
        let r = Refusal::new(at, 1500, 60_000, 1).unwrap();
        let later = at + Duration::from_millis(400);
        assert_eq!(
            Decision::cached(&r, later),
            Decision {
                allowed: false,
                remaining: 0,
                retry_after_ms: 1100,
                reset_after_ms: 59_600,
                limit: 1,
            }
        );
    }

    fn limiter(args: &[&str]) -> Limiter {
        let cfg = Config::try_parse_from([&["gw"], args].concat()).unwrap();
        cfg.validate().unwrap();
        Limiter::new(&cfg, Arc::default()).unwrap()
    }

    fn text(cmd: &slidingwindow_client::redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                slidingwindow_client::redis::Arg::Simple(b) => {
                    String::from_utf8_lossy(b).to_string()
                }
                _ => "?".to_string(),
            })
            .collect()
    }

    /// A command's expected arguments, written as one line.
    fn words(line: &str) -> Vec<&str> {
        line.split(' ').collect()
    }

    fn all(keys: &Keys) -> Vec<Part> {
        PARTS
            .into_iter()
            .filter(|&p| keys.get(p).is_some())
            .collect()
    }

    #[tokio::test]
    async fn commands() {
        let one = limiter(&["--limit", "10/1s", "--limit", "100/1m"]);
        let keys = one.keys(b"k", None);
        assert_eq!(keys.first(), b"rl:{k}");
        assert_eq!(
            text(one.call(&keys, &all(&keys)).unwrap().cmd()),
            words("SLIDINGWINDOW.ALLOW rl:{k} 1 10 * DETAIL LIMIT 60 100")
        );
        let both = limiter(&[
            "--limit",
            "10/1s",
            "--tenant-header",
            "x-tenant",
            "--tenant-limit",
            "1000/1m",
            "--global-limit",
            "5000/1s",
        ]);
        let keys = both.keys(b"k", Some(b"acme"));
        assert_eq!(keys.get(Part::Identity), Some(&b"rl:{acme}:k"[..]));
        assert_eq!(keys.get(Part::Tenant), Some(&b"rl:{acme}"[..]));
        assert_eq!(keys.get(Part::Global), Some(GLOBAL_KEY));
        assert_eq!(
            text(both.call(&keys, &all(&keys)).unwrap().cmd()),
            words(
                "SLIDINGWINDOW.ALLOWALL 3 rl:{acme}:k rl:{acme} rl:global * DETAIL \
                 LIMIT 1 1 10 LIMIT 2 60 1000 LIMIT 3 1 5000"
            )
        );
        let names: Vec<&str> = both.limits().iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["l0", "t0", "g0"]);
        // A reply's binding index names its limit among all, whichever keys the call had.
        let reply = |limit| Reply {
            allowed: false,
            count: 1,
            remaining: 0,
            retry_after: slidingwindow_client::RetryAfter::Ms(5),
            reset_after_ms: 5,
            limit,
            detail: None,
        };
        let without_tenant = [Part::Identity, Part::Global];
        assert_eq!(both.decision(&without_tenant, &reply(1)).limit, 2);
        assert_eq!(both.decision(&without_tenant, &reply(0)).limit, 0);
        assert_eq!(both.decision(&[Part::Tenant], &reply(0)).limit, 1);
        let tenant_only = limiter(&["--tenant-header", "x-t", "--tenant-limit", "5/1s"]);
        let keys = tenant_only.keys(b"k", Some(b"acme"));
        assert_eq!(keys.first(), b"rl:{acme}");
        assert_eq!(keys.get(Part::Identity), None);
        assert_eq!(
            text(tenant_only.call(&keys, &all(&keys)).unwrap().cmd()),
            words("SLIDINGWINDOW.ALLOW rl:{acme} 1 5 * DETAIL")
        );
        let global_only = limiter(&["--global-limit", "5/1s"]);
        let keys = global_only.keys(b"k", None);
        assert_eq!(keys.first(), GLOBAL_KEY);
        assert_eq!(all(&keys), [Part::Global]);
    }
}
