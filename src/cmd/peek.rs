//! `SLIDINGWINDOW.PEEK key window max now [COST n] [LIMIT window max]... [LEASE ms] [PRECISION p]
//! [DETAIL]`: ALLOW's answer, changing nothing.

use super::Answer;
use super::request::request;
use crate::core::args;
use crate::core::error::Error;
use crate::core::window;
use crate::ffi::{Argv, Ctx, Mode};
use crate::store::{self, Changes, Storage};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Changes<'a>) -> Result<Answer, Error> {
    let req = request(ctx, argv, args::parse)?;
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = store::open(ctx, name, Mode::Read)?;
    // The log only reads (a missing key reads as an empty one); `fx` stays empty, so nothing is
    // propagated.
    let outcome = window::peek(&mut key.log(fx.one(), Storage::Zset), &req)?;
    Ok(Answer::of(outcome))
}
