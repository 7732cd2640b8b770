//! One call per request against Redis: SLIDINGWINDOW.ALLOW on the identity's key, or with
//! tenants one SLIDINGWINDOW.ALLOWALL on the identity's and the tenant's keys; and the verdict.

use crate::abandoned::{Abandoned, Outcome};
use crate::config::{Config, Limit, OnRedisError, Switch};
use crate::deny_cache::{DenyCache, Refusal};
use slidingwindow_client::{
    Call, Check, CheckAll, Client, Error, ErrorLog, Keyed, Now, Options, Reply, unix_ms,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request does not wait longer than this for Redis; then the --on-redis-error policy decides
/// (and the call goes on, see abandoned.rs).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(1);
/// Connecting gives up after this (a request's own deadline is the one above).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a reply is awaited at all. A request stops waiting long before (its deadline), but
/// its call goes on so that a late "admitted" can be refunded.
const REPLY_WAIT: Duration = Duration::from_secs(30);

/// A limit and the name the headers give it: `l<i>` for the identity's, `t<i>` for the tenant's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub name: String,
    pub limit: Limit,
}

/// The reply, for the binding limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub remaining: i64,
    pub retry_after_ms: i64,
    pub reset_after_ms: i64,
    /// Index of the binding limit.
    pub limit: usize,
}

impl From<&Reply> for Decision {
    fn from(r: &Reply) -> Decision {
        Decision {
            allowed: r.allowed,
            remaining: i64::try_from(r.remaining).unwrap_or(i64::MAX),
            retry_after_ms: r.retry_after.as_i64(),
            reset_after_ms: i64::try_from(r.reset_after_ms).unwrap_or(i64::MAX),
            limit: r.limit,
        }
    }
}

impl Decision {
    /// A refusal remembered at `at`, seen at `now`.
    fn cached(r: &Refusal, now: Instant) -> Decision {
        let ms_up = |t: Instant| {
            let d = t.saturating_duration_since(now);
            i64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
        };
        Decision {
            allowed: false,
            remaining: 0,
            retry_after_ms: ms_up(r.until),
            reset_after_ms: ms_up(r.reset_at),
            limit: r.limit,
        }
    }
}

/// What an admitted call logged: one member on each key at `now_ms` (the gateway's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    keys: Vec<Vec<u8>>,
    now_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Admit(Decision, Charge),
    /// Refused by Redis, or from the deny cache.
    Refuse(Decision),
    /// Redis failed and --on-redis-error is open: let the request through, without headers.
    Unchecked,
    /// Redis failed and --on-redis-error is closed: 503.
    Unavailable,
}

pub struct Limiter {
    client: Client,
    /// The identity's limits, then the tenant's.
    limits: Vec<Named>,
    /// The same as the commands carry them.
    identity: Vec<slidingwindow_client::Limit>,
    tenant: Vec<slidingwindow_client::Limit>,
    tenants: bool,
    deny: Option<DenyCache>,
    on_error: OnRedisError,
    log: ErrorLog,
    abandoned: Arc<Abandoned>,
}

impl Limiter {
    /// Never waits for Redis: connections are made on first use and remade after failures.
    pub fn new(cfg: &Config) -> Result<Limiter, Error> {
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
        let options = Options::from_urls(&cfg.redis, cfg.cluster)?
            .connect_timeout(CONNECT_TIMEOUT)
            .response_timeout(REPLY_WAIT);
        Ok(Limiter {
            client: Client::new(&options)?,
            limits,
            identity: checked(&cfg.limits)?,
            tenant: checked(&cfg.tenant_limits)?,
            tenants: cfg.tenant_header.is_some(),
            deny: (cfg.deny_cache == Switch::On)
                .then(|| DenyCache::new(cfg.deny_cache_size as usize)),
            on_error: cfg.on_redis_error,
            log: ErrorLog::new("gateway", "redis"),
            abandoned: Arc::default(),
        })
    }

    pub fn limits(&self) -> &[Named] {
        &self.limits
    }

    /// The keys a request is counted on: `rl:{identity}`; with tenants `rl:{tenant}:<identity>`
    /// (when there are identity limits) and `rl:{tenant}`, one hash tag for one cluster slot.
    fn keys(&self, identity: &[u8], tenant: Option<&[u8]>) -> Vec<Vec<u8>> {
        let tagged = |tag: &[u8], rest: &[u8]| [b"rl:{", tag, b"}", rest].concat();
        match tenant {
            None => vec![tagged(identity, b"")],
            Some(t) if self.identity.is_empty() => vec![tagged(t, b"")],
            Some(t) => vec![tagged(t, &[b":", identity].concat()), tagged(t, b"")],
        }
    }

    /// `SLIDINGWINDOW.ALLOW key w0 max0 now [LIMIT w max]...`, or with tenants
    /// `SLIDINGWINDOW.ALLOWALL n key... now LIMIT keyno w max...`.
    fn call(&self, keys: &[Vec<u8>], now_ms: u64) -> Result<Call, Error> {
        let now = Now::Ms(now_ms);
        if !self.tenants {
            let key = keys.first().map_or(&[][..], Vec::as_slice);
            return Call::allow(&Check::new(key, &self.identity).now(now));
        }
        // The last key is the tenant's; the identity's comes first when it has limits.
        let both;
        let keyed: &[Keyed] = match keys {
            [identity, tenant] => {
                both = [
                    Keyed::new(identity, &self.identity),
                    Keyed::new(tenant, &self.tenant),
                ];
                &both
            }
            [tenant] => &[Keyed::new(tenant, &self.tenant)],
            _ => &[],
        };
        Call::allow_all(&CheckAll::new(keyed).now(now))
    }

    /// The verdict on one request: from the deny cache, else from Redis.
    pub async fn check(&self, identity: &[u8], tenant: Option<&[u8]>) -> Verdict {
        let at = Instant::now();
        let keys = self.keys(identity, tenant);
        let cache_key = keys.first().map_or(&[][..], Vec::as_slice);
        if let Some(r) = self.deny.as_ref().and_then(|c| c.get(cache_key, at)) {
            return Verdict::Refuse(Decision::cached(&r, at));
        }
        if self.abandoned.full() {
            return self.failed(&"too many calls still waiting for Redis");
        }
        let now_ms = unix_ms();
        let call = match self.call(&keys, now_ms) {
            Ok(call) => call,
            Err(e) => return self.failed(&e),
        };
        let client = self.client.clone();
        let mut call = Box::pin(async move { client.call(&call).await });
        let reply = match tokio::time::timeout(REQUEST_DEADLINE, &mut call).await {
            Ok(reply) => reply,
            Err(_) => {
                let charged = keys.clone();
                self.abandoned.watch(self.client.clone(), async move {
                    match call.await {
                        Ok(r) if r.allowed => Outcome::Admitted(charged, now_ms),
                        Ok(_) => Outcome::NotCharged,
                        // The link failed: the command may or may not have run.
                        Err(e) if e.may_have_run() => Outcome::Unknown,
                        Err(_) => Outcome::NotCharged,
                    }
                });
                return self.failed(&format!(
                    "no reply within {REQUEST_DEADLINE:?} (the call is refunded if it ran)"
                ));
            }
        };
        let decision = match reply {
            Ok(r) => Decision::from(&r),
            Err(e) => return self.failed(&e),
        };
        self.log.succeeded();
        if decision.allowed {
            return Verdict::Admit(decision, Charge { keys, now_ms });
        }
        if let Some(c) = &self.deny {
            let r = Refusal::new(
                at,
                decision.retry_after_ms,
                decision.reset_after_ms,
                decision.limit,
            );
            if let Some(r) = r {
                c.insert(cache_key, r);
            }
        }
        Verdict::Refuse(decision)
    }

    /// Takes an admitted request back (`REFUND key 1 AT now` on each of its keys).
    pub async fn refund(&self, charge: &Charge) {
        if let Some(c) = &self.deny
            && let Some(k) = charge.keys.first()
        {
            c.remove(k);
        }
        let at = Now::Ms(charge.now_ms);
        if let Err(e) = self.client.refund_all(&charge.keys, 1, at).await {
            eprintln!("gateway: refund failed: {e}");
        }
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
        Limiter::new(&cfg).unwrap()
    }

    fn text(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).to_string(),
                _ => "?".to_string(),
            })
            .collect()
    }

    #[tokio::test]
    async fn commands() {
        let one = limiter(&["--limit", "10/1s", "--limit", "100/1m"]);
        let keys = one.keys(b"k", None);
        assert_eq!(keys, [b"rl:{k}".to_vec()]);
        assert_eq!(
            text(one.call(&keys, 1234).unwrap().cmd()),
            [
                "SLIDINGWINDOW.ALLOW",
                "rl:{k}",
                "1",
                "10",
                "1234",
                "LIMIT",
                "60",
                "100"
            ]
        );
        let both = limiter(&[
            "--limit",
            "10/1s",
            "--tenant-header",
            "x-tenant",
            "--tenant-limit",
            "1000/1m",
        ]);
        let keys = both.keys(b"k", Some(b"acme"));
        assert_eq!(keys, [b"rl:{acme}:k".to_vec(), b"rl:{acme}".to_vec()]);
        assert_eq!(
            text(both.call(&keys, 99).unwrap().cmd()),
            [
                "SLIDINGWINDOW.ALLOWALL",
                "2",
                "rl:{acme}:k",
                "rl:{acme}",
                "99",
                "LIMIT",
                "1",
                "1",
                "10",
                "LIMIT",
                "2",
                "60",
                "1000"
            ]
        );
        let names: Vec<&str> = both.limits().iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["l0", "t0"]);
        let tenant_only = limiter(&["--tenant-header", "x-t", "--tenant-limit", "5/1s"]);
        let keys = tenant_only.keys(b"k", Some(b"acme"));
        assert_eq!(keys, [b"rl:{acme}".to_vec()]);
        assert_eq!(
            text(tenant_only.call(&keys, 7).unwrap().cmd()),
            [
                "SLIDINGWINDOW.ALLOWALL",
                "1",
                "rl:{acme}",
                "7",
                "LIMIT",
                "1",
                "1",
                "5"
            ]
        );
    }
}
