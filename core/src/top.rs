//! The summary of refused keys behind `SLIDINGWINDOW.TOP`: Space-Saving (Metwally, Agrawal and
//! El Abbadi, 2005) over at most `capacity` names.
//!
//! Every entry holds an estimate `count` and an `error`: the key's true refusals since the reset
//! lie in `count - error ..= count`. A name not in a full summary replaces the entry with the
//! smallest count `m` and starts at `m + 1` with error `m`; since the counts add up to the
//! refusals `R`, `m <= R / capacity`, so every key refused more than that is kept.
//!
//! The entries are kept in one array sorted by count, largest first, with the first position of
//! every count in a map: a refusal moves its entry to the front of its count's run and adds one,
//! which keeps the order, in O(1) expected time. A call hashes its name at most once: the index
//! holds slot numbers under their names' hashes, and each slot keeps its name's hash, so an
//! eviction finds the old name's place without hashing it, and the new name is copied into the old
//! name's buffer.

use super::args::integer;
use super::error::{Arg, Error, token};
use foldhash::fast::RandomState;
use hashbrown::HashTable;
use sha2::{Digest, Sha256};
use std::cmp::Reverse;
use std::collections::HashMap;
use std::hash::BuildHasher;

/// Most bytes of a name the summary keeps.
pub const NAME_BYTES: usize = 256;
/// Bytes of a longer name kept verbatim, before `...` and the hex of its SHA-256's first 4 bytes.
const KEPT_PREFIX: usize = 240;

/// One key of the summary as `TOP` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: Box<[u8]>,
    /// Never below the key's true refusals, never above it by more than `error`.
    pub count: u64,
    pub error: u64,
}

struct Slot {
    /// The name as `kept_name` keeps it; an eviction overwrites it in place.
    name: Vec<u8>,
    count: u64,
    error: u64,
    /// `name`'s hash in `index`.
    hash: u64,
    /// Where the slot is in `order`.
    at: u32,
}

impl Slot {
    fn entry(&self) -> Entry {
        Entry {
            name: self.name.as_slice().into(),
            count: self.count,
            error: self.error,
        }
    }
}

/// A bounded heavy-hitters summary of names.
pub struct Summary {
    capacity: usize,
    slots: Vec<Slot>,
    /// Slot numbers, largest count first.
    order: Vec<u32>,
    /// Slot numbers under their names' hashes (`hasher`).
    index: HashTable<u32>,
    hasher: RandomState,
    /// The first position in `order` of each count present but the largest, whose run starts at
    /// 0: a key refused again and again stays first, and its count moves without a table.
    starts: HashMap<u64, u32, RandomState>,
    /// Names counted since the reset.
    total: u64,
    /// The slot of the name counted last: a refused key is often refused again next, and
    /// comparing its name costs less than hashing it.
    last: u32,
}

impl Summary {
    /// An empty summary of at most `capacity` names (0 counts nothing).
    pub fn new(capacity: usize) -> Summary {
        Summary {
            capacity,
            slots: Vec::new(),
            order: Vec::new(),
            index: HashTable::new(),
            hasher: RandomState::default(),
            starts: HashMap::default(),
            total: 0,
            last: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Names counted since the reset (`R`).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Counts one refusal of `name`, kept as `kept_name` says.
    pub fn count(&mut self, name: &[u8]) {
        if self.capacity == 0 {
            return;
        }
        self.total += 1;
        // A name longer than `NAME_BYTES` is kept shortened: never equal to its slot's name.
        let slot = match self.slots.get(self.last as usize) {
            Some(last) if *last.name == *name => self.last,
            _ => {
                let name = kept_name(name);
                let hash = self.hasher.hash_one(&name[..]);
                let slots = &self.slots;
                let found = self.index.find(hash, |&s| slots[s as usize].name == *name);
                match found {
                    Some(&slot) => slot,
                    None => self.admit(&name, hash),
                }
            }
        };
        self.last = slot;
        self.bump(slot);
    }

    /// The slot a new name takes: a free one, or the one of the smallest count, which keeps its
    /// count as the new name's error; `hash` is `name`'s.
    fn admit(&mut self, name: &[u8], hash: u64) -> u32 {
        let slot = if self.slots.len() < self.capacity {
            let slot = self.slots.len() as u32;
            self.slots.push(Slot {
                name: name.to_vec(),
                count: 0,
                error: 0,
                hash,
                at: slot,
            });
            self.order.push(slot);
            self.run_starts(0, slot);
            slot
        } else {
            let slot = self.order[self.order.len() - 1];
            let old = &mut self.slots[slot as usize];
            if let Ok(place) = self.index.find_entry(old.hash, |&s| s == slot) {
                place.remove();
            }
            old.name.clear();
            old.name.extend_from_slice(name);
            old.hash = hash;
            old.error = old.count;
            slot
        };
        let slots = &self.slots;
        self.index
            .insert_unique(hash, slot, |&s| slots[s as usize].hash);
        slot
    }

    /// Adds one to `slot`'s count: it first swaps places with the first entry of its count.
    fn bump(&mut self, slot: u32) {
        let at = self.slots[slot as usize].at;
        let count = self.slots[slot as usize].count;
        // The first entry is the first of its count (`starts` holds no run that starts at 0).
        let first = match at {
            0 => 0,
            _ => self.starts.get(&count).copied().unwrap_or(0),
        };
        if first != at {
            let other = self.order[first as usize];
            self.order.swap(first as usize, at as usize);
            self.slots[other as usize].at = at;
            self.slots[slot as usize].at = first;
        }
        let next = first as usize + 1;
        if next < self.order.len() && self.slots[self.order[next] as usize].count == count {
            self.starts.insert(count, next as u32);
        } else if first != 0 {
            self.starts.remove(&count);
        }
        self.slots[slot as usize].count = count + 1;
        self.run_starts(count + 1, first);
    }

    /// Records that the entry at `at` has `count`: the first of that count's run unless the entry
    /// before it has `count` too; a run at 0 is not recorded.
    fn run_starts(&mut self, count: u64, at: u32) {
        let Some(before) = (at as usize).checked_sub(1) else {
            return;
        };
        if self.slots[self.order[before] as usize].count != count {
            self.starts.insert(count, at);
        }
    }

    /// The entries as `TOP` lists them: largest count first, then the smaller error, then the
    /// name's bytes; only those `keep` admits. `keep` is asked once an entry, then O(T) selects
    /// the first `k` of the kept and O(k log k) sorts them.
    pub fn top(&self, k: usize, mut keep: impl FnMut(&[u8]) -> bool) -> Vec<Entry> {
        let mut kept: Vec<&Slot> = self
            .order
            .iter()
            .map(|&slot| &self.slots[slot as usize])
            .filter(|s| keep(&s.name))
            .collect();
        if k == 0 {
            return Vec::new();
        }
        if k < kept.len() {
            kept.select_nth_unstable_by_key(k - 1, |&s| rank(s.count, s.error, &s.name));
            kept.truncate(k);
        }
        kept.sort_unstable_by_key(|&s| rank(s.count, s.error, &s.name));
        kept.into_iter().map(Slot::entry).collect()
    }

    /// The bytes the summary holds, its tables and names.
    pub fn bytes(&self) -> usize {
        let names: usize = self.slots.iter().map(|s| s.name.capacity()).sum();
        let slots = self.slots.capacity() * std::mem::size_of::<Slot>();
        let order = self.order.capacity() * std::mem::size_of::<u32>();
        // hashbrown keeps a control byte beside each bucket.
        let index = self.index.capacity() * (std::mem::size_of::<u32>() + 1);
        let starts = self.starts.capacity() * (std::mem::size_of::<(u64, u32)>() + 1);
        std::mem::size_of::<Summary>() + names + slots + order + index + starts
    }
}

/// How many entries `SLIDINGWINDOW.TOP [COUNT k]` asks for: `k` in `1..=top_keys` (or 1 when the
/// summary is off), 10 by default (at most `top_keys`).
pub fn parse_count(argv: &[&[u8]], top_keys: u64) -> Result<usize, Error> {
    let most = top_keys.max(1);
    let mut count = None;
    let mut options = argv.get(1..).unwrap_or_default().iter();
    while let Some(option) = options.next() {
        if !option.eq_ignore_ascii_case(b"COUNT") {
            return Err(Error::UnknownOption(token(option)));
        }
        if count.is_some() {
            return Err(Error::RepeatedOption(token(option)));
        }
        let value = options
            .next()
            .ok_or_else(|| Error::MissingValue(token(option)))?;
        count = Some(integer(value, 1, most).ok_or(Error::Invalid(Arg::TopCount(most)))?);
    }
    Ok(count.unwrap_or(10.min(most)) as usize)
}

/// `TOP`'s order, ascending: the larger count, then the smaller error, then the name's bytes.
fn rank(count: u64, error: u64, name: &[u8]) -> (Reverse<u64>, u64, &[u8]) {
    (Reverse(count), error, name)
}

/// `name` as the summary keeps it: itself up to `NAME_BYTES`, else its first 240 bytes, `...` and
/// the hex of the first 4 bytes of its SHA-256.
pub fn kept_name(name: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if name.len() <= NAME_BYTES {
        return name.into();
    }
    let digest = Sha256::digest(name);
    let mut kept = name[..KEPT_PREFIX].to_vec();
    kept.extend_from_slice(b"...");
    for b in &digest[..4] {
        kept.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    kept.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use testkit::zipf::Zipf;

    fn names(s: &Summary, k: usize) -> Vec<(String, u64, u64)> {
        s.top(k, |_| true)
            .into_iter()
            .map(|e| {
                (
                    String::from_utf8_lossy(&e.name).into_owned(),
                    e.count,
                    e.error,
                )
            })
            .collect()
    }

    fn entry(name: &str, count: u64, error: u64) -> (String, u64, u64) {
        (name.to_string(), count, error)
    }

    /// `order` runs from the largest count down, and `starts` holds the first position of each
    /// count's run but the one at 0, and nothing else; `index` holds each slot once, under its
    /// name's hash, which the slot keeps.
    fn check_runs(s: &Summary) {
        assert_eq!(s.index.len(), s.slots.len());
        for (i, slot) in s.slots.iter().enumerate() {
            assert_eq!(slot.hash, s.hasher.hash_one(&slot.name[..]));
            let found = s
                .index
                .find(slot.hash, |&o| s.slots[o as usize].name == slot.name);
            assert_eq!(found, Some(&(i as u32)));
        }
        let counts: Vec<u64> = s.order.iter().map(|&o| s.slots[o as usize].count).collect();
        assert!(counts.windows(2).all(|w| w[0] >= w[1]), "{counts:?}");
        for (i, &o) in s.order.iter().enumerate() {
            assert_eq!(s.slots[o as usize].at as usize, i);
        }
        let mut want = HashMap::<u64, u32, RandomState>::default();
        for (i, c) in counts.iter().enumerate().skip(1) {
            if counts[i - 1] != *c {
                want.insert(*c, i as u32);
            }
        }
        assert_eq!(s.starts, want, "{counts:?}");
    }

    #[test]
    fn runs_stay_sorted_and_recorded() {
        let mut rng = Rng::new(0x70_0001);
        for capacity in [1, 2, 3, 8, 64] {
            let mut s = Summary::new(capacity);
            for _ in 0..5_000 {
                // Mostly a few names, now and then a new one; runs of one name too.
                let name = match rng.range(0, 9) {
                    0 => rng.range(0, 1_000),
                    _ => rng.range(0, 6),
                };
                // Names of 2 to 304 bytes, those above `NAME_BYTES` kept shortened.
                let name = format!("k{name}{}", "-".repeat((name as usize * 37) % 301));
                for _ in 0..rng.range(1, 3) {
                    s.count(name.as_bytes());
                    check_runs(&s);
                }
            }
        }
    }

    #[test]
    fn counts_exactly_while_there_is_room() {
        let mut s = Summary::new(4);
        for name in ["a", "b", "a", "c", "a", "b"] {
            s.count(name.as_bytes());
        }
        assert_eq!(s.total(), 6);
        assert_eq!(
            names(&s, 10),
            vec![entry("a", 3, 0), entry("b", 2, 0), entry("c", 1, 0)]
        );
        assert_eq!(names(&s, 2), vec![entry("a", 3, 0), entry("b", 2, 0)]);
    }

    #[test]
    fn a_new_name_in_a_full_summary_takes_the_smallest_count_as_its_error() {
        let mut s = Summary::new(2);
        for name in ["a", "a", "b", "c"] {
            s.count(name.as_bytes());
        }
        // "c" replaced "b" (count 1): count 2, error 1.
        assert_eq!(names(&s, 2), vec![entry("a", 2, 0), entry("c", 2, 1)]);
        s.count(b"d");
        // "d" replaced the last of the count-2 run, "c": count 3, error 2.
        assert_eq!(names(&s, 2), vec![entry("d", 3, 2), entry("a", 2, 0)]);
    }

    #[test]
    fn an_evicted_name_leaves_its_buffer_to_the_next() {
        let mut s = Summary::new(1);
        s.count(b"a longer name");
        let buffer = s.slots[0].name.as_ptr();
        for name in ["b", "a name", "a longer name", "c"] {
            s.count(name.as_bytes());
            assert_eq!(s.slots[0].name, name.as_bytes());
            assert_eq!(s.slots[0].name.as_ptr(), buffer);
            check_runs(&s);
        }
        assert_eq!(names(&s, 1), vec![entry("c", 5, 4)]);
    }

    #[test]
    fn ties_list_the_smaller_error_then_the_name() {
        let mut s = Summary::new(3);
        for name in ["b", "a", "c", "c", "x"] {
            s.count(name.as_bytes());
        }
        // "x" replaced the smallest, which is one of a, b (count 1): count 2, error 1.
        let top = names(&s, 3);
        assert_eq!(top[0], entry("c", 2, 0));
        assert_eq!(top[1].0, "x");
        assert_eq!((top[1].1, top[1].2), (2, 1));
        assert_eq!(top[2].1, 1);
    }

    #[test]
    fn count_is_an_option_in_range() {
        let parse = |line: &str, top: u64| {
            let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            parse_count(&words, top)
        };
        assert_eq!(parse("TOP", 1024), Ok(10));
        assert_eq!(parse("TOP", 3), Ok(3));
        assert_eq!(parse("TOP", 0), Ok(1));
        assert_eq!(parse("TOP count 1024", 1024), Ok(1024));
        assert_eq!(parse("TOP COUNT 1", 0), Ok(1));
        let range = |most| Err(Error::Invalid(Arg::TopCount(most)));
        assert_eq!(parse("TOP COUNT 1025", 1024), range(1024));
        assert_eq!(parse("TOP COUNT 0", 1024), range(1024));
        assert_eq!(parse("TOP COUNT 2", 0), range(1));
        assert_eq!(parse("TOP COUNT x", 5), range(5));
        assert_eq!(
            parse("TOP COUNT", 5),
            Err(Error::MissingValue("COUNT".into()))
        );
        assert_eq!(
            parse("TOP COUNT 1 COUNT 2", 5),
            Err(Error::RepeatedOption("COUNT".into()))
        );
        assert_eq!(
            parse("TOP LIMIT 1", 5),
            Err(Error::UnknownOption("LIMIT".into()))
        );
        assert_eq!(
            Error::Invalid(Arg::TopCount(1024)).to_string(),
            "ERR COUNT must be an integer between 1 and 1024 (slidingwindow.top-keys)"
        );
    }

    #[test]
    fn capacity_zero_counts_nothing() {
        let mut s = Summary::new(0);
        s.count(b"a");
        assert_eq!(s.total(), 0);
        assert!(s.top(10, |_| true).is_empty());
    }

    #[test]
    fn left_out_names_let_the_next_ones_in() {
        let mut s = Summary::new(8);
        for (name, n) in [("a", 5), ("b", 4), ("c", 3), ("d", 2), ("e", 1)] {
            for _ in 0..n {
                s.count(name.as_bytes());
            }
        }
        let kept = s.top(2, |name| name != b"a" && name != b"c");
        let kept: Vec<_> = kept.iter().map(|e| (&e.name[..], e.count)).collect();
        assert_eq!(kept, vec![(&b"b"[..], 4), (&b"d"[..], 2)]);
    }

    #[test]
    fn long_names_keep_a_prefix_and_a_hash() {
        let short = vec![b'k'; NAME_BYTES];
        assert_eq!(&kept_name(&short)[..], &short[..]);
        let long = vec![b'k'; NAME_BYTES + 1];
        let kept = kept_name(&long);
        assert_eq!(kept.len(), KEPT_PREFIX + 3 + 8);
        assert_eq!(&kept[..KEPT_PREFIX], &long[..KEPT_PREFIX]);
        assert_eq!(&kept[KEPT_PREFIX..KEPT_PREFIX + 3], b"...");
        let other = [vec![b'k'; NAME_BYTES], vec![b'j']].concat();
        assert_ne!(kept_name(&other), kept);
        let mut s = Summary::new(2);
        s.count(&long);
        s.count(&long);
        assert_eq!(s.top(1, |_| true)[0].count, 2);
        assert_eq!(&s.top(1, |_| true)[0].name[..], &kept[..]);
    }

    /// Against exact counts on random streams: every estimate within its error of the truth,
    /// every key above R / capacity present, the order the contract's.
    #[test]
    fn estimates_bound_the_truth_on_skewed_streams() {
        let mut rng = Rng::new(7);
        for &(capacity, keys) in &[(1usize, 5u64), (4, 10), (16, 200), (64, 5000)] {
            let mut s = Summary::new(capacity);
            let mut truth: HashMap<Vec<u8>, u64> = HashMap::new();
            for _ in 0..20_000 {
                // Skewed: the smaller numbers far more often.
                let a = rng.range(0, keys - 1);
                let k = rng.range(0, a);
                // Names of 6 to 208 bytes.
                let name = format!("user:{k}{}", "-".repeat((k as usize * 37) % 200)).into_bytes();
                s.count(&name);
                *truth.entry(name).or_default() += 1;
            }
            let r = s.total();
            assert_eq!(r, 20_000);
            let top = s.top(capacity, |_| true);
            assert_eq!(top.len(), capacity.min(truth.len()));
            for w in top.windows(2) {
                let [a, b] = w else { unreachable!() };
                assert!(rank(a.count, a.error, &a.name) <= rank(b.count, b.error, &b.name));
            }
            for e in &top {
                let t = truth[&e.name[..]];
                assert!(e.count >= t && e.count - e.error <= t, "{e:?} truth {t}");
            }
            // Each refusal adds one to one entry.
            assert_eq!(top.iter().map(|e| e.count).sum::<u64>(), r);
            for (name, &t) in &truth {
                if t > r / capacity as u64 {
                    assert!(top.iter().any(|e| e.name[..] == name[..]), "{t} > R/k");
                }
            }
        }
    }

    /// Issue 40's target: 1M refusals over 100k keys drawn from Zipf(1.1), 1024 entries: the
    /// true top 10 are TOP's first 10, every estimate within its error.
    #[test]
    fn zipf_top_ten_are_listed_first() {
        let keys = 100_000usize;
        let zipf = Zipf::new(keys, 1.1);
        let mut rng = Rng::new(40);
        let mut s = Summary::new(1024);
        let mut truth = vec![0u64; keys];
        for _ in 0..1_000_000 {
            let k = zipf.sample(&mut rng);
            truth[k] += 1;
            s.count(format!("user:{k}").as_bytes());
        }
        let mut order: Vec<usize> = (0..keys).collect();
        order.sort_by_key(|&k| std::cmp::Reverse(truth[k]));
        let top: Vec<Entry> = s.top(10, |_| true);
        let listed: Vec<String> = top
            .iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect();
        for &k in &order[..10] {
            assert!(
                listed.contains(&format!("user:{k}")),
                "user:{k} not in {listed:?}"
            );
        }
        for e in s.top(1024, |_| true) {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let t = truth[name["user:".len()..].parse::<usize>().unwrap()];
            assert!(e.count >= t && e.count - e.error <= t, "{e:?} truth {t}");
        }
    }
}
