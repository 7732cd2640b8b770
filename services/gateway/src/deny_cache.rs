//! Refusals remembered in memory: once Redis refuses a key, its next requests get 429 from here
//! until the refusal's retry_after_ms has passed, without a Redis call. Bounded in entries and in
//! bytes (the crate's LRU map), least recently used first out. A refund can make a refusal
//! stale: the refunded key's own entry is dropped, and so is every entry refused while a shared
//! key (a tenant's, the global one) was part of its request, once that key is refunded.

use slidingwindow_client::Lru;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A refusal, on the gateway's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// When a request may pass again (the call's time + retry_after_ms).
    pub until: Instant,
    /// When the binding limit's window is empty (the call's time + reset_after_ms).
    pub reset_at: Instant,
    /// The binding limit.
    pub limit: usize,
}

impl Refusal {
    /// Only a wait that ends is cached: -1 (never admissible) and 0 go to Redis every time.
    pub fn new(
        at: Instant,
        retry_after_ms: i64,
        reset_after_ms: i64,
        limit: usize,
    ) -> Option<Self> {
        let ms = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
        (retry_after_ms > 0).then(|| Refusal {
            until: at + ms(retry_after_ms),
            reset_at: at + ms(reset_after_ms.max(retry_after_ms)),
            limit,
        })
    }
}

/// The shared keys an entry depends on, each with the generation it was refused at.
type Causes = [Option<(u64, u64)>; 2];

struct Entry {
    refusal: Refusal,
    causes: Causes,
    epoch: u64,
}

/// Most shared keys whose refunds are remembered; past it they are forgotten at once, and every
/// entry that depends on any shared key with them.
const MAX_GENERATIONS: usize = 65_536;

pub struct DenyCache {
    state: Mutex<State>,
}

struct State {
    lru: Lru<Entry>,
    /// A shared key's hash -> how many refunds it has had (absent: none since `epoch`).
    generations: HashMap<u64, u64>,
    epoch: u64,
}

impl State {
    fn generation(&self, h: u64) -> u64 {
        self.generations.get(&h).copied().unwrap_or(0)
    }

    /// No shared key of the entry has been refunded since it was refused.
    fn current(&self, causes: &Causes, epoch: u64) -> bool {
        causes
            .iter()
            .flatten()
            .all(|&(h, g)| epoch == self.epoch && self.generation(h) == g)
    }
}

impl DenyCache {
    pub fn new(max_entries: usize, max_bytes: usize) -> DenyCache {
        DenyCache {
            state: Mutex::new(State {
                lru: Lru::new(max_entries, max_bytes),
                generations: HashMap::new(),
                epoch: 0,
            }),
        }
    }

    /// The key's refusal if it still holds at `now`; an expired or stale one is dropped.
    pub fn get(&self, key: &[u8], now: Instant) -> Option<Refusal> {
        let mut st = self.lock();
        let e = st.lru.get(key)?;
        let (refusal, causes, epoch) = (e.refusal, e.causes, e.epoch);
        if now < refusal.until && st.current(&causes, epoch) {
            return Some(refusal);
        }
        st.lru.remove(key);
        None
    }

    /// Remembers `key`'s refusal; `shared` are the shared keys its request was checked on.
    pub fn insert(&self, key: &[u8], refusal: Refusal, shared: [Option<&[u8]>; 2]) {
        let mut st = self.lock();
        let causes = shared.map(|k| {
            k.map(|k| {
                let h = hash(k);
                (h, st.generation(h))
            })
        });
        let entry = Entry {
            refusal,
            causes,
            epoch: st.epoch,
        };
        st.lru.insert(key, entry, 0, |_, _| {});
    }

    /// A refund of `key` may make it admissible before its cached time.
    pub fn remove(&self, key: &[u8]) {
        self.lock().lru.remove(key);
    }

    /// A refund of the shared key `key`: every entry refused with it in its request is stale.
    pub fn refunded_shared(&self, key: &[u8]) {
        let mut st = self.lock();
        if st.generations.len() >= MAX_GENERATIONS {
            st.generations.clear();
            st.epoch += 1;
        }
        *st.generations.entry(hash(key)).or_insert(0) += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The map stays consistent whatever a panicking holder did: every change is one step.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn hash(key: &[u8]) -> u64 {
    // Fixed keys: the same key hashes the same for the process's life. A collision only drops
    // another entry early (Redis is asked again).
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(at: Instant, ms: u64, limit: usize) -> Refusal {
        Refusal {
            until: at + Duration::from_millis(ms),
            reset_at: at + Duration::from_millis(ms),
            limit,
        }
    }

    const NONE: [Option<&[u8]>; 2] = [None, None];

    #[test]
    fn holds_until_the_retry_time_then_forgets() {
        let t = Instant::now();
        let cache = DenyCache::new(10, 1 << 20);
        cache.insert(b"a", refusal(t, 100, 0), NONE);
        assert_eq!(cache.get(b"a", t), Some(refusal(t, 100, 0)));
        assert_eq!(
            cache.get(b"a", t + Duration::from_millis(99)),
            Some(refusal(t, 100, 0))
        );
        assert_eq!(cache.get(b"a", t + Duration::from_millis(100)), None);
        // The expired entry is gone, not just hidden.
        assert_eq!(cache.get(b"a", t), None);
        assert_eq!(cache.get(b"b", t), None);
        cache.insert(b"b", refusal(t, 5, 1), NONE);
        cache.remove(b"b");
        assert_eq!(cache.get(b"b", t), None);
    }

    #[test]
    fn only_waits_that_end_are_cached() {
        let t = Instant::now();
        assert_eq!(Refusal::new(t, -1, 5000, 0), None);
        assert_eq!(Refusal::new(t, 0, 5000, 0), None);
        let r = Refusal::new(t, 1500, 60_000, 2).unwrap();
        assert_eq!(r.until, t + Duration::from_millis(1500));
        assert_eq!(r.reset_at, t + Duration::from_millis(60_000));
        assert_eq!(r.limit, 2);
    }

    #[test]
    fn a_refund_of_a_shared_key_drops_the_refusals_it_was_part_of() {
        let t = Instant::now();
        let cache = DenyCache::new(10, 1 << 20);
        let acme: [Option<&[u8]>; 2] = [Some(b"rl:{acme}"), None];
        let both: [Option<&[u8]>; 2] = [Some(b"rl:{globex}"), Some(b"rl:global")];
        cache.insert(b"rl:{acme}:u1", refusal(t, 1000, 1), acme);
        cache.insert(b"rl:{acme}:u2", refusal(t, 1000, 1), acme);
        cache.insert(b"rl:{globex}:u1", refusal(t, 1000, 2), both);
        cache.insert(b"rl:{alone}", refusal(t, 1000, 0), NONE);
        cache.refunded_shared(b"rl:{acme}");
        assert_eq!(cache.get(b"rl:{acme}:u1", t), None);
        assert_eq!(cache.get(b"rl:{acme}:u2", t), None);
        assert!(cache.get(b"rl:{globex}:u1", t).is_some());
        // A refusal after the refund holds until the next one.
        cache.insert(b"rl:{acme}:u1", refusal(t, 1000, 1), acme);
        assert!(cache.get(b"rl:{acme}:u1", t).is_some());
        cache.refunded_shared(b"rl:global");
        assert_eq!(cache.get(b"rl:{globex}:u1", t), None);
        assert!(cache.get(b"rl:{acme}:u1", t).is_some());
        assert!(cache.get(b"rl:{alone}", t).is_some());
    }

    #[test]
    fn forgetting_the_generations_drops_every_shared_refusal() {
        let t = Instant::now();
        let cache = DenyCache::new(10, 1 << 20);
        cache.insert(b"rl:{a}:u", refusal(t, 1000, 1), [Some(b"rl:{a}"), None]);
        cache.insert(b"rl:{b}", refusal(t, 1000, 0), NONE);
        for i in 0..MAX_GENERATIONS as u32 + 1 {
            cache.refunded_shared(&i.to_be_bytes());
        }
        assert_eq!(cache.get(b"rl:{a}:u", t), None);
        assert!(cache.get(b"rl:{b}", t).is_some());
        assert_eq!(cache.lock().generations.len(), 1);
    }

    #[test]
    fn bounded_in_entries_and_bytes() {
        let t = Instant::now();
        let cache = DenyCache::new(3, usize::MAX);
        for k in [b"a", b"b", b"c"] {
            cache.insert(k, refusal(t, 1000, 0), NONE);
        }
        // a is used: b is now the oldest.
        assert!(cache.get(b"a", t).is_some());
        cache.insert(b"d", refusal(t, 1000, 0), NONE);
        assert!(cache.get(b"b", t).is_none());
        for k in [b"a", b"c", b"d"] {
            assert!(cache.get(k, t).is_some(), "{k:?}");
        }
        let per = Lru::<Entry>::ENTRY_BYTES;
        let bytes = DenyCache::new(1_000_000, 10 * (per + 100));
        for i in 0..1000u32 {
            bytes.insert(
                &[i.to_be_bytes().as_slice(), &[0; 96]].concat(),
                refusal(t, 1000, 0),
                NONE,
            );
        }
        let st = bytes.lock();
        assert_eq!(st.lru.len(), 10);
        assert!(st.lru.bytes() <= 10 * (per + 100));
    }
}
