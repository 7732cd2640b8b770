//! The Redis glue: everything that talks to the server lives below here.

mod api;
mod command;
mod zset;

use command::{Command, dispatch};
use redis_module::raw;
use std::ffi::CStr;
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

type Handler =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// Registers the commands. `write deny-oom` for ALLOW (refused on replicas and when out of memory),
/// `readonly` for PEEK; both take their key at position 1.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    let missing = api::missing_functions();
    if !missing.is_empty() {
        return Err(format!(
            "this server lacks module API functions the module needs: {}",
            missing.join(", ")
        ));
    }
    if let Some(set_options) = unsafe { raw::RedisModule_SetModuleOptions } {
        // Only calls that change the key should wake WATCH; we signal those ourselves.
        unsafe {
            set_options(
                ctx,
                raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int,
            )
        };
    }
    let mut commands: Vec<(&CStr, Handler, &CStr, c_int)> = vec![
        (c"slidingwindow.allow", allow_command, c"write deny-oom", 1),
        (c"slidingwindow.peek", peek_command, c"readonly", 1),
    ];
    #[cfg(feature = "panic-test")]
    commands.push((c"slidingwindow.debugpanic", panic_command, c"readonly", 0));
    for (name, handler, flags, key) in commands.drain(..) {
        let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
            return Err("RedisModule_CreateCommand is missing".into());
        };
        let r = unsafe {
            create(
                ctx,
                name.as_ptr(),
                Some(handler),
                flags.as_ptr(),
                key,
                key,
                key,
            )
        };
        if r != raw::REDISMODULE_OK as c_int {
            return Err(format!(
                "could not create command {}",
                name.to_string_lossy()
            ));
        }
    }
    Ok(())
}
