//! Reserve, then settle (`--reserve N --settle-header NAME`): each request is charged N on its
//! identity's `--limit`s before it is proxied (the client crate's `reserve`, an ALLOW of `COST N`
//! with DETAIL); the upstream's response header NAME carries its real cost `used`, and the
//! reservation is settled with it (`settle`): `N - used` refunded at the reservation's logged
//! score when less was used, the excess charged by an ALLOW of `COST used - N` when more (an
//! overrun, counted in `/metrics`, when the limits refuse it). A response without a valid header
//! keeps the reservation.

use super::{Decision, Limiter, Verdict};
use crate::metrics::Metrics;
use axum::http::{HeaderMap, HeaderName};
use slidingwindow_client::{ErrorLog, Reservation};
use std::sync::Arc;

/// `--reserve` and `--settle-header`, and what settling counts.
pub struct Settle {
    n: u64,
    header: HeaderName,
    metrics: Arc<Metrics>,
    log: ErrorLog,
}

impl Settle {
    pub fn new(n: u64, header: HeaderName, metrics: Arc<Metrics>) -> Settle {
        let log = ErrorLog::new("gateway", &format!("the upstream's {header} header"));
        Settle {
            n,
            header,
            metrics,
            log,
        }
    }

    /// The real cost the response reports: a decimal integer.
    fn used(&self, headers: &HeaderMap) -> Result<u64, String> {
        let v = headers
            .get(&self.header)
            .ok_or_else(|| "absent".to_string())?;
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("not an integer: {v:?}"))
    }
}

impl Limiter {
    /// The reservation of `settle`'s N on `identity`'s key and `--limit`s.
    pub async fn reserve(&self, settle: &Settle, identity: &[u8]) -> Verdict {
        let keys = self.keys(identity, None);
        match self
            .client
            .reserve(keys.first(), &self.parts[0], settle.n)
            .await
        {
            Ok(r) => {
                self.answered();
                let d = Decision::from(&r.reply);
                if r.allowed() {
                    Verdict::Reserved(d, Box::new(r))
                } else {
                    Verdict::Refuse(d)
                }
            }
            Err(e) => self.error(&e),
        }
    }

    /// Settles `r` with the cost the response's `headers` report, in a task of its own (the
    /// response does not wait for it); without a valid header the reservation is kept.
    pub fn settle_reservation(
        self: &Arc<Self>,
        settle: &Arc<Settle>,
        r: Box<Reservation>,
        headers: &HeaderMap,
    ) {
        let used = match settle.used(headers) {
            Ok(used) => used,
            Err(why) => {
                Metrics::add(&settle.metrics.settle_kept, 1);
                settle.log.failed("keeping the reservation", &why);
                return;
            }
        };
        settle.log.succeeded();
        let (limiter, settle) = (self.clone(), settle.clone());
        self.spawn(async move {
            match limiter.client.settle(&r, used).await {
                Ok(s) => {
                    let m = &settle.metrics;
                    Metrics::add(&m.settle_refunded, s.refunded);
                    Metrics::add(&m.settle_charged, s.charged);
                    Metrics::add(&m.settle_overrun, s.overrun);
                    Metrics::add(&m.settle_overruns, u64::from(s.overrun > 0));
                }
                Err(e) => eprintln!("gateway: settling a reservation failed: {e}"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_cost_is_a_decimal_header() {
        let s = Settle::new(
            10,
            HeaderName::from_static("x-tokens"),
            Arc::new(Metrics::new(1)),
        );
        let mut h = HeaderMap::new();
        assert_eq!(s.used(&h), Err("absent".to_string()));
        h.insert("x-tokens", HeaderValue::from_static(" 42 "));
        assert_eq!(s.used(&h), Ok(42));
        for bad in ["-1", "4.5", "", "x"] {
            h.insert("x-tokens", HeaderValue::from_static(bad));
            assert!(s.used(&h).is_err(), "{bad}");
        }
    }
}
