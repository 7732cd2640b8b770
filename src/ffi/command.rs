//! Command registration: the callback trampoline that hands a command its call-scoped handles,
//! `RedisModule_CreateCommand` + `SetCommandInfo` (arity, docs, key spec, arguments) and, where
//! the server has them, ACL categories.

use super::api;
use super::context::Ctx;
use super::string::Argv;
use crate::core::args::integer;
use crate::core::error::MAX_KEYS;
use redis_module::{Context, raw};
use std::ffi::{CStr, CString};
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

/// The callback for a command whose keys are counted (`numkeys key...`, as EVAL's): besides
/// running `H`, it answers the server's key-position requests (`getkeys-api`), which Redis 7.0
/// uses for cluster routing where later servers read the key spec.
extern "C" fn counted_trampoline<H: Handler>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: read once per call; present on every server with key specs.
    let (is_request, key_at) = unsafe {
        (
            raw::RedisModule_IsKeysPositionRequest,
            raw::RedisModule_KeyAtPos,
        )
    };
    if let (Some(is_request), Some(key_at), Some(api)) = (is_request, key_at, api::get())
        && let Some(c) = NonNull::new(ctx)
        // SAFETY: the context of this call.
        && unsafe { is_request(ctx) } != 0
    {
        // SAFETY: Redis hands the command its own arguments for the length of the call.
        let args = unsafe { Argv::new(Ctx::new(c, api), argv, argc) };
        let n = integer(args.bytes(1), 1, MAX_KEYS as u64).unwrap_or(0);
        for i in 0..n {
            let pos = c_int::try_from(i + 2).unwrap_or(c_int::MAX);
            if pos < argc {
                // SAFETY: the context of a key-position request, a position within argv.
                unsafe { key_at(ctx, pos) };
            }
        }
        return raw::REDISMODULE_OK as c_int;
    }
    trampoline::<H>(ctx, argv, argc)
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

/// Where a command's keys are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// One key, at argument 1.
    One,
    /// As EVAL declares them: the count at argument 1, then that many keys.
    Counted,
    /// No key: a command about the server.
    None,
}

/// One command to register.
pub struct Spec {
    pub name: &'static CStr,
    pub handler: CommandFn,
    pub flags: &'static CStr,
    /// What the command does with its keys, for ACL key permissions.
    pub access: Access,
    pub keys: Keys,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// Redis checks it before calling us (negative: at least that many).
    pub arity: c_int,
    /// The arguments after the command name, for `COMMAND DOCS` and the cli's hints.
    pub args: &'static [Arg],
    /// ACL categories, space-separated (`write slow`); the module's own category is added to
    /// them where the server has one. Servers before Redis 7.2 take none.
    pub acl: &'static CStr,
}

/// What an argument is, as `COMMAND DOCS` types it.
#[derive(Debug, Clone, Copy)]
pub enum ArgKind {
    /// The key; the command's only key spec (index 0) describes it.
    Key,
    Integer,
    String,
    /// Just its token (`*`).
    PureToken,
    /// Exactly one of these.
    OneOf(&'static [Arg]),
    /// All of these, in order.
    Block(&'static [Arg]),
}

/// One argument of a command: plain data, converted when the command is registered.
#[derive(Debug, Clone, Copy)]
pub struct Arg {
    pub name: &'static CStr,
    pub kind: ArgKind,
    /// The word that introduces it (`COST`), or is it (`*` for a pure token).
    pub token: Option<&'static CStr>,
    pub optional: bool,
    /// May repeat, its token with it (`LIMIT w m LIMIT w m`).
    pub multiple: bool,
}

impl Arg {
    const fn new(name: &'static CStr, kind: ArgKind) -> Arg {
        Arg {
            name,
            kind,
            token: None,
            optional: false,
            multiple: false,
        }
    }

    pub const fn key(name: &'static CStr) -> Arg {
        Arg::new(name, ArgKind::Key)
    }

    pub const fn integer(name: &'static CStr) -> Arg {
        Arg::new(name, ArgKind::Integer)
    }

    pub const fn string(name: &'static CStr) -> Arg {
        Arg::new(name, ArgKind::String)
    }

    pub const fn pure_token(name: &'static CStr, token: &'static CStr) -> Arg {
        Arg::new(name, ArgKind::PureToken).token(token)
    }

    pub const fn one_of(name: &'static CStr, choices: &'static [Arg]) -> Arg {
        Arg::new(name, ArgKind::OneOf(choices))
    }

    pub const fn block(name: &'static CStr, parts: &'static [Arg]) -> Arg {
        Arg::new(name, ArgKind::Block(parts))
    }

    pub const fn token(mut self, token: &'static CStr) -> Arg {
        self.token = Some(token);
        self
    }

    pub const fn optional(mut self) -> Arg {
        self.optional = true;
        self
    }

    pub const fn multiple(mut self) -> Arg {
        self.multiple = true;
        self
    }
}

/// A command's arguments as Redis reads them: zero-terminated arrays, children owned alongside
/// (moving a `Vec` keeps its buffer in place, so the `subargs` pointers stay valid).
struct ArgTable {
    args: Vec<raw::RedisModuleCommandArg>,
    _children: Vec<ArgTable>,
}

impl ArgTable {
    fn new(args: &[Arg]) -> ArgTable {
        let mut children = Vec::new();
        let mut table = Vec::with_capacity(args.len() + 1);
        for arg in args {
            let (type_, subargs) = match arg.kind {
                ArgKind::Key => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
                    None,
                ),
                ArgKind::Integer => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
                    None,
                ),
                ArgKind::String => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
                    None,
                ),
                ArgKind::PureToken => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
                    None,
                ),
                ArgKind::OneOf(sub) => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
                    Some(sub),
                ),
                ArgKind::Block(sub) => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
                    Some(sub),
                ),
            };
            let subargs = subargs.map_or(std::ptr::null_mut(), |sub| {
                let mut child = ArgTable::new(sub);
                let ptr = child.args.as_mut_ptr();
                children.push(child);
                ptr
            });
            let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
            if arg.optional {
                flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
            }
            if arg.multiple {
                flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
                if arg.token.is_some() {
                    flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE_TOKEN;
                }
            }
            table.push(raw::RedisModuleCommandArg {
                name: arg.name.as_ptr(),
                type_,
                // Every command of ours has one key spec; other arguments take -1.
                key_spec_index: if matches!(arg.kind, ArgKind::Key) {
                    0
                } else {
                    -1
                },
                token: arg.token.map_or(std::ptr::null(), CStr::as_ptr),
                summary: std::ptr::null(),
                since: std::ptr::null(),
                flags: c_int::try_from(flags).unwrap_or(0),
                deprecated_since: std::ptr::null(),
                subargs,
                display_text: std::ptr::null(),
            });
        }
        // SAFETY: an all-zero argument (null name) is the terminator Redis looks for.
        table.push(unsafe { std::mem::zeroed() });
        ArgTable {
            args: table,
            _children: children,
        }
    }
}

/// The callback for `H`, to put in a `Spec`.
pub fn handler<H: Handler>() -> CommandFn {
    trampoline::<H>
}

/// The callback for `H` with counted keys (`Keys::Counted`).
pub fn counted_handler<H: Handler>() -> CommandFn {
    counted_trampoline::<H>
}

/// Valkey's `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (valkeymodule.h, Valkey 9.0 on):
/// the module copes with keys of a slot arriving (through its types' `aof_rewrite` and its
/// replicated commands) before the slot is the node's. Without it, `CLUSTER MIGRATESLOTS` is
/// refused on every node that loads the module.
const VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION: u32 = 1 << 5;

/// `RedisModule_GetServerVersion` of Valkey 9.0.0.
const VALKEY_9_0_0: c_int = 0x0009_0000;

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
    /// stopping the server. On Valkey 9 and later, the module also declares that it handles
    /// atomic slot migration (`CLUSTER MIGRATESLOTS`), and says so in the log.
    pub fn set_module_options(&self) -> Result<(), String> {
        // SAFETY: read once at load.
        let f = unsafe { raw::RedisModule_SetModuleOptions }
            .ok_or("this server cannot set module options")?;
        let asm = self.is_valkey_9();
        let mut options = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED
            | raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS;
        if asm {
            options |= VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION;
        }
        // SAFETY: the load context.
        unsafe { f(self.raw(), options as c_int) };
        if asm {
            self.ctx.log_notice(
                "slidingwindow: handles atomic slot migration (CLUSTER MIGRATESLOTS) on this Valkey",
            );
        }
        Ok(())
    }

    /// Whether the server is Valkey 9.0 or later: `server_name:valkey` in `INFO server` (Redis
    /// has no such field) and `RedisModule_GetServerVersion` (Valkey's own version there, not its
    /// `redis_version`) at 9.0.0 or above. Option bits past Redis's own mean other things, or
    /// nothing, elsewhere: anything else answers false.
    fn is_valkey_9(&self) -> bool {
        // SAFETY: read once at load; all present since Redis 6.0.
        let (info, field, free, version) = unsafe {
            (
                raw::RedisModule_GetServerInfo,
                raw::RedisModule_ServerInfoGetFieldC,
                raw::RedisModule_FreeServerInfo,
                raw::RedisModule_GetServerVersion,
            )
        };
        let (Some(info), Some(field), Some(free), Some(version)) = (info, field, free, version)
        else {
            return false;
        };
        // SAFETY: the load context; the data is freed below, after the last read of its field.
        let valkey = unsafe {
            let data = info(self.raw(), c"server".as_ptr());
            if data.is_null() {
                return false;
            }
            let name = field(data, c"server_name".as_ptr());
            let valkey = !name.is_null() && CStr::from_ptr(name) == c"valkey";
            free(self.raw(), data);
            valkey
        };
        // SAFETY: no arguments; a number like 0x00090102 for 9.1.2.
        valkey && unsafe { version() } >= VALKEY_9_0_0
    }

    /// Creates a command and declares its arity, docs, key spec, arguments and ACL categories
    /// (`module_category`, from `acl_category`, joins `spec.acl`).
    pub fn create_command(
        &self,
        spec: &Spec,
        module_category: Option<&CStr>,
    ) -> Result<(), String> {
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
        // The legacy (first, last, step) triple; Redis derives it again from the key spec.
        // Counted keys are `movablekeys`, found through the key-position requests of
        // `counted_handler` where a server does not read the spec.
        let (first, last, step) = match spec.keys {
            Keys::One => (1, 1, 1),
            Keys::Counted | Keys::None => (0, 0, 0),
        };
        let flags = match spec.keys {
            Keys::One | Keys::None => CString::from(spec.flags),
            Keys::Counted => {
                let mut all = spec.flags.to_bytes().to_vec();
                all.extend_from_slice(b" getkeys-api");
                CString::new(all).map_err(|_| fail("command flags"))?
            }
        };
        // SAFETY: the load context and static NUL-terminated strings.
        let r = unsafe {
            create(
                self.raw(),
                spec.name.as_ptr(),
                Some(spec.handler),
                flags.as_ptr(),
                first,
                last,
                step,
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
        let end: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
        let mut key_specs = [key_spec(spec.access, spec.keys).unwrap_or(end), end];
        let mut args = ArgTable::new(spec.args);
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: spec.summary.as_ptr(),
            complexity: spec.complexity.as_ptr(),
            since: c"1.0.0".as_ptr(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity: spec.arity,
            key_specs: key_specs.as_mut_ptr(),
            args: args.args.as_mut_ptr(),
        };
        // SAFETY: a command of ours and a fully initialised info structure.
        if unsafe { set_info(command, &info) } != raw::REDISMODULE_OK as c_int {
            return Err(fail(
                "RedisModule_SetCommandInfo failed (its reason is in the log)",
            ));
        }
        self.set_acl_categories(command, spec, module_category)
            .map_err(|()| fail("RedisModule_SetCommandACLCategories failed"))
    }

    /// Adds the module's own ACL category, so `+@name` grants exactly its commands; `None` where
    /// the server cannot (Redis < 7.4). Loading the module again finds it there already (Redis
    /// never removes a category), which is as good.
    pub fn acl_category(&self, name: &'static CStr) -> Option<&'static CStr> {
        // SAFETY: read once at load; absent on servers before Redis 7.4.
        let add = unsafe { raw::RedisModule_AddACLCategory }?;
        // SAFETY: the load context and a static NUL-terminated name.
        if unsafe { add(self.raw(), name.as_ptr()) } == raw::REDISMODULE_OK as c_int {
            return Some(name);
        }
        let busy = std::io::Error::last_os_error().raw_os_error() == Some(EBUSY);
        busy.then_some(name)
    }

    /// Declares the command's ACL categories; quietly nothing where the server takes none
    /// (Redis < 7.2), where users grant the commands by name instead.
    fn set_acl_categories(
        &self,
        command: *mut raw::RedisModuleCommand,
        spec: &Spec,
        module_category: Option<&CStr>,
    ) -> Result<(), ()> {
        // SAFETY: read once at load; absent on servers before Redis 7.2.
        let Some(set) = (unsafe { raw::RedisModule_SetCommandACLCategories }) else {
            return Ok(());
        };
        let mut categories = spec.acl.to_bytes().to_vec();
        if let Some(own) = module_category {
            if !categories.is_empty() {
                categories.push(b' ');
            }
            categories.extend_from_slice(own.to_bytes());
        }
        let categories = CString::new(categories).map_err(|_| ())?;
        // SAFETY: a command of ours, during load; Redis parses the string during the call.
        if unsafe { set(command, categories.as_ptr()) } == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            Err(())
        }
    }
}

/// `errno` (Linux) for a category that exists already.
const EBUSY: i32 = 16;

/// The search begins at argument 1: the key there and only it, or (counted) the number of keys
/// there and that many keys after it, as EVAL's spec.
fn key_spec(access: Access, keys: Keys) -> Option<raw::RedisModuleCommandKeySpec> {
    let (find_keys_type, fk) = match keys {
        Keys::None => return None,
        Keys::One => (
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                    lastkey: 0,
                    keystep: 1,
                    limit: 0,
                },
            },
        ),
        Keys::Counted => (
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM,
            raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                keynum: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
                    keynumidx: 0,
                    firstkey: 1,
                    keystep: 1,
                },
            },
        ),
    };
    Some(raw::RedisModuleCommandKeySpec {
        notes: std::ptr::null(),
        flags: access.flags(),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
        },
        find_keys_type,
        fk,
    })
}
