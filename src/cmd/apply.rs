//! `SLIDINGWINDOW.APPLY key "cutoff pexpireat [ts n]..."` (or `"refund through n"`): the
//! resolved change of a call on a compact key, as replicas and the AOF receive it (and as an
//! AOF rewrite writes a compact log). It decides nothing, so it replays the same on any server whatever its clock; a client has no
//! reason to call it.

use super::Answer;
use crate::core::error::Error;
use crate::core::window::Log;
use crate::ffi::{Argv, Ctx, Mode};
use crate::store::compact::{APPLY_MAX_ADD, change};
use crate::store::{self, Changes, Slot, Storage, Store};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Changes<'a>) -> Result<Answer, Error> {
    if let Some(refund) = change::refund(argv.bytes(2)) {
        let (through, n) = refund?;
        let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
        let mut key = store::open(ctx, name, Mode::Write)?;
        let Slot::Compact(mut log) = key.log(fx.one(), Storage::Compact) else {
            return Err(Error::WrongType);
        };
        log.verbatim();
        return Ok(Answer::count(log.refund(Some(through), n)?));
    }
    let apply = change::apply(argv.bytes(2), APPLY_MAX_ADD)?;
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = store::open(ctx, name, Mode::Write)?;
    // A compact log, or a missing key that becomes one.
    let Slot::Compact(mut log) = key.log(fx.one(), Storage::Compact) else {
        return Err(Error::WrongType);
    };
    log.verbatim();
    log.trim(apply.cutoff)?;
    for (ts, n) in apply.adds {
        log.add(ts, n)?;
    }
    let count = log.count()?;
    if apply.pexpireat > 0 && count > 0 {
        log.expire_at(apply.pexpireat)?;
    }
    Ok(Answer::count(count))
}
