//! `SLIDINGWINDOW.ALLOW key window max now [COST n]`: trim, count, maybe add, expire.

use super::Answer;
use super::config::{self, Storage};
use super::request::request;
use crate::core::error::Error;
use crate::core::window::{self, Request};
use crate::ffi::{Argv, Ctx, Key, Kind, Mode};
use crate::store::compact::CompactStore;
use crate::store::compact::log::CompactLog;
use crate::store::zset::ZsetLog;
use crate::store::{Effects, Store};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Effects<'a>) -> Result<Answer, Error> {
    let req = request(ctx, argv)?;
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = Key::open(ctx, name, Mode::Write)?;
    // A missing key is created in the configured storage; an existing one keeps its own.
    let compact = match key.kind::<CompactLog>() {
        Kind::Empty => config::storage() == Storage::Compact,
        Kind::Zset => false,
        Kind::Native => true,
        Kind::Other => return Err(Error::WrongType),
    };
    if compact {
        decide(ctx, &mut CompactStore::new(&mut key, &mut fx.compact), &req)
    } else {
        decide(ctx, &mut ZsetLog::new(&mut key, &mut fx.zset), &req)
    }
}

/// The window decision on any storage, then the TTL of an admitted call: the longest window from
/// the server's clock.
fn decide<S: Store>(ctx: Ctx<'_>, store: &mut S, req: &Request) -> Result<Answer, Error> {
    let outcome = window::allow(store, req)?;
    if outcome.reply.allowed {
        let window = i64::try_from(req.limits.longest_window_ms()).unwrap_or(i64::MAX);
        let now = i64::try_from(ctx.now_ms()).unwrap_or(i64::MAX);
        store.set_expiry(now.saturating_add(window))?;
    }
    super::stats::allow(req.cost, &outcome);
    Ok(Answer::Fields(outcome.reply))
}
