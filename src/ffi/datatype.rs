//! Module data types: registration and every callback a real type needs (RDB save/load, AOF
//! rewrite, memory usage, digest, free, free effort, copy), each a thin shell around the type's
//! safe methods with panics contained, or, where output is being written, turned into an abort. `DUMP`/`RESTORE`/`MIGRATE` go through the RDB callbacks.

use super::api::{self, Api};
use super::command::Loader;
use redis_module::raw;
use std::ffi::{CStr, CString, c_void};
use std::os::raw::{c_int, c_longlong};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Where a registered type's handle is kept: one static beside each type.
pub struct TypeSlot(AtomicPtr<raw::RedisModuleType>);

impl TypeSlot {
    pub const fn new() -> Self {
        TypeSlot(AtomicPtr::new(ptr::null_mut()))
    }

    pub(super) fn get(&self) -> *mut raw::RedisModuleType {
        self.0.load(Ordering::Relaxed)
    }
}

impl Default for TypeSlot {
    fn default() -> Self {
        TypeSlot::new()
    }
}

/// How many values of a type are alive and the bytes they hold (each its box and the heap it
/// owns). Values are freed on the main thread, or on the lazy-free thread when big: atomics.
pub struct Gauge {
    values: AtomicU64,
    bytes: AtomicU64,
}

impl Gauge {
    pub const fn new() -> Self {
        Gauge {
            values: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    pub fn values(&self) -> u64 {
        self.values.load(Ordering::Relaxed)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// A value of `held` bytes came to life (created, loaded, copied).
    pub(super) fn born(&self, held: usize) {
        self.values.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(held as u64, Ordering::Relaxed);
    }

    /// A value of `held` bytes was freed.
    fn died(&self, held: usize) {
        self.values.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(held as u64, Ordering::Relaxed);
    }

    /// A live value's heap went from `before` to `after` bytes (unchanged: no locked
    /// instruction).
    pub fn resized(&self, before: usize, after: usize) {
        if after > before {
            self.bytes
                .fetch_add((after - before) as u64, Ordering::Relaxed);
        } else if after < before {
            self.bytes
                .fetch_sub((before - after) as u64, Ordering::Relaxed);
        }
    }
}

impl Default for Gauge {
    fn default() -> Self {
        Gauge::new()
    }
}

/// A value kept in a key as a module data type.
pub trait NativeType: Sized + Clone + 'static {
    /// Nine characters, fixed forever: RDB files name the type by it.
    const NAME: &'static CStr;
    /// The encoding version `save` writes.
    const ENCODING: i32;
    fn slot() -> &'static TypeSlot;
    /// The live values of the type: every place that creates, changes or frees one keeps it.
    fn gauge() -> &'static Gauge;
    fn save(&self, out: &mut RdbOut<'_>);
    /// Rebuilds a value; an error (logged, with the key) refuses the whole payload.
    fn load(input: &mut RdbIn<'_>, encver: i32) -> Result<Self, String>;
    /// Commands that rebuild the value, for an AOF rewrite without the RDB preamble.
    fn rewrite(&self, out: &mut AofOut<'_>);
    fn digest(&self, out: &mut Digest<'_>);
    /// Bytes of heap the value owns besides itself.
    fn heap_bytes(&self) -> usize;
    /// Offers the value's heap buffers to the defragmenter from `cursor` on (0: all of them),
    /// until it says to stop: then the cursor to resume from.
    fn defrag(&mut self, d: &mut Defrag<'_>, cursor: u64) -> Option<u64>;
    /// How much work freeing takes; above 64, Redis frees the value off the main thread.
    fn free_effort(&self) -> usize;
    /// The value as a word below 2^62 when it fits one: Redis then keeps the word in the
    /// pointer's place (as it keeps a small integer, `OBJ_ENCODING_INT`), no allocation.
    fn word(&self) -> Option<u64> {
        None
    }
    /// The value `word` gave `word` for; None for any other word.
    fn from_word(_word: u64) -> Option<Self> {
        None
    }
}

/// Bytes a value holds for its gauge: its box and its heap.
pub(super) fn held<T: NativeType>(v: &T) -> usize {
    std::mem::size_of::<T>() + v.heap_bytes()
}

/// What Redis holds for a value: the pointer to its box, or (an odd pointer) a word.
pub(super) enum Stored<T> {
    Boxed(NonNull<T>),
    Word(u64),
}

/// What the value pointer `p` holds; None for a null one.
pub(super) fn stored<T>(p: *const c_void) -> Option<Stored<T>> {
    let bits = p as usize as u64;
    if bits & 1 == 1 {
        return Some(Stored::Word(bits >> 1));
    }
    NonNull::new(p.cast_mut().cast::<T>()).map(Stored::Boxed)
}

/// The pointer that holds `word` (below 2^62): odd, so that no box is ever taken for it.
pub(super) fn word_ptr(word: u64) -> *mut c_void {
    ((word << 1) | 1) as usize as *mut c_void
}

/// Hands `v` to Redis as a word when it fits one, else boxed; counted as a live value.
pub(super) fn into_raw<T: NativeType>(v: T) -> *mut c_void {
    match v.word() {
        Some(word) => {
            T::gauge().born(0);
            word_ptr(word)
        }
        None => {
            T::gauge().born(held(&v));
            Box::into_raw(Box::new(v)).cast()
        }
    }
}

/// Runs `f` on the value behind a callback's pointer: the box's, or one rebuilt from the word.
fn with_value<T: NativeType, R>(p: *const c_void, f: impl FnOnce(&T) -> R) -> Option<R> {
    match stored::<T>(p)? {
        // SAFETY: a `T` this module boxed (Redis passes back what we gave it), alive for the
        // callback.
        Stored::Boxed(v) => Some(f(unsafe { v.as_ref() })),
        Stored::Word(w) => T::from_word(w).map(|v| f(&v)),
    }
}

/// The RDB (or DUMP payload) being written.
pub struct RdbOut<'a> {
    io: *mut raw::RedisModuleIO,
    api: &'a Api,
}

impl RdbOut<'_> {
    pub fn unsigned(&mut self, v: u64) {
        // SAFETY: the IO handle of the running save callback.
        unsafe { (self.api.save_unsigned)(self.io, v) };
    }

    pub fn buffer(&mut self, bytes: &[u8]) {
        // SAFETY: as above; Redis copies the bytes.
        unsafe { (self.api.save_string_buffer)(self.io, bytes.as_ptr().cast(), bytes.len()) };
    }
}

/// The RDB (or RESTORE payload) being read. With `HANDLE_IO_ERRORS` set, a short or broken
/// payload reads as an error here instead of stopping the server.
pub struct RdbIn<'a> {
    io: *mut raw::RedisModuleIO,
    api: &'a Api,
}

impl RdbIn<'_> {
    fn failed(&self) -> bool {
        // SAFETY: the IO handle of the running load callback.
        unsafe { (self.api.is_io_error)(self.io) != 0 }
    }

    pub fn unsigned(&mut self) -> Result<u64, String> {
        // SAFETY: as above.
        let v = unsafe { (self.api.load_unsigned)(self.io) };
        if self.failed() {
            return Err("the payload ends early".into());
        }
        Ok(v)
    }

    /// Reads a string buffer and hands it to `f` where Redis loaded it (no copy: a log's
    /// buffer is a byte or more per request), then frees it.
    pub fn with_buffer<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<R, String> {
        let mut len = 0usize;
        // SAFETY: as above; Redis hands us a buffer of `len` bytes that we must free.
        let ptr = unsafe { (self.api.load_string_buffer)(self.io, &mut len) };
        let Some(ptr) = NonNull::new(ptr) else {
            return Err("the payload ends early".into());
        };
        if self.failed() {
            // SAFETY: the buffer Redis allocated for us, freed once.
            unsafe { (self.api.free)(ptr.as_ptr().cast()) };
            return Err("the payload ends early".into());
        }
        // SAFETY: `len` bytes at `ptr`, alive until the free below; `f` cannot keep them.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.as_ptr().cast::<u8>(), len) };
        let r = catch_unwind(AssertUnwindSafe(|| f(bytes)));
        // SAFETY: as above, after the last use of `bytes`.
        unsafe { (self.api.free)(ptr.as_ptr().cast()) };
        r.map_err(|_| "a bug was caught while loading".to_string())
    }
}

/// An AOF rewrite in progress for one key.
pub struct AofOut<'a> {
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    api: &'a Api,
}

impl AofOut<'_> {
    /// Appends `cmd key bytes` to the AOF.
    pub fn emit(&mut self, cmd: &CStr, bytes: &[u8]) {
        // SAFETY: the format names the key string, then a buffer and its length.
        unsafe {
            (self.api.emit_aof)(
                self.io,
                cmd.as_ptr(),
                c"sb".as_ptr(),
                self.key,
                bytes.as_ptr(),
                bytes.len(),
            )
        };
    }
}

/// `DEBUG DIGEST` of one value.
pub struct Digest<'a> {
    md: *mut raw::RedisModuleDigest,
    api: &'a Api,
}

impl Digest<'_> {
    pub fn add(&mut self, v: i64) {
        // SAFETY: the digest handle of the running callback.
        unsafe { (self.api.digest_add_long_long)(self.md, c_longlong::from(v)) };
    }

    pub fn end_sequence(&mut self) {
        // SAFETY: as above.
        unsafe { (self.api.digest_end_sequence)(self.md) };
    }
}

extern "C" fn rdb_load<T: NativeType>(io: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    let Some(api) = api::get() else {
        return ptr::null_mut();
    };
    let loaded = catch_unwind(AssertUnwindSafe(|| T::load(&mut RdbIn { io, api }, encver)))
        .unwrap_or_else(|_| Err("a bug was caught while loading".into()));
    match loaded {
        Ok(v) => into_raw(v),
        Err(why) => {
            let why = format!(
                "slidingwindow: refusing a {} value: {why}\0",
                T::NAME.to_string_lossy()
            );
            if let Ok(why) = CStr::from_bytes_with_nul(why.as_bytes()) {
                // SAFETY: "%s" with one NUL-terminated string.
                unsafe {
                    (api.log_io_error)(io, c"warning".as_ptr(), c"%s".as_ptr(), why.as_ptr())
                };
            }
            ptr::null_mut()
        }
    }
}

/// Runs a callback that writes output (an RDB value, AOF commands, a digest). A panic half-way
/// would leave a truncated value there, so the process (the server, or the child saving for it)
/// stops instead, saying why in the log; the last complete RDB or AOF stays as it was.
fn or_abort<T: NativeType>(api: &Api, what: &str, f: impl FnOnce()) {
    let Err(payload) = catch_unwind(AssertUnwindSafe(f)) else {
        return;
    };
    let why = match (
        payload.downcast_ref::<String>(),
        payload.downcast_ref::<&str>(),
    ) {
        (Some(s), _) => s.as_str(),
        (None, Some(s)) => s,
        (None, None) => "a panic",
    };
    let why = why.strip_prefix("slidingwindow: ").unwrap_or(why);
    let line = format!(
        "slidingwindow: {why}, in {what} of a {} value: aborting rather than writing a truncated value",
        T::NAME.to_string_lossy()
    );
    if let Ok(line) = CString::new(line) {
        // SAFETY: no context needed; "%s" with one NUL-terminated string.
        unsafe {
            (api.log)(
                ptr::null_mut(),
                c"warning".as_ptr(),
                c"%s".as_ptr(),
                line.as_ptr(),
            )
        };
    }
    std::process::abort();
}

extern "C" fn rdb_save<T: NativeType>(io: *mut raw::RedisModuleIO, v: *mut c_void) {
    if let Some(api) = api::get() {
        or_abort::<T>(api, "rdb_save", || {
            with_value(v, |v: &T| v.save(&mut RdbOut { io, api }));
        });
    }
}

extern "C" fn aof_rewrite<T: NativeType>(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    v: *mut c_void,
) {
    if let Some(api) = api::get() {
        or_abort::<T>(api, "aof_rewrite", || {
            with_value(v, |v: &T| v.rewrite(&mut AofOut { io, key, api }));
        });
    }
}

extern "C" fn mem_usage<T: NativeType>(v: *const c_void) -> usize {
    // A word holds no allocation.
    let (Some(api), Some(Stored::Boxed(value))) = (api::get(), stored::<T>(v)) else {
        return 0;
    };
    // What the allocator really handed out for the value, and its buffers in size classes.
    // SAFETY: the value comes from the module allocator (RedisModule_Alloc), a `T` we boxed.
    let own = unsafe { (api.malloc_size)(v.cast_mut()) };
    own + unsafe { value.as_ref() }.heap_bytes()
}

/// The server's defragmenter during one value's turn: each buffer offered to it may move; it
/// may also say that the turn's time is up.
pub struct Defrag<'a> {
    ctx: *mut raw::RedisModuleDefragCtx,
    alloc: DefragAllocFn,
    should_stop: Option<DefragShouldStopFn>,
    _api: &'a Api,
    /// Allocations moved so far.
    moved: usize,
    /// Times the value asked whether to stop.
    asked: usize,
}

type DefragAllocFn =
    unsafe extern "C" fn(*mut raw::RedisModuleDefragCtx, *mut c_void) -> *mut c_void;
type DefragShouldStopFn = unsafe extern "C" fn(*mut raw::RedisModuleDefragCtx) -> c_int;

/// The value asks after each buffer; the server's clock is read once in this many.
const ASK_EVERY: usize = 16;

impl Defrag<'_> {
    /// The new home of the allocation at `p`, if the defragmenter moved it (freeing the old).
    fn moved(&mut self, p: *mut c_void) -> Option<NonNull<c_void>> {
        // SAFETY: `p` is a live allocation of the module allocator, which the global allocator
        // is; the server copies it and frees the old one, or returns NULL and leaves it.
        let moved = NonNull::new(unsafe { (self.alloc)(self.ctx, p) });
        self.moved += usize::from(moved.is_some());
        moved
    }

    /// Where the previous turn on this value stopped: 0 for a fresh start, or on a server that
    /// keeps no cursor (a value small enough to be done in one turn).
    fn cursor(&self) -> u64 {
        let mut cursor: std::os::raw::c_ulong = 0;
        // SAFETY: read once; the context of the running callback and a place for the cursor.
        let got = unsafe { raw::RedisModule_DefragCursorGet }
            .map(|get| unsafe { get(self.ctx, &mut cursor) });
        match got {
            Some(ok) if ok == raw::REDISMODULE_OK as c_int => cursor,
            _ => 0,
        }
    }

    /// Keeps `cursor` for the next turn on this value; false where the server keeps none.
    fn set_cursor(&self, cursor: u64) -> bool {
        let cursor = std::os::raw::c_ulong::try_from(cursor).unwrap_or(std::os::raw::c_ulong::MAX);
        // SAFETY: as in `cursor`.
        let set =
            unsafe { raw::RedisModule_DefragCursorSet }.map(|set| unsafe { set(self.ctx, cursor) });
        set == Some(raw::REDISMODULE_OK as c_int)
    }
}

impl crate::core::compact::heap::Mover for Defrag<'_> {
    fn bytes(&mut self, buf: &mut Box<[u8]>) {
        if buf.is_empty() {
            return;
        }
        let len = buf.len();
        let old = buf.as_mut_ptr();
        if let Some(new) = self.moved(old.cast()) {
            let moved = ptr::slice_from_raw_parts_mut(new.as_ptr().cast::<u8>(), len);
            // SAFETY: the old allocation is gone; the new one holds the same bytes with the same
            // layout, so it becomes the box, and the old box is forgotten, never freed twice.
            std::mem::forget(std::mem::replace(buf, unsafe { Box::from_raw(moved) }));
        }
    }

    fn vec<T>(&mut self, v: &mut Vec<T>) {
        if v.capacity() == 0 || size_of::<T>() == 0 {
            return;
        }
        let (len, cap) = (v.len(), v.capacity());
        if let Some(new) = self.moved(v.as_mut_ptr().cast()) {
            // SAFETY: as in `bytes`: the same elements at a new address, same capacity.
            let moved = unsafe { Vec::from_raw_parts(new.as_ptr().cast::<T>(), len, cap) };
            std::mem::forget(std::mem::replace(v, moved));
        }
    }

    fn boxed<T>(&mut self, b: &mut Box<T>) {
        if size_of::<T>() == 0 {
            return;
        }
        let old: *mut T = &mut **b;
        if let Some(new) = self.moved(old.cast()) {
            // SAFETY: as in `bytes`: the same value at a new address.
            let moved = unsafe { Box::from_raw(new.as_ptr().cast::<T>()) };
            std::mem::forget(std::mem::replace(b, moved));
        }
    }

    fn should_stop(&mut self) -> bool {
        self.asked += 1;
        if !self.asked.is_multiple_of(ASK_EVERY) {
            return false;
        }
        // SAFETY: the context of the running callback.
        self.should_stop
            .is_some_and(|stop| unsafe { stop(self.ctx) } != 0)
    }
}

/// Moves the value itself (on a fresh start), then lets it move its buffers until the server's
/// time for this turn is up (`RedisModule_DefragShouldStop`): then it keeps where it stopped
/// (`RedisModule_DefragCursorSet`) and asks for another turn, where the server keeps cursors. A
/// large value (its free effort above `active-defrag-max-scan-fields`) gets such turns; a
/// small one is done in one.
extern "C" fn defrag<T: NativeType>(
    ctx: *mut raw::RedisModuleDefragCtx,
    _key: *mut raw::RedisModuleString,
    value: *mut *mut c_void,
) -> c_int {
    // SAFETY: read once; present on servers that call this callback at all.
    let (Some(api), Some(alloc)) = (api::get(), unsafe { raw::RedisModule_DefragAlloc }) else {
        return 0;
    };
    let mut d = Defrag {
        ctx,
        alloc,
        // SAFETY: read once, like `RedisModule_DefragAlloc`.
        should_stop: unsafe { raw::RedisModule_DefragShouldStop },
        _api: api,
        moved: 0,
        asked: 0,
    };
    let cursor = d.cursor();
    // SAFETY: Redis hands the slot holding our value; we may replace it with the moved copy.
    // A word holds nothing to move.
    let Some(slot) =
        (unsafe { value.as_mut() }).filter(|v| matches!(stored::<T>(**v), Some(Stored::Boxed(_))))
    else {
        return 0;
    };
    if cursor == 0
        && let Some(new) = d.moved(*slot)
    {
        *slot = new.as_ptr();
    }
    // SAFETY: the slot holds a `T` we boxed (moved or not), ours alone during the callback.
    let next = match unsafe { slot.cast::<T>().as_mut() } {
        Some(v) => catch_unwind(AssertUnwindSafe(|| v.defrag(&mut d, cursor))).unwrap_or(None),
        None => None,
    };
    let more = next.is_some_and(|next| d.set_cursor(next));
    if d.moved > 0 || cursor > 0 || more {
        // At `debug` level only: what tests look for, silent otherwise.
        let line = match (cursor, next) {
            (0, None) => format!(
                "slidingwindow: defrag moved {} allocations of a value\0",
                d.moved
            ),
            (from, next) => format!(
                "slidingwindow: defrag moved {} allocations of a value in a turn from block {from} to {}\0",
                d.moved,
                next.map_or("its end".to_string(), |n| format!("block {n}"))
            ),
        };
        // SAFETY: "%s" with one NUL-terminated string; a NULL context logs as the module.
        if let (Some(log), Ok(line)) = (
            unsafe { raw::RedisModule_Log },
            CStr::from_bytes_with_nul(line.as_bytes()),
        ) {
            unsafe {
                log(
                    ptr::null_mut(),
                    c"debug".as_ptr(),
                    c"%s".as_ptr(),
                    line.as_ptr(),
                )
            };
        }
    }
    c_int::from(more)
}

extern "C" fn digest<T: NativeType>(md: *mut raw::RedisModuleDigest, v: *mut c_void) {
    if let Some(api) = api::get() {
        or_abort::<T>(api, "digest", || {
            with_value(v, |v: &T| v.digest(&mut Digest { md, api }));
        });
    }
}

/// Frees a value `into_raw` made that Redis did not take.
pub(super) fn free_raw<T: NativeType>(v: *mut c_void) {
    free::<T>(v);
}

extern "C" fn free<T: NativeType>(v: *mut c_void) {
    match stored::<T>(v) {
        Some(Stored::Boxed(v)) => {
            // SAFETY: a value we boxed, handed back once to be freed (maybe on the lazy-free
            // thread).
            let v = unsafe { Box::from_raw(v.as_ptr()) };
            T::gauge().died(held(&*v));
            drop(v);
        }
        Some(Stored::Word(_)) => T::gauge().died(0),
        None => {}
    }
}

extern "C" fn free_effort<T: NativeType>(
    _key: *mut raw::RedisModuleString,
    v: *const c_void,
) -> usize {
    with_value(v, T::free_effort).unwrap_or(1)
}

extern "C" fn copy<T: NativeType>(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    v: *const c_void,
) -> *mut c_void {
    catch_unwind(AssertUnwindSafe(|| {
        with_value(v, |v: &T| into_raw(v.clone())).unwrap_or(ptr::null_mut())
    }))
    .unwrap_or(ptr::null_mut())
}

/// Whether the server offers the defrag API to module types.
fn defrag_supported() -> bool {
    // SAFETY: filled once at load, read here at load.
    unsafe { raw::RedisModule_DefragAlloc }.is_some()
}

impl Loader<'_> {
    /// Registers `T` as a module data type (at load only).
    pub fn data_type<T: NativeType>(&self) -> Result<(), String> {
        let fail = || format!("cannot register data type {}", T::NAME.to_string_lossy());
        // SAFETY: read once at load.
        let create = unsafe { raw::RedisModule_CreateDataType }.ok_or_else(fail)?;
        let mut methods = raw::RedisModuleTypeMethods {
            // Version 3 brings free_effort, unlink, copy and defrag (Redis >= 6.0).
            version: 3,
            rdb_load: Some(rdb_load::<T>),
            rdb_save: Some(rdb_save::<T>),
            aof_rewrite: Some(aof_rewrite::<T>),
            mem_usage: Some(mem_usage::<T>),
            digest: Some(digest::<T>),
            free: Some(free::<T>),
            aux_load: None,
            aux_save: None,
            aux_save_triggers: 0,
            free_effort: Some(free_effort::<T>),
            unlink: None,
            copy: Some(copy::<T>),
            // Only where the server exports the defrag API to modules (Redis 6.2 on, Valkey):
            // a server without `RedisModule_DefragAlloc` never calls it.
            defrag: defrag_supported().then_some(defrag::<T> as _),
            mem_usage2: None,
            free_effort2: None,
            unlink2: None,
            copy2: None,
            aux_save2: None,
        };
        // SAFETY: the load context; Redis copies the methods.
        let t = unsafe { create(self.raw(), T::NAME.as_ptr(), T::ENCODING, &mut methods) };
        if t.is_null() {
            return Err(fail());
        }
        T::slot().0.store(t, Ordering::Relaxed);
        Ok(())
    }
}
