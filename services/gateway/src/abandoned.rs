//! Calls a request stopped waiting for. Their command may still run (a stalled Redis runs it
//! when it resumes), so the call goes on in the background; if the late reply says admitted,
//! the charge is refunded at the score the call logged. Refused calls logged nothing. A call whose
//! reply never comes (the link broke) cannot be told apart and is only counted.

use slidingwindow_client::Client;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// At most this many abandoned calls wait at once; past it, requests fail without a call, so a
/// long stall does not pile up work for Redis to run when it resumes.
pub const MAX_WAITING: u64 = 4096;

#[derive(Default)]
pub struct Abandoned {
    waiting: AtomicU64,
    refunded: AtomicU64,
    not_charged: AtomicU64,
    unknown: AtomicU64,
}

/// How an abandoned call ended.
pub enum Outcome {
    /// Admitted: these keys were charged by a call with this `now` (DETAIL's) and `--precision`.
    Admitted(Vec<Vec<u8>>, u64, Option<u64>),
    /// Refused, or answered with an error: nothing was logged.
    NotCharged,
    /// No reply (the link broke, or none came within the reply wait).
    Unknown,
}

impl Abandoned {
    pub fn full(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) >= MAX_WAITING
    }

    /// Lets `call` finish in the background and settles what it did. When the last waiting call
    /// is settled, one line on stderr sums them up.
    pub fn watch(
        self: &Arc<Self>,
        client: Client,
        call: impl Future<Output = Outcome> + Send + 'static,
    ) {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let this = self.clone();
        tokio::spawn(async move {
            match call.await {
                Outcome::Admitted(keys, now_ms, precision) => {
                    match client.refund_logged(&keys, 1, now_ms, precision).await {
                        Ok(_) => this.refunded.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            eprintln!("gateway: refund of an abandoned call failed: {e}");
                            this.unknown.fetch_add(1, Ordering::Relaxed)
                        }
                    }
                }
                Outcome::NotCharged => this.not_charged.fetch_add(1, Ordering::Relaxed),
                Outcome::Unknown => this.unknown.fetch_add(1, Ordering::Relaxed),
            };
            if this.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
                this.report();
            }
        });
    }

    fn report(&self) {
        let refunded = self.refunded.swap(0, Ordering::Relaxed);
        let not_charged = self.not_charged.swap(0, Ordering::Relaxed);
        let unknown = self.unknown.swap(0, Ordering::Relaxed);
        eprintln!(
            "gateway: {} calls abandoned after the request's deadline have ended: \
             {refunded} admitted and refunded, {not_charged} refused or failed, \
             {unknown} without a reply (not refunded)",
            refunded + not_charged + unknown
        );
    }
}
