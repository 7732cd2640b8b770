//! The Redis side of one request: one MULTI/EXEC holding the ALLOWALL call(s), the shadow ALLOWs,
//! the REFUNDs and two PEEKs per counted descriptor, all at the service's `now`.

use crate::plan::{self, Action, How};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Client, ErrorKind, Pipeline, RedisError, RedisResult, Value};
use std::time::Duration;

/// A request must not hang on a Redis that stopped answering: it fails after this and the
/// --on-redis-error policy decides.
const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// A PEEK reply: what the descriptor's log says after the request's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    /// A request of this descriptor's cost would be admitted now.
    pub fits: bool,
    pub remaining: i64,
    /// Until a request of this cost fits (-1: never, it is larger than the limit).
    pub retry_ms: i64,
    /// Until the window is empty.
    pub reset_ms: i64,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Every ALLOWALL admitted (true when there was none).
    pub admitted: bool,
    /// Descriptors that bound a refused ALLOWALL (its reply's sixth integer).
    pub binding: Vec<usize>,
    /// Per descriptor, for counted ones: its log after the request.
    pub looks: Vec<Option<Look>>,
}

enum Backend {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

pub struct Store {
    backend: Backend,
}

impl Store {
    /// Never waits for Redis: connections are made on first use and remade after failures.
    pub fn new(urls: &[String], cluster: bool) -> RedisResult<Store> {
        let backend = if cluster {
            let client = ClusterClient::builder(urls.to_vec())
                .retries(1)
                .max_retry_wait(100)
                .build()?;
            let config = ClusterConfig::new()
                .set_connection_timeout(REDIS_TIMEOUT)
                .set_response_timeout(REDIS_TIMEOUT);
            Backend::Cluster(client.get_pending_async_connection_with_config(config))
        } else {
            let url = urls
                .first()
                .map_or("redis://127.0.0.1:6379", String::as_str);
            let config = ConnectionManagerConfig::new()
                .set_number_of_retries(0)
                .set_connection_timeout(Some(REDIS_TIMEOUT))
                .set_response_timeout(Some(REDIS_TIMEOUT));
            Backend::Single(ConnectionManager::new_lazy_with_config(
                Client::open(url)?,
                config,
            )?)
        };
        Ok(Store { backend })
    }

    /// Runs the request's calls at `now` (ms). `charge` false: an enforced limit of 0 refuses
    /// the request, so no ALLOWALL is sent (shadow, refund and look calls still are).
    pub async fn run(&self, actions: &[Action], charge: bool, now: u64) -> RedisResult<Outcome> {
        let groups = if charge {
            plan::groups(actions)
        } else {
            Vec::new()
        };
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (cost, members) in &groups {
            pipe.add_command(allowall(actions, members, *cost, now));
        }
        for a in actions {
            match a {
                Action::Count {
                    key,
                    limit,
                    cost,
                    how: How::Shadow,
                } => {
                    pipe.cmd("SLIDINGWINDOW.ALLOW")
                        .arg(key)
                        .arg(limit.unit.seconds())
                        .arg(limit.requests_per_unit)
                        .arg(now)
                        .arg("COST")
                        .arg(cost);
                }
                Action::Count {
                    key,
                    cost,
                    how: How::Refund,
                    ..
                } => {
                    pipe.cmd("SLIDINGWINDOW.REFUND")
                        .arg(key)
                        .arg(cost)
                        .arg("AT")
                        .arg(now);
                }
                _ => {}
            }
        }
        add_looks(&mut pipe, actions, now);
        let Some(tag_key) = actions.iter().find_map(|a| match a {
            Action::Count { key, .. } => Some(key.as_slice()),
            _ => None,
        }) else {
            return Ok(Outcome {
                admitted: true,
                binding: Vec::new(),
                looks: vec![None; actions.len()],
            });
        };
        let mut replies = self.exec(&pipe, tag_key).await?.into_iter();
        let mut admitted = Vec::with_capacity(groups.len());
        let mut binding = Vec::new();
        for (_, members) in &groups {
            let r = ints(replies.next())?;
            match r.as_slice() {
                [1, _, _, _, _, _] => admitted.push(true),
                [0, _, _, _, _, b] => {
                    admitted.push(false);
                    let b = usize::try_from(*b).ok();
                    binding.extend(b.and_then(|b| members.get(b)).copied());
                }
                _ => return Err(unexpected("SLIDINGWINDOW.ALLOWALL", &r)),
            }
        }
        for a in actions {
            if let Action::Count { how, .. } = a {
                match how {
                    How::Shadow => drop(ints(replies.next())?),
                    How::Refund => drop(int(replies.next())?),
                    How::Charge | How::Look => {}
                }
            }
        }
        let mut looks = parse_looks(actions, &mut replies)?;
        let all = admitted.iter().all(|&a| a);
        if !all && admitted.contains(&true) {
            // All or nothing across ALLOWALL calls: take back what the admitted ones logged.
            let mut undo = redis::pipe();
            undo.atomic();
            for ((cost, members), _) in groups.iter().zip(&admitted).filter(|(_, a)| **a) {
                for &m in members {
                    if let Action::Count { key, .. } = &actions[m] {
                        undo.cmd("SLIDINGWINDOW.REFUND")
                            .arg(key)
                            .arg(cost)
                            .arg("AT")
                            .arg(now);
                    }
                }
            }
            let refunds = undo.len();
            add_looks(&mut undo, actions, now);
            let mut replies = self.exec(&undo, tag_key).await?.into_iter();
            for _ in 0..refunds {
                int(replies.next())?;
            }
            looks = parse_looks(actions, &mut replies)?;
        }
        Ok(Outcome {
            admitted: all,
            binding,
            looks,
        })
    }

    /// One MULTI/EXEC; its replies. A cluster gets it on the slot of the request's domain tag.
    async fn exec(&self, pipe: &Pipeline, tag_key: &[u8]) -> RedisResult<Vec<Value>> {
        let n = pipe.len() + 1;
        let reply = match &self.backend {
            Backend::Single(con) => {
                let first = con.clone().req_packed_commands(pipe, n, 1).await;
                match first {
                    // A connection that broke while idle (Redis restarted): the manager has
                    // reconnected, try once on the new one so the first request after a restart
                    // is limited too. Not after a timeout: that call may still run.
                    Err(e) if e.is_connection_dropped() && !e.is_timeout() => {
                        con.clone().req_packed_commands(pipe, n, 1).await
                    }
                    other => other,
                }
            }
            Backend::Cluster(con) => {
                let route = Route::with_slot(Slot::for_key(tag_key), SlotAddr::Master);
                con.clone()
                    .route_pipeline(
                        pipe.clone(),
                        n,
                        1,
                        SingleNodeRoutingInfo::SpecificNode(route),
                    )
                    .await
            }
        }?;
        match reply.into_iter().last() {
            Some(Value::Array(items)) => Ok(items),
            other => Err(RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "EXEC did not answer an array",
                format!("{other:?}"),
            ))),
        }
    }
}

fn allowall(actions: &[Action], members: &[usize], cost: u64, now: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("SLIDINGWINDOW.ALLOWALL");
    cmd.arg(members.len());
    let counted = || {
        members.iter().filter_map(|&m| match &actions[m] {
            Action::Count { key, limit, .. } => Some((key, limit)),
            _ => None,
        })
    };
    for (key, _) in counted() {
        cmd.arg(key);
    }
    cmd.arg(now).arg("COST").arg(cost);
    for (i, (_, limit)) in counted().enumerate() {
        cmd.arg("LIMIT")
            .arg(i + 1)
            .arg(limit.unit.seconds())
            .arg(limit.requests_per_unit);
    }
    cmd
}

/// Two PEEKs per counted descriptor. A PEEK answers as the ALLOW it previews, so one at the
/// descriptor's cost (1 for a zero-hit look) tells whether such a request fits and its wait, and
/// one at `max + 1`, which nothing admits, tells the log as it is: remaining and reset.
fn add_looks(pipe: &mut Pipeline, actions: &[Action], now: u64) {
    for a in actions {
        if let Action::Count {
            key, limit, cost, ..
        } = a
        {
            let max = limit.requests_per_unit;
            for peek_cost in [(*cost).max(1), u64::from(max) + 1] {
                pipe.cmd("SLIDINGWINDOW.PEEK")
                    .arg(key)
                    .arg(limit.unit.seconds())
                    .arg(max)
                    .arg(now)
                    .arg("COST")
                    .arg(peek_cost);
            }
        }
    }
}

fn parse_looks(
    actions: &[Action],
    replies: &mut impl Iterator<Item = Value>,
) -> RedisResult<Vec<Option<Look>>> {
    actions
        .iter()
        .map(|a| {
            if !matches!(a, Action::Count { .. }) {
                return Ok(None);
            }
            let (at_cost, as_is) = (ints(replies.next())?, ints(replies.next())?);
            match (at_cost.as_slice(), as_is.as_slice()) {
                (&[fits, _, _, retry_ms, _], &[_, _, remaining, _, reset_ms]) => Ok(Some(Look {
                    fits: fits == 1,
                    remaining,
                    retry_ms,
                    reset_ms,
                })),
                _ => Err(unexpected("SLIDINGWINDOW.PEEK", &[at_cost, as_is].concat())),
            }
        })
        .collect()
}

fn ints(v: Option<Value>) -> RedisResult<Vec<i64>> {
    let v = v.ok_or_else(|| unexpected("EXEC", &[]))?.extract_error()?;
    Ok(redis::from_redis_value(v)?)
}

fn int(v: Option<Value>) -> RedisResult<i64> {
    let v = v.ok_or_else(|| unexpected("EXEC", &[]))?.extract_error()?;
    Ok(redis::from_redis_value(v)?)
}

fn unexpected(what: &str, reply: &[i64]) -> RedisError {
    RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "unexpected reply",
        format!("{what}: {reply:?}"),
    ))
}
