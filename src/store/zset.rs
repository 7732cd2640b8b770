//! The sorted-set storage: the key stays an ordinary sorted set, one member per request.
//!
//! Queries stay near the ends of the set: the oldest member is one step from the head, and "is
//! anything newer than s?" is answered from the tail. Walks are bounded; beyond a few steps the
//! set's own O(log N) rank and range commands take over, run while the key is closed.
//!
//! Effects: replicas and the AOF get `ZREMRANGEBYSCORE key -inf cutoff` for a trim (`UNLINK key`
//! when a large set expired whole), `ZADD key now m1 ...` and `PEXPIREAT key at` when the expiry
//! moved, never the command, so they need no module. Keyspace events are the seed script's:
//! `zremrangebyscore`, `del`, `zadd`, and `expire` when the expiry moved.

use super::compact::log::CompactLog;
use super::{Expire, Store, extend_expiry};
use crate::core::error::{Error, MAX_EXACT, MAX_LIMITS};
use crate::core::member::{MEMBER_LEN, fresh};
use crate::core::window::Log;
use crate::ffi::{Class, Ctx, Key, OwnedString, RString, Range};

const NEG_INF: f64 = f64::NEG_INFINITY;
const POS_INF: f64 = f64::INFINITY;
/// Tries for a member name the key does not hold yet (a clash needs two equal 80-bit draws).
const NAME_TRIES: usize = 8;
/// Redis frees a set of more than this many members in the background when it is unlinked.
const LAZYFREE_THRESHOLD: u64 = 64;
/// Most steps a walk takes before a rank or range command is cheaper.
const WALK_MAX: usize = 64;
/// A side of the set guessed to hold more members than this is not walked at all.
const GUESS_MAX: f64 = 2.0 * WALK_MAX as f64;
/// Steps of the first look from the head when the ends are not known yet.
const PROBE: usize = 8;

/// Which end of the set a walk starts from, stepping inwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Head,
    Tail,
}

impl End {
    fn step(self, range: &Range<'_, '_>) -> bool {
        match self {
            End::Head => range.next(),
            End::Tail => range.prev(),
        }
    }
}

/// The score `steps` members on from where `range` stands, or None past its end.
fn steps_then_score(range: &Range<'_, '_>, from: End, steps: u64) -> Option<f64> {
    for _ in 0..steps {
        if !from.step(range) {
            return None;
        }
    }
    range.score()
}

/// Ranks learnt during one call: `(score, members scored at or before it)`, exact until the set
/// changes at or below that score. The k-th oldest just after one is a short walk from it.
#[derive(Default)]
struct Anchors {
    items: [(f64, u64); MAX_LIMITS],
    len: usize,
}

impl Anchors {
    fn note(&mut self, score: f64, rank: u64) {
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = (score, rank);
            self.len += 1;
        }
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    /// Members added at `score` move the rank of every anchor at or after it.
    fn forget_from(&mut self, score: f64) {
        let mut kept = 0;
        for i in 0..self.len {
            if let Some(&(s, rank)) = self.items.get(i)
                && s < score
            {
                if let Some(slot) = self.items.get_mut(kept) {
                    *slot = (s, rank);
                }
                kept += 1;
            }
        }
        self.len = kept;
    }

    /// The anchor closest below rank `k` (1-based): its score and the steps from the first
    /// member after it to the k-th oldest.
    fn nearest_below(&self, k: u64) -> Option<(f64, u64)> {
        self.items
            .get(..self.len)?
            .iter()
            .filter(|(_, rank)| *rank < k)
            .map(|&(s, rank)| (s, k - rank - 1))
            .min_by_key(|&(_, steps)| steps)
    }
}

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
    /// A whole log written into the emptied key (a conversion), members with their scores.
    imported: Vec<(u64, OwnedString<'a>)>,
    expire: Expire,
    /// Members a REFUND removed; `refund_emptied` when they were the last.
    refunded: Members<'a>,
    refund_emptied: bool,
}

impl<'a> Effects<'a> {
    /// Sends the changes to replicas and the AOF and emits the keyspace events the seed's script
    /// would, in its order. Out of line: a call on a compact key never reaches it.
    #[inline(never)]
    pub fn publish(&self, ctx: Ctx<'a>) -> Result<(), Error> {
        let Some(key) = self.key else {
            return Ok(());
        };
        match self.trim {
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
        match self.added.as_slice() {
            [] => {}
            [one] => ctx.replicate_key_int_string(c"ZADD", key, self.added_at, one)?,
            many => {
                let score = ctx.string(self.added_at.to_string().as_bytes())?;
                let pairs = many.iter().map(|m| (score.as_rstring(), m.as_rstring()));
                replicate_zadd(ctx, key, pairs)?;
            }
        }
        for batch in self.imported.chunks(MEMBERS_PER_ZADD) {
            let scores = batch
                .iter()
                .map(|(ts, _)| ctx.string(ts.to_string().as_bytes()))
                .collect::<Result<Vec<_>, _>>()?;
            let pairs = scores
                .iter()
                .zip(batch)
                .map(|(s, (_, m))| (s.as_rstring(), m.as_rstring()));
            replicate_zadd(ctx, key, pairs)?;
        }
        let added = !self.added.as_slice().is_empty() || !self.imported.is_empty();
        if added {
            ctx.notify(Class::Zset, c"zadd", key);
        }
        match self.expire {
            Expire::Untouched | Expire::Kept(_) => {}
            Expire::Set(at) => {
                ctx.replicate_key_ints(c"PEXPIREAT", key, &[at])?;
                ctx.notify(Class::Generic, c"expire", key);
            }
        }
        let refunded = self.refunded.as_slice();
        if !refunded.is_empty() {
            let members: Vec<RString<'_>> = refunded.iter().map(|m| m.as_rstring()).collect();
            ctx.replicate_key_args(c"ZREM", key, &members)?;
            ctx.notify(Class::Zset, c"zrem", key);
            if self.refund_emptied {
                ctx.notify(Class::Generic, c"del", key);
            }
        }
        if self.trim != Trim::Nothing || added || !refunded.is_empty() {
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
    anchors: Anchors,
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
            anchors: Anchors::default(),
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

    /// Members in a score range, counted by stepping from one end without allocating; None when
    /// there are more than `most`.
    fn walk_count(
        &mut self,
        min: f64,
        max: f64,
        min_excl: bool,
        from: End,
        most: usize,
    ) -> Result<Option<u64>, Error> {
        let range = self.key.range(min, max, min_excl, from == End::Head)?;
        if range.is_empty() {
            return Ok(Some(0));
        }
        let mut n = 1u64;
        while from.step(&range) {
            n += 1;
            if n > most as u64 {
                return Ok(None);
            }
        }
        Ok(Some(n))
    }

    /// The score `steps` members in from one end of the set (0 = the end itself).
    fn score_after_steps(&mut self, from: End, steps: u64) -> Result<Option<f64>, Error> {
        let range = self.key.range(NEG_INF, POS_INF, false, from == End::Head)?;
        Ok(steps_then_score(&range, from, steps))
    }

    /// Members scored at or before `score`: from the ends when few (the side guessed from where
    /// `score` falls in time between them), else the set's own O(log N) count.
    fn count_through_uncached(&mut self, score: f64) -> Result<u64, Error> {
        let len = self.key.len();
        if len == 0 {
            return Ok(0);
        }
        // Most counts are of the few members a trim would remove: a short look from the head
        // before paying to read the ends (a walked trim already knows the oldest).
        if self.oldest.is_none()
            && let Some(n) = self.walk_count(NEG_INF, score, false, End::Head, PROBE)?
        {
            return Ok(n);
        }
        let (Some(oldest), Some(newest)) = (self.kth_oldest(1)?, self.newest()?) else {
            return Ok(0);
        };
        if score < oldest {
            return Ok(0);
        }
        if score >= newest {
            return Ok(len);
        }
        // Walk the side that holds fewer members, guessed from where `score` falls in time
        // between the ends; a side guessed far past a walk's reach goes to the set's own count.
        let head = (score - oldest) / (newest - oldest) * len as f64;
        let tail = len as f64 - head;
        let sides = if head.is_nan() || head <= tail {
            [(End::Head, head), (End::Tail, tail)]
        } else {
            [(End::Tail, tail), (End::Head, head)]
        };
        for (side, guess) in sides {
            if guess > GUESS_MAX {
                break;
            }
            let counted = match side {
                End::Head => self.walk_count(NEG_INF, score, false, End::Head, WALK_MAX)?,
                End::Tail => self
                    .walk_count(score, POS_INF, true, End::Tail, WALK_MAX)?
                    .map(|n| len.saturating_sub(n)),
            };
            if let Some(n) = counted {
                return Ok(n);
            }
        }
        self.key.closed(|set| set.count_through(score))
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

/// Propagates `ZADD key score member ...`, one pair per member.
fn replicate_zadd<'a, 's>(
    ctx: Ctx<'a>,
    key: RString<'a>,
    pairs: impl ExactSizeIterator<Item = (RString<'s>, RString<'s>)>,
) -> Result<(), Error> {
    let mut args = Vec::with_capacity(pairs.len().saturating_mul(2));
    for (score, member) in pairs {
        args.push(score);
        args.push(member);
    }
    ctx.replicate_key_args(c"ZADD", key, &args)
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

/// Writes `log` into the empty `key` as a sorted set with fresh members, recorded in `fx`: sent
/// on as `ZADD`s, announced as `zadd`.
pub fn import<'a>(key: &mut Key<'a>, fx: &mut Effects<'a>, log: &CompactLog) -> Result<(), Error> {
    fx.key = Some(key.name());
    fx.imported.reserve(usize::try_from(log.len()).unwrap_or(0));
    for ts in log.iter() {
        let member = add_fresh(key, ts)?;
        fx.imported.push((ts, member));
    }
    Ok(())
}

impl Log for ZsetLog<'_, '_> {
    fn count(&mut self) -> Result<u64, Error> {
        Ok(self.key.len())
    }

    fn count_through(&mut self, score: f64) -> Result<u64, Error> {
        let n = self.count_through_uncached(score)?;
        self.anchors.note(score, n);
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
            self.anchors.clear();
            self.key.unlink()?;
            self.fx.trim = Trim::Unlinked;
            self.oldest = Some(None);
            self.newest = Some(None);
            return Ok(len);
        }
        let Some(expired) = self.expired_names(at)? else {
            // Many expired: the set's own range removal, O(log N + M).
            self.anchors.clear();
            let removed = self.key.closed(|set| set.remove_through(cutoff))?;
            self.fx.trim = Trim::Called { cutoff };
            self.oldest = None;
            return Ok(removed);
        };
        let expired = expired.as_slice();
        if expired.is_empty() {
            return Ok(0);
        }
        self.anchors.clear();
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
        // Scores are at most 2^53, exact in f64.
        self.anchors.forget_from(score as f64);
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
        let len = self.key.len();
        if k == 0 || k > len {
            return Ok(None);
        }
        // Step from the nearest known place: the head, the tail, or just after a score whose rank
        // a count learnt (a window's need-th oldest). Far from all, the set's own rank lookup.
        let from_head = k - 1;
        let from_tail = len - k;
        let score = match self.anchors.nearest_below(k) {
            Some((at, steps)) if steps < from_head.min(from_tail) && steps <= WALK_MAX as u64 => {
                let range = self.key.range(at, POS_INF, true, true)?;
                steps_then_score(&range, End::Head, steps)
            }
            _ if from_head <= WALK_MAX as u64 => self.score_after_steps(End::Head, from_head)?,
            _ if from_tail < WALK_MAX as u64 => self.score_after_steps(End::Tail, from_tail)?,
            _ => return self.key.closed(|set| set.score_at_rank(k - 1)),
        };
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
        self.fx.expire = extend_expiry(self.key, at_ms)?;
        Ok(())
    }

    fn refund(&mut self, through: Option<u64>, n: u64) -> Result<u64, Error> {
        let len = self.key.len();
        if len == 0 {
            return Ok(0);
        }
        // From the newest member at or before `through`, stepping back: O(log N + M).
        let max = through.map_or(POS_INF, |t| t as f64);
        let mut gone = Members::None;
        let range = self.key.range(NEG_INF, max, false, false)?;
        let mut left = n;
        while left > 0
            && let Some((member, _)) = range.current()
        {
            gone.push(member);
            left -= 1;
            if !range.prev() {
                break;
            }
        }
        drop(range);
        self.anchors.clear();
        self.oldest = None;
        self.newest = None;
        for member in gone.as_slice() {
            self.key.zrem(member)?;
        }
        let removed = gone.as_slice().len() as u64;
        self.fx.refund_emptied = removed == len;
        self.fx.refunded = gone;
        Ok(removed)
    }
}
