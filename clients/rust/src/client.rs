//! The link to Redis, one type for one node (a connection manager) and a cluster: typed calls,
//! batches, and one resend when the link is found down.

use crate::batch::{Answer, Batch};
use crate::connect::{Options, Topology};
use crate::error::Error;
use crate::limit::Now;
use crate::reply::Reply;
use crate::request::{Call, Check, CheckAll, Refund};
use crate::sentinel::{SentinelLink, not_master};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, Pipeline, Value};
use std::sync::Arc;

/// Cheap to clone: clones share the connection (one multiplexed link per node).
#[derive(Clone)]
pub struct Client {
    link: Link,
}

#[derive(Clone)]
enum Link {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<SentinelLink>),
}

impl Client {
    /// Never waits for Redis: connections are made on first use and remade after failures.
    pub fn new(options: &Options) -> Result<Client, Error> {
        let link = match &options.topology {
            Topology::Cluster(seeds) => {
                let builder = ClusterClient::builder(seeds.clone())
                    .retries(options.cluster_retries)
                    .max_retry_wait(
                        u64::try_from(options.cluster_max_retry_wait.as_millis())
                            .unwrap_or(u64::MAX),
                    );
                #[cfg(feature = "tls")]
                let builder = match crate::connect::certificates(options)? {
                    Some(certs) => builder.certs(certs),
                    None => builder,
                };
                #[cfg(not(feature = "tls"))]
                crate::connect::certificates(options)?;
                let client = builder.build()?;
                let config = ClusterConfig::new()
                    .set_connection_timeout(options.connect_timeout)
                    .set_response_timeout(options.response_timeout);
                Link::Cluster(client.get_pending_async_connection_with_config(config))
            }
            Topology::Single(url) => {
                let config = ConnectionManagerConfig::new()
                    // No backoff inside a call: a link found down is remade and the call resent
                    // once, at once (see `send`).
                    .set_number_of_retries(0)
                    .set_connection_timeout(Some(options.connect_timeout))
                    .set_response_timeout(Some(options.response_timeout));
                Link::Single(ConnectionManager::new_lazy_with_config(
                    open(url, options)?,
                    config,
                )?)
            }
            Topology::Sentinel {
                service,
                sentinels,
                auth,
            } => Link::Sentinel(Arc::new(SentinelLink::new(
                service,
                sentinels,
                auth.as_ref(),
                options,
            )?)),
        };
        Ok(Client { link })
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// `SLIDINGWINDOW.ALLOW`: admits the request if it fits every limit, and logs it.
    pub async fn allow(&self, c: &Check<'_>) -> Result<Reply, Error> {
        self.call(&Call::allow(c)?).await
    }

    /// `SLIDINGWINDOW.PEEK`: what ALLOW would answer, changing nothing.
    pub async fn peek(&self, c: &Check<'_>) -> Result<Reply, Error> {
        self.call(&Call::peek(c)?).await
    }

    /// `SLIDINGWINDOW.ALLOWALL`: the request on every key, or on none.
    pub async fn allow_all(&self, c: &CheckAll<'_>) -> Result<Reply, Error> {
        self.call(&Call::allow_all(c)?).await
    }

    /// `SLIDINGWINDOW.PEEKALL`: what ALLOWALL would answer, changing nothing.
    pub async fn peek_all(&self, c: &CheckAll<'_>) -> Result<Reply, Error> {
        self.call(&Call::peek_all(c)?).await
    }

    /// A call built beforehand (see [`Call`]).
    pub async fn call(&self, call: &Call) -> Result<Reply, Error> {
        call.parse(&self.send(call.cmd(), call.route()).await?)
    }

    /// `SLIDINGWINDOW.REFUND`: how many requests were taken back.
    pub async fn refund(&self, r: &Refund<'_>) -> Result<u64, Error> {
        let (cmd, route) = r.command()?;
        crate::reply::removed(&self.send(&cmd, route).await?)
    }

    /// `REFUND key n AT at` on each key in one pipeline (keys of one slot in a cluster): an
    /// ALLOWALL's charge. How many were taken back in all.
    pub async fn refund_all<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        n: u64,
        at: Now,
    ) -> Result<u64, Error> {
        let mut batch = Batch::pipeline();
        for key in keys {
            batch.refund(&Refund::new(key.as_ref(), n).at(at))?;
        }
        let mut removed = 0;
        for answer in self.exec(&batch).await? {
            removed += answer?.removed()?;
        }
        Ok(removed)
    }

    /// Runs a batch; one answer per call, in order (an error reply is that call's error). An
    /// empty batch sends nothing.
    pub async fn exec(&self, batch: &Batch) -> Result<Vec<Result<Answer, Error>>, Error> {
        let Some(route) = batch.route() else {
            return Ok(Vec::new());
        };
        let (offset, count) = batch.replies();
        let values = self
            .twice(|| self.send_pipeline_once(batch.pipe(), offset, count, route))
            .await?;
        batch.answers(values)
    }

    /// Any command, sent to the node of `key`'s slot in a cluster; its raw reply (an error reply
    /// is `Error::Server`).
    pub async fn command(&self, cmd: &Cmd, key: &[u8]) -> Result<Value, Error> {
        let route = Route::with_key(key, SlotAddr::Master);
        match self.send(cmd, route).await? {
            Value::ServerError(e) => Err(Error::Server(crate::error::line(e.code(), e.details()))),
            v => Ok(v),
        }
    }

    /// The module's `slidingwindow.storage` (`compact` or `zset`) on the node of `key`'s slot.
    pub async fn storage(&self, key: &[u8]) -> Result<String, Error> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg("slidingwindow.storage");
        let pairs = match self.command(&cmd, key).await? {
            Value::Array(v) => v,
            Value::Map(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            other => return Err(Error::Reply(format!("CONFIG GET answered {other:?}"))),
        };
        match pairs.get(1) {
            Some(Value::BulkString(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
            Some(Value::SimpleString(s)) => Ok(s.clone()),
            _ => Err(Error::Reply(
                "CONFIG GET slidingwindow.storage answered no value (is the module loaded?)".into(),
            )),
        }
    }

    /// For a caller about to pass `PRECISION`: a warning when the storage of `key`'s node is
    /// `zset` (there it saves nothing and only counts requests longer), or when that could not be
    /// checked (CONFIG unavailable); `None` on the compact storage.
    pub async fn precision_warning(&self, key: &[u8]) -> Option<String> {
        match self.storage(key).await {
            Ok(s) if s == "zset" => Some(
                "slidingwindow.storage is zset: PRECISION saves no memory on the sorted-set \
                 storage (one member per request) and only counts each request up to p ms longer"
                    .into(),
            ),
            Ok(_) => None,
            Err(e) => Some(format!(
                "slidingwindow.storage could not be checked ({e}): PRECISION saves memory only on \
                 the compact storage"
            )),
        }
    }

    /// A command without a key, sent to every master of a cluster (their array replies
    /// concatenated) or to the one node; an error reply is `Error::Server`.
    pub(crate) async fn on_masters(&self, cmd: &Cmd) -> Result<Value, Error> {
        let value = self
            .twice(|| async {
                Ok(match &self.link {
                    Link::Cluster(con) => {
                        let to = RoutingInfo::MultiNode((
                            MultipleNodeRoutingInfo::AllMasters,
                            Some(ResponsePolicy::CombineArrays),
                        ));
                        con.clone().route_command(cmd.clone(), to).await?
                    }
                    _ => self.send_once(cmd, Route::new(0, SlotAddr::Master)).await?,
                })
            })
            .await?;
        match value {
            Value::ServerError(e) => Err(Error::Server(crate::error::line(e.code(), e.details()))),
            v => Ok(v),
        }
    }

    async fn send(&self, cmd: &Cmd, route: Route) -> Result<Value, Error> {
        self.twice(|| self.send_once(cmd, route)).await
    }

    async fn send_once(&self, cmd: &Cmd, route: Route) -> Result<Value, Error> {
        Ok(match &self.link {
            Link::Single(con) => con.clone().req_packed_command(cmd).await?,
            Link::Cluster(con) => {
                // Routed by the first key's slot: the cluster client's own routing reads
                // ALLOWALL's `numkeys` as its key.
                let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                con.clone().route_command(cmd.clone(), to).await?
            }
            Link::Sentinel(s) => {
                let (g, mut con) = s.connection().await?;
                let r = con.req_packed_command(cmd).await.map_err(Error::from);
                s.after(g, &r);
                r?
            }
        })
    }

    async fn send_pipeline_once(
        &self,
        pipe: &Pipeline,
        offset: usize,
        count: usize,
        route: Route,
    ) -> Result<Vec<Value>, Error> {
        Ok(match &self.link {
            Link::Single(con) => con.clone().req_packed_commands(pipe, offset, count).await?,
            Link::Cluster(con) => {
                let to = SingleNodeRoutingInfo::SpecificNode(route);
                con.clone()
                    .route_pipeline(pipe.clone(), offset, count, to)
                    .await?
            }
            Link::Sentinel(s) => {
                let (g, mut con) = s.connection().await?;
                let r = con
                    .req_packed_commands(pipe, offset, count)
                    .await
                    .map_err(Error::from);
                s.after(g, &r);
                r?
            }
        })
    }

    /// A link found down (refused, or closed since the last call) is remade and the command sent
    /// once more, so the first call after Redis is back is served rather than failing on the
    /// previous outage's connection. (A server that closes the link mid-call has crashed or
    /// dropped the client; a resend costs at most one extra charge there.) Never after a timeout:
    /// that call may still run. Under Sentinel, a node that answers it is no longer the master ran
    /// nothing: the call goes to the master looked up again.
    async fn twice<T, F: Future<Output = Result<T, Error>>>(
        &self,
        send: impl Fn() -> F,
    ) -> Result<T, Error> {
        match send().await {
            Err(e) if e.link_was_down() => send().await,
            Err(e) if matches!(self.link, Link::Sentinel(_)) && not_master(&e) => send().await,
            reply => reply,
        }
    }
}

/// A node's client, trusting the CA file for `rediss://` when one is given.
fn open(url: &str, options: &Options) -> Result<redis::Client, Error> {
    #[cfg(feature = "tls")]
    if let Some(certs) = crate::connect::certificates(options)? {
        return Ok(redis::Client::build_with_tls(url, certs)?);
    }
    #[cfg(not(feature = "tls"))]
    crate::connect::certificates(options)?;
    Ok(redis::Client::open(url)?)
}
