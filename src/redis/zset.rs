//! The sorted-set storage of the log: the key stays an ordinary sorted set, one member per request.
//!
//! Queries stay near the ends of the set: the oldest member is one step from the head, and "is
//! anything newer than s?" is answered from the tail. Walks are bounded; beyond a few steps the
//! set's own O(log N) rank and range commands take over.

use super::api::{Key, OwnedString};
use crate::error::{Error, MAX_ADD_PER_CALL};
use crate::member::{MEMBER_LEN, fresh};
use crate::window::Log;

const NEG_INF: f64 = f64::NEG_INFINITY;
const POS_INF: f64 = f64::INFINITY;
/// Tries for a member name the key does not hold yet (a clash needs two equal 80-bit draws).
const NAME_TRIES: usize = 8;
/// Redis's LAZYFREE_THRESHOLD: larger values are freed off the main thread when unlinked.
const LAZYFREE_THRESHOLD: u64 = 64;
/// Most steps a walk takes before a rank or range command is cheaper; also the most members a
/// trim names when it propagates them.
pub const WALK_MAX: usize = 64;

/// How the trim changed the key, for propagation and keyspace events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trimmed {
    Nothing,
    /// The members in `removed` left, one by one; the key holds the rest.
    Named,
    /// More than `WALK_MAX` left, removed by `ZREMRANGEBYSCORE` (which emitted its own event).
    Range,
    /// Every member had left: the key is gone (a large set is freed in the background).
    All,
}

/// A few members; the common single one needs no allocation of ours.
#[derive(Default)]
pub enum Members {
    #[default]
    None,
    One(OwnedString),
    Many(Vec<OwnedString>),
}

impl Members {
    pub fn as_slice(&self) -> &[OwnedString] {
        match self {
            Members::None => &[],
            Members::One(m) => std::slice::from_ref(m),
            Members::Many(v) => v,
        }
    }

    fn push(&mut self, m: OwnedString) {
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

/// What a call changed, for the caller to propagate.
pub struct Effects {
    pub trimmed: Trimmed,
    pub removed: Members,
    pub added: Members,
}

/// A sorted set seen as a `Log`; records what it changed so the caller can propagate it.
pub struct ZsetLog<'k> {
    key: &'k mut Key,
    /// Cached oldest and newest scores; `None` until known.
    oldest: Option<Option<f64>>,
    newest: Option<Option<f64>>,
    /// Score of the members this call added, if any.
    added_at: Option<f64>,
    effects: Effects,
}

impl<'k> ZsetLog<'k> {
    pub fn new(key: &'k mut Key) -> Self {
        ZsetLog {
            key,
            oldest: None,
            newest: None,
            added_at: None,
            effects: Effects {
                trimmed: Trimmed::Nothing,
                removed: Members::None,
                added: Members::None,
            },
        }
    }

    pub fn into_effects(self) -> Effects {
        self.effects
    }

    /// Whether a member is scored above `score`; answered from the tail, no descent.
    fn any_after(&mut self, score: f64) -> Result<bool, Error> {
        if self.key.len()? == 0 {
            return Ok(false);
        }
        Ok(!self.key.range(score, POS_INF, true, true)?.is_empty()?)
    }

    /// Walks from the head over members scored at or before `cutoff`, keeping their names, and
    /// notes the first score after it. None when more than `WALK_MAX` are expired.
    fn expired_names(&mut self, cutoff: f64) -> Result<Option<Members>, Error> {
        let mut expired = Members::None;
        let mut oldest = None;
        let range = self.key.range(NEG_INF, POS_INF, false, true)?;
        loop {
            let Some((member, score)) = range.current()? else {
                break;
            };
            if score > cutoff {
                oldest = Some(score);
                break;
            }
            if expired.as_slice().len() == WALK_MAX {
                return Ok(None);
            }
            expired.push(member);
            if !range.next()? {
                break;
            }
        }
        drop(range);
        self.oldest = Some(oldest);
        Ok(Some(expired))
    }

    /// Adds one member at `score` under a fresh name.
    fn add_one(&mut self, score: u64) -> Result<(), Error> {
        let mut name = [0u8; MEMBER_LEN];
        for _ in 0..NAME_TRIES {
            fresh(score, &mut name);
            let member = self.key.ctx().string(&name)?;
            // Scores are at most 2^53, exact in f64.
            if self.key.zadd_new(score as f64, &member)? {
                self.effects.added.push(member);
                return Ok(());
            }
        }
        Err(Error::Server("a fresh member name"))
    }
}

impl Log for ZsetLog<'_> {
    type Error = Error;

    fn count(&mut self) -> Result<u64, Error> {
        self.key.len()
    }

    fn count_through(&mut self, score: f64) -> Result<u64, Error> {
        let len = self.key.len()?;
        if len == 0 || !self.any_after(score)? {
            return Ok(len);
        }
        let range = self.key.range(NEG_INF, score, false, true)?;
        if range.is_empty()? {
            return Ok(0);
        }
        let mut n = 1u64;
        while range.next()? {
            n += 1;
            if n > WALK_MAX as u64 {
                drop(range);
                return self.key.count_through(score);
            }
        }
        Ok(n)
    }

    fn trim(&mut self, cutoff: i64) -> Result<u64, Error> {
        let len = self.key.len()?;
        if len == 0 {
            return Ok(0);
        }
        let at = cutoff;
        // Cutoffs are within +-2^53, so the conversion is exact.
        let cutoff = cutoff as f64;
        // Redis frees a set of more than 64 members in the background on unlink; check that case
        // first (from the tail, no descent), so a call never walks a fully expired large set.
        if len > LAZYFREE_THRESHOLD && self.key.range(cutoff, POS_INF, true, true)?.is_empty()? {
            self.key.unlink()?;
            self.effects.trimmed = Trimmed::All;
            self.oldest = Some(None);
            self.newest = Some(None);
            return Ok(len);
        }
        let Some(expired) = self.expired_names(cutoff)? else {
            // Many expired: the set's own range removal, O(log N + M).
            let removed = self.key.remove_through(at)?;
            self.effects.trimmed = Trimmed::Range;
            self.oldest = None;
            return Ok(removed);
        };
        for member in expired.as_slice() {
            self.key.zrem(member)?;
        }
        let removed = expired.as_slice().len() as u64;
        self.effects.removed = expired;
        self.effects.trimmed = match removed {
            0 => Trimmed::Nothing,
            // The last removal deleted the key, as an empty set is.
            _ if removed == len => {
                self.newest = Some(None);
                Trimmed::All
            }
            _ => Trimmed::Named,
        };
        Ok(removed)
    }

    fn add(&mut self, score: u64, n: u64) -> Result<(), Error> {
        if n > MAX_ADD_PER_CALL {
            return Err(Error::TooManyMembers(n));
        }
        if n > 1 {
            self.effects.added = Members::Many(Vec::with_capacity(usize::try_from(n).unwrap_or(0)));
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
        if k == 0 || k > self.key.len()? {
            return Ok(None);
        }
        if k > WALK_MAX as u64 {
            return self.key.score_at_rank(k - 1);
        }
        let range = self.key.range(NEG_INF, POS_INF, false, true)?;
        for _ in 1..k {
            if !range.next()? {
                return Ok(None);
            }
        }
        let score = range.score()?;
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
            _ if self.key.len()? == 0 => None,
            _ => self.key.range(NEG_INF, POS_INF, false, false)?.score()?,
        };
        self.newest = Some(n);
        Ok(n)
    }
}
