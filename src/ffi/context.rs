//! The context of one command call: the clock, replies, keyspace events and propagation.
//!
//! A `Ctx<'a>` only exists inside a command callback and carries that call's lifetime, so no
//! handle made from it (keys, strings, arguments) can outlive the call.

use super::api::Api;
use super::string::{OwnedString, RString};
use crate::core::error::Error;
use redis_module::raw;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::{c_int, c_long, c_longlong};
use std::ptr::NonNull;

#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    raw: NonNull<raw::RedisModuleCtx>,
    pub(super) api: &'static Api,
    _call: PhantomData<&'a mut raw::RedisModuleCtx>,
}

/// A keyspace event class, as `notify-keyspace-events` filters them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Generic,
    Zset,
    Module,
}

impl Class {
    fn flag(self) -> c_int {
        let flag = match self {
            Class::Generic => raw::REDISMODULE_NOTIFY_GENERIC,
            Class::Zset => raw::REDISMODULE_NOTIFY_ZSET,
            Class::Module => raw::REDISMODULE_NOTIFY_MODULE,
        };
        flag as c_int
    }
}

impl<'a> Ctx<'a> {
    /// Wraps the context Redis passed to the running callback.
    pub(super) fn new(raw: NonNull<raw::RedisModuleCtx>, api: &'static Api) -> Ctx<'a> {
        Ctx {
            raw,
            api,
            _call: PhantomData,
        }
    }

    pub(super) fn raw(self) -> *mut raw::RedisModuleCtx {
        self.raw.as_ptr()
    }

    /// The server's clock in ms (frozen for the length of a command, as Redis keeps it).
    pub fn now_ms(self) -> u64 {
        // SAFETY: a plain clock read.
        u64::try_from(unsafe { (self.api.milliseconds)() }).unwrap_or(0)
    }

    /// Replies with an array of integers.
    pub fn reply_ints(self, fields: &[i64]) {
        let len = c_long::try_from(fields.len()).unwrap_or(0);
        // SAFETY: the context belongs to the running command.
        unsafe { (self.api.reply_array)(self.raw(), len) };
        for &v in fields {
            unsafe { (self.api.reply_long_long)(self.raw(), v) };
        }
    }

    /// Opens an array reply of `len` elements; the next `len` replies fill it.
    pub fn reply_array(self, len: usize) {
        let len = c_long::try_from(len).unwrap_or(0);
        // SAFETY: the context belongs to the running command.
        unsafe { (self.api.reply_array)(self.raw(), len) };
    }

    /// Replies with a binary-safe string.
    pub fn reply_bytes(self, bytes: &[u8]) {
        // SAFETY: Redis copies `len` bytes from `ptr`.
        unsafe { (self.api.reply_string_buffer)(self.raw(), bytes.as_ptr().cast(), bytes.len()) };
    }

    /// Replies `+OK`.
    pub fn reply_ok(self) {
        // SAFETY: a static NUL-terminated string.
        unsafe { (self.api.reply_simple_string)(self.raw(), c"OK".as_ptr()) };
    }

    /// Replies with one integer.
    pub fn reply_int(self, value: i64) {
        // SAFETY: the context belongs to the running command.
        unsafe { (self.api.reply_long_long)(self.raw(), value) };
    }

    /// Replies with `err`'s text, kept to one line (it starts with its error code).
    pub fn reply_error(self, err: &Error) {
        let mut text = err.to_string().into_bytes();
        text.retain(|b| *b != b'\r' && *b != b'\n' && *b != 0);
        text.push(0);
        if let Ok(c) = CStr::from_bytes_with_nul(&text) {
            // SAFETY: a NUL-terminated string that lives across the call; Redis copies it.
            unsafe { (self.api.reply_error)(self.raw(), c.as_ptr()) };
        }
    }

    /// Emits a keyspace event about `key`.
    pub fn notify(self, class: Class, event: &CStr, key: RString<'a>) {
        // SAFETY: the event name is NUL-terminated and the key string lives for the call.
        unsafe {
            (self.api.notify_keyspace_event)(self.raw(), class.flag(), event.as_ptr(), key.raw())
        };
    }

    /// Tells WATCH and client-side caching that `key` changed.
    pub fn signal_modified(self, key: RString<'a>) {
        // SAFETY: the key string lives for the call.
        unsafe { (self.api.signal_modified_key)(self.raw(), key.raw()) };
    }

    /// Copies `bytes` into a new Redis string, freed on drop.
    pub fn string(self, bytes: &[u8]) -> Result<OwnedString<'a>, Error> {
        // SAFETY: Redis copies `len` bytes from `ptr`.
        let ptr =
            unsafe { (self.api.create_string)(self.raw(), bytes.as_ptr().cast(), bytes.len()) };
        NonNull::new(ptr)
            .map(|p| OwnedString::new(self, p))
            .ok_or(Error::Server("RedisModule_CreateString"))
    }

    /// Propagates `cmd key` to replicas and the AOF.
    pub fn replicate_key(self, cmd: &CStr, key: RString<'a>) -> Result<(), Error> {
        // SAFETY: the format names one RedisModuleString argument, which follows.
        let r = unsafe { (self.api.replicate)(self.raw(), cmd.as_ptr(), c"s".as_ptr(), key.raw()) };
        status(r, "RedisModule_Replicate")
    }

    /// Propagates `cmd key n...`, up to five integers.
    pub fn replicate_key_ints(self, cmd: &CStr, key: RString<'a>, n: &[i64]) -> Result<(), Error> {
        let (c, k, f) = (cmd.as_ptr(), key.raw(), self.api.replicate);
        let ctx = self.raw();
        // SAFETY: each format names the key string and then as many long longs as follow.
        let r = unsafe {
            match *n {
                [a] => f(ctx, c, c"sl".as_ptr(), k, a),
                [a, b] => f(ctx, c, c"sll".as_ptr(), k, a, b),
                [a, b, x] => f(ctx, c, c"slll".as_ptr(), k, a, b, x),
                [a, b, x, y] => f(ctx, c, c"sllll".as_ptr(), k, a, b, x, y),
                [a, b, x, y, z] => f(ctx, c, c"slllll".as_ptr(), k, a, b, x, y, z),
                _ => return Err(Error::Server("RedisModule_Replicate of that many integers")),
            }
        };
        status(r, "RedisModule_Replicate")
    }

    /// Propagates `cmd key bytes`.
    pub fn replicate_key_bytes(
        self,
        cmd: &CStr,
        key: RString<'a>,
        bytes: &[u8],
    ) -> Result<(), Error> {
        // SAFETY: the format names a string, then a buffer and its length, which follow; Redis
        // copies the buffer.
        let r = unsafe {
            (self.api.replicate)(
                self.raw(),
                cmd.as_ptr(),
                c"sb".as_ptr(),
                key.raw(),
                bytes.as_ptr(),
                bytes.len(),
            )
        };
        status(r, "RedisModule_Replicate")
    }

    /// Propagates the running command exactly as the client sent it.
    pub fn replicate_verbatim(self) -> Result<(), Error> {
        // SAFETY: the context belongs to the running command.
        status(
            unsafe { (self.api.replicate_verbatim)(self.raw()) },
            "RedisModule_ReplicateVerbatim",
        )
    }

    /// Propagates `cmd key word n`, e.g. `ZREMRANGEBYSCORE key -inf cutoff`.
    pub fn replicate_key_word_int(
        self,
        cmd: &CStr,
        key: RString<'a>,
        word: &CStr,
        n: i64,
    ) -> Result<(), Error> {
        // SAFETY: the format names a string, a C string and a long long, which follow.
        let r = unsafe {
            (self.api.replicate)(
                self.raw(),
                cmd.as_ptr(),
                c"scl".as_ptr(),
                key.raw(),
                word.as_ptr(),
                c_longlong::from(n),
            )
        };
        status(r, "RedisModule_Replicate")
    }

    /// Propagates `cmd key n s`, e.g. `ZADD key score member`.
    pub fn replicate_key_int_string(
        self,
        cmd: &CStr,
        key: RString<'a>,
        n: i64,
        s: &OwnedString<'a>,
    ) -> Result<(), Error> {
        // SAFETY: the format names a string, a long long and a string, which follow.
        let r = unsafe {
            (self.api.replicate)(
                self.raw(),
                cmd.as_ptr(),
                c"sls".as_ptr(),
                key.raw(),
                c_longlong::from(n),
                s.raw(),
            )
        };
        status(r, "RedisModule_Replicate")
    }

    /// Propagates `cmd key args...`.
    pub fn replicate_key_args(
        self,
        cmd: &CStr,
        key: RString<'a>,
        args: &[RString<'_>],
    ) -> Result<(), Error> {
        let mut argv: Vec<*mut raw::RedisModuleString> = args.iter().map(|a| a.raw()).collect();
        // SAFETY: the format names a string then an argv array and its length, which follow;
        // Redis copies the array during the call.
        let r = unsafe {
            (self.api.replicate)(
                self.raw(),
                cmd.as_ptr(),
                c"sv".as_ptr(),
                key.raw(),
                argv.as_mut_ptr(),
                argv.len(),
            )
        };
        status(r, "RedisModule_Replicate")
    }
}

pub(super) fn status(r: c_int, what: &'static str) -> Result<(), Error> {
    if r == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(Error::Server(what))
    }
}
