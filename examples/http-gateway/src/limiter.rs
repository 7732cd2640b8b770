//! One call per request against Redis: SLIDINGWINDOW.ALLOW on the identity's key, or with
//! tenants one SLIDINGWINDOW.ALLOWALL on the identity's and the tenant's keys; and the verdict.

use crate::abandoned::{Abandoned, Outcome};
use crate::backend::Backend;
use crate::config::{Config, Limit, OnRedisError, Switch};
use crate::deny_cache::{DenyCache, Refusal};
use crate::error_log::ErrorLog;
use redis::{Cmd, RedisResult};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A request does not wait longer than this for Redis; then the --on-redis-error policy decides
/// (and the call goes on, see abandoned.rs).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(1);

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

impl Decision {
    /// The command's reply: 5 integers, a 6th (the binding limit, below `limits`) when the call
    /// had several limits or keys.
    pub fn from_reply(reply: &[i64], limits: usize) -> Option<Decision> {
        let (fields, binding) = match reply {
            [fields @ .., b] if reply.len() == 6 => (fields, *b),
            _ => (reply, 0),
        };
        let &[allowed, _count, remaining, retry_after_ms, reset_after_ms] = fields else {
            return None;
        };
        let limit = usize::try_from(binding).ok().filter(|&b| b < limits)?;
        Some(Decision {
            allowed: allowed == 1,
            remaining,
            retry_after_ms,
            reset_after_ms,
            limit,
        })
    }

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
    backend: Backend,
    /// The identity's limits, then the tenant's.
    limits: Vec<Named>,
    identity_limits: usize,
    tenants: bool,
    deny: Option<DenyCache>,
    on_error: OnRedisError,
    log: ErrorLog,
    abandoned: Arc<Abandoned>,
}

impl Limiter {
    /// Never waits for Redis: connections are made on first use and remade after failures.
    pub fn new(cfg: &Config) -> RedisResult<Limiter> {
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
        let mut limits = named("l", &cfg.limits);
        limits.extend(named("t", &cfg.tenant_limits));
        Ok(Limiter {
            backend: Backend::new(cfg)?,
            limits,
            identity_limits: cfg.limits.len(),
            tenants: cfg.tenant_header.is_some(),
            deny: (cfg.deny_cache == Switch::On)
                .then(|| DenyCache::new(cfg.deny_cache_size as usize)),
            on_error: cfg.on_redis_error,
            log: ErrorLog::default(),
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
            Some(t) if self.identity_limits == 0 => vec![tagged(t, b"")],
            Some(t) => vec![tagged(t, &[b":", identity].concat()), tagged(t, b"")],
        }
    }

    /// `SLIDINGWINDOW.ALLOW key w0 max0 now [LIMIT w max]...`, or with tenants
    /// `SLIDINGWINDOW.ALLOWALL n key... now LIMIT keyno w max...`.
    fn command(&self, keys: &[Vec<u8>], now_ms: u64) -> Cmd {
        if !self.tenants {
            let mut cmd = redis::cmd("SLIDINGWINDOW.ALLOW");
            cmd.arg(keys.first().map_or(&[][..], Vec::as_slice));
            for (i, l) in self.limits.iter().enumerate() {
                if i > 0 {
                    cmd.arg("LIMIT");
                }
                cmd.arg(l.limit.window_s).arg(l.limit.max);
                if i == 0 {
                    cmd.arg(now_ms);
                }
            }
            return cmd;
        }
        let mut cmd = redis::cmd("SLIDINGWINDOW.ALLOWALL");
        cmd.arg(keys.len());
        for k in keys {
            cmd.arg(k.as_slice());
        }
        cmd.arg(now_ms);
        for (i, l) in self.limits.iter().enumerate() {
            // The last key is the tenant's; the identity's comes first when it has limits.
            let keyno = if i < self.identity_limits {
                1
            } else {
                keys.len()
            };
            cmd.arg("LIMIT")
                .arg(keyno)
                .arg(l.limit.window_s)
                .arg(l.limit.max);
        }
        cmd
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
        let cmd = self.command(&keys, now_ms);
        let backend = self.backend.clone();
        let mut call = Box::pin(async move { backend.query_ints(&cmd).await });
        let reply = match tokio::time::timeout(REQUEST_DEADLINE, &mut call).await {
            Ok(reply) => reply,
            Err(_) => {
                let n = self.limits.len();
                let charged = keys.clone();
                self.abandoned.watch(self.backend.clone(), async move {
                    match call.await {
                        Ok(r) => match Decision::from_reply(&r, n) {
                            Some(d) if d.allowed => Outcome::Admitted(charged, now_ms),
                            Some(_) => Outcome::NotCharged,
                            None => Outcome::Unknown,
                        },
                        // The link failed: the command may or may not have run.
                        Err(e) if e.is_io_error() => Outcome::Unknown,
                        Err(_) => Outcome::NotCharged,
                    }
                });
                return self.failed(&format!(
                    "no reply within {REQUEST_DEADLINE:?} (the call is refunded if it ran)"
                ));
            }
        };
        let decision = match reply {
            Ok(r) => match Decision::from_reply(&r, self.limits.len()) {
                Some(d) => d,
                None => return self.failed(&format!("unexpected reply {r:?}")),
            },
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
        if let Err(e) = self.backend.refund(&charge.keys, charge.now_ms).await {
            eprintln!("gateway: refund failed: {e}");
        }
    }

    fn failed(&self, err: &dyn std::fmt::Display) -> Verdict {
        self.log.failed(err, self.on_error);
        match self.on_error {
            OnRedisError::Open => Verdict::Unchecked,
            OnRedisError::Closed => Verdict::Unavailable,
        }
    }
}

/// The gateway's clock in Unix ms: the `now` of every call, so a refund can name it.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn replies() {
        let d = |allowed, remaining, retry_after_ms, reset_after_ms, limit| Decision {
            allowed,
            remaining,
            retry_after_ms,
            reset_after_ms,
            limit,
        };
        assert_eq!(
            Decision::from_reply(&[1, 3, 7, 0, 1000], 1),
            Some(d(true, 7, 0, 1000, 0))
        );
        assert_eq!(
            Decision::from_reply(&[0, 5, 0, 59_000, 60_000, 1], 2),
            Some(d(false, 0, 59_000, 60_000, 1))
        );
        for bad in [
            &[][..],
            &[1, 2, 3, 4],
            &[1, 2, 3, 4, 5, -1],
            &[1, 2, 3, 4, 5, 2],
            &[1, 2, 3, 4, 5, 6, 7],
        ] {
            assert_eq!(Decision::from_reply(bad, 2), None, "{bad:?}");
        }
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

    fn text(cmd: &Cmd) -> Vec<String> {
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
            text(&one.command(&keys, 1234)),
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
            text(&both.command(&keys, 99)),
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
            text(&tenant_only.command(&keys, 7)),
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
