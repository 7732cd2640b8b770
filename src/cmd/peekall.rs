//! `SLIDINGWINDOW.PEEKALL numkeys key [key ...] now [COST n] LIMIT keyno window max... [LEASE ms]
//! [PRECISION p] [DETAIL]`: ALLOWALL's answer, changing nothing.

use super::Answer;
use super::request::{open_keys, request};
use crate::core::args;
use crate::core::error::Error;
use crate::core::limits::Scope;
use crate::core::window;
use crate::ffi::{Argv, Ctx, Mode};
use crate::store::{Changes, Storage};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Changes<'a>) -> Result<Answer, Error> {
    let req = request(ctx, argv, args::parse_all)?;
    let n = req.limits.keys();
    let mut keys = open_keys(ctx, argv, n, Mode::Read)?;
    // The logs only read (a missing key reads as an empty one); nothing is propagated.
    let mut logs: Vec<_> = keys
        .iter_mut()
        .zip(fx.keys(n))
        .map(|(key, fx)| key.log(fx, Storage::Zset))
        .collect();
    Ok(Answer::of(window::peek_all(&mut logs, &req)?))
}
