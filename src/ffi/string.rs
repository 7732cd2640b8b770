//! Redis strings: arguments borrowed for the call, and strings we create and free on drop.

use super::context::Ctx;
use redis_module::raw;
use std::marker::PhantomData;
use std::os::raw::c_int;
use std::ptr::NonNull;

/// A string Redis owns for the whole call (an argument, a key name); never freed by us.
#[derive(Clone, Copy)]
pub struct RString<'a> {
    ptr: NonNull<raw::RedisModuleString>,
    _call: PhantomData<&'a raw::RedisModuleString>,
}

impl RString<'_> {
    pub(super) fn raw(self) -> *mut raw::RedisModuleString {
        self.ptr.as_ptr()
    }
}

/// A string we created; freed on drop.
pub struct OwnedString<'a> {
    ctx: Ctx<'a>,
    ptr: NonNull<raw::RedisModuleString>,
}

impl<'a> OwnedString<'a> {
    pub(super) fn new(ctx: Ctx<'a>, ptr: NonNull<raw::RedisModuleString>) -> Self {
        OwnedString { ctx, ptr }
    }

    pub(super) fn raw(&self) -> *mut raw::RedisModuleString {
        self.ptr.as_ptr()
    }

    /// Borrows it as an argument-like string for as long as it lives.
    pub fn as_rstring(&self) -> RString<'_> {
        RString {
            ptr: self.ptr,
            _call: PhantomData,
        }
    }
}

impl Drop for OwnedString<'_> {
    fn drop(&mut self) {
        // SAFETY: we created this string and free it exactly once.
        unsafe { (self.ctx.api.free_string)(self.ctx.raw(), self.ptr.as_ptr()) };
    }
}

/// The command's arguments, borrowed from Redis for the call.
#[derive(Clone, Copy)]
pub struct Argv<'a> {
    ctx: Ctx<'a>,
    ptrs: *mut *mut raw::RedisModuleString,
    len: usize,
}

impl<'a> Argv<'a> {
    /// # Safety
    /// `ptrs` and `argc` must be what Redis passed to the running command.
    pub(super) unsafe fn new(
        ctx: Ctx<'a>,
        ptrs: *mut *mut raw::RedisModuleString,
        argc: c_int,
    ) -> Self {
        let len = if ptrs.is_null() {
            0
        } else {
            usize::try_from(argc).unwrap_or(0)
        };
        Argv { ctx, ptrs, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, i: usize) -> Option<RString<'a>> {
        if i >= self.len {
            return None;
        }
        // SAFETY: `i` is within the argc Redis gave us.
        let ptr = unsafe { *self.ptrs.add(i) };
        NonNull::new(ptr).map(|ptr| RString {
            ptr,
            _call: PhantomData,
        })
    }

    /// The bytes of argument `i`; empty for an index out of range.
    pub fn bytes(&self, i: usize) -> &'a [u8] {
        let Some(s) = self.get(i) else {
            return &[];
        };
        let mut len = 0usize;
        // SAFETY: the string lives for the call, and Redis reports its length.
        let ptr = unsafe { (self.ctx.api.string_ptr_len)(s.raw(), &mut len) };
        if ptr.is_null() {
            return &[];
        }
        // SAFETY: `len` bytes at `ptr`, owned by Redis for the call.
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }
}
