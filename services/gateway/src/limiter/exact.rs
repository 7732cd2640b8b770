//! The exact calls: the command on a request's keys at Redis's clock, its reply read as a
//! decision, waited for until the request's deadline, and undone when the request is not admitted.

use super::{Decision, Keys, Limiter, PARTS, Part, REQUEST_DEADLINE, Verdict};
use crate::abandoned::Outcome;
use slidingwindow_client::{Batch, Call, Check, CheckAll, Error, Keyed, Ledger, Now, Reply};
use std::time::Instant;

impl Limiter {
    /// The exact call on `parts`' keys at Redis's clock: `SLIDINGWINDOW.ALLOW key w0 max0 *
    /// [LIMIT w max]... DETAIL` for one key, `SLIDINGWINDOW.ALLOWALL n key... * DETAIL LIMIT keyno
    /// w max...` for several.
    pub(super) fn call(&self, keys: &Keys, parts: &[Part]) -> Result<Call, Error> {
        let now = Now::Server;
        let empty: &[u8] = b"";
        let mut keyed = [Keyed::new(empty, &[]); 3];
        let mut n = 0;
        for (slot, &p) in keyed.iter_mut().zip(parts) {
            *slot = Keyed::new(keys.get(p).unwrap_or(empty), self.limits_of(p));
            n += 1;
        }
        match &keyed[..n] {
            [one] => {
                let check = Check::new(one.key, one.limits).now(now);
                Call::allow(&check.precision(self.precision).detail(true))
            }
            all => {
                let check = CheckAll::new(all).now(now).precision(self.precision);
                Call::allow_all(&check.detail(true))
            }
        }
    }

    /// The decision of a reply to the call on `parts`, its binding limit named among all limits.
    pub(super) fn decision(&self, parts: &[Part], reply: &Reply) -> Decision {
        let mut d = Decision::from(reply);
        let mut rest = d.limit;
        for &p in parts {
            let n = self.limits_of(p).len();
            if rest < n {
                d.limit = self.offsets[p as usize] + rest;
                break;
            }
            rest -= n;
        }
        d
    }

    /// The exact call on `parts`, waited for until the request's deadline: its reply and the
    /// `now` Redis used. A call abandoned then goes on in the background and is refunded (at its
    /// `now`) if it turns out admitted.
    pub(super) async fn exact(
        &self,
        keys: &Keys,
        parts: &[Part],
        deadline: Instant,
    ) -> Result<(Reply, u64), Verdict> {
        let call = self.call(keys, parts).map_err(|e| self.error(&e))?;
        let client = self.client.clone();
        let mut call = Box::pin(async move { client.call(&call).await });
        let reply = match tokio::time::timeout_at(deadline.into(), &mut call).await {
            Ok(reply) => reply,
            Err(_) => {
                let charged: Vec<Vec<u8>> = parts
                    .iter()
                    .filter_map(|&p| keys.get(p).map(<[u8]>::to_vec))
                    .collect();
                let precision = self.precision;
                self.abandoned.watch(self.client.clone(), async move {
                    match call.await {
                        Ok(r) if r.allowed => match r.detail {
                            Some(d) => Outcome::Admitted(charged, d.now_ms, precision),
                            None => Outcome::Unknown,
                        },
                        Ok(_) => Outcome::NotCharged,
                        // The link failed: the command may or may not have run.
                        Err(e) if e.may_have_run() => Outcome::Unknown,
                        Err(_) => Outcome::NotCharged,
                    }
                });
                return Err(self.failed(&format!(
                    "no reply within {REQUEST_DEADLINE:?} (the call is refunded if it ran)"
                )));
            }
        };
        match reply {
            Ok(mut r) => {
                self.answered();
                // DETAIL was asked for: the reply parser checked it is there.
                let now_ms = r.detail.take().map_or(0, |d| d.now_ms);
                Ok((r, now_ms))
            }
            Err(e) => Err(self.error(&e)),
        }
    }

    /// A request that will not be admitted after all: its leases' permits go back, and the keys
    /// its exact calls charged are refunded at the `now` each call logged them at.
    pub(super) async fn undo(&self, keys: &Keys, ledger: &mut Ledger) {
        if let Err(e) = ledger
            .undo(&self.client, Batch::pipeline, |i| keys.get(PARTS[i]))
            .await
        {
            eprintln!("gateway: refund failed: {e}");
        }
    }
}
