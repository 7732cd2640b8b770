//! `SLIDINGWINDOW.PEEKALL numkeys key [key ...] now [COST n] LIMIT keyno window max... [LEASE ms]
//! [PRECISION p] [DETAIL]`: ALLOWALL's answer, changing nothing.

use super::Answer;
use super::request::{all_request, open_keys};
use crate::core::error::Error;
use crate::core::window;
use crate::ffi::{Argv, Ctx, Mode};
use crate::store::{Changes, Storage};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Changes<'a>) -> Result<Answer, Error> {
    let req = all_request(ctx, argv)?;
    let mut keys = open_keys(ctx, argv, req.keys, Mode::Read)?;
    // The logs only read (a missing key reads as an empty one); nothing is propagated.
    let mut logs: Vec<_> = keys
        .iter_mut()
        .zip(fx.keys(req.keys))
        .map(|(key, fx)| key.log(fx, Storage::Zset))
        .collect();
    Ok(Answer::of(window::peek_all(&mut logs, &req)?))
}
