//! `SLIDINGWINDOW.CONVERT key zset|compact`: moves one key's log to the other storage, in place
//! and atomically, keeping every timestamp and the TTL. Replicas and the AOF see what it is: the
//! old value unlinked (`UNLINK`), the log written anew (`ZADD`s or `APPLY`s), the TTL set again;
//! the keyspace events are the same: `del`, `zadd` or `slidingwindow.add`, `expire`.

use super::Answer;
use crate::core::error::{Error, token};
use crate::ffi::{Argv, Ctx, Mode};
use crate::store::{self, Changes, Storage};

pub fn run<'a>(ctx: Ctx<'a>, argv: Argv<'a>, fx: &mut Changes<'a>) -> Result<Answer, Error> {
    let word = argv.bytes(2);
    let target = Storage::parse(word).ok_or_else(|| Error::BadStorage(token(word)))?;
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = store::open(ctx, name, Mode::Write)?;
    key.convert(fx.one(), target).map(Answer::count)
}
