//! The lease call, in a task of its own, and the lease's end.

use super::{Grant, Inner, Round, bump};
use crate::error::Error;
use crate::limit::{Now, logged_score};
use crate::refusal::Refusal;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;

impl Inner {
    /// The lease call, in its own task so that a caller that stops waiting does not lose its
    /// permits; then, if granted, the lease's end.
    pub(super) async fn round(
        self: Arc<Inner>,
        tx: watch::Sender<Option<Round>>,
        id: u64,
        size: u64,
    ) {
        let sent = Instant::now();
        let now = self.clock.now();
        let server = now == Now::Server;
        bump(&self.stats.calls, 1);
        bump(&self.stats.lease_calls, 1);
        let call = self
            .target
            .call(now, size, Some(self.ms), self.precision, server);
        let result = match call {
            Ok(call) => self.client.call(&call).await,
            Err(e) => Err(e),
        };
        let mut back = Vec::new();
        let mut live = None;
        let outcome = {
            let mut st = self.lock();
            let from = match st.rounds.iter().position(|r| r.id == id) {
                Some(i) => st.rounds.remove(i).map_or(st.handed, |r| r.from),
                None => st.handed,
            };
            let during = st.handed - from;
            st.ahead = during.saturating_mul(2).clamp(self.size / 4, self.size / 2);
            if result.is_ok() {
                st.far.round_trip(sent.elapsed());
            }
            match result {
                Ok(mut reply) if reply.allowed => {
                    bump(&self.stats.leases_granted, 1);
                    let now_ms = match now {
                        Now::Ms(t) => t,
                        Now::Server => reply.detail.take().map_or(0, |d| d.now_ms),
                    };
                    let end_ms = now_ms + self.ms;
                    let logged_ms = logged_score(end_ms, self.precision);
                    let arrived = Instant::now();
                    let deadline = self.deadline(sent, arrived, end_ms);
                    st.far.granted(deadline.saturating_duration_since(arrived));
                    if st.closed || arrived >= deadline {
                        back.push((size, logged_ms));
                        st.refunding += 1;
                        Round::Exact
                    } else {
                        let grant = Grant {
                            id,
                            left: size,
                            end_ms,
                            logged_ms,
                            deadline,
                            sent,
                            now_ms,
                            reply,
                        };
                        let current = st.grant.as_ref().is_some_and(|g| self.usable(g));
                        if current || !st.next.is_empty() {
                            // Taken early: it waits for the ones before it to run out.
                            st.next.push_back(grant);
                        } else if let Some(old) = st.grant.replace(grant).filter(|g| g.left > 0) {
                            // Replaced after its end, before its own task came to it.
                            back.push((old.left, old.logged_ms));
                            st.refunding += 1;
                        }
                        live = Some((id, deadline));
                        Round::Granted
                    }
                }
                Ok(mut reply) => {
                    bump(&self.stats.leases_refused, 1);
                    let now_ms = match now {
                        Now::Ms(t) => t,
                        Now::Server => reply.detail.take().map_or(0, |d| d.now_ms),
                    };
                    // A lease is within every max (checked at construction): a lease that never
                    // fits means the limits are not what this object was made for.
                    match Refusal::new(&reply, now_ms, Instant::now()) {
                        Some(r) => {
                            st.refused = Some(r);
                            Round::Refused
                        }
                        None => {
                            bump(&self.stats.errors, 1);
                            Round::Failed(Error::Reply(format!(
                                "a lease of {size} never fits these limits (retry_after -1)",
                            )))
                        }
                    }
                }
                Err(e) => {
                    bump(&self.stats.errors, 1);
                    Round::Failed(e)
                }
            }
        };
        // Refunds first: whoever waits on this round (close) then finds them done.
        for (n, end_ms) in back {
            let _ = self.refund(n, end_ms).await;
        }
        tx.send_replace(Some(outcome));
        drop(tx);
        if let Some((id, deadline)) = live {
            tokio::time::sleep_until(deadline.into()).await;
            self.expire(id).await;
        }
    }

    /// The lease's end: its unused permits go back.
    async fn expire(&self, id: u64) {
        let unused = {
            let mut st = self.lock();
            let g = if st.grant.as_ref().is_some_and(|g| g.id == id) {
                st.grant.take()
            } else if let Some(i) = st.next.iter().position(|g| g.id == id) {
                st.next.remove(i)
            } else {
                return;
            };
            let g = g.filter(|g| g.left > 0);
            if g.is_some() {
                st.refunding += 1;
                // The traffic did not fill this lease within its duration (far, where leases
                // overlap: the callers' rate fills under half of `size` in a lease's time).
                let far = st.far.far(self.ms).is_some();
                if self.when_busy && (!far || st.far.quiet(self.size, self.ms)) {
                    st.hot = false;
                }
            }
            g
        };
        if let Some(g) = unused {
            let _ = self.refund(g.left, g.logged_ms).await;
        }
    }
}
