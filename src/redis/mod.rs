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

/// One command to register.
struct Spec {
    name: &'static CStr,
    handler: Handler,
    flags: &'static CStr,
    /// What the command does with its key, for ACL key permissions.
    key_flags: u32,
    summary: &'static CStr,
    /// Redis checks it before calling us: -5 is `key window max now` and more.
    arity: c_int,
}

const COMPLEXITY: &CStr = c"O(log N + M): N members in the window, M members trimmed";

/// Registers the commands. `write deny-oom` for ALLOW (refused on replicas and when out of memory),
/// `readonly` for PEEK; both take their key at position 1, declared with a key spec whose access
/// flags let ACL read-only key patterns (`%R~`) admit PEEK and refuse ALLOW.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    let missing = api::missing_functions();
    if !missing.is_empty() {
        return Err(format!(
            "this server lacks module API functions the module needs (Redis >= 7.0 has them): {}",
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
        create(ctx, &spec).map_err(|what| format!("{what} for {}", spec.name.to_string_lossy()))?;
    }
    Ok(())
}

fn create(ctx: *mut raw::RedisModuleCtx, spec: &Spec) -> Result<(), &'static str> {
    let (Some(create), Some(get), Some(set_info)) = (unsafe {
        (
            raw::RedisModule_CreateCommand,
            raw::RedisModule_GetCommand,
            raw::RedisModule_SetCommandInfo,
        )
    }) else {
        return Err("missing command API");
    };
    let r = unsafe {
        create(
            ctx,
            spec.name.as_ptr(),
            Some(spec.handler),
            spec.flags.as_ptr(),
            1,
            1,
            1,
        )
    };
    if r != raw::REDISMODULE_OK as c_int {
        return Err("RedisModule_CreateCommand failed");
    }
    let command = unsafe { get(ctx, spec.name.as_ptr()) };
    if command.is_null() {
        return Err("RedisModule_GetCommand failed");
    }
    // Redis copies everything out of these structures during the call.
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // The list ends with an all-zero spec.
    let mut key_specs = [key_spec(spec.key_flags), unsafe { std::mem::zeroed() }];
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: spec.summary.as_ptr(),
        complexity: COMPLEXITY.as_ptr(),
        since: c"1.0.0".as_ptr(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: spec.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: std::ptr::null_mut(),
    };
    if unsafe { set_info(command, &info) } != raw::REDISMODULE_OK as c_int {
        return Err("RedisModule_SetCommandInfo failed");
    }
    Ok(())
}

/// The key at argument 1, and only it.
fn key_spec(flags: u32) -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: std::ptr::null(),
        flags: u64::from(flags),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
        },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                lastkey: 0,
                keystep: 1,
                limit: 0,
            },
        },
    }
}
