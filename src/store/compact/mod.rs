//! The compact storage: the log (`slidingwindow_core::compact`) as the module's own data type
//! (`swcompact`), about 0.3 bytes a logged request for a dense log once its blocks are sealed into
//! bits and at most 8 (7 bytes a slot at any span), O(log N + M) a call wherever `now` lands (see
//! `log`).
//!
//! Effects: replicas and the AOF get `SW.APPLY key "cutoff pexpireat [ts n]"`, the
//! call's resolved change, which replays the same on any server whatever its clock. Keyspace events:
//! `slidingwindow.trim` and `slidingwindow.add` (class `d`, module), `del` when the log empties and
//! `expire` (class `g`).

pub use crate::core::compact::{change, codec, log};

use super::{Expire, Store, extend_expiry, replay_expiry};
use crate::core::error::Error;
use crate::core::window::Log;
use crate::ffi::{
    AofOut, Class, Ctx, Defrag, Digest, Gauge, Key, NativeType, RString, RdbIn, RdbOut, TypeSlot,
};
use change::write_change;
use log::CompactLog;

/// The name replicas and the AOF receive a change under: `SLIDINGWINDOW.APPLY`'s short one.
/// `RedisModule_Replicate` and `RedisModule_EmitAOF` look the name up on every call, hashing and
/// splitting it byte by byte: 420 fewer instructions an append than the long name (callgrind,
/// Redis 7.0.15).
pub const APPLY: &std::ffi::CStr = c"SW.APPLY";
/// Most timestamps one `SLIDINGWINDOW.APPLY` may add: the highest per-call cap.
pub const APPLY_MAX_ADD: u64 = 10_000_000;
/// `(timestamp, count)` pairs per command when a log is rewritten or converted.
pub const PAIRS_PER_COMMAND: usize = 512;

static TYPE: TypeSlot = TypeSlot::new();
static GAUGE: Gauge = Gauge::new();

impl NativeType for CompactLog {
    const NAME: &'static std::ffi::CStr = c"swcompact";
    const ENCODING: i32 = codec::ENCODING;

    fn slot() -> &'static TypeSlot {
        &TYPE
    }

    fn gauge() -> &'static Gauge {
        &GAUGE
    }

    fn save(&self, out: &mut RdbOut<'_>) {
        let (count, bytes) = codec::encode(self);
        out.unsigned(count);
        #[cfg(feature = "panic-test")]
        crate::core::fault::hit(crate::core::fault::Point::RdbSave);
        out.buffer(&bytes);
    }

    fn load(input: &mut RdbIn<'_>, encver: i32) -> Result<Self, String> {
        let count = input.unsigned()?;
        input
            .with_buffer(|bytes| codec::decode(encver, count, bytes))?
            .map_err(|why| why.to_string())
    }

    fn rewrite(&self, out: &mut AofOut<'_>) {
        for_each_batch(self, |change| out.emit(APPLY, change));
    }

    fn digest(&self, out: &mut Digest<'_>) {
        for (ts, n) in self.runs() {
            out.add(clamp(ts));
            out.add(clamp(n));
        }
        out.end_sequence();
    }

    fn heap_bytes(&self) -> usize {
        self.heap_bytes()
    }

    fn defrag(&mut self, d: &mut Defrag<'_>, cursor: u64) -> Option<u64> {
        self.move_buffers(d, cursor)
    }

    fn word(&self) -> Option<u64> {
        self.word()
    }

    fn from_word(word: u64) -> Option<Self> {
        CompactLog::from_word(word)
    }

    fn free_effort(&self) -> usize {
        // One free per allocation (each block's, each node's of its tree): past 64 of them
        // (about 250 KiB of blocks), off the main thread.
        1 + self.allocations()
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `APPLY` changes that rebuild `log` from nothing: `-1 0 ts n ts n ...`, in batches of at most
/// `PAIRS_PER_COMMAND` pairs, each adding at most `APPLY_MAX_ADD` timestamps.
pub fn apply_batches(log: &CompactLog) -> Vec<Vec<u8>> {
    let mut batches = Vec::new();
    for_each_batch(log, |change| batches.push(change.to_vec()));
    batches
}

/// The batches of `apply_batches`, handed to `f` one at a time in one reused buffer: an AOF
/// rewrite (or a slot migration's snapshot) of a large log holds one batch, not all of them.
fn for_each_batch(log: &CompactLog, mut f: impl FnMut(&[u8])) {
    let mut pairs: Vec<(u64, u64)> = Vec::with_capacity(PAIRS_PER_COMMAND);
    let mut change = Vec::new();
    let mut added = 0;
    let mut flush = |pairs: &mut Vec<(u64, u64)>| {
        change.resize(change::change_bytes(pairs.len()), 0);
        if let Some(start) = write_change(&mut change, -1, 0, pairs) {
            f(change.get(start..).unwrap_or_default());
        }
        pairs.clear();
    };
    for (ts, mut n) in log.runs() {
        while n > 0 {
            if pairs.len() == PAIRS_PER_COMMAND || added == APPLY_MAX_ADD {
                flush(&mut pairs);
                added = 0;
            }
            let take = n.min(APPLY_MAX_ADD - added);
            pairs.push((ts, take));
            added += take;
            n -= take;
        }
    }
    if !pairs.is_empty() {
        flush(&mut pairs);
    }
}

/// Writes `log` into the empty `key` as a compact log, recorded in `fx`: sent on as `APPLY`s,
/// announced as `slidingwindow.add`.
pub fn import<'a>(key: &mut Key<'a>, fx: &mut Effects<'a>, log: CompactLog) -> Result<(), Error> {
    fx.key = Some(key.name());
    if log.is_empty() {
        return Ok(());
    }
    let batches = apply_batches(&log);
    key.set_native(log)?;
    fx.imported = batches;
    Ok(())
}

/// What a call changed on a compact key, recorded as it happens.
#[derive(Default)]
pub struct Effects<'a> {
    key: Option<RString<'a>>,
    /// The cutoff of a trim that removed something.
    trimmed: Option<i64>,
    emptied: bool,
    added: Option<(u64, u64)>,
    /// A whole log written into the emptied key (a conversion), as `APPLY` changes.
    imported: Vec<Vec<u8>>,
    expire: Expire,
    /// Sent as the client sent it (an `APPLY`, deterministic by itself).
    verbatim: bool,
    /// A REFUND's removal: up to how many of the newest timestamps at or before which.
    refunded: Option<(u64, u64)>,
}

impl<'a> Effects<'a> {
    /// Propagates and announces what the call recorded.
    #[inline]
    pub fn publish(&self, ctx: Ctx<'a>) -> Result<(), Error> {
        // A refusal, a PEEK: nothing recorded, nothing sent.
        let unchanged = self.trimmed.is_none()
            && self.added.is_none()
            && self.expire == Expire::Untouched
            && self.refunded.is_none()
            && self.imported.is_empty();
        match self.key {
            Some(key) if !unchanged => self.publish_key(ctx, key),
            _ => Ok(()),
        }
    }

    /// `publish` of a call that changed `key` or its expiry.
    #[inline(never)]
    fn publish_key(&self, ctx: Ctx<'a>, key: RString<'a>) -> Result<(), Error> {
        if let Some((through, n)) = self.refunded {
            return publish_refund(ctx, key, through, n, self.emptied, self.verbatim);
        }
        for change in &self.imported {
            ctx.replicate_key_bytes(APPLY, key, change)?;
        }
        let changed = self.trimmed.is_some() || self.added.is_some();
        if self.verbatim {
            if changed || self.expire != Expire::Untouched {
                ctx.replicate_verbatim()?;
            }
        } else if changed || self.expire != Expire::Untouched {
            // The key's resulting expiry, moved or not (0: a call that set none).
            let at = self.expire.at().unwrap_or(0);
            let added = self.added.as_slice();
            // One call's change fits a small buffer on the stack: four numbers.
            let mut buf = [0u8; change::change_bytes(1)];
            let start = write_change(&mut buf, self.trimmed.unwrap_or(-1), at, added)
                .ok_or(Error::Server("an APPLY change"))?;
            let change = buf.get(start..).unwrap_or_default();
            ctx.replicate_key_bytes(APPLY, key, change)?;
        }
        if self.trimmed.is_some() {
            ctx.notify(Class::Module, c"slidingwindow.trim", key);
        }
        if self.emptied {
            ctx.notify(Class::Generic, c"del", key);
        }
        let added = self.added.is_some() || !self.imported.is_empty();
        if added {
            ctx.notify(Class::Module, c"slidingwindow.add", key);
        }
        if let Expire::Set(_) = self.expire {
            ctx.notify(Class::Generic, c"expire", key);
        }
        if changed || added {
            ctx.signal_modified(key);
        }
        Ok(())
    }
}

/// A REFUND's removal: `APPLY key "refund through n"`, which removes the same timestamps from
/// the same log; `slidingwindow.refund`, then `del` if the log emptied.
fn publish_refund<'a>(
    ctx: Ctx<'a>,
    key: RString<'a>,
    through: u64,
    n: u64,
    emptied: bool,
    verbatim: bool,
) -> Result<(), Error> {
    if verbatim {
        ctx.replicate_verbatim()?;
    } else {
        let mut buf = [0u8; change::REFUND_BYTES];
        let start =
            change::write_refund(&mut buf, through, n).ok_or(Error::Server("an APPLY change"))?;
        let change = buf.get(start..).unwrap_or_default();
        ctx.replicate_key_bytes(APPLY, key, change)?;
    }
    ctx.notify(Class::Module, c"slidingwindow.refund", key);
    if emptied {
        ctx.notify(Class::Generic, c"del", key);
    }
    ctx.signal_modified(key);
    Ok(())
}

/// A compact key seen as a `Log`; records what it changes in `fx`.
pub struct CompactStore<'k, 'a> {
    key: &'k mut Key<'a>,
    fx: &'k mut Effects<'a>,
}

impl<'k, 'a> CompactStore<'k, 'a> {
    pub fn new(key: &'k mut Key<'a>, fx: &'k mut Effects<'a>) -> Self {
        fx.key = Some(key.name());
        CompactStore { key, fx }
    }

    /// Replays an `APPLY` as it was sent: replicas get it verbatim.
    pub fn verbatim(&mut self) {
        self.fx.verbatim = true;
    }

    fn log(&mut self) -> Option<&mut CompactLog> {
        self.key.native::<CompactLog>()
    }

    /// Changes the log with `f`, keeping `compact_bytes` in step with its heap; a log left
    /// small enough for a word goes back into one when the key closes.
    fn change<R>(&mut self, f: impl FnOnce(&mut CompactLog) -> R) -> Option<R> {
        let log = self.log()?;
        let before = log.heap_bytes();
        let r = f(log);
        GAUGE.resized(before, log.heap_bytes());
        if log.word().is_some() {
            self.key.repack_on_close::<CompactLog>();
        }
        Some(r)
    }

    /// Sets the TTL as `PEXPIREAT at_ms` would (a replayed change), and records it.
    pub fn expire_at(&mut self, at_ms: i64) -> Result<(), Error> {
        self.fx.expire = replay_expiry(self.key, at_ms)?;
        Ok(())
    }
}

impl Log for CompactStore<'_, '_> {
    fn count(&mut self) -> Result<u64, Error> {
        Ok(self.log().map_or(0, |l| l.len()))
    }

    fn count_through(&mut self, score: f64) -> Result<u64, Error> {
        Ok(self.log().map_or(0, |l| l.count_through(score)))
    }

    fn trim(&mut self, cutoff: i64) -> Result<u64, Error> {
        let Some(log) = self.log() else {
            return Ok(0);
        };
        let (len, removed) = (log.len(), log.count_trimmed(cutoff));
        if removed == 0 {
            return Ok(0);
        }
        if removed == len {
            // A log that expired whole is no key, as an empty sorted set is none: unlinked as it
            // is, so that a large buffer is freed off the main thread.
            self.key.unlink()?;
            self.fx.emptied = true;
        } else {
            self.change(|log| log.remove_oldest(removed));
        }
        self.fx.trimmed = Some(cutoff);
        Ok(removed)
    }

    fn add(&mut self, score: u64, n: u64) -> Result<(), Error> {
        if self.log().is_none() {
            self.key.set_native(CompactLog::default())?;
        }
        self.change(|log| log.add(score, n))
            .ok_or(Error::Server("a new compact log"))?;
        self.fx.added = Some((score, n));
        Ok(())
    }

    fn kth_oldest(&mut self, k: u64) -> Result<Option<f64>, Error> {
        // Timestamps are at most 2^53, exact as f64.
        Ok(self.log().and_then(|l| l.kth_oldest(k)).map(|t| t as f64))
    }

    fn newest(&mut self) -> Result<Option<f64>, Error> {
        Ok(self.log().and_then(|l| l.newest()).map(|t| t as f64))
    }
}

impl Store for CompactStore<'_, '_> {
    fn set_expiry(&mut self, at_ms: i64) -> Result<(), Error> {
        self.fx.expire = extend_expiry(self.key, at_ms)?;
        Ok(())
    }

    fn refund(&mut self, through: Option<u64>, n: u64) -> Result<u64, Error> {
        let through = through.unwrap_or(log::MAX_TS);
        let Some(removed) = self.change(|log| log.refund(through, n)) else {
            return Ok(0);
        };
        if removed == 0 {
            return Ok(0);
        }
        // An empty log is no key, as an empty sorted set is none.
        if self.log().is_some_and(|log| log.is_empty()) {
            self.key.unlink()?;
            self.fx.emptied = true;
        }
        self.fx.refunded = Some((through, removed));
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::rng::Rng;
    use crate::core::window::model::Model;

    /// Refunds with and without `AT`, among adds and trims, with time going backwards.
    #[test]
    fn refunds_follow_the_model() {
        let mut rng = Rng::new(0x0002_EF0D);
        let mut log = CompactLog::default();
        let mut model = Model::default();
        let mut now: u64 = 1_000_000;
        let mut refunded = 0;
        for step in 0..20_000 {
            now = match rng.range(0, 9) {
                0 => now.saturating_sub(rng.range(0, 20_000)),
                1 => now + rng.range(0, 1 << 33),
                _ => now + rng.range(0, 300),
            };
            match rng.range(0, 9) {
                0..=4 => {
                    let n = rng.range(1, 4);
                    log.add(now, n);
                    model.scores.extend(std::iter::repeat_n(now, n as usize));
                    model.scores.sort_unstable();
                }
                5 => {
                    let cutoff = now as i64 - 5000;
                    log.trim(cutoff);
                    model.scores.retain(|s| *s as i64 > cutoff);
                }
                _ => {
                    let n = if rng.chance(10) {
                        u64::MAX
                    } else {
                        rng.range(1, 5)
                    };
                    let at = rng
                        .chance(60)
                        .then(|| now.saturating_sub(rng.range(0, 1000)) + rng.range(0, 500));
                    let want = model.refund(n, at);
                    assert_eq!(
                        log.refund(at.unwrap_or(log::MAX_TS), n),
                        want,
                        "step {step}"
                    );
                    refunded += want;
                }
            }
            assert_eq!(log.iter().collect::<Vec<_>>(), model.scores, "step {step}");
        }
        assert!(refunded > 5000, "{refunded}");
    }

    #[test]
    fn batches_rebuild_the_log_within_their_limits() {
        let mut log = CompactLog::default();
        for i in 0..1200u64 {
            log.add(1_000 + i, 1 + i % 3);
        }
        log.add(5_000, APPLY_MAX_ADD + 1);
        let mut rebuilt = CompactLog::default();
        for change in apply_batches(&log) {
            let apply = change::apply(&change, APPLY_MAX_ADD);
            let Ok(apply) = apply else {
                panic!("{apply:?}");
            };
            assert_eq!((apply.cutoff, apply.pexpireat), (-1, 0));
            assert!(apply.adds.len() <= PAIRS_PER_COMMAND);
            for (ts, n) in apply.adds {
                rebuilt.add(ts, n);
            }
        }
        assert_eq!(
            rebuilt.runs().collect::<Vec<_>>(),
            log.runs().collect::<Vec<_>>()
        );
        assert!(apply_batches(&CompactLog::default()).is_empty());
    }
}
