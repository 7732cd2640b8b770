//! ShouldRateLimit, shared by gRPC and `/json`: the config in force (swapped by a reload), the
//! store, the statistics and the health flags.

use crate::cli::OnRedisError;
use crate::config::{Config, LeaseSpec};
use crate::leases::{self, Leases};
use crate::metrics::Metrics;
use crate::plan::{self, Action, Mode};
use crate::response::{self, HeaderForms};
use crate::store::{Outcome, Seen, Store};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use slidingwindow_client::{Batch, ErrorLog, Ledger, MapStats};
use slidingwindow_service::backend::Misconfigured;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

pub struct Shared {
    /// The config in force and the lease maps of its `lease` specs, swapped together.
    live: RwLock<(Arc<Config>, Arc<Leases>)>,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub on_error: OnRedisError,
    pub forms: HeaderForms,
    pub prefix: String,
    pub failures: ErrorLog,
    /// Redis answered the last call or ping.
    pub redis_up: AtomicBool,
    /// SIGTERM was received.
    pub stopping: AtomicBool,
    /// The last call met a configuration error (neither the module nor the script runs).
    pub misconfigured: Misconfigured,
    /// Wakes the health task when `redis_up` or `stopping` changes.
    pub health_changed: Notify,
}

impl Shared {
    pub fn new(
        config: Config,
        store: Store,
        metrics: Arc<Metrics>,
        on_error: OnRedisError,
        forms: HeaderForms,
        prefix: String,
    ) -> Result<Shared, slidingwindow_client::Error> {
        let (leases, _) = Leases::new(store.client(), &config.leases, None)?;
        Ok(Shared {
            live: RwLock::new((Arc::new(config), Arc::new(leases))),
            store,
            metrics,
            on_error,
            forms,
            prefix,
            failures: ErrorLog::new("envoy-ratelimit", "redis"),
            redis_up: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            misconfigured: Misconfigured::new("envoy-ratelimit"),
            health_changed: Notify::new(),
        })
    }

    /// With a `precision` in `config`: a warning on stderr when Redis's storage is `zset` (it
    /// saves nothing there) or could not be checked.
    pub async fn warn_precision(&self, config: &Config) {
        if !config.precise {
            return;
        }
        if let Some(w) = self.store.client().precision_warning(b"config").await {
            eprintln!("envoy-ratelimit: warning: precision in the config: {w}");
        }
    }

    /// The live config's lease statistics, one entry per lease spec.
    pub fn lease_stats(&self) -> Vec<(LeaseSpec, MapStats)> {
        self.live().1.stats()
    }

    pub fn live(&self) -> (Arc<Config>, Arc<Leases>) {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The next requests use `config`. Lease maps of a spec the new config still has go on
    /// serving; those of a spec it dropped are closed in the background (their unused permits go
    /// back). Runs in the runtime (it spawns).
    pub fn set_config(self: &Arc<Self>, config: Config) -> Result<(), slidingwindow_client::Error> {
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        let (leases, retired) = Leases::new(self.store.client(), &config.leases, Some(&live.1))?;
        let config = Arc::new(config);
        *live = (config.clone(), Arc::new(leases));
        drop(live);
        if config.precise {
            let this = self.clone();
            tokio::spawn(async move { this.warn_precision(&config).await });
        }
        if !retired.is_empty() {
            tokio::spawn(async move {
                match leases::close(retired).await {
                    Ok(n) => eprintln!(
                        "envoy-ratelimit: leases the config no longer has closed, {n} unused permits given back"
                    ),
                    Err(e) => eprintln!(
                        "envoy-ratelimit: leases the config no longer has closed, a refund failed: {e}"
                    ),
                }
            });
        }
        Ok(())
    }

    /// After the last request: every lease's unused permits go back.
    pub async fn close_leases(&self) {
        let (_, leases) = self.live();
        if leases.is_empty() {
            return;
        }
        match leases.close().await {
            Ok(n) => eprintln!("envoy-ratelimit: leases closed, {n} unused permits given back"),
            Err(e) => eprintln!("envoy-ratelimit: leases closed, a refund failed: {e}"),
        }
    }

    /// What the health checks answer: Redis answers, with a backend that runs, and no SIGTERM.
    pub fn serving(&self) -> bool {
        self.redis_up.load(Ordering::Relaxed)
            && !self.misconfigured.is_on()
            && !self.stopping.load(Ordering::Relaxed)
    }

    pub fn set_redis_up(&self, up: bool) {
        if self.redis_up.swap(up, Ordering::Relaxed) != up {
            self.health_changed.notify_one();
        }
    }

    /// One request, as gRPC and `/json` answer it.
    pub async fn decide(&self, req: RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let started = Instant::now();
        self.metrics.total_requests.fetch_add(1, Ordering::Relaxed);
        let answer = self.answer(req).await;
        self.metrics.response_time.observe(started.elapsed());
        answer
    }

    async fn answer(&self, req: RateLimitRequest) -> Result<RateLimitResponse, Status> {
        // As the reference answers them (its service errors reach gRPC as UNKNOWN).
        let service_error = |why: &str| {
            self.metrics.service_errors.fetch_add(1, Ordering::Relaxed);
            Status::unknown(why)
        };
        if req.domain.is_empty() {
            return Err(service_error("rate limit domain must not be empty"));
        }
        if req.descriptors.is_empty() {
            return Err(service_error(
                "rate limit descriptor list must not be empty",
            ));
        }
        let (config, leases) = self.live();
        let mut actions = plan::actions(
            &config,
            &self.metrics,
            &self.prefix,
            &req.domain,
            req.hits_addend,
            &req.descriptors,
        )
        .map_err(|e| Status::invalid_argument(e.0))?;
        // Every call on Redis's clock. A lease call that failed leaves every descriptor to the
        // exact call, whose own failure (if Redis is down) decides.
        let mut ledger = Ledger::new("envoy-ratelimit");
        let _ = leases.take(&mut actions, &mut ledger).await;
        let mut result = self.store.run(&actions, &mut ledger, &self.metrics).await;
        if let Ok(o) = &result
            && !o.refused
            && ledger.late()
        {
            // A permit is good until its lease's end, and the request's exact call was decided at
            // or after it: everything goes back and exact calls alone decide the request.
            let indexes: Vec<usize> = ledger.permits().iter().map(|p| p.index).collect();
            let started = Instant::now();
            let undone = ledger
                .undo(self.store.client(), Batch::transaction, |i| {
                    leases::key(&actions, i)
                })
                .await;
            self.metrics.redis_latency.observe(started.elapsed());
            for i in indexes {
                if let Some(Action::Count { mode, .. }) = actions.get_mut(i) {
                    *mode = Mode::Charge;
                }
            }
            result = match undone {
                Ok(()) => self.store.run(&actions, &mut ledger, &self.metrics).await,
                Err(e) => Err(e),
            };
        }
        // A configuration error answers as closed, whatever `--on-redis-error` says.
        let mut on_error = self.on_error;
        let outcome = match result {
            Ok(mut o) => {
                if o.round_trips > 0 {
                    self.failures.succeeded();
                    if self.misconfigured.is_on() {
                        self.misconfigured.answered();
                        self.health_changed.notify_one();
                    }
                    self.set_redis_up(true);
                }
                for p in ledger.permits() {
                    let r = &p.reply.reply;
                    if let Some(seen) = o.seen.get_mut(p.index) {
                        *seen = Some(Seen {
                            // Given back below if the request is refused.
                            remaining: r.remaining + u64::from(o.refused),
                            retry_ms: r.retry_after.as_i64(),
                            reset_ms: r.reset_after_ms,
                            over: false,
                            before: r.count.saturating_sub(1),
                        });
                    }
                }
                if o.refused {
                    ledger.give_back(|i| leases::key(&actions, i)).await;
                }
                Some(o)
            }
            Err(e) => {
                ledger.give_back(|i| leases::key(&actions, i)).await;
                if self.misconfigured.found(
                    &e,
                    "answering OVER_LIMIT and NOT_SERVING",
                    &self.metrics.redis_config_errors,
                ) {
                    self.health_changed.notify_one();
                    on_error = OnRedisError::Closed;
                    None
                } else {
                    let action = match self.on_error {
                        OnRedisError::Open => "answering OK",
                        OnRedisError::Closed => "answering OVER_LIMIT",
                    };
                    self.failures.failed(action, &e);
                    self.metrics.redis_errors.fetch_add(1, Ordering::Relaxed);
                    self.set_redis_up(false);
                    None
                }
            }
        };
        self.count(&actions, outcome.as_ref());
        let (rows, refused) = response::rows(&actions, outcome.as_ref(), on_error);
        let forms = if outcome.is_some() {
            self.forms.clone()
        } else {
            HeaderForms::default()
        };
        Ok(response::response(&rows, refused, &forms))
    }

    /// Each limited descriptor's statistics (without Redis, only its total hits).
    fn count(&self, actions: &[Action], outcome: Option<&Outcome>) {
        for (i, a) in actions.iter().enumerate() {
            match a {
                Action::Zero {
                    limit,
                    counters,
                    cost,
                } => self.metrics.hits(counters, 0, 0, *cost, true, limit.shadow),
                Action::Count {
                    key,
                    limit,
                    counters,
                    cost,
                    mode: Mode::Charge | Mode::Look | Mode::Leased,
                } => match outcome.and_then(|o| o.seen.get(i).copied().flatten()) {
                    Some(s) => {
                        if s.over && !limit.shadow {
                            self.metrics.top.count(key);
                        }
                        self.metrics.hits(
                            counters,
                            limit.requests_per_unit,
                            s.before,
                            *cost,
                            s.over,
                            limit.shadow,
                        )
                    }
                    None => {
                        counters.total_hits.fetch_add(*cost, Ordering::Relaxed);
                    }
                },
                _ => {}
            }
        }
    }
}

/// The gRPC face of [`Shared`].
#[derive(Clone)]
pub struct Service(pub Arc<Shared>);

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.0.decide(request.into_inner()).await.map(Response::new)
    }
}
