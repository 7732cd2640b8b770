//! The Redis glue: everything that talks to the server lives below here.

mod api;
mod command;
mod zset;

use api::{Ctx, Spec};
use command::{Command, dispatch};
use redis_module::raw;
use std::os::raw::c_int;

extern "C" fn allow_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(ctx, argv, argc, Command::Allow)
}

extern "C" fn peek_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(ctx, argv, argc, Command::Peek)
}

#[cfg(feature = "panic-test")]
extern "C" fn panic_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(ctx, argv, argc, Command::Panic)
}

/// Commands the module replicates its effects with, or calls in place.
const NEEDED: [&std::ffi::CStr; 7] = [
    c"ZADD",
    c"ZREM",
    c"ZREMRANGEBYSCORE",
    c"UNLINK",
    c"PEXPIREAT",
    c"ZRANGE",
    c"ZCOUNT",
];

/// Registers the commands. `write deny-oom` for ALLOW (refused on replicas and when out of memory),
/// `readonly` for PEEK; both take their key at position 1, declared with a key spec whose access
/// flags let ACL read-only key patterns (`%R~`) admit PEEK and refuse ALLOW.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    // SAFETY: Redis passes the load callback its context.
    let ctx = unsafe { Ctx::from_raw(ctx) }.ok_or("no module context")?;
    let missing = api::missing_functions();
    if !missing.is_empty() {
        return Err(format!(
            "this server lacks module API functions the module needs (Redis >= 7.0 has them): {}",
            missing.join(", ")
        ));
    }
    // Effects go to replicas and the AOF as these commands, and big sets are read through them.
    for name in NEEDED {
        if !ctx.command_exists(name).map_err(|e| e.to_string())? {
            return Err(format!(
                "the server has no {} command (renamed or disabled?): slidingwindow needs it",
                name.to_string_lossy()
            ));
        }
    }
    // Only calls that change the key should wake WATCH; we signal those ourselves.
    ctx.set_module_options(raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);
    let mut specs = vec![
        Spec {
            name: c"slidingwindow.allow",
            handler: allow_command,
            flags: c"write deny-oom",
            // It trims and adds: an update (Redis allows one of insert, delete, update).
            key_flags: raw::REDISMODULE_CMD_KEY_RW
                | raw::REDISMODULE_CMD_KEY_ACCESS
                | raw::REDISMODULE_CMD_KEY_UPDATE,
            summary: c"Trims the sliding-window log, counts it, and logs the request if it fits",
            arity: -5,
        },
        Spec {
            name: c"slidingwindow.peek",
            handler: peek_command,
            flags: c"readonly",
            key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
            summary: c"Answers what SLIDINGWINDOW.ALLOW would, changing nothing",
            arity: -5,
        },
    ];
    #[cfg(feature = "panic-test")]
    specs.push(Spec {
        name: c"slidingwindow.debugpanic",
        handler: panic_command,
        flags: c"readonly",
        key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        summary: c"Panics on purpose (test builds only)",
        arity: -1,
    });
    for spec in specs.drain(..) {
        ctx.create_command(&spec)
            .map_err(|what| format!("{what} for {}", spec.name.to_string_lossy()))?;
    }
    Ok(())
}
