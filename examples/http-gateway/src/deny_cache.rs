//! Refusals remembered in memory: once Redis refuses a key, its next requests get 429 from here
//! until the refusal's retry_after_ms has passed, without a Redis call. Bounded, least recently
//! used first out.

use std::collections::HashMap;
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

pub struct DenyCache {
    lru: Mutex<Lru>,
}

impl DenyCache {
    pub fn new(capacity: usize) -> DenyCache {
        DenyCache {
            lru: Mutex::new(Lru::new(capacity)),
        }
    }

    /// The key's refusal if it still holds at `now`; an expired one is dropped.
    pub fn get(&self, key: &[u8], now: Instant) -> Option<Refusal> {
        let mut lru = self.lock();
        let found = lru.get(key)?;
        if now < found.until {
            return Some(found);
        }
        lru.remove(key);
        None
    }

    pub fn insert(&self, key: &[u8], refusal: Refusal) {
        self.lock().insert(key, refusal);
    }

    /// A refund may make the key admissible before its cached time.
    pub fn remove(&self, key: &[u8]) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // The map stays consistent whatever a panicking holder did: every change is one step.
        self.lru.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

const NIL: usize = usize::MAX;

struct Slot {
    key: Box<[u8]>,
    value: Refusal,
    prev: usize,
    next: usize,
}

/// A map plus a doubly linked list through a slab: O(1) get, insert, remove and eviction.
struct Lru {
    map: HashMap<Box<[u8]>, usize>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Most recently used.
    head: usize,
    /// Least recently used: the next to go.
    tail: usize,
    capacity: usize,
}

impl Lru {
    fn new(capacity: usize) -> Lru {
        Lru {
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            capacity: capacity.max(1),
        }
    }

    fn get(&mut self, key: &[u8]) -> Option<Refusal> {
        let i = *self.map.get(key)?;
        self.unlink(i);
        self.push_front(i);
        self.slots.get(i).map(|s| s.value)
    }

    fn insert(&mut self, key: &[u8], value: Refusal) {
        if let Some(&i) = self.map.get(key) {
            if let Some(s) = self.slots.get_mut(i) {
                s.value = value;
            }
            self.unlink(i);
            self.push_front(i);
            return;
        }
        if self.map.len() >= self.capacity {
            let oldest = self.tail;
            if let Some(k) = self.slots.get(oldest).map(|s| s.key.clone()) {
                self.remove(&k);
            }
        }
        let slot = Slot {
            key: key.into(),
            value,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slots.get_mut(i) {
                    *s = slot;
                }
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.map.insert(key.into(), i);
        self.push_front(i);
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(i) = self.map.remove(key) {
            self.unlink(i);
            if let Some(s) = self.slots.get_mut(i) {
                s.key = Box::default();
            }
            self.free.push(i);
        }
    }

    fn unlink(&mut self, i: usize) {
        let Some((prev, next)) = self.slots.get(i).map(|s| (s.prev, s.next)) else {
            return;
        };
        match self.slots.get_mut(prev) {
            Some(p) => p.next = next,
            None => self.head = next,
        }
        match self.slots.get_mut(next) {
            Some(n) => n.prev = prev,
            None => self.tail = prev,
        }
    }

    fn push_front(&mut self, i: usize) {
        let old = self.head;
        if let Some(s) = self.slots.get_mut(i) {
            s.prev = NIL;
            s.next = old;
        }
        match self.slots.get_mut(old) {
            Some(o) => o.prev = i,
            None => self.tail = i,
        }
        self.head = i;
    }
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

    #[test]
    fn holds_until_the_retry_time_then_forgets() {
        let t = Instant::now();
        let cache = DenyCache::new(10);
        cache.insert(b"a", refusal(t, 100, 0));
        assert_eq!(cache.get(b"a", t), Some(refusal(t, 100, 0)));
        assert_eq!(
            cache.get(b"a", t + Duration::from_millis(99)),
            Some(refusal(t, 100, 0))
        );
        assert_eq!(cache.get(b"a", t + Duration::from_millis(100)), None);
        // The expired entry is gone, not just hidden.
        assert_eq!(cache.get(b"a", t), None);
        assert_eq!(cache.get(b"b", t), None);
        cache.insert(b"b", refusal(t, 5, 1));
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
    fn least_recently_used_leaves_first() {
        let t = Instant::now();
        let cache = DenyCache::new(3);
        for k in [b"a", b"b", b"c"] {
            cache.insert(k, refusal(t, 1000, 0));
        }
        // a is used: b is now the oldest.
        assert!(cache.get(b"a", t).is_some());
        cache.insert(b"d", refusal(t, 1000, 0));
        assert!(cache.get(b"b", t).is_none());
        for k in [b"a", b"c", b"d"] {
            assert!(cache.get(k, t).is_some(), "{k:?}");
        }
        // Updating keeps one entry per key.
        cache.insert(b"c", refusal(t, 2000, 1));
        assert_eq!(cache.get(b"c", t), Some(refusal(t, 2000, 1)));
        cache.insert(b"e", refusal(t, 1000, 0));
        cache.insert(b"f", refusal(t, 1000, 0));
        // After using c then adding e and f, a and d (the oldest uses) left.
        assert!(cache.get(b"c", t).is_some());
        assert_eq!(cache.lock().map.len(), 3);
    }

    #[test]
    fn many_keys_stay_within_capacity() {
        let t = Instant::now();
        let cache = DenyCache::new(100);
        for i in 0..10_000u32 {
            cache.insert(&i.to_be_bytes(), refusal(t, 1000, 0));
            if i % 7 == 0 {
                cache.remove(&(i / 2).to_be_bytes());
            }
        }
        let lru = cache.lock();
        assert_eq!(lru.map.len(), 100);
        assert!(lru.slots.len() <= 101);
        // The newest 100 are the ones kept (the removals only touched older keys).
        for i in 9_900..10_000u32 {
            assert!(lru.map.contains_key(&i.to_be_bytes()[..]), "{i}");
        }
    }
}
