//! Sorted-set commands run in place through `RedisModule_Call`, for what the key API cannot do
//! in O(log N). A `Caller` exists only while its key is closed (see `Key::closed`). Nothing here
//! is propagated: the caller's storage sends its own effects.

use super::context::Ctx;
use super::string::RString;
use crate::core::error::Error;
use redis_module::raw;
use std::os::raw::{c_int, c_longlong};
use std::ptr::NonNull;

pub struct Caller<'a> {
    ctx: Ctx<'a>,
    key: RString<'a>,
}

impl<'a> Caller<'a> {
    pub(super) fn new(ctx: Ctx<'a>, key: RString<'a>) -> Self {
        Caller { ctx, key }
    }

    fn reply(
        &self,
        ptr: *mut raw::RedisModuleCallReply,
        what: &'static str,
    ) -> Result<CallReply<'a>, Error> {
        let reply = NonNull::new(ptr)
            .map(|ptr| CallReply { ctx: self.ctx, ptr })
            .ok_or(Error::Server(what))?;
        if reply.kind() == raw::REDISMODULE_REPLY_ERROR as c_int {
            return Err(Error::Server(what));
        }
        Ok(reply)
    }

    /// The score at 0-based `rank`, O(log N): `ZRANGE key rank rank WITHSCORES`.
    pub fn score_at_rank(&self, rank: u64) -> Result<Option<f64>, Error> {
        let rank = c_longlong::try_from(rank).unwrap_or(c_longlong::MAX);
        // SAFETY: the format names a string, two long longs and a C string, which follow.
        let ptr = unsafe {
            (self.ctx.api.call)(
                self.ctx.raw(),
                c"ZRANGE".as_ptr(),
                c"sllc".as_ptr(),
                self.key.raw(),
                rank,
                rank,
                c"WITHSCORES".as_ptr(),
            )
        };
        let reply = self.reply(ptr, "ZRANGE")?;
        let Some(score) = reply.element_bytes(1) else {
            return Ok(None);
        };
        std::str::from_utf8(score)
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
            .map(Some)
            .ok_or(Error::Server("a ZRANGE score"))
    }

    /// Members scored at or before `max`, O(log N): `ZCOUNT key -inf max`.
    pub fn count_through(&self, max: f64) -> Result<u64, Error> {
        // Rust prints every f64 so that Redis reads it back exactly ("inf" included).
        let max = max.to_string();
        // SAFETY: the format names a string, a C string and a buffer with its length.
        let ptr = unsafe {
            (self.ctx.api.call)(
                self.ctx.raw(),
                c"ZCOUNT".as_ptr(),
                c"scb".as_ptr(),
                self.key.raw(),
                c"-inf".as_ptr(),
                max.as_ptr(),
                max.len(),
            )
        };
        self.reply(ptr, "ZCOUNT")?.integer()
    }

    /// Removes the members scored at or before `cutoff` in O(log N + M), as the seed's script
    /// does: `ZREMRANGEBYSCORE key -inf cutoff`. Redis emits its keyspace events (and deletes
    /// the key if it empties); nothing is propagated.
    pub fn remove_through(&self, cutoff: i64) -> Result<u64, Error> {
        // SAFETY: the format names a string, a C string and a long long, which follow.
        let ptr = unsafe {
            (self.ctx.api.call)(
                self.ctx.raw(),
                c"ZREMRANGEBYSCORE".as_ptr(),
                c"scl".as_ptr(),
                self.key.raw(),
                c"-inf".as_ptr(),
                c_longlong::from(cutoff),
            )
        };
        self.reply(ptr, "ZREMRANGEBYSCORE")?.integer()
    }
}

/// A reply of `RedisModule_Call`; freed on drop.
struct CallReply<'a> {
    ctx: Ctx<'a>,
    ptr: NonNull<raw::RedisModuleCallReply>,
}

impl CallReply<'_> {
    fn kind(&self) -> c_int {
        // SAFETY: a live reply.
        unsafe { (self.ctx.api.call_reply_type)(self.ptr.as_ptr()) }
    }

    fn integer(&self) -> Result<u64, Error> {
        if self.kind() != raw::REDISMODULE_REPLY_INTEGER as c_int {
            return Err(Error::Server("an integer reply"));
        }
        // SAFETY: a live integer reply.
        Ok(
            u64::try_from(unsafe { (self.ctx.api.call_reply_integer)(self.ptr.as_ptr()) })
                .unwrap_or(0),
        )
    }

    /// The bytes of string element `i` of an array reply, borrowed from the reply.
    fn element_bytes(&self, i: usize) -> Option<&[u8]> {
        let api = self.ctx.api;
        // SAFETY: a live reply; elements live as long as it does.
        unsafe {
            if (api.call_reply_type)(self.ptr.as_ptr()) != raw::REDISMODULE_REPLY_ARRAY as c_int
                || i >= (api.call_reply_length)(self.ptr.as_ptr())
            {
                return None;
            }
            let element = NonNull::new((api.call_reply_array_element)(self.ptr.as_ptr(), i))?;
            let mut len = 0usize;
            let ptr = (api.call_reply_string_ptr)(element.as_ptr(), &mut len);
            if ptr.is_null() {
                return None;
            }
            Some(std::slice::from_raw_parts(ptr.cast::<u8>(), len))
        }
    }
}

impl Drop for CallReply<'_> {
    fn drop(&mut self) {
        // SAFETY: a live reply, freed once.
        unsafe { (self.ctx.api.free_call_reply)(self.ptr.as_ptr()) };
    }
}
