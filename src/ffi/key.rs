//! An open key and its sorted-set operations, closed on drop; score-range iterations, stopped on
//! drop. Commands run through `RedisModule_Call` only while the key is closed (`Key::closed`), so
//! a command that deletes the value can never leave us holding a dangling handle.

use super::call::Caller;
use super::context::{Ctx, status};
use super::datatype::{NativeType, Stored, held, into_raw, stored, word_ptr};
use super::string::{OwnedString, RString};
use crate::core::error::Error;
use redis_module::raw;
use std::cell::Cell;
use std::ffi::c_void;
use std::os::raw::{c_int, c_longlong};
use std::ptr::NonNull;

/// How a key is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read only, leaving the key's LRU/LFU clock alone.
    Read,
    /// Read and write (a missing key opens empty, ready to be created).
    Write,
}

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Empty,
    Zset,
    /// The module data type asked about.
    Native,
    Other,
}

/// A key's access recency, kept across inner commands that would otherwise touch it.
#[derive(Debug, Clone, Copy)]
enum Recency {
    /// Idle time in ms (the LRU policies and no eviction).
    Lru(i64),
    /// Access frequency counter (the LFU policies).
    Lfu(c_longlong),
}

pub struct Key<'a> {
    ctx: Ctx<'a>,
    ptr: Option<NonNull<raw::RedisModuleKey>>,
    name: RString<'a>,
    mode: Mode,
    /// The module value last found in the key, with its type: a call reads its log several
    /// times, and asking Redis each time costs more than the log's own work.
    native: Option<(*mut raw::RedisModuleType, NonNull<c_void>)>,
    /// What a value kept as a word leaves to do on close (one field: one check on close).
    on_close: Option<OnClose<'a>>,
    /// The key's expiry where this handle knows it without asking Redis (a key found empty
    /// has none, one set here is the one set), so that an admission on a new key reads no
    /// expiry; None when unknown.
    expiry: Cell<Option<Option<i64>>>,
}

/// What a key does on close for a value Redis keeps as a word.
enum OnClose<'a> {
    /// Put the key's value back into a word if it fits one: set where a value that may fit one
    /// was boxed in this key (a word opened for writing, a value written).
    Repack(fn(&mut Key<'a>)),
    /// Drop the value rebuilt from the word for a key opened for reading (a box of the type
    /// the function drops): plain data, so that a key needs no drop glue besides its close.
    Scratch(NonNull<c_void>, fn(NonNull<c_void>)),
}

/// Drops a scratch value `Key::unpack` boxed.
fn drop_scratch<T>(p: NonNull<c_void>) {
    // SAFETY: a `T` boxed by `unpack` for this key, dropped once (its `OnClose` was taken).
    drop(unsafe { Box::from_raw(p.cast::<T>().as_ptr()) });
}

impl<'a> Key<'a> {
    /// Opens `name`. A missing key opened for reading holds no handle and reads as empty.
    pub fn open(ctx: Ctx<'a>, name: RString<'a>, mode: Mode) -> Result<Key<'a>, Error> {
        let ptr = Key::handle_for(ctx, name, mode);
        if mode == Mode::Write && ptr.is_none() {
            return Err(Error::Server("RedisModule_OpenKey"));
        }
        Ok(Key {
            ctx,
            ptr,
            name,
            mode,
            native: None,
            on_close: None,
            expiry: Cell::new(None),
        })
    }

    fn handle_for(
        ctx: Ctx<'a>,
        name: RString<'a>,
        mode: Mode,
    ) -> Option<NonNull<raw::RedisModuleKey>> {
        let flags = match mode {
            Mode::Read => raw::REDISMODULE_READ | raw::REDISMODULE_OPEN_KEY_NOTOUCH,
            Mode::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        };
        // SAFETY: context and name belong to the running command.
        NonNull::new(unsafe { (ctx.api.open_key)(ctx.raw(), name.raw(), flags as c_int) })
    }

    pub fn name(&self) -> RString<'a> {
        self.name
    }

    pub fn ctx(&self) -> Ctx<'a> {
        self.ctx
    }

    fn handle(&self, what: &'static str) -> Result<*mut raw::RedisModuleKey, Error> {
        self.ptr.map(NonNull::as_ptr).ok_or(Error::Server(what))
    }

    /// What the key holds, telling `T`'s values apart from every other type. A boxed `T` found
    /// here is kept for `native`, which then asks Redis nothing.
    pub fn kind<T: NativeType>(&mut self) -> Kind {
        let Some(k) = self.ptr else {
            return Kind::Empty;
        };
        // SAFETY: an open key.
        match unsafe { (self.ctx.api.key_type)(k.as_ptr()) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => {
                self.expiry.set(Some(None));
                Kind::Empty
            }
            raw::REDISMODULE_KEYTYPE_ZSET => Kind::Zset,
            raw::REDISMODULE_KEYTYPE_MODULE => match self.native_ptr::<T>() {
                Some(p) => {
                    if let Some(Stored::Boxed(value)) = stored::<T>(p.as_ptr()) {
                        self.native = Some((T::slot().get(), value.cast()));
                    }
                    Kind::Native
                }
                None => Kind::Other,
            },
            _ => Kind::Other,
        }
    }

    /// The key's value pointer (a box, or an odd word) if it is a `T`.
    fn native_ptr<T: NativeType>(&self) -> Option<NonNull<c_void>> {
        let t = T::slot().get();
        if let Some((cached, value)) = self.native {
            return (cached == t).then_some(value);
        }
        let k = self.ptr?.as_ptr();
        // SAFETY: an open key; a module type pointer is only compared, its value only read when
        // the type is `T`'s.
        unsafe {
            if t.is_null() || (self.ctx.api.module_type_get_type)(k) != t {
                return None;
            }
            NonNull::new((self.ctx.api.module_type_get_value)(k))
        }
    }

    /// The key's value if it is a `T`, to read or change in place. A value kept as a word is
    /// boxed first: in the key itself when it is open for writing (put back into a word on
    /// close if it still fits one), else in a copy dropped on close.
    #[inline]
    pub fn native<T: NativeType>(&mut self) -> Option<&mut T> {
        // The value found before (a box: a word is never cached), without asking Redis again: a
        // call reads its log several times.
        if let Some((cached, value)) = self.native
            && cached == T::slot().get()
        {
            // SAFETY: as below.
            return Some(unsafe { value.cast::<T>().as_mut() });
        }
        self.find_native::<T>()
    }

    /// `native`'s first look at the key.
    #[inline(never)]
    fn find_native<T: NativeType>(&mut self) -> Option<&mut T> {
        let p = self.native_ptr::<T>()?;
        let mut value = match stored::<T>(p.as_ptr())? {
            Stored::Boxed(v) => v,
            Stored::Word(w) => self.unpack::<T>(w)?,
        };
        self.native = Some((T::slot().get(), value.cast()));
        // SAFETY: Redis owns the value (or the scratch box does) until the key changes, which
        // needs `&mut self` (and forgets the cached pointer), so the borrow cannot outlive it.
        Some(unsafe { value.as_mut() })
    }

    /// Boxes the value a key keeps as `word`: the key's own value when it is open for writing,
    /// else a scratch copy.
    #[cold]
    #[inline(never)]
    fn unpack<T: NativeType>(&mut self, word: u64) -> Option<NonNull<T>> {
        let value = T::from_word(word)?;
        if self.mode == Mode::Read {
            let v = NonNull::from(Box::leak(Box::new(value)));
            self.on_close = Some(OnClose::Scratch(v.cast(), drop_scratch::<T>));
            return Some(v);
        }
        let k = self.ptr?.as_ptr();
        let held = held(&value);
        let boxed = Box::into_raw(Box::new(value));
        // SAFETY: an open key opened for writing, holding a `T` (its word, which owns nothing,
        // is dropped); on success Redis holds the box as the value.
        let r = unsafe {
            (self.ctx.api.module_type_replace_value)(
                k,
                T::slot().get(),
                boxed.cast(),
                std::ptr::null_mut(),
            )
        };
        if r != raw::REDISMODULE_OK as c_int {
            // SAFETY: Redis did not take it: it is still ours, freed once.
            drop(unsafe { Box::from_raw(boxed) });
            return None;
        }
        T::gauge().resized(0, held);
        self.on_close = Some(OnClose::Repack(Key::repack::<T>));
        NonNull::new(boxed)
    }

    /// Puts a boxed `T` that fits a word back into one (see `NativeType::word`).
    fn repack<T: NativeType>(&mut self) {
        let Some(p) = self.native_ptr::<T>() else {
            return;
        };
        let (Some(k), Some(Stored::Boxed(value))) = (self.ptr, stored::<T>(p.as_ptr())) else {
            return;
        };
        // SAFETY: the key's value, a `T` we boxed, not borrowed (this needs `&mut self`).
        let Some(word) = unsafe { value.as_ref() }.word() else {
            return;
        };
        // SAFETY: an open key (a repack is set only on one opened for writing) holding that
        // box; on success the box is ours again, and freed once.
        let r = unsafe {
            (self.ctx.api.module_type_replace_value)(
                k.as_ptr(),
                T::slot().get(),
                word_ptr(word),
                std::ptr::null_mut(),
            )
        };
        if r == raw::REDISMODULE_OK as c_int {
            self.native = None;
            let boxed = unsafe { Box::from_raw(value.as_ptr()) };
            T::gauge().resized(held(&*boxed), 0);
        }
    }

    /// Asks for the key's `T` to be put back into a word on close if it fits one then.
    pub fn repack_on_close<T: NativeType>(&mut self) {
        if self.mode == Mode::Write {
            self.on_close = Some(OnClose::Repack(Key::repack::<T>));
        }
    }

    /// Stores `value` in the key as a `T`, replacing whatever it held.
    pub fn set_native<T: NativeType>(&mut self, value: T) -> Result<(), Error> {
        let k = self.handle("RedisModule_ModuleTypeSetValue")?;
        let t = T::slot().get();
        if t.is_null() {
            return Err(Error::Server("an unregistered data type"));
        }
        let raw = into_raw(value);
        self.native = None;
        self.on_close = Some(OnClose::Repack(Key::repack::<T>));
        // Redis deletes the old value, and its expiry with it, whether or not the new one is
        // taken.
        self.expiry.set(None);
        // SAFETY: an open key opened for writing; on success Redis owns the value and frees it
        // through the type's free callback.
        let r = unsafe { (self.ctx.api.module_type_set_value)(k, t, raw) };
        if r != raw::REDISMODULE_OK as c_int {
            // SAFETY: Redis did not take it: it is still ours, freed once (through the same
            // callback, which counts it out of the gauge as `into_raw` counted it in).
            super::datatype::free_raw::<T>(raw);
            return Err(Error::Server("RedisModule_ModuleTypeSetValue"));
        }
        self.expiry.set(Some(None));
        Ok(())
    }

    /// Members of the sorted set; 0 when the key is empty.
    pub fn len(&self) -> u64 {
        let Some(k) = self.ptr else {
            return 0;
        };
        // SAFETY: an open key.
        u64::try_from(unsafe { (self.ctx.api.value_length)(k.as_ptr()) }).unwrap_or(u64::MAX)
    }

    /// Adds `member` at `score` unless a member of that name exists; true when added.
    pub fn zadd_new(&mut self, score: f64, member: &OwnedString<'a>) -> Result<bool, Error> {
        let k = self.handle("RedisModule_ZsetAdd")?;
        let mut flags = raw::REDISMODULE_ZADD_NX as c_int;
        // SAFETY: an open key and a live string; Redis copies the member.
        let r = unsafe { (self.ctx.api.zset_add)(k, score, member.raw(), &mut flags) };
        status(r, "RedisModule_ZsetAdd")?;
        Ok(flags & raw::REDISMODULE_ZADD_ADDED as c_int != 0)
    }

    /// Removes `member`; the key goes when its last member does.
    pub fn zrem(&mut self, member: &OwnedString<'a>) -> Result<(), Error> {
        let k = self.handle("RedisModule_ZsetRem")?;
        // The last member takes the key, and its expiry, with it.
        self.expiry.set(None);
        // SAFETY: an open key and a live string.
        let r = unsafe { (self.ctx.api.zset_rem)(k, member.raw(), std::ptr::null_mut()) };
        status(r, "RedisModule_ZsetRem")
    }

    /// Starts a score-range iteration at its first (or last) member. The guard stops it and
    /// borrows the key, so nothing changes the set while it iterates.
    pub fn range(
        &mut self,
        min: f64,
        max: f64,
        min_excl: bool,
        first: bool,
    ) -> Result<Range<'_, 'a>, Error> {
        let k = self.handle("zset range")?;
        let f = if first {
            self.ctx.api.zset_first_in_score_range
        } else {
            self.ctx.api.zset_last_in_score_range
        };
        // SAFETY: an open key; the range is stopped by the guard's drop.
        let r = unsafe { f(k, min, max, c_int::from(min_excl), 0) };
        status(r, "zset range")?;
        Ok(Range { key: self, ptr: k })
    }

    /// Deletes the key; Redis frees a large value in the background.
    pub fn unlink(&mut self) -> Result<(), Error> {
        let k = self.handle("RedisModule_UnlinkKey")?;
        self.native = None;
        self.expiry.set(None);
        // SAFETY: an open key, opened for writing.
        status(
            unsafe { (self.ctx.api.unlink_key)(k) },
            "RedisModule_UnlinkKey",
        )?;
        self.expiry.set(Some(None));
        Ok(())
    }

    /// The key's absolute expiry in ms, if it has one.
    pub fn expire_at(&self) -> Option<i64> {
        if let Some(known) = self.expiry.get() {
            return known;
        }
        let k = self.ptr?;
        // SAFETY: an open key.
        let at = unsafe { (self.ctx.api.get_abs_expire)(k.as_ptr()) };
        let at = (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at);
        self.expiry.set(Some(at));
        at
    }

    pub fn set_expire_at(&mut self, at_ms: i64) -> Result<(), Error> {
        let k = self.handle("RedisModule_SetAbsExpire")?;
        self.expiry.set(None);
        // SAFETY: an open key, opened for writing.
        status(
            unsafe { (self.ctx.api.set_abs_expire)(k, at_ms) },
            "RedisModule_SetAbsExpire",
        )?;
        self.expiry.set(Some(Some(at_ms)));
        Ok(())
    }

    /// Closes the key, runs `f` with a caller that may run commands on it, then opens it again.
    /// A key opened for reading keeps its LRU/LFU clock: the inner commands' touch is undone.
    pub fn closed<R>(&mut self, f: impl FnOnce(&Caller<'a>) -> R) -> R {
        let recency = match self.mode {
            Mode::Read => self.recency(),
            Mode::Write => None,
        };
        self.close();
        // The inner commands may change or remove the key.
        self.expiry.set(None);
        let out = f(&Caller::new(self.ctx, self.name));
        self.ptr = Key::handle_for(self.ctx, self.name, self.mode);
        if let Some(r) = recency {
            self.restore(r);
        }
        out
    }

    fn recency(&self) -> Option<Recency> {
        let k = self.ptr?.as_ptr();
        let (mut idle, mut freq) = (-1, -1);
        // SAFETY: an open key. Each call answers -1 when the policy keeps the other clock.
        unsafe {
            (self.ctx.api.get_lru)(k, &mut idle);
            (self.ctx.api.get_lfu)(k, &mut freq);
        }
        match (idle, freq) {
            (idle, _) if idle >= 0 => Some(Recency::Lru(idle)),
            (_, freq) if freq >= 0 => Some(Recency::Lfu(freq)),
            _ => None,
        }
    }

    fn restore(&self, recency: Recency) {
        let Some(k) = self.ptr else {
            return;
        };
        // SAFETY: an open key.
        match recency {
            Recency::Lru(idle) => unsafe { (self.ctx.api.set_lru)(k.as_ptr(), idle) },
            Recency::Lfu(freq) => unsafe { (self.ctx.api.set_lfu)(k.as_ptr(), freq) },
        };
    }

    /// Repacks the value or drops the scratch copy (see `OnClose`).
    #[cold]
    #[inline(never)]
    fn close_word(&mut self) {
        match self.on_close.take() {
            Some(OnClose::Repack(repack)) => repack(self),
            Some(OnClose::Scratch(value, drop)) => {
                self.native = None;
                drop(value);
            }
            None => {}
        }
    }

    #[inline]
    fn close(&mut self) {
        if self.on_close.is_some() {
            self.close_word();
        }
        self.native = None;
        if let Some(k) = self.ptr.take() {
            // SAFETY: an open key, closed once (the handle is taken).
            unsafe { (self.ctx.api.close_key)(k.as_ptr()) };
        }
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

/// An active sorted-set iteration; stopped on drop.
pub struct Range<'k, 'a> {
    key: &'k mut Key<'a>,
    ptr: *mut raw::RedisModuleKey,
}

impl<'a> Range<'_, 'a> {
    /// The current member and its score, or None past the end.
    pub fn current(&self) -> Option<(OwnedString<'a>, f64)> {
        let mut score = 0.0;
        // SAFETY: an active range on an open key; Redis returns a new string we own.
        let ptr = unsafe { (self.key.ctx.api.zset_range_current_element)(self.ptr, &mut score) };
        NonNull::new(ptr).map(|p| (OwnedString::new(self.key.ctx, p), score))
    }

    /// Whether the range holds no (more) members; unlike `current`, allocates nothing.
    pub fn is_empty(&self) -> bool {
        // SAFETY: an active range on an open key.
        unsafe { (self.key.ctx.api.zset_range_end_reached)(self.ptr) != 0 }
    }

    /// The current score, or None past the end.
    pub fn score(&self) -> Option<f64> {
        self.current().map(|(_, s)| s)
    }

    /// Moves on; false past the end.
    pub fn next(&self) -> bool {
        // SAFETY: an active range on an open key.
        unsafe { (self.key.ctx.api.zset_range_next)(self.ptr) != 0 }
    }

    /// Moves back; false past the start.
    pub fn prev(&self) -> bool {
        // SAFETY: an active range on an open key.
        unsafe { (self.key.ctx.api.zset_range_prev)(self.ptr) != 0 }
    }
}

impl Drop for Range<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: an active range, stopped once.
        unsafe { (self.key.ctx.api.zset_range_stop)(self.ptr) };
    }
}
