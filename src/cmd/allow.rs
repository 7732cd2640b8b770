//! `SLIDINGWINDOW.ALLOW key window max now [COST n] [LIMIT window max]... [LEASE ms] [PRECISION p]
//! [DETAIL]`: trim, count, maybe add, expire.

use super::Answer;
use super::request::request;
use crate::core::args;
use crate::core::error::Error;
use crate::core::window::{self, Request};
use crate::ffi::{Argv, Ctx, Mode};
use crate::store::{self, Changes, Store};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Changes<'a>) -> Result<Answer, Error> {
    let req = request(ctx, argv, args::parse)?;
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = store::open(ctx, name, Mode::Write)?;
    // A missing key is created in the configured storage; an existing one keeps its own.
    decide(&mut key.log(fx.one(), store::default_storage()), &req, argv)
}

/// The window decision on any storage, then the TTL of an admitted call: the longest window (and
/// how far ahead of `now` its members are scored, and the lateness) from the server's clock as
/// the call read it, unless the key already expires later; a refusal counts for the key (argument
/// 1) in `SLIDINGWINDOW.TOP`, its name read only then.
fn decide<S: Store>(store: &mut S, req: &Request, argv: Argv<'_>) -> Result<Answer, Error> {
    let outcome = window::allow(store, req)?;
    if outcome.reply.allowed {
        store.set_expiry(req.expire_at(0))?;
    } else {
        super::top::refused(argv.bytes(1));
    }
    super::stats::allow(req.cost, &outcome);
    Ok(Answer::of(outcome))
}
