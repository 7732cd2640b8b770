//! `SLIDINGWINDOW.PEEKALL numkeys key [key ...] now [COST n] LIMIT keyno window max...`:
//! ALLOWALL's answer, changing nothing.

use super::Answer;
use super::request::all_request;
use crate::core::error::Error;
use crate::core::window;
use crate::ffi::{Argv, Ctx, Mode};
use crate::store::{self, Changes, Opened, Storage};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Changes<'a>) -> Result<Answer, Error> {
    let req = all_request(ctx, argv)?;
    let mut keys = open_keys(ctx, argv, req.keys, Mode::Read)?;
    // The logs only read (a missing key reads as an empty one); nothing is propagated.
    let mut logs: Vec<_> = keys
        .iter_mut()
        .zip(fx.keys(req.keys))
        .map(|(key, fx)| key.log(fx, Storage::Zset))
        .collect();
    Ok(Answer::Fields(window::peek_all(&mut logs, &req)?))
}

/// Opens the call's `n` keys (arguments 2 to n + 1), checking each one's type.
pub fn open_keys<'a>(
    ctx: Ctx<'a>,
    argv: Argv<'a>,
    n: usize,
    mode: Mode,
) -> Result<Vec<Opened<'a>>, Error> {
    (0..n)
        .map(|i| {
            let name = argv
                .get(i.saturating_add(2))
                .ok_or(Error::Server("a key argument"))?;
            store::open(ctx, name, mode)
        })
        .collect()
}
