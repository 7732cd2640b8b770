//! `SLIDINGWINDOW.ALLOW key window max now [COST n]`: trim, count, maybe add, expire.

use super::Answer;
use super::request::request;
use crate::core::error::Error;
use crate::core::window::{self, Request};
use crate::ffi::{Argv, Ctx, Key, Kind, Mode};
use crate::store::zset::ZsetLog;
use crate::store::{Effects, Store};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Effects<'a>) -> Result<Answer, Error> {
    let req = request(ctx, argv)?;
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = Key::open(ctx, name, Mode::Write)?;
    match key.kind() {
        Kind::Empty | Kind::Zset => decide(ctx, &mut ZsetLog::new(&mut key, &mut fx.zset), &req),
        Kind::Other => Err(Error::WrongType),
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
    Ok(Answer::Fields(outcome.reply))
}
