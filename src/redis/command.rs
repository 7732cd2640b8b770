//! The two commands: parse, run the window logic on the sorted set, reply, propagate the effects.

use super::api::{Argv, Ctx, Key, Kind};
use super::zset::{Effects, Trimmed, ZsetLog};
use crate::args::{self, Args, Now};
use crate::error::{Error, MAX_ADD_PER_CALL, MAX_EXACT};
use crate::reply::Reply;
use crate::window::{self, Request};
use redis_module::raw;
use std::os::raw::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Allow,
    Peek,
    /// Panics on purpose, to prove panics are contained; only in builds with `panic-test`.
    #[cfg(feature = "panic-test")]
    Panic,
}

/// Runs one call with panics contained: a bug answers an error instead of aborting the server.
pub fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    command: Command,
) -> c_int {
    // SAFETY: Redis hands the command its own context and arguments for the length of the call.
    let Some(ctx) = (unsafe { Ctx::from_raw(ctx) }) else {
        return raw::REDISMODULE_ERR as c_int;
    };
    let argv = unsafe { Argv::from_raw(argv, argc) };
    let result = catch_unwind(AssertUnwindSafe(|| execute(ctx, &argv, command)));
    let reply = match result {
        Ok(Ok(reply)) => ctx.reply_array(&reply.fields()),
        Ok(Err(err)) => Err(err),
        Err(_) => Err(Error::Panic),
    };
    if let Err(err) = reply {
        ctx.reply_error(&err);
    }
    raw::REDISMODULE_OK as c_int
}

fn execute(ctx: Ctx, argv: &Argv, command: Command) -> Result<Reply, Error> {
    #[cfg(feature = "panic-test")]
    if command == Command::Panic {
        std::panic::panic_any("slidingwindow.debugpanic: a deliberate panic");
    }
    let args = parse(argv)?;
    let now = match args.now {
        Now::At(ms) => ms,
        Now::Server => ctx.now_ms()?.min(MAX_EXACT),
    };
    let req = Request {
        window_ms: args.window_ms,
        max: args.max,
        now,
        cost: args.cost,
    };
    let name = argv.get(1).ok_or(Error::Server("the key argument"))?;
    let mut key = Key::open(ctx, name, command == Command::Allow)?;
    if key.kind()? == Kind::Other {
        return Err(Error::WrongType);
    }
    match command {
        Command::Peek => admissible(window::peek(&mut ZsetLog::new(&mut key), &req)?, &req),
        Command::Allow => allow(ctx, &mut key, &req),
        #[cfg(feature = "panic-test")]
        Command::Panic => Err(Error::Panic),
    }
}

fn allow(ctx: Ctx, key: &mut Key, req: &Request) -> Result<Reply, Error> {
    let mut log = ZsetLog::new(key);
    // Refuse an oversized batch before changing anything.
    if req.cost > MAX_ADD_PER_CALL && req.cost <= req.max {
        admissible(window::peek(&mut log, req)?, req)?;
    }
    let outcome = window::allow(&mut log, req);
    let effects = log.into_effects();
    // Whatever happened, replicas and the AOF must get every change made.
    propagate(ctx, key, &effects, req)?;
    outcome.map(|o| o.reply)
}

/// An admission that would add more members than one call may is an error, for PEEK as for ALLOW.
fn admissible(reply: Reply, req: &Request) -> Result<Reply, Error> {
    if reply.allowed && req.cost > MAX_ADD_PER_CALL {
        Err(Error::TooManyMembers(req.cost))
    } else {
        Ok(reply)
    }
}

/// Sends the call's effects to replicas and the AOF, sets the TTL, and emits the keyspace events the
/// seed's script would (`zremrangebyscore`, `del`, `zadd`, `expire`), in its order.
fn propagate(ctx: Ctx, key: &mut Key, effects: &Effects, req: &Request) -> Result<(), Error> {
    let name = key.name;
    let added = effects.added.as_slice();
    match effects.trimmed {
        Trimmed::Nothing => {}
        Trimmed::Named => {
            ctx.replicate_remove(&name, effects.removed.as_slice())?;
            ctx.notify(raw::REDISMODULE_NOTIFY_ZSET, c"zremrangebyscore", &name)?;
        }
        // ZREMRANGEBYSCORE ran in place and emitted its own event.
        Trimmed::Range => ctx.replicate_trim(&name, req.cutoff())?,
        Trimmed::All => {
            ctx.replicate_unlink(&name)?;
            ctx.notify(raw::REDISMODULE_NOTIFY_ZSET, c"zremrangebyscore", &name)?;
            ctx.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del", &name)?;
        }
    }
    if !added.is_empty() {
        let window = i64::try_from(req.window_ms).unwrap_or(i64::MAX);
        let at = i64::try_from(ctx.now_ms()?)
            .unwrap_or(i64::MAX)
            .saturating_add(window);
        ctx.replicate_add(&name, req.now, added)?;
        ctx.notify(raw::REDISMODULE_NOTIFY_ZSET, c"zadd", &name)?;
        // Calls in the same ms on a busy key find the TTL already exact: nothing to set or send.
        if key.expire_at()? != Some(at) {
            key.set_expire_at(at)?;
            ctx.replicate_expire_at(&name, at)?;
        }
        ctx.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", &name)?;
    }
    if effects.trimmed != Trimmed::Nothing || !added.is_empty() {
        ctx.signal_modified(&name)?;
    }
    Ok(())
}

/// Parses without allocating for any well-formed call.
fn parse(argv: &Argv) -> Result<Args, Error> {
    const INLINE: usize = 8;
    if argv.len() > INLINE {
        let words = (0..argv.len())
            .map(|i| argv.bytes(i))
            .collect::<Result<Vec<_>, _>>()?;
        return args::parse(&words);
    }
    let mut words: [&[u8]; INLINE] = [&[]; INLINE];
    for (i, slot) in words.iter_mut().enumerate().take(argv.len()) {
        *slot = argv.bytes(i)?;
    }
    args::parse(words.get(..argv.len()).unwrap_or(&[]))
}
