//! The module's configs and their current values, read by every call.

use crate::core::error::MAX_ADD_PER_CALL;
use crate::ffi::{EnumConfig, Loader, NumericConfig};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

pub use crate::store::Storage;

// Commands and config callbacks run on the main thread; atomics keep that free of `unsafe`.
static STORAGE: AtomicI32 = AtomicI32::new(0);
static MAX_MEMBERS_PER_CALL: AtomicU64 = AtomicU64::new(MAX_ADD_PER_CALL);

/// `slidingwindow.storage`: the storage of new keys.
pub fn storage() -> Storage {
    match STORAGE.load(Ordering::Relaxed) {
        1 => Storage::Compact,
        _ => Storage::Zset,
    }
}

/// `slidingwindow.max-members-per-call`: most members one admitted call may add.
pub fn max_members_per_call() -> u64 {
    MAX_MEMBERS_PER_CALL.load(Ordering::Relaxed)
}

static STORAGE_CONFIG: EnumConfig = EnumConfig {
    name: c"storage",
    // In the order of `Storage`'s values above.
    names: &[c"zset", c"compact"],
    default: 0,
    get: || STORAGE.load(Ordering::Relaxed),
    set: |v| STORAGE.store(v, Ordering::Relaxed),
};

/// The highest cap: 10 million inserts block the server for seconds already.
const MAX_MEMBERS_LIMIT: i64 = 10_000_000;

static MAX_MEMBERS_CONFIG: NumericConfig = NumericConfig {
    name: c"max-members-per-call",
    default: MAX_ADD_PER_CALL as i64,
    min: 1,
    max: MAX_MEMBERS_LIMIT,
    get: || i64::try_from(MAX_MEMBERS_PER_CALL.load(Ordering::Relaxed)).unwrap_or(i64::MAX),
    set: |v| MAX_MEMBERS_PER_CALL.store(u64::try_from(v).unwrap_or(1), Ordering::Relaxed),
};

/// Registers the configs and applies the values redis.conf or `MODULE LOADEX` gave.
pub fn register(loader: &Loader) -> Result<(), String> {
    loader.enum_config(&STORAGE_CONFIG)?;
    loader.numeric_config(&MAX_MEMBERS_CONFIG)?;
    loader.load_configs()
}
