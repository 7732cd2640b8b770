//! Command registration: the callback trampoline that hands a command its call-scoped handles,
//! and `RedisModule_CreateCommand` + `SetCommandInfo` (arity, docs, key spec).

use super::api;
use super::context::Ctx;
use super::string::Argv;
use redis_module::{Context, raw};
use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr::NonNull;

/// A command's body: replies through `ctx`; the handles cannot outlive the call.
pub trait Handler {
    fn call<'a>(ctx: Ctx<'a>, argv: Argv<'a>);
}

/// The C callback Redis invokes for command `H`.
extern "C" fn trampoline<H: Handler>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let (Some(ctx), Some(api)) = (NonNull::new(ctx), api::get()) else {
        return raw::REDISMODULE_ERR as c_int;
    };
    let ctx = Ctx::new(ctx, api);
    // SAFETY: Redis hands the command its own arguments for the length of the call.
    let argv = unsafe { Argv::new(ctx, argv, argc) };
    H::call(ctx, argv);
    raw::REDISMODULE_OK as c_int
}

/// What a command does with its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads it: ACL read-only key patterns (`%R~`) admit the command.
    Read,
    /// Reads and changes it in place (Redis allows one of insert, delete, update).
    Update,
}

impl Access {
    fn flags(self) -> u64 {
        let flags = match self {
            Access::Read => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
            Access::Update => {
                raw::REDISMODULE_CMD_KEY_RW
                    | raw::REDISMODULE_CMD_KEY_ACCESS
                    | raw::REDISMODULE_CMD_KEY_UPDATE
            }
        };
        u64::from(flags)
    }
}

type CommandFn =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// One command to register.
pub struct Spec {
    pub name: &'static CStr,
    pub handler: CommandFn,
    pub flags: &'static CStr,
    /// What the command does with its key, for ACL key permissions.
    pub access: Access,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// Redis checks it before calling us (negative: at least that many).
    pub arity: c_int,
}

/// The callback for `H`, to put in a `Spec`.
pub fn handler<H: Handler>() -> CommandFn {
    trampoline::<H>
}

/// The module's load context, for registration.
pub struct Loader<'a> {
    ctx: &'a Context,
}

impl<'a> Loader<'a> {
    /// Resolves the API table first, so every later call finds its functions.
    pub fn new(ctx: &'a Context) -> Result<Loader<'a>, String> {
        api::load()?;
        Ok(Loader { ctx })
    }

    pub(super) fn raw(&self) -> *mut raw::RedisModuleCtx {
        self.ctx.ctx
    }

    /// Whether the server knows `name` (it may be renamed away or disabled by the config).
    pub fn command_exists(&self, name: &CStr) -> bool {
        let Some(api) = api::get() else {
            return false;
        };
        // SAFETY: the load context; the format names two C strings, which follow.
        let reply = unsafe {
            (api.call)(
                self.raw(),
                c"COMMAND".as_ptr(),
                c"cc".as_ptr(),
                c"INFO".as_ptr(),
                name.as_ptr(),
            )
        };
        let Some(reply) = NonNull::new(reply) else {
            return false;
        };
        // SAFETY: a live reply, freed below; its first element is an array for a known command.
        unsafe {
            let r = reply.as_ptr();
            let known = (api.call_reply_type)(r) == raw::REDISMODULE_REPLY_ARRAY as c_int
                && (api.call_reply_length)(r) > 0
                && NonNull::new((api.call_reply_array_element)(r, 0)).is_some_and(|e| {
                    (api.call_reply_type)(e.as_ptr()) == raw::REDISMODULE_REPLY_ARRAY as c_int
                });
            (api.free_call_reply)(r);
            known
        }
    }

    /// Only calls that change a key should wake WATCH (the commands signal those themselves),
    /// and a broken RDB or RESTORE payload must reach the type's loader as an error instead of
    /// stopping the server.
    pub fn set_module_options(&self) -> Result<(), String> {
        // SAFETY: read once at load.
        let f = unsafe { raw::RedisModule_SetModuleOptions }
            .ok_or("this server cannot set module options")?;
        let options = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED
            | raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS;
        // SAFETY: the load context.
        unsafe { f(self.raw(), options as c_int) };
        Ok(())
    }

    /// Creates a command and declares its arity, docs and key spec.
    pub fn create_command(&self, spec: &Spec) -> Result<(), String> {
        let fail = |what: &str| format!("{what} for {}", spec.name.to_string_lossy());
        // SAFETY: read once at load; checked below.
        let (create, get, set_info) = unsafe {
            (
                raw::RedisModule_CreateCommand,
                raw::RedisModule_GetCommand,
                raw::RedisModule_SetCommandInfo,
            )
        };
        let (Some(create), Some(get), Some(set_info)) = (create, get, set_info) else {
            return Err(fail("this server lacks the command API"));
        };
        // SAFETY: the load context and static NUL-terminated strings.
        let r = unsafe {
            create(
                self.raw(),
                spec.name.as_ptr(),
                Some(spec.handler),
                spec.flags.as_ptr(),
                1,
                1,
                1,
            )
        };
        if r != raw::REDISMODULE_OK as c_int {
            return Err(fail("RedisModule_CreateCommand failed"));
        }
        // SAFETY: as above.
        let command = unsafe { get(self.raw(), spec.name.as_ptr()) };
        if command.is_null() {
            return Err(fail("RedisModule_GetCommand failed"));
        }
        // Redis copies everything out of these structures during the call.
        let version = raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
        };
        // The list ends with an all-zero spec.
        // SAFETY: an all-zero key spec is the terminator Redis looks for.
        let mut key_specs = [key_spec(spec.access), unsafe { std::mem::zeroed() }];
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: spec.summary.as_ptr(),
            complexity: spec.complexity.as_ptr(),
            since: c"1.0.0".as_ptr(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity: spec.arity,
            key_specs: key_specs.as_mut_ptr(),
            args: std::ptr::null_mut(),
        };
        // SAFETY: a command of ours and a fully initialised info structure.
        if unsafe { set_info(command, &info) } != raw::REDISMODULE_OK as c_int {
            return Err(fail("RedisModule_SetCommandInfo failed"));
        }
        Ok(())
    }
}

/// The key at argument 1, and only it.
fn key_spec(access: Access) -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: std::ptr::null(),
        flags: access.flags(),
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
