//! Where a log is kept. Each storage implements the window's `Log` over an open key, records what
//! it changes, and owns its effects: what it propagates to replicas and the AOF, and which
//! keyspace events it emits.

pub mod compact;
pub mod zset;

use crate::core::error::Error;
use crate::core::window::Log;
use crate::ffi::{Ctx, Key};

/// A storage seen by a command: the log, plus the key's TTL.
pub trait Store: Log {
    /// Sets the key's absolute expiry (ms) after an admission.
    fn set_expiry(&mut self, at_ms: i64) -> Result<(), Error>;
    /// REFUND: removes up to `n` of the newest members scored at or before `through` (None: the
    /// newest, whatever their score); how many went. No trim, the TTL untouched; a key left
    /// empty is deleted.
    fn refund(&mut self, through: Option<u64>, n: u64) -> Result<u64, Error>;
}

/// Everything one call changed, whatever the storage; owned by the dispatcher, outside the
/// unwind boundary, so that what a panicking call did still reaches replicas.
#[derive(Default)]
pub struct Effects<'a> {
    pub zset: zset::Effects<'a>,
    pub compact: compact::Effects<'a>,
}

impl<'a> Effects<'a> {
    /// Propagates and announces every recorded change, once.
    pub fn publish(&mut self, ctx: Ctx<'a>) -> Result<(), Error> {
        self.zset.publish(ctx)?;
        self.compact.publish(ctx)
    }
}

/// The TTL an admitted call leaves.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Expire {
    #[default]
    Untouched,
    /// Already exact (a call in the same ms): nothing to set or send, the event still fires.
    Kept,
    Set(i64),
}

/// Sets `key`'s absolute expiry unless it already is exactly that.
fn expire(key: &mut Key<'_>, at_ms: i64) -> Result<Expire, Error> {
    if key.expire_at() == Some(at_ms) {
        return Ok(Expire::Kept);
    }
    key.set_expire_at(at_ms)?;
    Ok(Expire::Set(at_ms))
}
