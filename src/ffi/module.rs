//! The module's entry point, `RedisModule_OnLoad`, written out instead of made by the
//! `redis_module!` macro: the macro also registers the crate's global defrag callbacks, and on
//! Redis 7.0, which lacks `RedisModule_RegisterDefragCallbacks`, it logs a warning at every start
//! though this module registers none. What the macro did that this module uses is here: the API
//! table, the detached context, the arguments, then `init`.

use redis_module::{Context, RedisString, Status, raw};
use std::os::raw::c_int;

/// Defines `RedisModule_OnLoad` for a module named `$name`, version `$version`, started by
/// `$init` (as the macro's `init`).
#[macro_export]
macro_rules! entry_point {
    ($name:expr, $version:expr, $init:path) => {
        /// Called by the server once, when it loads the module.
        ///
        /// # Safety
        /// Only the server calls it, with its load context and arguments.
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn RedisModule_OnLoad(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::os::raw::c_int,
        ) -> std::os::raw::c_int {
            let (name, version, init) = ($name, $version, $init);
            // SAFETY: passed on as the server gave them.
            unsafe { $crate::ffi::on_load(ctx, argv, argc, name, version, init) }
        }
    };
}

/// Starts the module: fills the API table, then runs `init`.
///
/// # Safety
/// `ctx`, `argv` and `argc` are the server's, from `RedisModule_OnLoad`.
pub unsafe fn on_load(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    name: &'static std::ffi::CStr,
    version: c_int,
    init: fn(&Context, &[RedisString]) -> Status,
) -> c_int {
    // The name is static: nothing may be allocated before the allocator's API is filled in.
    // SAFETY: the load context; the server copies the name.
    let filled = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            name.as_ptr(),
            version,
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if filled == raw::Status::Err as c_int {
        return raw::Status::Err as c_int;
    }
    let context = Context::new(ctx);
    // The crate's logging without a context reads this one.
    let _ = redis_module::MODULE_CONTEXT.set_context(&context);
    let args = redis_module::decode_args(ctx, argv, argc);
    match init(&context, &args) {
        Status::Ok => raw::Status::Ok as c_int,
        Status::Err => raw::Status::Err as c_int,
    }
}
