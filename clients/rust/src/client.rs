//! The link to Redis, one type for one node (a connection manager) and a cluster: typed calls,
//! batches, and one resend when the link is found down; each call on the module's commands or on
//! the script (see [`crate::Backend`]).

use crate::batch::{Answer, Batch};
use crate::connect::{Options, Topology};
use crate::error::Error;
use crate::limit::Now;
use crate::reply::Reply;
use crate::request::{Call, Check, CheckAll, Refund};
use crate::script::{self, Backend, Path};
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
    path: Arc<Path>,
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
        Ok(Client {
            link,
            path: Arc::new(Path::new(options.backend)),
        })
    }

    /// The backend the options asked for.
    pub fn chosen_backend(&self) -> Backend {
        self.path.chosen
    }

    /// The path calls take on this server: [`Backend::Module`] or [`Backend::Script`], asked of
    /// the server now (every master in a cluster) and checked: a forced module the server does not
    /// have, or a script it cannot load (`SCRIPT LOAD` refused), is [`Error::Config`]. On the
    /// script path the script is loaded on every master.
    pub async fn backend(&self) -> Result<Backend, Error> {
        let mut info = redis::cmd("COMMAND");
        info.arg("INFO").arg("slidingwindow.allow").arg("evalsha");
        let known = script::known(
            &self
                .on_masters(&info, ResponsePolicy::CombineArrays)
                .await?,
            2,
        )?;
        let module = match self.path.chosen {
            Backend::Script => false,
            Backend::Module if !known[0] => {
                return Err(Error::Config(
                    "backend module: the server has no SLIDINGWINDOW.ALLOW (the module is not \
                     loaded); load it, or use the script backend (auto or script)"
                        .into(),
                ));
            }
            _ => known[0],
        };
        if !module && !known[1] {
            return Err(Error::Config(
                "backend script: the server has no EVALSHA (renamed or disabled); allow EVALSHA \
                 and SCRIPT, or load the module"
                    .into(),
            ));
        }
        if !module {
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(script::SCRIPT);
            self.on_masters(&load, ResponsePolicy::AllSucceeded)
                .await
                .map_err(|e| match e {
                    Error::Server(line) => Error::Config(format!(
                        "backend script: SCRIPT LOAD answered {line}; allow SCRIPT and EVALSHA, or \
                     load the module"
                    )),
                    e => e,
                })?;
        }
        self.path.set(module);
        Ok(if module {
            Backend::Module
        } else {
            Backend::Script
        })
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
        self.refund_each(keys.iter().map(|k| Refund::new(k.as_ref(), n).at(at)))
            .await
    }

    /// The refund of an ALLOWALL admitted at `now_ms` (DETAIL's `now`) with `precision`:
    /// [`Refund::logged`] on each key in one pipeline. How many were taken back in all.
    pub async fn refund_logged<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        n: u64,
        now_ms: u64,
        precision: Option<u64>,
    ) -> Result<u64, Error> {
        self.refund_each(
            keys.iter()
                .map(|k| Refund::logged(k.as_ref(), n, now_ms, precision)),
        )
        .await
    }

    /// `refunds` in one pipeline: how many were taken back in all.
    async fn refund_each<'a>(
        &self,
        refunds: impl Iterator<Item = Refund<'a>>,
    ) -> Result<u64, Error> {
        let mut batch = Batch::pipeline();
        for r in refunds {
            batch.refund(&r)?;
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
        let pipe = batch.pipe();
        let on_module = match self.module(route).await? {
            true => self.pipeline_on_module(pipe, route).await?,
            false => None,
        };
        let values = match on_module {
            Some(values) => values,
            None => self.eval_pipeline(pipe, route).await?,
        };
        batch.answers(values)
    }

    /// Every reply to `pipe` (a transaction's OK and QUEUED lines too: a command refused when
    /// queued shows only there).
    async fn replies(&self, pipe: &Pipeline, route: Route) -> Result<Vec<Value>, Error> {
        let count = pipe.len() + if pipe.is_transaction() { 2 } else { 0 };
        self.twice(|| self.send_pipeline_once(pipe, count, route))
            .await
    }

    /// A batch's replies from the module, the calls' (EXEC's array for a transaction); None when
    /// its commands are unknown there and `Auto` moved to the script.
    async fn pipeline_on_module(
        &self,
        pipe: &Pipeline,
        route: Route,
    ) -> Result<Option<Vec<Value>>, Error> {
        let values = self.replies(pipe, route).await?;
        match values.iter().find_map(unusable) {
            Some(line) => {
                self.not_module(&line)?;
                Ok(None)
            }
            None => Ok(Some(calls_part(pipe, values))),
        }
    }

    /// A batch's commands as the script (a transaction stays one), the calls' replies; the script
    /// loaded on the node when it answers `NOSCRIPT`, and the calls that found none sent again.
    async fn eval_pipeline(&self, pipe: &Pipeline, route: Route) -> Result<Vec<Value>, Error> {
        let mut evals = redis::pipe();
        if pipe.is_transaction() {
            evals.atomic();
        }
        for cmd in pipe.cmd_iter() {
            evals.add_command(match script::module_command(cmd) {
                Some(name) => script::translate(cmd, &name)?,
                None => cmd.clone(),
            });
        }
        let send = || async {
            let values = self.replies(&evals, route).await?;
            match values.iter().find_map(unusable) {
                Some(line) => Err(script_error(&line)),
                None => Ok(calls_part(pipe, values)),
            }
        };
        let values = send().await?;
        if !values.iter().any(noscript) {
            return Ok(values);
        }
        // None ran: as for one call, `Auto` asks again.
        if values.iter().all(noscript)
            && self.asks_again(route).await?
            && let Some(values) = self.pipeline_on_module(pipe, route).await?
        {
            return Ok(values);
        }
        self.load(route).await?;
        // A transaction found no script in any call (none ran): it is sent again whole. In a
        // pipeline the calls that found it ran, and only the others are sent again.
        if pipe.is_transaction() {
            let values = send().await?;
            return match values.iter().any(noscript) {
                true => Err(unfixable()),
                false => Ok(values),
            };
        }
        let mut again = redis::pipe();
        let missing: Vec<usize> = (0..values.len())
            .filter(|&i| noscript(&values[i]))
            .collect();
        let cmds: Vec<&Cmd> = evals.cmd_iter().collect();
        for &i in &missing {
            again.add_command(cmds[i].clone());
        }
        let redone = self.replies(&again, route).await?;
        let mut values = values;
        for (i, v) in missing.into_iter().zip(redone) {
            if noscript(&v) {
                return Err(unfixable());
            }
            values[i] = v;
        }
        Ok(values)
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
        if self.path.current() == Backend::Script {
            return Some(
                "the script path (no module) logs one sorted-set member per request: PRECISION \
                 saves no memory there and only counts each request up to p ms longer"
                    .into(),
            );
        }
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

    /// A command without a key, sent to every master of a cluster (their replies combined by
    /// `policy`) or to the one node; an error reply is `Error::Server`.
    pub(crate) async fn on_masters(
        &self,
        cmd: &Cmd,
        policy: ResponsePolicy,
    ) -> Result<Value, Error> {
        let value = self
            .twice(|| async {
                Ok(match &self.link {
                    Link::Cluster(con) => {
                        let to = RoutingInfo::MultiNode((
                            MultipleNodeRoutingInfo::AllMasters,
                            Some(policy),
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

    /// A module command on the path in use (the module's, or the script's), anything else as it
    /// is.
    async fn send(&self, cmd: &Cmd, route: Route) -> Result<Value, Error> {
        let Some(name) = script::module_command(cmd) else {
            return self.raw(cmd, route).await;
        };
        if self.module(route).await?
            && let Some(reply) = self.on_module(cmd, route).await?
        {
            return Ok(reply);
        }
        let eval = script::translate(cmd, &name)?;
        let reply = self.raw(&eval, route).await;
        match as_line(&reply) {
            Some(line) if script::unusable(&line) => Err(script_error(&line)),
            Some(line) if script::noscript(&line) => {
                // A server without the script may be another server (restarted, failed over):
                // `Auto` asks again.
                if self.asks_again(route).await?
                    && let Some(reply) = self.on_module(cmd, route).await?
                {
                    return Ok(reply);
                }
                self.load(route).await?;
                let reply = self.raw(&eval, route).await;
                match as_line(&reply) {
                    Some(line) if script::noscript(&line) => Err(unfixable()),
                    Some(line) if script::unusable(&line) => Err(script_error(&line)),
                    _ => reply,
                }
            }
            _ => reply,
        }
    }

    async fn raw(&self, cmd: &Cmd, route: Route) -> Result<Value, Error> {
        self.twice(|| self.send_once(cmd, route)).await
    }

    /// The module's reply; None when the command is unknown there and `Auto` moved to the script.
    async fn on_module(&self, cmd: &Cmd, route: Route) -> Result<Option<Value>, Error> {
        let reply = self.raw(cmd, route).await;
        match as_line(&reply).filter(|l| script::unusable(l)) {
            Some(line) => {
                self.not_module(&line)?;
                Ok(None)
            }
            None => reply.map(Some),
        }
    }

    /// Under `Auto`, whether the node of `route` has the module, asked again; false otherwise.
    async fn asks_again(&self, route: Route) -> Result<bool, Error> {
        if self.path.chosen != Backend::Auto {
            return Ok(false);
        }
        self.path.forget();
        self.module(route).await
    }

    /// `SCRIPT LOAD` on the node of `route`; a refusal is a configuration error.
    async fn load(&self, route: Route) -> Result<(), Error> {
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(script::SCRIPT);
        match self.raw(&load, route).await {
            Ok(Value::ServerError(e)) => Err(Error::Config(format!(
                "SCRIPT LOAD answered {}; allow SCRIPT and EVALSHA, or load the module",
                crate::error::line(e.code(), e.details())
            ))),
            Err(Error::Server(line)) => Err(Error::Config(format!(
                "SCRIPT LOAD answered {line}; allow SCRIPT and EVALSHA, or load the module"
            ))),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether module commands go to the module: the chosen path, or under `Auto` what the node
    /// of `route` answers to `COMMAND INFO slidingwindow.allow` (asked when not known).
    pub(crate) async fn module(&self, route: Route) -> Result<bool, Error> {
        match self.path.current() {
            Backend::Module => return Ok(true),
            Backend::Script => return Ok(false),
            Backend::Auto => {}
        }
        let mut info = redis::cmd("COMMAND");
        info.arg("INFO").arg("slidingwindow.allow");
        let module = script::has_module(&self.raw(&info, route).await?)?;
        self.path.set(module);
        Ok(module)
    }

    /// A module command was unknown: under `Auto` the script path from now on, else a
    /// configuration error.
    fn not_module(&self, line: &str) -> Result<(), Error> {
        if self.path.chosen != Backend::Auto {
            return Err(Error::Config(format!(
                "backend module: the server answered {line}; load the module, or use the script \
                 backend (auto or script)"
            )));
        }
        self.path.set(false);
        Ok(())
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

    /// The first `count` replies to `pipe`.
    async fn send_pipeline_once(
        &self,
        pipe: &Pipeline,
        count: usize,
        route: Route,
    ) -> Result<Vec<Value>, Error> {
        let offset = 0;
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
            Err(e) if e.link_was_down() => {
                self.path.forget();
                send().await
            }
            Err(e) if matches!(self.link, Link::Sentinel(_)) && not_master(&e) => {
                self.path.forget();
                send().await
            }
            reply => reply,
        }
    }
}

/// An error reply's line.
fn as_line(reply: &Result<Value, Error>) -> Option<String> {
    match reply {
        Ok(Value::ServerError(e)) => Some(crate::error::line(e.code(), e.details())),
        Err(Error::Server(line)) => Some(line.clone()),
        _ => None,
    }
}

fn value_line(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(crate::error::line(e.code(), e.details())),
        _ => None,
    }
}

/// The replies that answer a batch's calls: for a transaction, `EXEC`'s (after MULTI's OK and
/// one QUEUED a call).
fn calls_part(pipe: &Pipeline, mut values: Vec<Value>) -> Vec<Value> {
    if pipe.is_transaction() {
        values.split_off(values.len().min(pipe.len() + 1))
    } else {
        values
    }
}

/// A batch's reply (a transaction's `EXEC` included) that says the command cannot run here.
fn unusable(v: &Value) -> Option<String> {
    match v {
        Value::Array(items) => items.iter().find_map(unusable),
        v => value_line(v).filter(|l| script::unusable(l)),
    }
}

/// A batch's reply that found no script (in a transaction: its `EXEC` array's).
fn noscript(v: &Value) -> bool {
    match v {
        Value::Array(items) => !items.is_empty() && items.iter().all(noscript),
        v => value_line(v).is_some_and(|l| script::noscript(&l)),
    }
}

fn script_error(line: &str) -> Error {
    Error::Config(format!(
        "backend script: the server answered {line}; allow EVALSHA and SCRIPT, or load the module"
    ))
}

fn unfixable() -> Error {
    Error::Config("NOSCRIPT after SCRIPT LOAD: the server does not keep the script".into())
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
