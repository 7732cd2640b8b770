//! The only place with `unsafe`: small safe wrappers over the raw module API, with RAII guards.
//!
//! Every pointer here comes from Redis for the duration of one command call; the guards make sure
//! keys are closed and strings freed on every path, errors and contained panics included.

use crate::error::Error;
use redis_module::raw;
use std::ffi::CStr;
use std::os::raw::{c_int, c_longlong};
use std::ptr::NonNull;

/// Fetches a module API function pointer, or fails the call if this server lacks it.
macro_rules! api {
    ($name:ident) => {
        match unsafe { raw::$name } {
            Some(f) => f,
            None => return Err(Error::Server(stringify!($name))),
        }
    };
}

/// Functions the module calls; checked once at load so a missing one fails `MODULE LOAD` cleanly.
pub fn missing_functions() -> Vec<&'static str> {
    macro_rules! check {
        ($($name:ident),* $(,)?) => {{
            let mut missing = Vec::new();
            $(if unsafe { raw::$name }.is_none() { missing.push(stringify!($name)); })*
            missing
        }};
    }
    check!(
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ValueLength,
        RedisModule_ZsetAdd,
        RedisModule_ZsetRem,
        RedisModule_ZsetFirstInScoreRange,
        RedisModule_ZsetLastInScoreRange,
        RedisModule_ZsetRangeCurrentElement,
        RedisModule_ZsetRangeNext,
        RedisModule_ZsetRangeStop,
        RedisModule_ZsetRangeEndReached,
        RedisModule_GetAbsExpire,
        RedisModule_UnlinkKey,
        RedisModule_SetAbsExpire,
        RedisModule_Milliseconds,
        RedisModule_CreateString,
        RedisModule_FreeString,
        RedisModule_StringPtrLen,
        RedisModule_Replicate,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_SignalModifiedKey,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithError,
        RedisModule_CreateCommand,
        RedisModule_SetModuleOptions,
        RedisModule_GetCommand,
        RedisModule_SetCommandInfo,
        RedisModule_Call,
        RedisModule_CallReplyType,
        RedisModule_CallReplyInteger,
        RedisModule_CallReplyLength,
        RedisModule_CallReplyArrayElement,
        RedisModule_CallReplyStringPtr,
        RedisModule_FreeCallReply,
    )
}

/// The context of one command call.
#[derive(Clone, Copy)]
pub struct Ctx(NonNull<raw::RedisModuleCtx>);

impl Ctx {
    /// # Safety
    /// `ptr` must be the context Redis passed to the running command or load callback.
    pub unsafe fn from_raw(ptr: *mut raw::RedisModuleCtx) -> Option<Ctx> {
        NonNull::new(ptr).map(Ctx)
    }

    fn raw(self) -> *mut raw::RedisModuleCtx {
        self.0.as_ptr()
    }

    /// The server's clock in ms.
    pub fn now_ms(self) -> Result<u64, Error> {
        let f = api!(RedisModule_Milliseconds);
        Ok(u64::try_from(unsafe { f() }).unwrap_or(0))
    }

    pub fn reply_array(self, fields: &[i64]) -> Result<(), Error> {
        let array = api!(RedisModule_ReplyWithArray);
        let long = api!(RedisModule_ReplyWithLongLong);
        let len = std::os::raw::c_long::try_from(fields.len()).unwrap_or(0);
        unsafe { array(self.raw(), len) };
        for &v in fields {
            unsafe { long(self.raw(), v) };
        }
        Ok(())
    }

    /// Replies with `err`'s text; it must be one line starting with an error code.
    pub fn reply_error(self, err: &Error) {
        let Some(f) = (unsafe { raw::RedisModule_ReplyWithError }) else {
            return;
        };
        let mut text = err.to_string().into_bytes();
        text.retain(|b| *b != b'\r' && *b != b'\n' && *b != 0);
        text.push(0);
        if let Ok(c) = CStr::from_bytes_with_nul(&text) {
            unsafe { f(self.raw(), c.as_ptr()) };
        }
    }

    pub fn notify(self, kind: c_int, event: &CStr, key: &RString) -> Result<(), Error> {
        let f = api!(RedisModule_NotifyKeyspaceEvent);
        unsafe { f(self.raw(), kind, event.as_ptr(), key.raw()) };
        Ok(())
    }

    /// Tells WATCH and client-side caching that `key` changed.
    pub fn signal_modified(self, key: &RString) -> Result<(), Error> {
        let f = api!(RedisModule_SignalModifiedKey);
        unsafe { f(self.raw(), key.raw()) };
        Ok(())
    }

    /// Copies `bytes` into a new Redis string, freed on drop.
    pub fn string(self, bytes: &[u8]) -> Result<OwnedString, Error> {
        let f = api!(RedisModule_CreateString);
        let ptr = unsafe { f(self.raw(), bytes.as_ptr().cast(), bytes.len()) };
        NonNull::new(ptr)
            .map(|p| OwnedString { ctx: self, ptr: p })
            .ok_or(Error::Server("RedisModule_CreateString"))
    }

    /// Creates a command and declares its arity, docs and key spec.
    pub fn create_command(self, spec: &Spec) -> Result<(), &'static str> {
        let ctx = self.raw();
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

    pub fn set_module_options(self, options: u32) {
        if let Some(f) = unsafe { raw::RedisModule_SetModuleOptions } {
            unsafe { f(self.raw(), options as c_int) };
        }
    }

    /// Propagates `ZREMRANGEBYSCORE key -inf cutoff` to replicas and the AOF.
    pub fn replicate_trim(self, key: &RString, cutoff: i64) -> Result<(), Error> {
        let f = api!(RedisModule_Replicate);
        let r = unsafe {
            f(
                self.raw(),
                c"ZREMRANGEBYSCORE".as_ptr(),
                c"scl".as_ptr(),
                key.raw(),
                c"-inf".as_ptr(),
                c_longlong::from(cutoff),
            )
        };
        status(r, "RedisModule_Replicate")
    }

    /// Propagates `ZREM key m1 m2 ...`: the exact members a trim removed.
    pub fn replicate_remove(self, key: &RString, members: &[OwnedString]) -> Result<(), Error> {
        let f = api!(RedisModule_Replicate);
        let r = match members {
            [one] => unsafe {
                f(
                    self.raw(),
                    c"ZREM".as_ptr(),
                    c"ss".as_ptr(),
                    key.raw(),
                    one.ptr.as_ptr(),
                )
            },
            _ => {
                let mut argv: Vec<_> = members.iter().map(|m| m.ptr.as_ptr()).collect();
                unsafe {
                    f(
                        self.raw(),
                        c"ZREM".as_ptr(),
                        c"sv".as_ptr(),
                        key.raw(),
                        argv.as_mut_ptr(),
                        argv.len(),
                    )
                }
            }
        };
        status(r, "RedisModule_Replicate")
    }

    /// Propagates `UNLINK key`.
    pub fn replicate_unlink(self, key: &RString) -> Result<(), Error> {
        let f = api!(RedisModule_Replicate);
        let r = unsafe { f(self.raw(), c"UNLINK".as_ptr(), c"s".as_ptr(), key.raw()) };
        status(r, "RedisModule_Replicate")
    }

    /// Propagates `ZADD key score m1 score m2 ...`.
    pub fn replicate_add(
        self,
        key: &RString,
        score: u64,
        members: &[OwnedString],
    ) -> Result<(), Error> {
        let f = api!(RedisModule_Replicate);
        let score = c_longlong::try_from(score).unwrap_or(c_longlong::MAX);
        let r = match members {
            [one] => unsafe {
                f(
                    self.raw(),
                    c"ZADD".as_ptr(),
                    c"sls".as_ptr(),
                    key.raw(),
                    score,
                    one.ptr.as_ptr(),
                )
            },
            _ => {
                let text = score.to_string();
                let score = self.string(text.as_bytes())?;
                let mut argv = Vec::with_capacity(members.len().saturating_mul(2));
                for m in members {
                    argv.push(score.ptr.as_ptr());
                    argv.push(m.ptr.as_ptr());
                }
                unsafe {
                    f(
                        self.raw(),
                        c"ZADD".as_ptr(),
                        c"sv".as_ptr(),
                        key.raw(),
                        argv.as_mut_ptr(),
                        argv.len(),
                    )
                }
            }
        };
        status(r, "RedisModule_Replicate")
    }

    /// Propagates `PEXPIREAT key at_ms`.
    pub fn replicate_expire_at(self, key: &RString, at_ms: i64) -> Result<(), Error> {
        let f = api!(RedisModule_Replicate);
        let r = unsafe {
            f(
                self.raw(),
                c"PEXPIREAT".as_ptr(),
                c"sl".as_ptr(),
                key.raw(),
                c_longlong::from(at_ms),
            )
        };
        status(r, "RedisModule_Replicate")
    }
}

/// Commands run in place through `RedisModule_Call`, for what the key API cannot do in
/// O(log N). None is propagated: the caller sends the effects.
impl Ctx {
    fn reply(
        reply: *mut raw::RedisModuleCallReply,
        what: &'static str,
    ) -> Result<CallReply, Error> {
        let reply = NonNull::new(reply)
            .map(CallReply)
            .ok_or(Error::Server(what))?;
        if reply.kind()? == raw::REDISMODULE_REPLY_ERROR {
            return Err(Error::Server(what));
        }
        Ok(reply)
    }

    /// Whether the server knows `name` (it may be renamed away or disabled by the config).
    pub fn command_exists(self, name: &CStr) -> Result<bool, Error> {
        let f = api!(RedisModule_Call);
        let r = unsafe {
            f(
                self.raw(),
                c"COMMAND".as_ptr(),
                c"cc".as_ptr(),
                c"INFO".as_ptr(),
                name.as_ptr(),
            )
        };
        let reply = Ctx::reply(r, "COMMAND INFO")?;
        let Some(info) = reply.element(0)? else {
            return Ok(false);
        };
        Ok(info.kind()? == raw::REDISMODULE_REPLY_ARRAY)
    }

    /// `ZRANGE key rank rank WITHSCORES`.
    fn zrange_withscores(self, key: RString, rank: u64) -> Result<CallReply, Error> {
        let f = api!(RedisModule_Call);
        let rank = c_longlong::try_from(rank).unwrap_or(c_longlong::MAX);
        let r = unsafe {
            f(
                self.raw(),
                c"ZRANGE".as_ptr(),
                c"sllc".as_ptr(),
                key.raw(),
                rank,
                rank,
                c"WITHSCORES".as_ptr(),
            )
        };
        Ctx::reply(r, "ZRANGE")
    }

    /// `ZCOUNT key -inf max`.
    fn zcount_through(self, key: RString, max: f64) -> Result<CallReply, Error> {
        let f = api!(RedisModule_Call);
        // Rust prints every f64 so that Redis reads it back exactly ("inf" included).
        let max = max.to_string();
        let r = unsafe {
            f(
                self.raw(),
                c"ZCOUNT".as_ptr(),
                c"scb".as_ptr(),
                key.raw(),
                c"-inf".as_ptr(),
                max.as_ptr(),
                max.len(),
            )
        };
        Ctx::reply(r, "ZCOUNT")
    }

    /// `ZREMRANGEBYSCORE key -inf cutoff`.
    fn zremrangebyscore(self, key: RString, cutoff: i64) -> Result<CallReply, Error> {
        let f = api!(RedisModule_Call);
        let r = unsafe {
            f(
                self.raw(),
                c"ZREMRANGEBYSCORE".as_ptr(),
                c"scl".as_ptr(),
                key.raw(),
                c"-inf".as_ptr(),
                c_longlong::from(cutoff),
            )
        };
        Ctx::reply(r, "ZREMRANGEBYSCORE")
    }
}

/// A reply of `RedisModule_Call`; freed on drop.
struct CallReply(NonNull<raw::RedisModuleCallReply>);

impl CallReply {
    fn kind(&self) -> Result<isize, Error> {
        let f = api!(RedisModule_CallReplyType);
        Ok(unsafe { f(self.0.as_ptr()) } as isize)
    }

    fn integer(&self) -> Result<u64, Error> {
        let f = api!(RedisModule_CallReplyInteger);
        if self.kind()? != raw::REDISMODULE_REPLY_INTEGER {
            return Err(Error::Server("an integer reply"));
        }
        Ok(u64::try_from(unsafe { f(self.0.as_ptr()) }).unwrap_or(0))
    }

    /// Element `i` of an array reply, if there is one; it lives as long as this reply.
    fn element(&self, i: usize) -> Result<Option<ReplyElement<'_>>, Error> {
        let len = api!(RedisModule_CallReplyLength);
        let at = api!(RedisModule_CallReplyArrayElement);
        if self.kind()? != raw::REDISMODULE_REPLY_ARRAY || i >= unsafe { len(self.0.as_ptr()) } {
            return Ok(None);
        }
        Ok(
            NonNull::new(unsafe { at(self.0.as_ptr(), i) }).map(|ptr| ReplyElement {
                ptr,
                _reply: std::marker::PhantomData,
            }),
        )
    }
}

impl Drop for CallReply {
    fn drop(&mut self) {
        if let Some(f) = unsafe { raw::RedisModule_FreeCallReply } {
            unsafe { f(self.0.as_ptr()) };
        }
    }
}

/// An element inside a `CallReply`, freed with it.
struct ReplyElement<'r> {
    ptr: NonNull<raw::RedisModuleCallReply>,
    _reply: std::marker::PhantomData<&'r CallReply>,
}

impl ReplyElement<'_> {
    fn kind(&self) -> Result<isize, Error> {
        let f = api!(RedisModule_CallReplyType);
        Ok(unsafe { f(self.ptr.as_ptr()) } as isize)
    }

    fn bytes(&self) -> Result<&[u8], Error> {
        let f = api!(RedisModule_CallReplyStringPtr);
        let mut len = 0usize;
        let ptr = unsafe { f(self.ptr.as_ptr(), &mut len) };
        if ptr.is_null() {
            return Err(Error::Server("a string reply"));
        }
        Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }
}

fn status(r: c_int, what: &'static str) -> Result<(), Error> {
    if r == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(Error::Server(what))
    }
}

/// Signature of a command callback.
pub type Handler =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// One command to register.
pub struct Spec {
    pub name: &'static CStr,
    pub handler: Handler,
    pub flags: &'static CStr,
    /// What the command does with its key, for ACL key permissions.
    pub key_flags: u32,
    pub summary: &'static CStr,
    /// Redis checks it before calling us: -5 is `key window max now` and more.
    pub arity: c_int,
}

const COMPLEXITY: &CStr = c"O(log N + M): N members in the window, M members trimmed";

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

/// A string Redis owns for the whole call (an argument); never freed by us.
#[derive(Clone, Copy)]
pub struct RString(NonNull<raw::RedisModuleString>);

impl RString {
    fn raw(self) -> *mut raw::RedisModuleString {
        self.0.as_ptr()
    }
}

/// The command's arguments, borrowed from Redis for the duration of the call.
pub struct Argv {
    ptrs: *mut *mut raw::RedisModuleString,
    len: usize,
}

impl Argv {
    /// # Safety
    /// `argv` and `argc` must be what Redis passed to the running command.
    pub unsafe fn from_raw(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Argv {
        let len = if argv.is_null() {
            0
        } else {
            usize::try_from(argc).unwrap_or(0)
        };
        Argv { ptrs: argv, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, i: usize) -> Option<RString> {
        if i >= self.len {
            return None;
        }
        NonNull::new(unsafe { *self.ptrs.add(i) }).map(RString)
    }

    /// The bytes of argument `i`.
    pub fn bytes(&self, i: usize) -> Result<&[u8], Error> {
        let f = api!(RedisModule_StringPtrLen);
        let s = self.get(i).ok_or(Error::Server("argv"))?;
        let mut len = 0usize;
        let ptr = unsafe { f(s.raw(), &mut len) };
        if ptr.is_null() {
            return Err(Error::Server("RedisModule_StringPtrLen"));
        }
        Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }
}

/// A string we created; freed on drop.
pub struct OwnedString {
    ctx: Ctx,
    ptr: NonNull<raw::RedisModuleString>,
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        if let Some(f) = unsafe { raw::RedisModule_FreeString } {
            unsafe { f(self.ctx.raw(), self.ptr.as_ptr()) };
        }
    }
}

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Empty,
    Zset,
    Other,
}

/// An open key; closed on drop.
pub struct Key {
    ctx: Ctx,
    ptr: Option<NonNull<raw::RedisModuleKey>>,
    pub name: RString,
}

impl Key {
    /// Opens `name` for reading, or for writing when `write`. A missing key opened for reading
    /// holds no handle and reads as empty. Reading leaves the key's LRU/LFU clock alone.
    pub fn open(ctx: Ctx, name: RString, write: bool) -> Result<Key, Error> {
        let f = api!(RedisModule_OpenKey);
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ | raw::REDISMODULE_OPEN_KEY_NOTOUCH
        };
        let ptr = unsafe { f(ctx.raw(), name.raw(), mode as c_int) };
        let ptr = NonNull::new(ptr.cast::<raw::RedisModuleKey>());
        if write && ptr.is_none() {
            return Err(Error::Server("RedisModule_OpenKey"));
        }
        Ok(Key { ctx, ptr, name })
    }

    pub fn kind(&self) -> Result<Kind, Error> {
        let Some(k) = self.ptr else {
            return Ok(Kind::Empty);
        };
        let f = api!(RedisModule_KeyType);
        Ok(match unsafe { f(k.as_ptr()) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => Kind::Empty,
            raw::REDISMODULE_KEYTYPE_ZSET => Kind::Zset,
            _ => Kind::Other,
        })
    }

    /// Members of the sorted set; 0 when the key is empty.
    pub fn len(&self) -> Result<u64, Error> {
        let Some(k) = self.ptr else {
            return Ok(0);
        };
        let f = api!(RedisModule_ValueLength);
        Ok(u64::try_from(unsafe { f(k.as_ptr()) }).unwrap_or(u64::MAX))
    }

    fn handle(&self, what: &'static str) -> Result<*mut raw::RedisModuleKey, Error> {
        self.ptr.map(NonNull::as_ptr).ok_or(Error::Server(what))
    }

    /// Adds `member` at `score` unless a member of that name exists; true when added.
    pub fn zadd_new(&mut self, score: f64, member: &OwnedString) -> Result<bool, Error> {
        let f = api!(RedisModule_ZsetAdd);
        let k = self.handle("RedisModule_ZsetAdd")?;
        let mut flags = raw::REDISMODULE_ZADD_NX as c_int;
        let r = unsafe { f(k, score, member.ptr.as_ptr(), &mut flags) };
        status(r, "RedisModule_ZsetAdd")?;
        Ok(flags & raw::REDISMODULE_ZADD_ADDED as c_int != 0)
    }

    pub fn zrem(&mut self, member: &OwnedString) -> Result<(), Error> {
        let f = api!(RedisModule_ZsetRem);
        let k = self.handle("RedisModule_ZsetRem")?;
        let r = unsafe { f(k, member.ptr.as_ptr(), std::ptr::null_mut()) };
        status(r, "RedisModule_ZsetRem")
    }

    /// Starts a score-range iteration at its first (or last) member; the guard stops it, and
    /// holds the key so that nothing changes the set while it iterates.
    pub fn range(
        &mut self,
        min: f64,
        max: f64,
        min_excl: bool,
        first: bool,
    ) -> Result<Range<'_>, Error> {
        let k = self.handle("zset range")?;
        let f = if first {
            api!(RedisModule_ZsetFirstInScoreRange)
        } else {
            api!(RedisModule_ZsetLastInScoreRange)
        };
        let r = unsafe { f(k, min, max, c_int::from(min_excl), 0) };
        status(r, "zset range")?;
        Ok(Range { key: self, ptr: k })
    }

    /// Deletes the key, freeing a large value in the background.
    pub fn unlink(&mut self) -> Result<(), Error> {
        let f = api!(RedisModule_UnlinkKey);
        let k = self.handle("RedisModule_UnlinkKey")?;
        status(unsafe { f(k) }, "RedisModule_UnlinkKey")
    }

    /// The key's absolute expiry in ms, if it has one.
    pub fn expire_at(&self) -> Result<Option<i64>, Error> {
        let f = api!(RedisModule_GetAbsExpire);
        let k = self.handle("RedisModule_GetAbsExpire")?;
        let at = unsafe { f(k) };
        Ok((at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at))
    }

    pub fn set_expire_at(&mut self, at_ms: i64) -> Result<(), Error> {
        let f = api!(RedisModule_SetAbsExpire);
        let k = self.handle("RedisModule_SetAbsExpire")?;
        status(unsafe { f(k, at_ms) }, "RedisModule_SetAbsExpire")
    }

    pub fn ctx(&self) -> Ctx {
        self.ctx
    }

    /// The score at 0-based `rank`, O(log N): `ZRANGE key rank rank WITHSCORES`.
    pub fn score_at_rank(&self, rank: u64) -> Result<Option<f64>, Error> {
        let reply = self.ctx.zrange_withscores(self.name, rank)?;
        let Some(score) = reply.element(1)? else {
            return Ok(None);
        };
        std::str::from_utf8(score.bytes()?)
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
            .map(Some)
            .ok_or(Error::Server("a ZRANGE score"))
    }

    /// Members scored at or before `max`, O(log N): `ZCOUNT key -inf max`.
    pub fn count_through(&self, max: f64) -> Result<u64, Error> {
        self.ctx.zcount_through(self.name, max)?.integer()
    }

    /// Removes the members scored at or before `cutoff` in O(log N + M), as the script does:
    /// `ZREMRANGEBYSCORE key -inf cutoff`. Redis emits its keyspace event; nothing is propagated
    /// (the caller propagates the effect).
    pub fn remove_through(&mut self, cutoff: i64) -> Result<u64, Error> {
        self.ctx.zremrangebyscore(self.name, cutoff)?.integer()
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if let (Some(k), Some(f)) = (self.ptr, unsafe { raw::RedisModule_CloseKey }) {
            unsafe { f(k.as_ptr()) };
        }
    }
}

/// An active sorted-set iteration; stopped on drop.
pub struct Range<'k> {
    key: &'k mut Key,
    ptr: *mut raw::RedisModuleKey,
}

impl Range<'_> {
    /// The current member and its score, or None past the end.
    pub fn current(&self) -> Result<Option<(OwnedString, f64)>, Error> {
        let f = api!(RedisModule_ZsetRangeCurrentElement);
        let mut score = 0.0;
        let ptr = unsafe { f(self.ptr, &mut score) };
        Ok(NonNull::new(ptr).map(|p| {
            (
                OwnedString {
                    ctx: self.key.ctx,
                    ptr: p,
                },
                score,
            )
        }))
    }

    /// Whether the range holds no (more) members; unlike `current`, allocates nothing.
    pub fn is_empty(&self) -> Result<bool, Error> {
        let f = api!(RedisModule_ZsetRangeEndReached);
        Ok(unsafe { f(self.ptr) } != 0)
    }

    /// The current score, or None past the end.
    pub fn score(&self) -> Result<Option<f64>, Error> {
        Ok(self.current()?.map(|(_, s)| s))
    }

    /// Moves on; false past the end.
    pub fn next(&self) -> Result<bool, Error> {
        let f = api!(RedisModule_ZsetRangeNext);
        Ok(unsafe { f(self.ptr) } != 0)
    }
}

impl Drop for Range<'_> {
    fn drop(&mut self) {
        if let Some(f) = unsafe { raw::RedisModule_ZsetRangeStop } {
            unsafe { f(self.ptr) };
        }
    }
}
