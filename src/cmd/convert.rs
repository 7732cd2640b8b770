//! `SLIDINGWINDOW.CONVERT key zset|compact`: moves one key's log to the other storage, in place
//! and atomically, keeping every timestamp and the TTL. Replicas and the AOF see what it is: the
//! old value unlinked (`UNLINK`), the log written anew (`ZADD`s or `APPLY`s), the TTL set again
//! (`PEXPIREAT`); the keyspace events are the same: `del`, `zadd` or `slidingwindow.add`, `expire`.

use super::Answer;
use super::config::Storage;
use crate::core::error::{Error, token};
use crate::ffi::{Argv, Class, Ctx, Key, Kind, Mode};
use crate::store::Effects;
use crate::store::compact::log::CompactLog;
use crate::store::{compact, zset};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, _fx: &mut Effects<'a>) -> Result<Answer, Error> {
    let target = match argv.bytes(2) {
        w if w.eq_ignore_ascii_case(b"zset") => Storage::Zset,
        w if w.eq_ignore_ascii_case(b"compact") => Storage::Compact,
        w => return Err(Error::BadStorage(token(w))),
    };
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = Key::open(ctx, name, Mode::Write)?;
    let (from, log) = match key.kind::<CompactLog>() {
        Kind::Empty => return Err(Error::NoSuchKey),
        Kind::Other => return Err(Error::WrongType),
        Kind::Zset if target == Storage::Zset => return Ok(Answer::count(key.len())),
        Kind::Zset => (Storage::Zset, zset::export(&mut key)?),
        Kind::Native => {
            let log = key.native::<CompactLog>();
            if target == Storage::Compact {
                return Ok(Answer::count(log.map_or(0, |l| l.len())));
            }
            // Unlinking the key frees its value: the log goes on as a copy.
            (Storage::Compact, log.cloned().unwrap_or_default())
        }
    };
    // Everything is read and checked; from here on the key changes, and each step is sent on.
    let len = log.len();
    let ttl = key.expire_at();
    key.unlink()?;
    ctx.replicate_key(c"UNLINK", name)?;
    ctx.notify(Class::Generic, c"del", name);
    match from {
        Storage::Zset => compact::import(ctx, &mut key, log)?,
        Storage::Compact => zset::import(ctx, &mut key, &log)?,
    }
    if let Some(at) = ttl {
        key.set_expire_at(at)?;
        ctx.replicate_key_ints(c"PEXPIREAT", name, &[at])?;
        ctx.notify(Class::Generic, c"expire", name);
    }
    ctx.signal_modified(name);
    Ok(Answer::count(len))
}
