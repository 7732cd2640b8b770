//! `SLIDINGWINDOW.APPLY key "cutoff pexpireat [ts n]..."` (or `"refund through n"`): the
//! resolved change of a call on a compact key, as replicas and the AOF receive it (and as an
//! AOF rewrite writes a compact log). It decides nothing, so it replays the same on any server whatever its clock; a client has no
//! reason to call it.

use super::Answer;
use crate::core::error::Error;
use crate::core::window::Log;
use crate::ffi::{Argv, Ctx, Key, Kind, Mode};
use crate::store::compact::change;
use crate::store::compact::log::CompactLog;
use crate::store::compact::{APPLY_MAX_ADD, CompactStore};
use crate::store::{Effects, Store};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Effects<'a>) -> Result<Answer, Error> {
    if let Some(refund) = change::refund(argv.bytes(2)) {
        let (through, n) = refund?;
        let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
        let mut key = Key::open(ctx, name, Mode::Write)?;
        return match key.kind::<CompactLog>() {
            Kind::Empty => Ok(Answer::count(0)),
            Kind::Native => {
                let mut log = CompactStore::new(&mut key, &mut fx.compact);
                log.verbatim();
                Ok(Answer::count(log.refund(Some(through), n)?))
            }
            Kind::Zset | Kind::Other => Err(Error::WrongType),
        };
    }
    let apply = change::apply(argv.bytes(2), APPLY_MAX_ADD)?;
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = Key::open(ctx, name, Mode::Write)?;
    match key.kind::<CompactLog>() {
        Kind::Empty | Kind::Native => {}
        Kind::Zset | Kind::Other => return Err(Error::WrongType),
    }
    let mut log = CompactStore::new(&mut key, &mut fx.compact);
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
