//! The sorted-set storage: the key stays an ordinary sorted set, one member per request.
//!
//! Queries stay near the ends of the set: the oldest member is one step from the head, and "is
//! anything newer than s?" is answered from the tail. Walks are bounded; beyond a few steps the
//! set's own O(log N) rank and range commands take over, run while the key is closed.
//!
//! Effects: replicas and the AOF get `ZREMRANGEBYSCORE key -inf cutoff` for a trim (`UNLINK key`
//! when a large set expired whole), `ZADD key now m1 ...` and `PEXPIREAT key at`, never the
//! command, so they need no module. Keyspace events are the seed script's: `zremrangebyscore`,
//! `del`, `zadd`, `expire`.

use super::compact::log::CompactLog;
use super::{Expire, Store, expire};
use crate::core::error::{Error, MAX_EXACT};
use crate::core::member::{MEMBER_LEN, fresh};
use crate::core::window::Log;
use crate::ffi::{Class, Ctx, Key, OwnedString, RString};

const NEG_INF: f64 = f64::NEG_INFINITY;
const POS_INF: f64 = f64::INFINITY;
/// Tries for a member name the key does not hold yet (a clash needs two equal 80-bit draws).
const NAME_TRIES: usize = 8;
/// Redis frees a set of more than this many members in the background when it is unlinked.
const LAZYFREE_THRESHOLD: u64 = 64;
/// Most steps a walk takes before a rank or range command is cheaper.
const WALK_MAX: usize = 64;

/// How the trim changed the key.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Trim {
    #[default]
    Nothing,
    /// A few members removed one by one; `emptied` when they were the last.
    Walked { cutoff: i64, emptied: bool },
    /// Removed in place by `ZREMRANGEBYSCORE`, which emitted its own events.
    Called { cutoff: i64 },
    /// A large set that expired whole, unlinked (freed in the background).
    Unlinked,
}

/// A few members; the common single one needs no allocation of ours.
#[derive(Default)]
enum Members<'a> {
    #[default]
    None,
    One(OwnedString<'a>),
    Many(Vec<OwnedString<'a>>),
}

impl<'a> Members<'a> {
    fn as_slice(&self) -> &[OwnedString<'a>] {
        match self {
            Members::None => &[],
            Members::One(m) => std::slice::from_ref(m),
            Members::Many(v) => v,
        }
    }

    fn push(&mut self, m: OwnedString<'a>) {
        match std::mem::take(self) {
            Members::None => *self = Members::One(m),
            Members::One(first) => *self = Members::Many(vec![first, m]),
            Members::Many(mut v) => {
                v.push(m);
                *self = Members::Many(v);
            }
        }
    }
}

/// What a call changed on a sorted-set key, recorded as it happens so that a panic half-way
/// still propagates exactly what was done.
#[derive(Default)]
pub struct Effects<'a> {
    key: Option<RString<'a>>,
    trim: Trim,
    added: Members<'a>,
    added_at: i64,
    expire: Expire,
}

impl<'a> Effects<'a> {
    /// Sends the changes to replicas and the AOF and emits the keyspace events the seed's script
    /// would, in its order; then forgets them.
    pub fn publish(&mut self, ctx: Ctx<'a>) -> Result<(), Error> {
        let fx = std::mem::take(self);
        let Some(key) = fx.key else {
            return Ok(());
        };
        match fx.trim {
            Trim::Nothing => {}
            Trim::Walked { cutoff, emptied } => {
                ctx.replicate_key_word_int(c"ZREMRANGEBYSCORE", key, c"-inf", cutoff)?;
                ctx.notify(Class::Zset, c"zremrangebyscore", key);
                if emptied {
                    ctx.notify(Class::Generic, c"del", key);
                }
            }
            Trim::Called { cutoff } => {
                ctx.replicate_key_word_int(c"ZREMRANGEBYSCORE", key, c"-inf", cutoff)?;
            }
            Trim::Unlinked => {
                ctx.replicate_key(c"UNLINK", key)?;
                ctx.notify(Class::Zset, c"zremrangebyscore", key);
                ctx.notify(Class::Generic, c"del", key);
            }
        }
        match fx.added.as_slice() {
            [] => {}
            [one] => ctx.replicate_key_int_string(c"ZADD", key, fx.added_at, one)?,
            many => {
                let score = ctx.string(fx.added_at.to_string().as_bytes())?;
                let mut args = Vec::with_capacity(many.len().saturating_mul(2));
                for m in many {
                    args.push(score.as_rstring());
                    args.push(m.as_rstring());
                }
                ctx.replicate_key_args(c"ZADD", key, &args)?;
            }
        }
        if !fx.added.as_slice().is_empty() {
            ctx.notify(Class::Zset, c"zadd", key);
        }
        match fx.expire {
            Expire::Untouched => {}
            Expire::Kept => ctx.notify(Class::Generic, c"expire", key),
            Expire::Set(at) => {
                ctx.replicate_key_ints(c"PEXPIREAT", key, &[at])?;
                ctx.notify(Class::Generic, c"expire", key);
            }
        }
        if fx.trim != Trim::Nothing || !fx.added.as_slice().is_empty() {
            ctx.signal_modified(key);
        }
        Ok(())
    }
}

/// A sorted set seen as a `Log`; records what it changes in `fx`.
pub struct ZsetLog<'k, 'a> {
    key: &'k mut Key<'a>,
    fx: &'k mut Effects<'a>,
    /// Cached oldest and newest scores; `None` until known.
    oldest: Option<Option<f64>>,
    newest: Option<Option<f64>>,
    /// Score of the members this call added, if any.
    added_at: Option<f64>,
}

impl<'k, 'a> ZsetLog<'k, 'a> {
    pub fn new(key: &'k mut Key<'a>, fx: &'k mut Effects<'a>) -> Self {
        fx.key = Some(key.name());
        ZsetLog {
            key,
            fx,
            oldest: None,
            newest: None,
            added_at: None,
        }
    }

    /// Whether a member is scored above `score`; answered from the tail, no descent.
    fn any_after(&mut self, score: f64) -> Result<bool, Error> {
        if self.key.len() == 0 {
            return Ok(false);
        }
        Ok(!self.key.range(score, POS_INF, true, true)?.is_empty())
    }

    /// Walks from the head over members scored at or before `cutoff`, keeping their names, and
    /// notes the first score after it. None when more than `WALK_MAX` are expired.
    fn expired_names(&mut self, cutoff: f64) -> Result<Option<Members<'a>>, Error> {
        let mut expired = Members::None;
        let mut oldest = None;
        let range = self.key.range(NEG_INF, POS_INF, false, true)?;
        while let Some((member, score)) = range.current() {
            if score > cutoff {
                oldest = Some(score);
                break;
            }
            if expired.as_slice().len() == WALK_MAX {
                return Ok(None);
            }
            expired.push(member);
            if !range.next() {
                break;
            }
        }
        drop(range);
        self.oldest = Some(oldest);
        Ok(Some(expired))
    }

    /// Adds one member at `score` under a fresh name.
    fn add_one(&mut self, score: u64) -> Result<(), Error> {
        let member = add_fresh(self.key, score)?;
        self.fx.added.push(member);
        Ok(())
    }
}

/// Adds one member scored `score` under a fresh name; returns the name.
fn add_fresh<'a>(key: &mut Key<'a>, score: u64) -> Result<OwnedString<'a>, Error> {
    let mut name = [0u8; MEMBER_LEN];
    for _ in 0..NAME_TRIES {
        fresh(score, &mut name);
        let member = key.ctx().string(&name)?;
        // Scores are at most 2^53, exact in f64.
        if key.zadd_new(score as f64, &member)? {
            return Ok(member);
        }
    }
    Err(Error::Server("a fresh member name"))
}

/// Members per `ZADD` when a whole log is written.
const MEMBERS_PER_ZADD: usize = 512;

/// A sorted set's scores as a log; every score must be a ms timestamp in `0..=2^53`.
pub fn export(key: &mut Key<'_>) -> Result<CompactLog, Error> {
    let mut log = CompactLog::default();
    if key.len() == 0 {
        return Ok(log);
    }
    let range = key.range(NEG_INF, POS_INF, false, true)?;
    while let Some(score) = range.score() {
        if !(0.0..=MAX_EXACT as f64).contains(&score) || score.fract() != 0.0 {
            return Err(Error::NotATimestamp(score.to_string()));
        }
        log.add(score as u64, 1);
        if !range.next() {
            break;
        }
    }
    Ok(log)
}

/// Writes `log` into the empty `key` as a sorted set with fresh members, and sends it on as
/// `ZADD`s; announces `zadd`.
pub fn import<'a>(ctx: Ctx<'a>, key: &mut Key<'a>, log: &CompactLog) -> Result<(), Error> {
    let name = key.name();
    let mut batch: Vec<(u64, OwnedString<'a>)> = Vec::with_capacity(MEMBERS_PER_ZADD);
    let send = |batch: &mut Vec<(u64, OwnedString<'a>)>| -> Result<(), Error> {
        let scores = batch
            .iter()
            .map(|(ts, _)| ctx.string(ts.to_string().as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut args = Vec::with_capacity(batch.len() * 2);
        for (score, (_, member)) in scores.iter().zip(batch.iter()) {
            args.push(score.as_rstring());
            args.push(member.as_rstring());
        }
        ctx.replicate_key_args(c"ZADD", name, &args)?;
        batch.clear();
        Ok(())
    };
    for ts in log.iter() {
        batch.push((ts, add_fresh(key, ts)?));
        if batch.len() == MEMBERS_PER_ZADD {
            send(&mut batch)?;
        }
    }
    if !batch.is_empty() {
        send(&mut batch)?;
    }
    if !log.is_empty() {
        ctx.notify(Class::Zset, c"zadd", name);
    }
    Ok(())
}

impl Log for ZsetLog<'_, '_> {
    fn count(&mut self) -> Result<u64, Error> {
        Ok(self.key.len())
    }

    fn count_through(&mut self, score: f64) -> Result<u64, Error> {
        let len = self.key.len();
        if len == 0 || !self.any_after(score)? {
            return Ok(len);
        }
        let range = self.key.range(NEG_INF, score, false, true)?;
        if range.is_empty() {
            return Ok(0);
        }
        let mut n = 1u64;
        while range.next() {
            n += 1;
            if n > WALK_MAX as u64 {
                drop(range);
                return self.key.closed(|set| set.count_through(score));
            }
        }
        Ok(n)
    }

    fn trim(&mut self, cutoff: i64) -> Result<u64, Error> {
        let len = self.key.len();
        if len == 0 {
            return Ok(0);
        }
        // Cutoffs are within +-2^53, so the conversion is exact.
        let at = cutoff as f64;
        // Check the fully expired large set first (from the tail, no descent), so a call never
        // walks it: unlinked, it is freed off the main thread.
        if len > LAZYFREE_THRESHOLD && self.key.range(at, POS_INF, true, true)?.is_empty() {
            self.key.unlink()?;
            self.fx.trim = Trim::Unlinked;
            self.oldest = Some(None);
            self.newest = Some(None);
            return Ok(len);
        }
        let Some(expired) = self.expired_names(at)? else {
            // Many expired: the set's own range removal, O(log N + M).
            let removed = self.key.closed(|set| set.remove_through(cutoff))?;
            self.fx.trim = Trim::Called { cutoff };
            self.oldest = None;
            return Ok(removed);
        };
        let expired = expired.as_slice();
        if expired.is_empty() {
            return Ok(0);
        }
        for member in expired {
            self.key.zrem(member)?;
        }
        let removed = expired.len() as u64;
        // The last removal deleted the key, as an empty set is.
        let emptied = removed == len;
        if emptied {
            self.newest = Some(None);
        }
        self.fx.trim = Trim::Walked { cutoff, emptied };
        Ok(removed)
    }

    fn add(&mut self, score: u64, n: u64) -> Result<(), Error> {
        self.fx.added_at = i64::try_from(score).unwrap_or(i64::MAX);
        if n > 1 {
            self.fx.added = Members::Many(Vec::with_capacity(usize::try_from(n).unwrap_or(0)));
        }
        for _ in 0..n {
            self.add_one(score)?;
        }
        let s = score as f64;
        self.added_at = Some(s);
        self.oldest = self.oldest.map(|o| Some(o.map_or(s, |o| o.min(s))));
        self.newest = self.newest.map(|o| Some(o.map_or(s, |o| o.max(s))));
        Ok(())
    }

    fn kth_oldest(&mut self, k: u64) -> Result<Option<f64>, Error> {
        if let (1, Some(oldest)) = (k, self.oldest) {
            return Ok(oldest);
        }
        if k == 0 || k > self.key.len() {
            return Ok(None);
        }
        if k > WALK_MAX as u64 {
            return self.key.closed(|set| set.score_at_rank(k - 1));
        }
        let range = self.key.range(NEG_INF, POS_INF, false, true)?;
        for _ in 1..k {
            if !range.next() {
                return Ok(None);
            }
        }
        let score = range.score();
        drop(range);
        if k == 1 {
            self.oldest = Some(score);
        }
        Ok(score)
    }

    fn newest(&mut self) -> Result<Option<f64>, Error> {
        if let Some(n) = self.newest {
            return Ok(n);
        }
        // Just added at `s`: unless something is scored later, `s` is the newest.
        let added_at = self.added_at;
        let n = match added_at {
            Some(s) if !self.any_after(s)? => Some(s),
            _ if self.key.len() == 0 => None,
            _ => self.key.range(NEG_INF, POS_INF, false, false)?.score(),
        };
        self.newest = Some(n);
        Ok(n)
    }
}

impl Store for ZsetLog<'_, '_> {
    fn set_expiry(&mut self, at_ms: i64) -> Result<(), Error> {
        self.fx.expire = expire(self.key, at_ms)?;
        Ok(())
    }
}
