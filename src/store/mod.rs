//! Where a log is kept. Each storage implements the window's `Log` over an open key, records what
//! it changes, and owns its effects: what it propagates to replicas and the AOF, and which
//! keyspace events it emits.

pub mod zset;

use crate::core::error::Error;
use crate::core::window::Log;
use crate::ffi::Ctx;

/// A storage seen by a command: the log, plus the key's TTL.
pub trait Store: Log {
    /// Sets the key's absolute expiry (ms) after an admission.
    fn set_expiry(&mut self, at_ms: i64) -> Result<(), Error>;
}

/// Everything one call changed, whatever the storage; owned by the dispatcher, outside the
/// unwind boundary, so that what a panicking call did still reaches replicas.
#[derive(Default)]
pub struct Effects<'a> {
    pub zset: zset::Effects<'a>,
}

impl<'a> Effects<'a> {
    /// Propagates and announces every recorded change, once.
    pub fn publish(&mut self, ctx: Ctx<'a>) -> Result<(), Error> {
        self.zset.publish(ctx)
    }
}
