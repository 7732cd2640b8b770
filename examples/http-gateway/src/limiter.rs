//! One SLIDINGWINDOW.ALLOW per request against Redis (one server or a cluster), and the verdict.

use crate::config::{Config, Limit, OnRedisError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, RedisError, RedisResult};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A request must not hang on a Redis that stopped answering: it fails after this and the
/// --on-redis-error policy decides.
const REDIS_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest wait before the cluster client's one retry of a failed request (a retry also follows
/// a slot that moved), so an outage costs a request this much at most on top of the timeouts.
const CLUSTER_RETRY_WAIT: Duration = Duration::from_millis(100);

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
    /// The command's reply: 5 integers, a 6th (the binding limit) when LIMIT options were sent.
    pub fn from_reply(reply: &[i64]) -> Option<Decision> {
        let (fields, binding) = match reply {
            [fields @ .., b] if reply.len() == 6 => (fields, *b),
            _ => (reply, 0),
        };
        let &[allowed, _count, remaining, retry_after_ms, reset_after_ms] = fields else {
            return None;
        };
        Some(Decision {
            allowed: allowed == 1,
            remaining,
            retry_after_ms,
            reset_after_ms,
            limit: usize::try_from(binding).ok()?,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admit(Decision),
    Refuse(Decision),
    /// Redis failed and --on-redis-error is open: let the request through, without headers.
    Unchecked,
    /// Redis failed and --on-redis-error is closed: 503.
    Unavailable,
}

enum Backend {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

pub struct Limiter {
    backend: Backend,
    limits: Vec<Limit>,
    on_error: OnRedisError,
    log: ErrorLog,
}

impl Limiter {
    /// Never waits for Redis: connections are made on first use and remade after failures.
    pub fn new(cfg: &Config) -> RedisResult<Limiter> {
        let backend = if cfg.cluster {
            let client = ClusterClient::builder(cfg.redis.clone())
                .retries(1)
                .max_retry_wait(CLUSTER_RETRY_WAIT.as_millis() as u64)
                .build()?;
            let config = ClusterConfig::new()
                .set_connection_timeout(REDIS_TIMEOUT)
                .set_response_timeout(REDIS_TIMEOUT);
            Backend::Cluster(client.get_pending_async_connection_with_config(config))
        } else {
            let url = cfg
                .redis
                .first()
                .map_or("redis://127.0.0.1:6379", String::as_str);
            let config = ConnectionManagerConfig::new()
                // No retry inside a request: a request that finds the link down fails at once
                // (a retry waits 100 ms or more) and the next one connects again.
                .set_number_of_retries(0)
                .set_connection_timeout(Some(REDIS_TIMEOUT))
                .set_response_timeout(Some(REDIS_TIMEOUT));
            Backend::Single(ConnectionManager::new_lazy_with_config(
                Client::open(url)?,
                config,
            )?)
        };
        Ok(Limiter {
            backend,
            limits: cfg.limits.clone(),
            on_error: cfg.on_redis_error,
            log: ErrorLog::default(),
        })
    }

    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// `SLIDINGWINDOW.ALLOW rl:{identity} w0 max0 * [LIMIT w max]...` and what it means.
    pub async fn check(&self, identity: &[u8]) -> Verdict {
        let mut key = Vec::with_capacity(identity.len() + 5);
        key.extend_from_slice(b"rl:{");
        key.extend_from_slice(identity);
        key.push(b'}');
        let mut cmd = redis::cmd("SLIDINGWINDOW.ALLOW");
        cmd.arg(key);
        for (i, l) in self.limits.iter().enumerate() {
            if i > 0 {
                cmd.arg("LIMIT");
            }
            cmd.arg(l.window_s).arg(l.max);
            if i == 0 {
                cmd.arg("*");
            }
        }
        let reply: RedisResult<Vec<i64>> = match &self.backend {
            Backend::Single(con) => cmd.query_async(&mut con.clone()).await,
            Backend::Cluster(con) => cmd.query_async(&mut con.clone()).await,
        };
        let decision = reply.and_then(|r| {
            Decision::from_reply(&r).ok_or_else(|| {
                RedisError::from((
                    redis::ErrorKind::Parse,
                    "unexpected reply",
                    format!("{r:?}"),
                ))
            })
        });
        match decision {
            Ok(d) => {
                self.log.succeeded();
                if d.allowed {
                    Verdict::Admit(d)
                } else {
                    Verdict::Refuse(d)
                }
            }
            Err(err) => {
                self.log.failed(&err, self.on_error);
                match self.on_error {
                    OnRedisError::Open => Verdict::Unchecked,
                    OnRedisError::Closed => Verdict::Unavailable,
                }
            }
        }
    }
}

/// Reports Redis failures on stderr at most once a second, with the count of those not reported,
/// and the recovery once.
#[derive(Default)]
struct ErrorLog {
    last: Mutex<Option<Instant>>,
    unreported: AtomicU64,
    failing: AtomicBool,
}

impl ErrorLog {
    fn failed(&self, err: &RedisError, mode: OnRedisError) {
        self.failing.store(true, Ordering::Relaxed);
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            self.unreported.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(Instant::now());
        let more = self.unreported.swap(0, Ordering::Relaxed);
        let action = match mode {
            OnRedisError::Open => "letting requests through unlimited",
            OnRedisError::Closed => "answering 503",
        };
        eprintln!(
            "gateway: redis failed, {action} ({more} more failures since the last report): {err}"
        );
    }

    fn succeeded(&self) {
        // A plain load first: the common case writes nothing to the line all workers share.
        if self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed) {
            eprintln!("gateway: redis answers again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            Decision::from_reply(&[1, 3, 7, 0, 1000]),
            Some(d(true, 7, 0, 1000, 0))
        );
        assert_eq!(
            Decision::from_reply(&[0, 5, 0, 59_000, 60_000, 1]),
            Some(d(false, 0, 59_000, 60_000, 1))
        );
        for bad in [
            &[][..],
            &[1, 2, 3, 4],
            &[1, 2, 3, 4, 5, -1],
            &[1, 2, 3, 4, 5, 6, 7],
        ] {
            assert_eq!(Decision::from_reply(bad), None, "{bad:?}");
        }
    }
}
