//! The sorted-set storage of the log: the key stays an ordinary sorted set, one member per request.

use super::api::{Key, OwnedString};
use crate::error::{Error, MAX_ADD_PER_CALL};
use crate::member::{MEMBER_LEN, fresh};
use crate::window::Log;

const NEG_INF: f64 = f64::NEG_INFINITY;
const POS_INF: f64 = f64::INFINITY;
/// Tries for a member name the key does not hold yet (a clash needs two equal 80-bit draws).
const NAME_TRIES: usize = 8;

/// How the trim changed the key, for propagation and keyspace events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trimmed {
    Nothing,
    /// Some members left; the key still holds the rest.
    Some,
    /// Every member had left: the whole set was unlinked and is freed in the background.
    All,
}

/// A sorted set seen as a `Log`; records what it changed so the caller can propagate it.
pub struct ZsetLog<'k> {
    key: &'k Key,
    /// Cached newest score; `None` until asked.
    newest: Option<Option<f64>>,
    pub trimmed: Trimmed,
    /// Members this call added, in order.
    pub added: Vec<OwnedString>,
}

impl<'k> ZsetLog<'k> {
    pub fn new(key: &'k Key) -> Self {
        ZsetLog {
            key,
            newest: None,
            trimmed: Trimmed::Nothing,
            added: Vec::new(),
        }
    }

    /// Score of the first member of `[min, max]`, or of the last when `first` is false.
    fn edge(&self, min: f64, max: f64, first: bool) -> Result<Option<f64>, Error> {
        if self.key.len()? == 0 {
            return Ok(None);
        }
        self.key.range(min, max, false, first)?.score()
    }

    /// Removes members one at a time: O(log N) each, and trims are a few members per call.
    fn remove_through(&mut self, cutoff: f64) -> Result<u64, Error> {
        let mut removed = 0u64;
        loop {
            let member = match self.key.range(NEG_INF, cutoff, false, true)?.current()? {
                Some((member, _)) => member,
                None => return Ok(removed),
            };
            self.key.zrem(&member)?;
            removed += 1;
        }
    }

    /// Adds one member at `score` under a fresh name.
    fn add_one(&mut self, score: u64) -> Result<(), Error> {
        let mut name = [0u8; MEMBER_LEN];
        for _ in 0..NAME_TRIES {
            fresh(score, &mut name);
            let member = self.key.ctx().string(&name)?;
            // Scores are at most 2^53, exact in f64.
            if self.key.zadd_new(score as f64, &member)? {
                self.added.push(member);
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
        if len == 0 || self.newest()?.is_some_and(|n| n <= score) {
            return Ok(len);
        }
        let range = self.key.range(NEG_INF, score, false, true)?;
        if range.score()?.is_none() {
            return Ok(0);
        }
        let mut n = 1u64;
        while range.next()? {
            n += 1;
        }
        Ok(n)
    }

    fn trim(&mut self, cutoff: i64) -> Result<u64, Error> {
        let len = self.key.len()?;
        if len == 0 {
            return Ok(0);
        }
        // Cutoffs are within +-2^53, so the conversion is exact.
        let cutoff = cutoff as f64;
        if self.newest()?.is_some_and(|n| n <= cutoff) {
            // The whole window expired: O(1) here, the set is freed off the main thread.
            self.key.unlink()?;
            self.trimmed = Trimmed::All;
            self.newest = Some(None);
            return Ok(len);
        }
        let removed = self.remove_through(cutoff)?;
        if removed > 0 {
            self.trimmed = Trimmed::Some;
        }
        Ok(removed)
    }

    fn add(&mut self, score: u64, n: u64) -> Result<(), Error> {
        if n > MAX_ADD_PER_CALL {
            return Err(Error::TooManyMembers(n));
        }
        self.added.reserve(usize::try_from(n).unwrap_or(0));
        for _ in 0..n {
            self.add_one(score)?;
        }
        let s = score as f64;
        self.newest = match self.newest {
            Some(Some(old)) if old > s => Some(Some(old)),
            Some(_) => Some(Some(s)),
            None => None,
        };
        Ok(())
    }

    fn kth_oldest(&mut self, k: u64) -> Result<Option<f64>, Error> {
        if k == 0 || k > self.key.len()? {
            return Ok(None);
        }
        let range = self.key.range(NEG_INF, POS_INF, false, true)?;
        for _ in 1..k {
            if !range.next()? {
                return Ok(None);
            }
        }
        range.score()
    }

    fn newest(&mut self) -> Result<Option<f64>, Error> {
        if let Some(n) = self.newest {
            return Ok(n);
        }
        let n = self.edge(NEG_INF, POS_INF, false)?;
        self.newest = Some(n);
        Ok(n)
    }
}
