//! In-flight limits and costs known after the response, over ALLOW and `REFUND ... AT`. A slot is
//! an ALLOW on a window as long as the longest a request may hold it: its member leaves the window
//! by itself when the hold passes (a holder that dies frees its slot then), and a release takes it
//! back at once. A reservation is an ALLOW of the cost expected, settled when the real cost is
//! known: the difference refunded at the reservation's score, or the excess charged by an ALLOW.

use crate::client::Client;
use crate::error::Error;
use crate::limit::{Limit, Now};
use crate::reply::Reply;
use crate::request::{Check, Refund};
use std::sync::atomic::{AtomicBool, Ordering};

/// One request in flight (`Client::acquire`).
#[derive(Debug)]
pub struct Slot {
    key: Vec<u8>,
    pub reply: Reply,
    held: AtomicBool,
}

/// `n` requests charged before the real cost is known (`Client::reserve`).
#[derive(Debug)]
pub struct Reservation {
    key: Vec<u8>,
    limits: Vec<Limit>,
    n: u64,
    pub reply: Reply,
    open: AtomicBool,
}

/// What `Client::settle` did: `refunded` (reserved, unused), `charged` (used beyond the
/// reservation and admitted) and `overrun` (used beyond it and refused by the limits: spent
/// anyway, reported here, never hidden).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settlement {
    pub refunded: u64,
    pub charged: u64,
    pub overrun: u64,
}

/// The score a call with `DETAIL` logged its members at: its `now`.
fn logged_at(reply: &Reply) -> Result<u64, Error> {
    reply
        .detail
        .as_ref()
        .map(|d| d.now_ms)
        .ok_or_else(|| Error::Reply("a reply without DETAIL's now".into()))
}

impl Slot {
    pub fn allowed(&self) -> bool {
        self.reply.allowed
    }
}

impl Reservation {
    pub fn allowed(&self) -> bool {
        self.reply.allowed
    }
}

impl Client {
    /// A slot among `limit` in flight on `key`, held at most `hold_s` seconds (the longest a
    /// request may take): never more than `limit` in flight. `release` gives it back.
    pub async fn acquire(&self, key: &[u8], limit: u64, hold_s: u64) -> Result<Slot, Error> {
        let limits = [Limit::new(hold_s, limit)?];
        let reply = self.allow(&Check::new(key, &limits).detail(true)).await?;
        let held = AtomicBool::new(reply.allowed);
        Ok(Slot {
            key: key.to_vec(),
            reply,
            held,
        })
    }

    /// Gives `slot` back once (`REFUND key 1 AT` the acquire's `now`): whether a member was taken
    /// back (false when refused, released already, or after the hold).
    pub async fn release(&self, slot: &Slot) -> Result<bool, Error> {
        if !slot.held.swap(false, Ordering::AcqRel) {
            return Ok(false);
        }
        let at = Now::Ms(logged_at(&slot.reply)?);
        Ok(self.refund(&Refund::new(&slot.key, 1).at(at)).await? == 1)
    }

    /// `n` requests charged on `key`'s limits now, for a cost known only later (the tokens of a
    /// response): `settle` with the real cost, or `cancel`.
    pub async fn reserve(
        &self,
        key: &[u8],
        limits: &[Limit],
        n: u64,
    ) -> Result<Reservation, Error> {
        let reply = self
            .allow(&Check::new(key, limits).cost(n).detail(true))
            .await?;
        let open = AtomicBool::new(reply.allowed);
        Ok(Reservation {
            key: key.to_vec(),
            limits: limits.to_vec(),
            n,
            reply,
            open,
        })
    }

    /// Closes `r` with the real cost: `used < n` refunds `n - used` at the reservation's score;
    /// `used > n` charges `used - n` with an ALLOW (`COST used - n`) on the same limits, an
    /// overrun when it does not fit.
    pub async fn settle(&self, r: &Reservation, used: u64) -> Result<Settlement, Error> {
        close(r)?;
        let at = Now::Ms(logged_at(&r.reply)?);
        if used < r.n {
            let refunded = self.refund(&Refund::new(&r.key, r.n - used).at(at)).await?;
            return Ok(Settlement {
                refunded,
                ..Settlement::default()
            });
        }
        if used > r.n {
            let extra = used - r.n;
            let admitted = self
                .allow(&Check::new(&r.key, &r.limits).cost(extra))
                .await?
                .allowed;
            return Ok(if admitted {
                Settlement {
                    charged: extra,
                    ..Settlement::default()
                }
            } else {
                Settlement {
                    overrun: extra,
                    ..Settlement::default()
                }
            });
        }
        Ok(Settlement::default())
    }

    /// Refunds the whole of `r`: the requests taken back.
    pub async fn cancel(&self, r: &Reservation) -> Result<u64, Error> {
        close(r)?;
        let at = Now::Ms(logged_at(&r.reply)?);
        self.refund(&Refund::new(&r.key, r.n).at(at)).await
    }
}

fn close(r: &Reservation) -> Result<(), Error> {
    if r.open.swap(false, Ordering::AcqRel) {
        Ok(())
    } else {
        Err(Error::Invalid(
            "the reservation was refused, or is already settled or cancelled".into(),
        ))
    }
}
