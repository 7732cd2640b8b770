//! The link to Redis: one server through the connection manager, or a cluster.

use crate::config::Config;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, RedisError, RedisResult};
use std::time::Duration;

/// Connecting gives up after this (a request's own deadline is the limiter's).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a reply is awaited at all. A request stops waiting long before (the limiter's
/// deadline), but its call goes on so that a late "admitted" can be refunded.
pub const REPLY_WAIT: Duration = Duration::from_secs(30);
/// Longest wait before the cluster client's one retry of a failed request (a retry also follows
/// a slot that moved).
const CLUSTER_RETRY_WAIT: Duration = Duration::from_millis(100);

#[derive(Clone)]
pub enum Backend {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Backend {
    /// Never waits for Redis: connections are made on first use and remade after failures.
    pub fn new(cfg: &Config) -> RedisResult<Backend> {
        if cfg.cluster {
            let client = ClusterClient::builder(cfg.redis.clone())
                .retries(1)
                .max_retry_wait(CLUSTER_RETRY_WAIT.as_millis() as u64)
                .build()?;
            let config = ClusterConfig::new()
                .set_connection_timeout(CONNECT_TIMEOUT)
                .set_response_timeout(REPLY_WAIT);
            return Ok(Backend::Cluster(
                client.get_pending_async_connection_with_config(config),
            ));
        }
        let url = cfg
            .redis
            .first()
            .map_or("redis://127.0.0.1:6379", String::as_str);
        let config = ConnectionManagerConfig::new()
            // No backoff inside a request: `query` retries once, at once, when the link was down.
            .set_number_of_retries(0)
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(REPLY_WAIT));
        Ok(Backend::Single(ConnectionManager::new_lazy_with_config(
            Client::open(url)?,
            config,
        )?))
    }

    /// The command's reply as integers. A link found down (refused, or closed since the last
    /// call) is remade and the command sent once more: the first request after Redis is back is
    /// served, rather than failing on the previous outage's connection.
    pub async fn query_ints(&self, cmd: &Cmd) -> RedisResult<Vec<i64>> {
        match self.query(cmd).await {
            Err(e) if link_was_down(&e) => self.query(cmd).await,
            reply => reply,
        }
    }

    async fn query(&self, cmd: &Cmd) -> RedisResult<Vec<i64>> {
        match self {
            Backend::Single(con) => cmd.query_async(&mut con.clone()).await,
            Backend::Cluster(con) => cmd.query_async(&mut con.clone()).await,
        }
    }

    /// `SLIDINGWINDOW.REFUND key 1 AT now` for each key: the charge of one admitted call, never
    /// a request logged after it. Answers how many members were removed in all.
    pub async fn refund(&self, keys: &[Vec<u8>], now_ms: u64) -> RedisResult<i64> {
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("SLIDINGWINDOW.REFUND")
                .arg(key.as_slice())
                .arg(1)
                .arg("AT")
                .arg(now_ms);
        }
        let removed: Vec<i64> = match self {
            Backend::Single(con) => pipe.query_async(&mut con.clone()).await?,
            Backend::Cluster(con) => pipe.query_async(&mut con.clone()).await?,
        };
        Ok(removed.iter().sum())
    }
}

/// The connection was refused or had closed: the call did not reach a live server. (A server
/// that closes the link mid-call has crashed or dropped the client; a retry costs at most one
/// extra charge there, which is the rarer and smaller harm than failing every first request.)
fn link_was_down(e: &RedisError) -> bool {
    e.is_connection_refusal() || e.is_connection_dropped()
}
