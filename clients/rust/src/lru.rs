//! A map of byte-string keys bounded in entries and in bytes, the least recently used entry
//! leaving first: the lease map's ([`crate::LeaseMap`]) and the HTTP gateway's deny cache. A
//! slab with a doubly linked list through it: get, insert, remove and eviction are O(1); the
//! key is stored once, shared by the index and its slot.

use std::collections::HashMap;
use std::sync::Arc;

const NIL: usize = usize::MAX;

struct Slot<V> {
    key: Arc<[u8]>,
    value: V,
    /// What this entry is counted as (see [`Lru::insert`]).
    bytes: usize,
    prev: usize,
    next: usize,
}

pub struct Lru<V> {
    index: HashMap<Arc<[u8]>, usize>,
    slots: Vec<Option<Slot<V>>>,
    free: Vec<usize>,
    /// Most recently used.
    head: usize,
    /// Least recently used: the next to go.
    tail: usize,
    max_entries: usize,
    max_bytes: usize,
    bytes: usize,
}

impl<V> Lru<V> {
    /// What every entry is counted as beyond its key and the bytes its value declares: its slot,
    /// its index entry and the key's shared allocation header.
    pub const ENTRY_BYTES: usize =
        size_of::<Option<Slot<V>>>() + size_of::<(Arc<[u8]>, usize)>() + 2 * size_of::<usize>() + 1;

    /// At most `max_entries` entries (at least 1) and `max_bytes` bytes as counted by
    /// [`Lru::insert`].
    pub fn new(max_entries: usize, max_bytes: usize) -> Lru<V> {
        Lru {
            index: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            max_entries: max_entries.max(1),
            max_bytes,
            bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The bytes the entries are counted as.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The entry, marked as the most recently used.
    pub fn get(&mut self, key: &[u8]) -> Option<&mut V> {
        let i = *self.index.get(key)?;
        self.unlink(i);
        self.push_front(i);
        self.slots.get_mut(i)?.as_mut().map(|s| &mut s.value)
    }

    /// The entry, its recency unchanged.
    pub fn peek(&self, key: &[u8]) -> Option<&V> {
        let i = *self.index.get(key)?;
        self.slots.get(i)?.as_ref().map(|s| &s.value)
    }

    /// The least recently used entry.
    pub fn oldest(&self) -> Option<(&[u8], &V)> {
        let s = self.slots.get(self.tail)?.as_ref()?;
        Some((&s.key, &s.value))
    }

    /// Inserts or replaces `key`'s entry, counted as `key.len() + extra_bytes +`
    /// [`Lru::ENTRY_BYTES`], as the most recently used; then the least recently used others leave
    /// until both bounds hold, each handed to `evicted`, as is a replaced value. An entry larger
    /// than the byte bound on its own is not kept (handed to `evicted` at once).
    pub fn insert(
        &mut self,
        key: &[u8],
        value: V,
        extra_bytes: usize,
        mut evicted: impl FnMut(Arc<[u8]>, V),
    ) {
        let bytes = key
            .len()
            .saturating_add(extra_bytes)
            .saturating_add(Self::ENTRY_BYTES);
        if let Some((k, old)) = self.remove_entry(key) {
            evicted(k, old);
        }
        if bytes > self.max_bytes {
            evicted(key.into(), value);
            return;
        }
        while !self.is_empty()
            && (self.len() >= self.max_entries || self.bytes + bytes > self.max_bytes)
        {
            match self.pop_oldest() {
                Some((k, v)) => evicted(k, v),
                None => break,
            }
        }
        let key: Arc<[u8]> = key.into();
        let slot = Slot {
            key: key.clone(),
            value,
            bytes,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slots.get_mut(i) {
                    *s = Some(slot);
                }
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.index.insert(key, i);
        self.bytes += bytes;
        self.push_front(i);
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        self.remove_entry(key).map(|(_, v)| v)
    }

    /// Takes the least recently used entry out.
    pub fn pop_oldest(&mut self) -> Option<(Arc<[u8]>, V)> {
        let key = self.slots.get(self.tail)?.as_ref()?.key.clone();
        self.remove_entry(&key)
    }

    /// Takes every entry out, least recently used first.
    pub fn drain(&mut self) -> Vec<(Arc<[u8]>, V)> {
        let mut all = Vec::with_capacity(self.len());
        while let Some(e) = self.pop_oldest() {
            all.push(e);
        }
        all
    }

    fn remove_entry(&mut self, key: &[u8]) -> Option<(Arc<[u8]>, V)> {
        let i = self.index.remove(key)?;
        self.unlink(i);
        let slot = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        self.bytes -= slot.bytes;
        Some((slot.key, slot.value))
    }

    fn links(&self, i: usize) -> Option<(usize, usize)> {
        self.slots.get(i)?.as_ref().map(|s| (s.prev, s.next))
    }

    fn slot_mut(&mut self, i: usize) -> Option<&mut Slot<V>> {
        self.slots.get_mut(i)?.as_mut()
    }

    fn unlink(&mut self, i: usize) {
        let Some((prev, next)) = self.links(i) else {
            return;
        };
        match self.slot_mut(prev) {
            Some(p) => p.next = next,
            None => self.head = next,
        }
        match self.slot_mut(next) {
            Some(n) => n.prev = prev,
            None => self.tail = prev,
        }
    }

    fn push_front(&mut self, i: usize) {
        let old = self.head;
        if let Some(s) = self.slot_mut(i) {
            s.prev = NIL;
            s.next = old;
        }
        match self.slot_mut(old) {
            Some(o) => o.prev = i,
            None => self.tail = i,
        }
        self.head = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys<V>(lru: &Lru<V>) -> Vec<Vec<u8>> {
        // From the most recently used.
        let mut out = Vec::new();
        let mut i = lru.head;
        while let Some(Some(s)) = lru.slots.get(i) {
            out.push(s.key.to_vec());
            i = s.next;
        }
        out
    }

    #[test]
    fn least_recently_used_leaves_first() {
        let mut lru = Lru::new(3, usize::MAX);
        let mut gone = Vec::new();
        for (k, v) in [(b"a", 1), (b"b", 2), (b"c", 3)] {
            lru.insert(k, v, 0, |k, v| gone.push((k.to_vec(), v)));
        }
        assert_eq!(lru.get(b"a"), Some(&mut 1));
        lru.insert(b"d", 4, 0, |k, v| gone.push((k.to_vec(), v)));
        assert_eq!(gone, [(b"b".to_vec(), 2)]);
        assert_eq!(keys(&lru), [b"d".to_vec(), b"a".to_vec(), b"c".to_vec()]);
        assert_eq!(lru.oldest(), Some((&b"c"[..], &3)));
        // Replacing hands the old value back and keeps one entry per key.
        lru.insert(b"c", 30, 0, |k, v| gone.push((k.to_vec(), v)));
        assert_eq!(gone[1], (b"c".to_vec(), 3));
        assert_eq!(lru.len(), 3);
        assert_eq!(lru.peek(b"c"), Some(&30));
        assert_eq!(lru.remove(b"a"), Some(1));
        assert_eq!(lru.remove(b"a"), None);
        assert_eq!(
            lru.pop_oldest().map(|(k, v)| (k.to_vec(), v)),
            Some((b"d".to_vec(), 4))
        );
        assert_eq!(lru.drain().len(), 1);
        assert!(lru.is_empty());
        assert_eq!(lru.bytes(), 0);
    }

    #[test]
    fn bounded_in_bytes() {
        let per = Lru::<u8>::ENTRY_BYTES;
        // Room for three entries of 10-byte keys with 90 declared bytes each.
        let mut lru = Lru::new(1000, 3 * (100 + per));
        let mut gone = 0;
        for i in 0..10u8 {
            lru.insert(&[i; 10], i, 90, |_, _| gone += 1);
            assert!(lru.bytes() <= 3 * (100 + per));
        }
        assert_eq!((lru.len(), gone), (3, 7));
        assert_eq!(lru.peek(&[9; 10]), Some(&9));
        // One larger than the whole bound is not kept, and evicts nothing.
        let mut big = Vec::new();
        lru.insert(&[0; 10], 0, 10_000, |k, v| big.push((k.len(), v)));
        assert_eq!(big, [(10, 0)]);
        assert_eq!(lru.len(), 3);
    }

    #[test]
    fn many_keys_stay_within_bounds() {
        let mut lru = Lru::new(100, usize::MAX);
        for i in 0..10_000u32 {
            lru.insert(&i.to_be_bytes(), i, 0, |_, _| {});
            if i % 7 == 0 {
                lru.remove(&(i / 2).to_be_bytes());
            }
        }
        assert_eq!(lru.len(), 100);
        assert!(lru.slots.len() <= 101);
        for i in 9_900..10_000u32 {
            assert_eq!(lru.peek(&i.to_be_bytes()), Some(&i));
        }
        assert_eq!(lru.bytes(), 100 * (4 + Lru::<u32>::ENTRY_BYTES));
    }
}
