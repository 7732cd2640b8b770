//! What a lease object limits: one key and its limits, or several keys (an ALLOWALL).

use crate::client::Client;
use crate::error::Error;
use crate::limit::{Limit, Now};
use crate::request::{Call, Check, CheckAll, Keyed, Refund};

/// The key and its limits, or several keys (an ALLOWALL: a permit counts on every key).
pub(super) enum Target {
    One(Vec<u8>, Vec<Limit>),
    All(Vec<(Vec<u8>, Vec<Limit>)>),
}

impl Target {
    pub(super) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        let (one, all) = match self {
            Target::One(key, _) => (Some(key.as_slice()), None),
            Target::All(keys) => (None, Some(keys.iter().map(|(k, _)| k.as_slice()))),
        };
        one.into_iter().chain(all.into_iter().flatten())
    }

    pub(super) fn limits(&self) -> impl Iterator<Item = &Limit> {
        let (one, all) = match self {
            Target::One(_, limits) => (Some(limits.iter()), None),
            Target::All(keys) => (None, Some(keys.iter().flat_map(|(_, l)| l.iter()))),
        };
        one.into_iter().flatten().chain(all.into_iter().flatten())
    }

    pub(super) fn call(
        &self,
        now: Now,
        cost: u64,
        lease: Option<u64>,
        precision: Option<u64>,
        detail: bool,
    ) -> Result<Call, Error> {
        // The call's options, on a Check or a CheckAll.
        macro_rules! options {
            ($c:expr) => {{
                let c = $c.now(now).cost(cost).precision(precision).detail(detail);
                match lease {
                    Some(ms) => c.lease(ms),
                    None => c,
                }
            }};
        }
        match self {
            Target::One(key, limits) => Call::allow(&options!(Check::new(key, limits))),
            Target::All(keys) => {
                let keyed: Vec<Keyed<'_>> = keys
                    .iter()
                    .map(|(key, limits)| Keyed { key, limits })
                    .collect();
                Call::allow_all(&options!(CheckAll::new(&keyed)))
            }
        }
    }

    /// `REFUND key n AT at` on every key.
    pub(super) async fn refund(&self, client: &Client, n: u64, at: u64) -> Result<u64, Error> {
        match self {
            Target::One(key, _) => client.refund(&Refund::new(key, n).at(Now::Ms(at))).await,
            Target::All(keys) => {
                let names: Vec<&[u8]> = keys.iter().map(|(key, _)| key.as_slice()).collect();
                client.refund_all(&names, n, Now::Ms(at)).await
            }
        }
    }
}
