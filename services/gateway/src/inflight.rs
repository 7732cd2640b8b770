//! In-flight limits (`--concurrency`, `--tenant-concurrency`, `--global-concurrency N/HOLD`): a
//! slot is an ALLOW on a window of HOLD (the longest a request may hold it) taken before the
//! upstream is called, and given back (`REFUND key 1 AT` the ALLOW's `now`, the client crate's
//! acquire and release) when the upstream's response ends: its body sent, or the connection
//! dropped. A gateway that dies holding slots frees them when HOLD has passed.

use crate::config::{Config, Limit, OnRedisError};
use crate::layer::{identity, json, tenant};
use crate::metrics::Metrics;
use crate::wrap::{Answer, Check, Inner};
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderName, Request, StatusCode};
use slidingwindow_client::{Client, Error, ErrorLog, Options, Slot};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The slots' keys: none has the form of a rate limit's key (`rl:...`).
const IDENTITY_PREFIX: &str = "inflight:id:";
const TENANT_PREFIX: &str = "inflight:tenant:";
const GLOBAL_KEY: &[u8] = b"inflight:global";

/// Which limit a slot is taken on, as the 429's body names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Identity,
    Tenant,
    Global,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Identity => "concurrency",
            Scope::Tenant => "tenant-concurrency",
            Scope::Global => "global-concurrency",
        }
    }
}

pub struct Inflight {
    client: Client,
    limits: Vec<(Scope, Limit)>,
    tenant_header: Option<HeaderName>,
    identity_header: HeaderName,
    ipv6_prefix: u8,
    on_error: OnRedisError,
    metrics: Arc<Metrics>,
    log: ErrorLog,
}

/// What taking a request's slots gave.
enum Taken {
    Held(Held),
    /// This limit is full.
    Full(Scope),
    /// Redis failed, --on-redis-error open.
    Unchecked,
    /// Redis failed, --on-redis-error closed.
    Unavailable,
}

/// A request's slots, given back when dropped.
struct Held {
    client: Client,
    slots: Vec<Slot>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let slots = std::mem::take(&mut self.slots);
        // Without a runtime the process is ending: the slots leave the window after HOLD.
        if slots.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let client = self.client.clone();
        tokio::spawn(async move {
            for slot in &slots {
                if let Err(e) = client.release(slot).await {
                    eprintln!("gateway: releasing an in-flight slot failed: {e}");
                }
            }
        });
    }
}

impl Inflight {
    /// `None` without any --*concurrency option.
    pub fn new(
        cfg: &Config,
        metrics: Arc<Metrics>,
    ) -> Result<Option<Inflight>, Box<dyn std::error::Error>> {
        let limits: Vec<(Scope, Limit)> = [
            (Scope::Identity, cfg.concurrency),
            (Scope::Tenant, cfg.tenant_concurrency),
            (Scope::Global, cfg.global_concurrency),
        ]
        .into_iter()
        .filter_map(|(s, l)| Some((s, l?)))
        .collect();
        if limits.is_empty() {
            return Ok(None);
        }
        let options = Options::from_urls(&cfg.redis, cfg.cluster)?
            .connect_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(1))
            .backend(cfg.backend);
        Ok(Some(Inflight {
            client: Client::new(&options)?,
            limits,
            tenant_header: cfg.tenant_header.clone(),
            identity_header: cfg.identity_header.clone(),
            ipv6_prefix: cfg.ipv6_prefix,
            on_error: cfg.on_redis_error,
            metrics,
            log: ErrorLog::new("gateway", "redis (in-flight slots)"),
        }))
    }

    fn key(scope: Scope, identity: &[u8], tenant: Option<&[u8]>) -> Option<Vec<u8>> {
        let braced = |prefix: &str, name: &[u8]| [prefix.as_bytes(), b"{", name, b"}"].concat();
        match scope {
            Scope::Identity => Some(braced(IDENTITY_PREFIX, identity)),
            Scope::Tenant => tenant.map(|t| braced(TENANT_PREFIX, t)),
            Scope::Global => Some(GLOBAL_KEY.to_vec()),
        }
    }

    /// A slot on each limit, in order; the first full one gives the others back.
    async fn take(&self, identity: &[u8], tenant: Option<&[u8]>) -> Taken {
        let mut held = Held {
            client: self.client.clone(),
            slots: Vec::with_capacity(self.limits.len()),
        };
        for &(scope, limit) in &self.limits {
            let Some(key) = Inflight::key(scope, identity, tenant) else {
                continue;
            };
            match self.client.acquire(&key, limit.max, limit.window_s).await {
                Ok(slot) if slot.allowed() => {
                    self.log.succeeded();
                    held.slots.push(slot);
                }
                Ok(_) => {
                    self.log.succeeded();
                    return Taken::Full(scope);
                }
                // Neither the module nor the script runs: never unlimited.
                Err(e @ Error::Config(_)) => {
                    Metrics::add(&self.metrics.redis_config_errors, 1);
                    self.log.failed("answering 503", &e);
                    return Taken::Unavailable;
                }
                Err(e) => {
                    return match self.on_error {
                        OnRedisError::Open => {
                            self.log.failed("letting requests through unlimited", &e);
                            Taken::Unchecked
                        }
                        OnRedisError::Closed => {
                            self.log.failed("answering 503", &e);
                            Taken::Unavailable
                        }
                    };
                }
            }
        }
        Taken::Held(held)
    }
}

impl Check for Inflight {
    async fn check<S: Inner>(self: Arc<Self>, req: Request<Body>, mut inner: S) -> Answer<S> {
        let inflight = self;
        let who = identity(&req, &inflight.identity_header, inflight.ipv6_prefix).into_owned();
        let tenant = inflight
            .tenant_header
            .as_ref()
            .and_then(|h| tenant(&req, h))
            .map(|t| t.into_owned());
        match inflight.take(&who, tenant.as_deref()).await {
            // Dropped with this future if the client goes away before the answer.
            Taken::Held(held) => {
                let resp = inner.call(req).await?;
                Ok(resp.map(|body| Body::new(Holding { body, _held: held })))
            }
            Taken::Full(scope) => {
                inflight
                    .metrics
                    .inflight_refused
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                inflight.metrics.refused(&who);
                let body = format!(
                    "{{\"error\":\"too many requests in flight\",\"limit\":\"{}\"}}\n",
                    scope.name()
                );
                Ok(json(StatusCode::TOO_MANY_REQUESTS, body))
            }
            Taken::Unchecked => inner.call(req).await,
            Taken::Unavailable => Ok(json(
                StatusCode::SERVICE_UNAVAILABLE,
                "{\"error\":\"rate limiter unavailable\"}\n".to_string(),
            )),
        }
    }
}

/// A response body that holds its request's slots until it is dropped: sent to its end, or
/// abandoned with its connection.
struct Holding {
    body: Body,
    _held: Held,
}

impl HttpBody for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
