//! Where a log is kept. Each storage implements the window's `Log` over an open key, records what
//! it changes, and owns its effects: what it propagates to replicas and the AOF, and which
//! keyspace events it emits.
//!
//! Every command reaches a key's storage through `open`, which checks the key's type once.

pub mod compact;
pub mod zset;

use crate::core::error::{Error, MAX_ZSET_MEMBERS};
use crate::core::window::Log;
use crate::ffi::{Class, Ctx, EnumConfig, Key, Kind, Loader, Mode, NativeType, RString};
use compact::CompactStore;
use compact::log::CompactLog;
use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, Ordering};
use zset::ZsetLog;

/// The two storages of a log, in the order of the `slidingwindow.storage` config's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    Zset,
    Compact,
}

impl Storage {
    const ALL: [Storage; 2] = [Storage::Zset, Storage::Compact];

    pub fn name(self) -> &'static str {
        match self {
            Storage::Zset => "zset",
            Storage::Compact => "compact",
        }
    }

    /// The storage a word names (`zset`, `compact`, in any case).
    pub fn parse(word: &[u8]) -> Option<Storage> {
        Self::ALL
            .into_iter()
            .find(|s| s.name().as_bytes().eq_ignore_ascii_case(word))
    }
}

// Commands and config callbacks run on the main thread; an atomic keeps that free of `unsafe`.
static STORAGE: AtomicI32 = AtomicI32::new(0);

/// `slidingwindow.storage`: the storage of new keys.
pub fn default_storage() -> Storage {
    match STORAGE.load(Ordering::Relaxed) {
        1 => Storage::Compact,
        _ => Storage::Zset,
    }
}

pub static STORAGE_CONFIG: EnumConfig = EnumConfig {
    name: c"storage",
    // In the order of `Storage`'s values.
    names: &[c"zset", c"compact"],
    default: 0,
    get: || STORAGE.load(Ordering::Relaxed),
    set: |v| STORAGE.store(v, Ordering::Relaxed),
};

/// Registers what the storages add to the server: the compact log's data type.
pub fn register(loader: &Loader) -> Result<(), String> {
    loader.data_type::<CompactLog>()
}

/// The storages' gauges for `INFO slidingwindow`: what is alive now, as (field, value).
pub fn gauges() -> [(&'static CStr, u64); 2] {
    let gauge = CompactLog::gauge();
    [
        (c"compact_keys", gauge.values()),
        (c"compact_bytes", gauge.bytes()),
    ]
}

/// A storage seen by a command: the log, plus the key's TTL.
pub trait Store: Log {
    /// After an admission: the key's absolute expiry (ms) becomes the later of its current one
    /// and `at_ms` (a key without one gets `at_ms`).
    fn set_expiry(&mut self, at_ms: i64) -> Result<(), Error>;
    /// REFUND: removes up to `n` of the newest members scored at or before `through` (None: the
    /// newest, whatever their score); how many went. No trim, the TTL untouched; a key left
    /// empty is deleted.
    fn refund(&mut self, through: Option<u64>, n: u64) -> Result<u64, Error>;
}

/// A key opened by a command, its type checked: a sorted set, a compact log, or missing.
pub struct Opened<'a> {
    key: Key<'a>,
    held: Option<Storage>,
}

/// The one way in: opens `name` for a command. Any type but the two logs is `WRONGTYPE`.
pub fn open<'a>(ctx: Ctx<'a>, name: RString<'a>, mode: Mode) -> Result<Opened<'a>, Error> {
    let mut key = Key::open(ctx, name, mode)?;
    let held = match key.kind::<CompactLog>() {
        Kind::Empty => None,
        Kind::Zset => Some(Storage::Zset),
        Kind::Native => Some(Storage::Compact),
        Kind::Other => return Err(Error::WrongType),
    };
    Ok(Opened { key, held })
}

impl<'a> Opened<'a> {
    /// The key's log, recording its changes in `fx`; a missing key is created in `new` once
    /// something is added to it.
    pub fn log<'k>(&'k mut self, fx: &'k mut Effects<'a>, new: Storage) -> Slot<'k, 'a> {
        match self.held.unwrap_or(new) {
            Storage::Zset => Slot::Zset(ZsetLog::new(&mut self.key, fx.zset())),
            Storage::Compact => Slot::Compact(CompactStore::new(&mut self.key, fx.compact())),
        }
    }

    /// Moves the log to `target` storage in place, keeping every timestamp and the TTL; the
    /// number of logged requests. A sorted set must hold only integer scores in `0..=2^53`.
    pub fn convert(&mut self, fx: &mut Effects<'a>, target: Storage) -> Result<u64, Error> {
        let key = &mut self.key;
        let log = match self.held {
            None => return Err(Error::NoSuchKey),
            Some(from) if from == target => {
                return Ok(match from {
                    Storage::Zset => key.len(),
                    Storage::Compact => key.native::<CompactLog>().map_or(0, |l| l.len()),
                });
            }
            Some(Storage::Zset) => zset::export(key)?,
            // Unlinking the key frees its value: the log goes on as a copy.
            Some(Storage::Compact) => key.native::<CompactLog>().cloned().unwrap_or_default(),
        };
        let len = log.len();
        if target == Storage::Zset && len > MAX_ZSET_MEMBERS {
            return Err(Error::TooLargeForZset(len));
        }
        // Everything is read and checked; from here on the key changes, and `fx` records it.
        let ttl = key.expire_at();
        key.unlink()?;
        fx.replaced = Some(key.name());
        self.held = None;
        match target {
            Storage::Compact => compact::import(key, fx.compact(), log)?,
            Storage::Zset => zset::import(key, fx.zset(), &log)?,
        }
        self.held = (len > 0).then_some(target);
        if let Some(at) = ttl.filter(|_| len > 0) {
            self.log(fx, target).set_expiry(at)?;
        }
        Ok(len)
    }
}

/// One key's log in whichever storage it has.
// It lives on the stack for one call: boxing the larger variant would allocate on the hot path.
#[allow(clippy::large_enum_variant)]
pub enum Slot<'k, 'a> {
    Zset(ZsetLog<'k, 'a>),
    Compact(CompactStore<'k, 'a>),
}

/// Runs the same expression on whichever storage `$slot` holds.
macro_rules! each {
    ($slot:expr, $log:ident => $body:expr) => {
        match $slot {
            Slot::Zset($log) => $body,
            Slot::Compact($log) => $body,
        }
    };
}

impl Log for Slot<'_, '_> {
    #[inline]
    fn count(&mut self) -> Result<u64, Error> {
        each!(self, log => log.count())
    }

    fn count_through(&mut self, score: f64) -> Result<u64, Error> {
        each!(self, log => log.count_through(score))
    }

    #[inline(always)]
    fn trim(&mut self, cutoff: i64) -> Result<u64, Error> {
        match self {
            Slot::Zset(log) => log.trim(cutoff),
            // Most calls trim nothing: the oldest timestamp, one read, says so without the
            // trim's search and its bookkeeping of the log's bytes.
            Slot::Compact(log) => match log.kth_oldest(1)? {
                // Cutoffs are within +-2^53, so the conversion is exact.
                Some(oldest) if oldest > cutoff as f64 => Ok(0),
                _ => log.trim(cutoff),
            },
        }
    }

    fn add(&mut self, score: u64, n: u64) -> Result<(), Error> {
        each!(self, log => log.add(score, n))
    }

    #[inline]
    fn kth_oldest(&mut self, k: u64) -> Result<Option<f64>, Error> {
        each!(self, log => log.kth_oldest(k))
    }

    #[inline(always)]
    fn newest(&mut self) -> Result<Option<f64>, Error> {
        each!(self, log => log.newest())
    }
}

impl Store for Slot<'_, '_> {
    #[inline]
    fn set_expiry(&mut self, at_ms: i64) -> Result<(), Error> {
        each!(self, log => log.set_expiry(at_ms))
    }

    fn refund(&mut self, through: Option<u64>, n: u64) -> Result<u64, Error> {
        each!(self, log => log.refund(through, n))
    }
}

/// What one call changed on one key, whatever the storage: each storage's record begins when the
/// call first reaches the key through it, so a call records (and later drops) only its own.
#[derive(Default)]
pub struct Effects<'a> {
    /// The key's old value was unlinked first (a conversion).
    replaced: Option<RString<'a>>,
    zset: Option<zset::Effects<'a>>,
    compact: Option<compact::Effects<'a>>,
}

impl<'a> Effects<'a> {
    fn zset(&mut self) -> &mut zset::Effects<'a> {
        self.zset.get_or_insert_with(Default::default)
    }

    fn compact(&mut self) -> &mut compact::Effects<'a> {
        self.compact.get_or_insert_with(Default::default)
    }

    /// Propagates and announces every recorded change.
    #[inline]
    fn publish(&self, ctx: Ctx<'a>) -> Result<(), Error> {
        if let Some(name) = self.replaced {
            publish_replaced(ctx, name)?;
        }
        if let Some(fx) = &self.zset {
            fx.publish(ctx)?;
        }
        match &self.compact {
            Some(fx) => fx.publish(ctx),
            None => Ok(()),
        }
    }
}

/// A conversion's `UNLINK` of the key's old value, propagated and announced.
#[cold]
#[inline(never)]
fn publish_replaced<'a>(ctx: Ctx<'a>, name: RString<'a>) -> Result<(), Error> {
    ctx.replicate_key(c"UNLINK", name)?;
    ctx.notify(Class::Generic, c"del", name);
    Ok(())
}

/// Everything one call changed, key by key; owned by the dispatcher, outside the unwind
/// boundary, so that what a panicking call did still reaches replicas. A one-key call needs no
/// allocation.
#[derive(Default)]
pub struct Changes<'a> {
    first: Effects<'a>,
    more: Vec<Effects<'a>>,
}

impl<'a> Changes<'a> {
    /// The effects of a one-key call.
    pub fn one(&mut self) -> &mut Effects<'a> {
        &mut self.first
    }

    /// The effects of `n` keys, in the order given.
    pub fn keys(&mut self, n: usize) -> impl Iterator<Item = &mut Effects<'a>> {
        self.more.resize_with(n.saturating_sub(1), Effects::default);
        std::iter::once(&mut self.first).chain(self.more.iter_mut())
    }

    /// Propagates and announces every key's changes in order.
    pub fn publish(&self, ctx: Ctx<'a>) -> Result<(), Error> {
        self.first.publish(ctx)?;
        self.more.iter().try_for_each(|fx| fx.publish(ctx))
    }

    /// Empties the record in place, calling the out-of-line drop of the more keys' list and of
    /// the first key's sorted-set record only when they hold anything: what is left owns nothing
    /// (no allocation, no record, a borrowed name), so its holder may skip dropping it.
    #[inline]
    pub fn discard(&mut self) {
        // Every field is below: one added here must be emptied here too.
        let Changes {
            first:
                Effects {
                    replaced: _,
                    zset,
                    compact,
                },
            more,
        } = self;
        if more.capacity() != 0 {
            *more = Vec::new();
        }
        if zset.is_some() {
            *zset = None;
        }
        *compact = None;
    }
}

/// The TTL an admitted call leaves.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Expire {
    #[default]
    Untouched,
    /// The key already expired at or after the call's expiry, which stays where it was (held
    /// here): nothing is set, sent as `PEXPIREAT` or announced.
    Kept(i64),
    Set(i64),
}

impl Expire {
    /// The key's absolute expiry after the call, if the call computed one.
    fn at(self) -> Option<i64> {
        match self {
            Expire::Untouched => None,
            Expire::Kept(at) | Expire::Set(at) => Some(at),
        }
    }
}

/// An admission's expiry: the later of the key's current one and `at_ms` (a key without one
/// gets `at_ms`), so an admission never moves a key's expiry earlier.
fn extend_expiry(key: &mut Key<'_>, at_ms: i64) -> Result<Expire, Error> {
    match key.expire_at() {
        Some(current) if current >= at_ms => Ok(Expire::Kept(current)),
        _ => {
            key.set_expire_at(at_ms)?;
            Ok(Expire::Set(at_ms))
        }
    }
}

/// A replayed expiry (`APPLY`): exactly `at_ms`, set only if the key does not already have it.
fn replay_expiry(key: &mut Key<'_>, at_ms: i64) -> Result<Expire, Error> {
    if key.expire_at() == Some(at_ms) {
        return Ok(Expire::Kept(at_ms));
    }
    key.set_expire_at(at_ms)?;
    Ok(Expire::Set(at_ms))
}
