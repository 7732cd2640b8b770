//! The Redis side of one request: one MULTI/EXEC holding the ALLOWALL call(s), the shadow ALLOWs,
//! the REFUNDs and two PEEKs per counted descriptor, all at the service's `now`.

use crate::plan::{self, Action, How};
use slidingwindow_client::{
    Batch, Call, Check, CheckAll, Client, Error, Keyed, Limit, Now, Options, Refund, Reply,
};
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

pub struct Store {
    client: Client,
}

impl Store {
    /// Never waits for Redis: connections are made on first use and remade after failures.
    pub fn new(urls: &[String], cluster: bool) -> Result<Store, Error> {
        let options = Options::from_urls(urls, cluster)?
            .connect_timeout(REDIS_TIMEOUT)
            .response_timeout(REDIS_TIMEOUT);
        Ok(Store {
            client: Client::new(&options)?,
        })
    }

    /// Runs the request's calls at `now` (ms). `charge` false: an enforced limit of 0 refuses
    /// the request, so no ALLOWALL is sent (shadow, refund and look calls still are).
    pub async fn run(&self, actions: &[Action], charge: bool, now: u64) -> Result<Outcome, Error> {
        let groups = if charge {
            plan::groups(actions)
        } else {
            Vec::new()
        };
        let at = Now::Ms(now);
        // Each counted descriptor's limit as the calls carry it.
        let limits = actions
            .iter()
            .map(|a| match a {
                Action::Count { limit, .. } => {
                    Limit::new(limit.unit.seconds(), u64::from(limit.requests_per_unit)).map(Some)
                }
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let counted = |m: usize| match &actions[m] {
            Action::Count { key, .. } => Some(Keyed::new(key, limits[m].as_slice())),
            _ => None,
        };
        let mut batch = Batch::transaction();
        for (cost, members) in &groups {
            let keys: Vec<Keyed> = members.iter().filter_map(|&m| counted(m)).collect();
            batch.call(Call::allow_all(&CheckAll::new(&keys).now(at).cost(*cost))?);
        }
        for (a, limit) in actions.iter().zip(&limits) {
            match a {
                Action::Count {
                    key,
                    cost,
                    how: How::Shadow,
                    ..
                } => {
                    let check = Check::new(key, limit.as_slice()).now(at).cost(*cost);
                    batch.call(Call::allow(&check)?);
                }
                Action::Count {
                    key,
                    cost,
                    how: How::Refund,
                    ..
                } => {
                    batch.refund(&Refund::new(key, *cost).at(at))?;
                }
                _ => {}
            }
        }
        add_looks(&mut batch, actions, &limits, at)?;
        if batch.is_empty() {
            return Ok(Outcome {
                admitted: true,
                binding: Vec::new(),
                looks: vec![None; actions.len()],
            });
        }
        let mut replies = self.client.exec(&batch).await?.into_iter();
        let mut admitted = Vec::with_capacity(groups.len());
        let mut binding = Vec::new();
        for (_, members) in &groups {
            let r = next(&mut replies)?.reply()?;
            admitted.push(r.allowed);
            if !r.allowed {
                // One LIMIT per descriptor: the binding option is the binding member.
                binding.extend(members.get(r.limit).copied());
            }
        }
        for a in actions {
            if let Action::Count { how, .. } = a {
                match how {
                    How::Shadow => drop(next(&mut replies)?.reply()?),
                    How::Refund => drop(next(&mut replies)?.removed()?),
                    How::Charge | How::Look => {}
                }
            }
        }
        let mut looks = parse_looks(actions, &mut replies)?;
        let all = admitted.iter().all(|&a| a);
        if !all && admitted.contains(&true) {
            // All or nothing across ALLOWALL calls: take back what the admitted ones logged.
            let mut undo = Batch::transaction();
            for ((cost, members), _) in groups.iter().zip(&admitted).filter(|(_, a)| **a) {
                for &m in members {
                    if let Action::Count { key, .. } = &actions[m] {
                        undo.refund(&Refund::new(key, *cost).at(at))?;
                    }
                }
            }
            let refunds = undo.len();
            add_looks(&mut undo, actions, &limits, at)?;
            let mut replies = self.client.exec(&undo).await?.into_iter();
            for _ in 0..refunds {
                next(&mut replies)?.removed()?;
            }
            looks = parse_looks(actions, &mut replies)?;
        }
        Ok(Outcome {
            admitted: all,
            binding,
            looks,
        })
    }
}

/// Two PEEKs per counted descriptor. A PEEK answers as the ALLOW it previews, so one at the
/// descriptor's cost (1 for a zero-hit look) tells whether such a request fits and its wait, and
/// one at `max + 1`, which nothing admits, tells the log as it is: remaining and reset.
fn add_looks(
    batch: &mut Batch,
    actions: &[Action],
    limits: &[Option<Limit>],
    at: Now,
) -> Result<(), Error> {
    for (a, limit) in actions.iter().zip(limits) {
        if let (Action::Count { key, cost, .. }, Some(l)) = (a, limit) {
            for peek_cost in [(*cost).max(1), l.max() + 1] {
                let check = Check::new(key, limit.as_slice()).now(at).cost(peek_cost);
                batch.call(Call::peek(&check)?);
            }
        }
    }
    Ok(())
}

fn parse_looks(
    actions: &[Action],
    replies: &mut impl Iterator<Item = Result<slidingwindow_client::Answer, Error>>,
) -> Result<Vec<Option<Look>>, Error> {
    actions
        .iter()
        .map(|a| {
            if !matches!(a, Action::Count { .. }) {
                return Ok(None);
            }
            let (at_cost, as_is): (Reply, Reply) =
                (next(replies)?.reply()?, next(replies)?.reply()?);
            let ms = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            Ok(Some(Look {
                fits: at_cost.allowed,
                remaining: ms(as_is.remaining),
                retry_ms: at_cost.retry_after.as_i64(),
                reset_ms: ms(as_is.reset_after_ms),
            }))
        })
        .collect()
}

/// The next call's answer; a batch answers every call, so a missing one is a bad reply.
fn next<T>(replies: &mut impl Iterator<Item = Result<T, Error>>) -> Result<T, Error> {
    replies
        .next()
        .unwrap_or_else(|| Err(Error::Reply("fewer answers than calls".into())))
}
