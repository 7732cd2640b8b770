//! `SLIDINGWINDOW.REFUND key n [AT ts]`: takes back up to `n` logged requests, the newest at or
//! before `ts`. No trim, the TTL untouched.

use super::Answer;
use super::request::{resolve, words};
use crate::core::args::parse_refund;
use crate::core::error::Error;
use crate::ffi::{Argv, Ctx, Mode};
use crate::store::{self, Changes, Store};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Changes<'a>) -> Result<Answer, Error> {
    let args = words(argv, parse_refund)?;
    let through = args.at.map(|at| resolve(ctx.now_ms(), at));
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = store::open(ctx, name, Mode::Write)?;
    // A missing key reads as an empty log: nothing to take back, nothing created.
    let removed = key
        .log(fx.one(), store::default_storage())
        .refund(through, args.n)?;
    super::stats::refund(removed);
    Ok(Answer::count(removed))
}
