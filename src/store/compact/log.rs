//! The compact log itself, free of Redis: the timestamps of logged requests, oldest first.
//!
//! A few requests (up to `SMALL`) live inside the value itself, as 4-byte offsets from a base: a
//! new key costs one small allocation. Past that, the log is a row of sorted blocks of at most
//! `BLOCK_BYTES` each. Every block has its own base and its own slot width (1 to 7 bytes), the
//! fewest that hold its own span: a dense block, requests ms apart, takes 2 bytes a request
//! whatever the whole log spans. Blocks are sized on the allocator's size classes.
//!
//! Every operation costs O(log N + M) for M timestamps removed, wherever it lands: finding a
//! position is a binary search over the blocks' first timestamps, then one inside a block;
//! counts before a block come from a Fenwick tree over the blocks' lengths once there are many;
//! an insert touches one block (splitting it when full); a trim drops whole blocks and cuts one.
//! Re-laying out a block (a new width or base) or rebuilding the tree after a block comes or
//! goes costs one block's or one index's length, once per many requests.

/// Largest timestamp a log holds: every argument is at most 2^53.
pub const MAX_TS: u64 = 1 << 53;

/// Timestamps kept inside the value itself, before any block exists.
const SMALL: usize = 11;

/// Bytes of slots in one block at most: one allocator class, moved whole at most once a call.
#[cfg(not(fuzzing))]
const BLOCK_BYTES: usize = 4096;
/// Tiny blocks under the fuzzer, so that a short input splits and merges many.
#[cfg(fuzzing)]
const BLOCK_BYTES: usize = 32;

/// Below this many blocks, counts before a block are summed directly (no tree to allocate).
const FENWICK_MIN: usize = 16;

/// Offsets below this fit a slot of `width` bytes (1 to 7).
fn reach(width: usize) -> u64 {
    1u64 << (8 * width.clamp(1, 7) as u32)
}

/// The fewest bytes a slot needs for offsets up to `span`.
fn width_for(span: u64) -> usize {
    (1..=7).find(|w| span < reach(*w)).unwrap_or(7)
}

/// The allocator's size class for `bytes`: four classes per doubling (16-byte steps up to 128).
fn size_class(bytes: usize) -> usize {
    match bytes {
        0 => 0,
        1..=16 => bytes.next_multiple_of(8),
        17..=128 => bytes.next_multiple_of(16),
        _ => {
            let step = 1usize << (usize::BITS - (bytes - 1).leading_zeros()).saturating_sub(3);
            bytes.next_multiple_of(step)
        }
    }
}

/// A sorted run of timestamps, each stored as its offset from `base` in `width` little-endian
/// bytes; the live slots are `start..start + len` of `buf`. The first timestamp is kept beside
/// them, so that searching the blocks reads no buffer but one.
#[derive(Debug, Clone)]
struct Block {
    first: u64,
    base: u64,
    buf: Box<[u8]>,
    start: u16,
    len: u16,
    width: u8,
}

impl Block {
    /// A block holding `ts` (sorted, fitting `BLOCK_BYTES` at their width).
    fn from_sorted(ts: &[u64]) -> Block {
        let (lo, hi) = (
            ts.first().copied().unwrap_or(0),
            ts.last().copied().unwrap_or(0),
        );
        let width = width_for(hi.saturating_sub(lo));
        let mut buf = vec![0u8; size_class(ts.len() * width)].into_boxed_slice();
        for (slot, t) in buf.chunks_exact_mut(width).zip(ts) {
            if let Some(bytes) = t.saturating_sub(lo).to_le_bytes().get(..width) {
                slot.copy_from_slice(bytes);
            }
        }
        Block {
            first: lo,
            base: lo,
            buf,
            start: 0,
            len: ts.len() as u16,
            width: width as u8,
        }
    }

    /// `n` copies of `ts`, one byte each (`n` at most `BLOCK_BYTES`).
    fn run(ts: u64, n: usize) -> Block {
        Block {
            first: ts,
            base: ts,
            buf: vec![0u8; size_class(n)].into_boxed_slice(),
            start: 0,
            len: n as u16,
            width: 1,
        }
    }

    fn len(&self) -> usize {
        usize::from(self.len)
    }

    fn w(&self) -> usize {
        usize::from(self.width)
    }

    /// The `i`-th timestamp of the block (below its length).
    fn get(&self, i: usize) -> u64 {
        let w = self.w();
        let at = (usize::from(self.start) + i) * w;
        // One 8-byte load and a mask where the buffer has 8 bytes left, else byte by byte.
        let offset = match self.buf.get(at..at + 8).map(<[u8; 8]>::try_from) {
            Some(Ok(bytes)) => u64::from_le_bytes(bytes) & (u64::MAX >> (64 - 8 * w as u32)),
            _ => {
                let mut bytes = [0u8; 8];
                if let (Some(to), Some(from)) = (bytes.get_mut(..w), self.buf.get(at..at + w)) {
                    to.copy_from_slice(from);
                }
                u64::from_le_bytes(bytes)
            }
        };
        self.base.saturating_add(offset)
    }

    fn first(&self) -> u64 {
        self.first
    }

    fn last(&self) -> u64 {
        self.get(self.len().saturating_sub(1))
    }

    /// Timestamps at or before `t`.
    fn count_le(&self, t: u64) -> usize {
        if self.last() <= t {
            return self.len();
        }
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.get(mid) <= t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn values(&self) -> Vec<u64> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    /// Inserts `n` copies of `ts` at `p` when the block can take them within `BLOCK_BYTES`
    /// (re-laid out if its base or width must change); false leaves it untouched.
    fn insert(&mut self, p: usize, ts: u64, n: usize) -> bool {
        let len = self.len();
        let (lo, hi) = match len {
            0 => (ts, ts),
            _ => (self.first.min(ts), self.last().max(ts)),
        };
        // Offsets count from the base, which trims from the front leave behind the first.
        let relayout = ts < self.base || width_for(hi - self.base) > self.w();
        let width = if relayout {
            width_for(hi - lo)
        } else {
            self.w()
        };
        if (len + n) * width > BLOCK_BYTES {
            return false;
        }
        if relayout {
            let mut ts_all = self.values();
            let p = p.min(len);
            ts_all.splice(p..p, std::iter::repeat_n(ts, n));
            *self = Block::from_sorted(&ts_all);
            return true;
        }
        let w = self.w();
        let start = usize::from(self.start);
        if (start + len + n) * w > self.buf.len() {
            // Slide the live slots to the front, into a larger class if they need it.
            let bytes = size_class((len + n) * w).max(self.buf.len());
            let mut buf = vec![0u8; bytes].into_boxed_slice();
            if let (Some(to), Some(from)) = (
                buf.get_mut(..len * w),
                self.buf.get(start * w..(start + len) * w),
            ) {
                to.copy_from_slice(from);
            }
            self.buf = buf;
            self.start = 0;
        }
        let at = (usize::from(self.start) + p.min(len)) * w;
        let end = (usize::from(self.start) + len) * w;
        if end + n * w > self.buf.len() {
            return false;
        }
        self.buf.copy_within(at..end, at + n * w);
        let offset = ts - self.base;
        if let Some(span) = self.buf.get_mut(at..at + n * w) {
            for slot in span.chunks_exact_mut(w) {
                if let Some(bytes) = offset.to_le_bytes().get(..w) {
                    slot.copy_from_slice(bytes);
                }
            }
        }
        self.len = (len + n) as u16;
        self.first = self.first.min(ts);
        if len == 0 {
            self.first = ts;
        }
        true
    }

    /// Removes slots `a..b` (within the length), and gives memory back once less than half of
    /// the buffer is live.
    fn remove(&mut self, a: usize, b: usize) {
        let (len, w) = (self.len(), self.w());
        let (a, b) = (a.min(len), b.min(len));
        if a >= b {
            return;
        }
        let start = usize::from(self.start);
        if a == 0 {
            self.start = (start + b) as u16;
        } else if (start + len) * w <= self.buf.len() {
            self.buf
                .copy_within((start + b) * w..(start + len) * w, (start + a) * w);
        }
        self.len = (len - (b - a)) as u16;
        if a == 0 {
            self.first = self.get(0);
        }
        let live = self.len() * w;
        if self.buf.len() > 64 && live * 2 < self.buf.len() {
            let start = usize::from(self.start) * w;
            let mut buf = vec![0u8; size_class(live)].into_boxed_slice();
            if let (Some(to), Some(from)) = (buf.get_mut(..live), self.buf.get(start..start + live))
            {
                to.copy_from_slice(from);
            }
            self.buf = buf;
            self.start = 0;
        }
    }
}

/// Whether `ts` (sorted) fits one block.
fn fits_one(ts: &[u64]) -> bool {
    match (ts.first(), ts.last()) {
        (Some(lo), Some(hi)) => ts.len() * width_for(hi - lo) <= BLOCK_BYTES,
        _ => true,
    }
}

/// Blocks holding `ts` (sorted): the fewest equal shares that each fit a block, so that a split
/// leaves room on both sides.
fn pack(ts: &[u64]) -> Vec<Block> {
    if ts.is_empty() {
        return Vec::new();
    }
    let mut k = 1;
    loop {
        let share = ts.len().div_ceil(k);
        if share <= 1 || ts.chunks(share).all(fits_one) {
            return ts.chunks(share).map(Block::from_sorted).collect();
        }
        k += 1;
    }
}

/// `n` copies of `ts` as full one-byte blocks.
fn runs_of(ts: u64, n: u64) -> Vec<Block> {
    let full = (n / BLOCK_BYTES as u64) as usize;
    let rest = (n % BLOCK_BYTES as u64) as usize;
    let mut blocks: Vec<Block> = Vec::with_capacity(full + 1);
    blocks.extend((0..full).map(|_| Block::run(ts, BLOCK_BYTES)));
    if rest > 0 {
        blocks.push(Block::run(ts, rest));
    }
    blocks
}

/// The blocks of a log past `SMALL` requests, and a Fenwick tree over their lengths once there
/// are `FENWICK_MIN` of them (empty before).
#[derive(Debug, Clone, Default)]
struct Blocks {
    blocks: Vec<Block>,
    tree: Vec<u64>,
    len: u64,
}

impl Blocks {
    fn from_sorted(ts: &[u64]) -> Blocks {
        let mut b = Blocks {
            blocks: pack(ts),
            tree: Vec::new(),
            len: ts.len() as u64,
        };
        b.reindex();
        b
    }

    /// Rebuilds the tree after blocks came or went.
    fn reindex(&mut self) {
        self.tree.clear();
        if self.blocks.len() < FENWICK_MIN {
            self.tree.shrink_to_fit();
            return;
        }
        let n = self.blocks.len();
        self.tree.extend(self.blocks.iter().map(|b| b.len() as u64));
        for i in 1..=n {
            let j = i + (i & i.wrapping_neg());
            if j <= n
                && let Some(v) = self.tree.get(i - 1).copied()
                && let Some(t) = self.tree.get_mut(j - 1)
            {
                *t += v;
            }
        }
    }

    /// Block `i` grew (or shrank) by `delta`.
    fn bump(&mut self, i: usize, delta: i64) {
        let mut j = i + 1;
        while let Some(t) = self.tree.get_mut(j.wrapping_sub(1)) {
            *t = t.wrapping_add_signed(delta);
            j += j & j.wrapping_neg();
        }
    }

    /// Timestamps in blocks `..i`.
    fn before(&self, i: usize) -> u64 {
        if self.tree.is_empty() {
            return self.blocks.iter().take(i).map(|b| b.len() as u64).sum();
        }
        let (mut sum, mut j) = (0, i.min(self.tree.len()));
        while j > 0 {
            sum += self.tree.get(j - 1).copied().unwrap_or(0);
            j &= j - 1;
        }
        sum
    }

    /// The block holding the `k`-th oldest (0-based, below the length), and where in it.
    fn find(&self, k: u64) -> (usize, usize) {
        // The ends, where trims and appends land, without a search.
        if let Some(b) = self.blocks.first()
            && k < b.len() as u64
        {
            return (0, k as usize);
        }
        if let Some(b) = self.blocks.last()
            && let Some(from) = self.len.checked_sub(b.len() as u64)
            && k >= from
        {
            return (self.blocks.len() - 1, (k - from) as usize);
        }
        if self.tree.is_empty() {
            let mut rest = k;
            for (i, b) in self.blocks.iter().enumerate() {
                if rest < b.len() as u64 {
                    return (i, rest as usize);
                }
                rest -= b.len() as u64;
            }
            return (self.blocks.len(), 0);
        }
        let n = self.tree.len();
        let (mut pos, mut rest) = (0, k);
        let mut step = 1usize << (usize::BITS - 1 - n.leading_zeros());
        while step > 0 {
            if let Some(&t) = self.tree.get(pos + step - 1)
                && t <= rest
            {
                pos += step;
                rest -= t;
            }
            step >>= 1;
        }
        (pos, rest as usize)
    }

    fn get(&self, k: u64) -> Option<u64> {
        let (i, at) = self.find(k);
        self.blocks.get(i).map(|b| b.get(at))
    }

    fn newest(&self) -> Option<u64> {
        self.blocks.last().map(Block::last)
    }

    /// Timestamps at or before `t`.
    fn count_le(&self, t: u64) -> u64 {
        if self.newest().is_none_or(|n| n <= t) {
            return self.len;
        }
        // The ends first: a trim cuts the first block, a recent cutoff lands in the last.
        if let Some(b) = self.blocks.first()
            && b.last() > t
        {
            return b.count_le(t) as u64;
        }
        if let Some(b) = self.blocks.last()
            && b.first() <= t
        {
            return self.len - b.len() as u64 + b.count_le(t) as u64;
        }
        match self.blocks.partition_point(|b| b.first() <= t) {
            0 => 0,
            i => {
                let inner = self.blocks.get(i - 1).map_or(0, |b| b.count_le(t));
                self.before(i - 1) + inner as u64
            }
        }
    }

    /// Adds `n` copies of `ts` after every equal one.
    fn add(&mut self, ts: u64, n: u64) {
        if self.blocks.is_empty() {
            self.blocks = runs_of(ts, n);
            self.len = n;
            self.reindex();
            return;
        }
        // The block to insert into: the last whose first timestamp is at or before `ts`.
        let i = match self.newest() {
            Some(newest) if newest <= ts => self.blocks.len() - 1,
            _ => self
                .blocks
                .partition_point(|b| b.first() <= ts)
                .saturating_sub(1),
        };
        let Some(block) = self.blocks.get_mut(i) else {
            return;
        };
        let p = block.count_le(ts);
        let at_end = p == block.len();
        let small = usize::try_from(n).ok().filter(|n| *n <= BLOCK_BYTES);
        self.len += n;
        if let Some(m) = small {
            if block.insert(p, ts, m) {
                self.bump(i, m as i64);
                return;
            }
            // Between two blocks: the front of the next may have room.
            if at_end
                && let Some(next) = self.blocks.get_mut(i + 1)
                && next.insert(0, ts, m)
            {
                self.bump(i + 1, m as i64);
                return;
            }
        }
        let Some(block) = self.blocks.get(i) else {
            return;
        };
        let fresh = if at_end && i + 1 == self.blocks.len() {
            // An append past a full last block starts a new one, leaving the others full.
            runs_of(ts, n)
        } else if let Some(m) = small {
            let mut ts_all = block.values();
            ts_all.splice(p..p, std::iter::repeat_n(ts, m));
            pack(&ts_all)
        } else {
            let ts_all = block.values();
            let (left, right) = ts_all.split_at(p.min(ts_all.len()));
            let mut fresh = pack(left);
            fresh.extend(runs_of(ts, n));
            fresh.extend(pack(right));
            fresh
        };
        if at_end && i + 1 == self.blocks.len() {
            self.blocks.extend(fresh);
        } else {
            self.blocks.splice(i..=i, fresh);
        }
        self.reindex();
    }

    /// Removes the timestamps `a..b` (0-based positions, oldest first).
    fn remove(&mut self, a: u64, b: u64) {
        let b = b.min(self.len);
        if a >= b {
            return;
        }
        let (i, pa) = self.find(a);
        let (j, pb) = self.find(b - 1);
        self.len -= b - a;
        if i == j {
            if let Some(block) = self.blocks.get_mut(i) {
                block.remove(pa, pb + 1);
                let empty = block.len() == 0;
                if empty {
                    self.blocks.remove(i);
                    self.reindex();
                } else {
                    self.bump(i, -((b - a) as i64));
                }
            }
        } else {
            if let Some(block) = self.blocks.get_mut(j) {
                block.remove(0, pb + 1);
            }
            if let Some(block) = self.blocks.get_mut(i) {
                block.remove(pa, block.len());
            }
            self.blocks.drain(i + 1..j);
            self.blocks.retain(|b| b.len() > 0);
            self.reindex();
        }
        // Where the cut ends, a block left small merges with a neighbour that has room.
        let at = i.min(self.blocks.len().saturating_sub(1));
        for k in [at + 1, at] {
            self.merge(k);
        }
    }

    /// Merges blocks `k - 1` and `k` when one of them holds under a quarter of a block and
    /// both fit one block.
    fn merge(&mut self, k: usize) {
        let (Some(a), Some(b)) = (self.blocks.get(k.wrapping_sub(1)), self.blocks.get(k)) else {
            return;
        };
        let quarter = BLOCK_BYTES / 4;
        if a.len() * a.w() >= quarter && b.len() * b.w() >= quarter {
            return;
        }
        if (a.len() + b.len()) * width_for(b.last().saturating_sub(a.first())) > BLOCK_BYTES {
            return;
        }
        let mut ts = a.values();
        ts.extend(b.values());
        if fits_one(&ts) {
            self.blocks.splice(k - 1..=k, [Block::from_sorted(&ts)]);
            self.reindex();
        }
    }

    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.blocks
            .iter()
            .flat_map(|b| (0..b.len()).map(|i| b.get(i)))
    }

    fn heap_bytes(&self) -> usize {
        size_class(self.blocks.capacity() * size_of::<Block>())
            + size_class(self.tree.capacity() * size_of::<u64>())
            + self.blocks.iter().map(|b| b.buf.len()).sum::<usize>()
    }
}

/// Up to `SMALL` timestamps inside the value: 4-byte offsets from `base`.
#[derive(Debug, Clone, Copy, Default)]
struct Small {
    base: u64,
    len: u8,
    off: [u32; SMALL],
}

impl Small {
    fn len(&self) -> usize {
        usize::from(self.len).min(SMALL)
    }

    fn get(&self, i: usize) -> Option<u64> {
        (i < self.len()).then(|| self.base + u64::from(self.off.get(i).copied().unwrap_or(0)))
    }

    fn values(&self) -> Vec<u64> {
        (0..self.len()).filter_map(|i| self.get(i)).collect()
    }

    fn count_le(&self, t: u64) -> usize {
        (0..self.len())
            .take_while(|i| self.get(*i).is_some_and(|ts| ts <= t))
            .count()
    }

    /// Adds `n` copies of `ts` if they fit; false leaves it untouched.
    fn add(&mut self, ts: u64, n: u64) -> bool {
        let len = self.len();
        let Some(total) = usize::try_from(n).ok().and_then(|n| n.checked_add(len)) else {
            return false;
        };
        let lo = self.get(0).map_or(ts, |f| f.min(ts));
        let hi = self.get(len.wrapping_sub(1)).map_or(ts, |l| l.max(ts));
        if total > SMALL || hi - lo > u64::from(u32::MAX) {
            return false;
        }
        let mut ts_all = self.values();
        let p = self.count_le(ts);
        ts_all.splice(p..p, std::iter::repeat_n(ts, total - len));
        *self = Small::of(&ts_all);
        true
    }

    /// The small form of `ts` (sorted, at most `SMALL`, spanning under 2^32).
    fn of(ts: &[u64]) -> Small {
        let base = ts.first().copied().unwrap_or(0);
        let mut small = Small {
            base,
            len: ts.len().min(SMALL) as u8,
            off: [0; SMALL],
        };
        for (o, t) in small.off.iter_mut().zip(ts) {
            *o = u32::try_from(t - base).unwrap_or(u32::MAX);
        }
        small
    }

    fn remove(&mut self, a: usize, b: usize) {
        let mut ts = self.values();
        let b = b.min(ts.len());
        ts.drain(a.min(b)..b);
        *self = Small::of(&ts);
    }
}

#[derive(Debug, Clone)]
enum Repr {
    Small(Small),
    Blocks(Blocks),
}

/// A sorted log of request timestamps (ms), each at most 2^53.
#[derive(Debug, Clone)]
pub struct CompactLog {
    repr: Repr,
}

/// Two logs are equal when they hold the same timestamps, whatever their layout.
impl PartialEq for CompactLog {
    fn eq(&self, other: &CompactLog) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for CompactLog {}

impl Default for CompactLog {
    fn default() -> Self {
        CompactLog {
            repr: Repr::Small(Small::default()),
        }
    }
}

/// Something that can move a log's heap buffers elsewhere (the server's defragmenter): given
/// each one, it may replace it by an identical copy.
pub trait Mover {
    fn bytes(&mut self, buf: &mut Box<[u8]>);
    fn vec<T>(&mut self, v: &mut Vec<T>);
}

impl CompactLog {
    /// Logged requests.
    pub fn len(&self) -> u64 {
        match &self.repr {
            Repr::Small(s) => s.len() as u64,
            Repr::Blocks(b) => b.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `k`-th oldest timestamp, 1-based.
    pub fn kth_oldest(&self, k: u64) -> Option<u64> {
        let i = k.checked_sub(1).filter(|i| *i < self.len())?;
        match &self.repr {
            Repr::Small(s) => s.get(usize::try_from(i).ok()?),
            Repr::Blocks(b) => b.get(i),
        }
    }

    pub fn newest(&self) -> Option<u64> {
        match &self.repr {
            Repr::Small(s) => s.get(s.len().checked_sub(1)?),
            Repr::Blocks(b) => b.newest(),
        }
    }

    /// Timestamps at or before `score` (any f64: fractions, infinities).
    pub fn count_through(&self, score: f64) -> u64 {
        // Timestamps are integers of at most 2^53, exact as f64: `ts <= score` iff
        // `ts <= floor(score)`.
        if score.is_nan() || score < 0.0 {
            return 0;
        }
        if score >= MAX_TS as f64 {
            return self.len();
        }
        self.count_le(score as u64)
    }

    /// Timestamps at or before `t`.
    fn count_le(&self, t: u64) -> u64 {
        match &self.repr {
            Repr::Small(s) => s.count_le(t) as u64,
            Repr::Blocks(b) => b.count_le(t),
        }
    }

    /// Removes positions `a..b` (oldest first), and keeps a log that became short inside the value.
    fn remove(&mut self, a: u64, b: u64) {
        match &mut self.repr {
            Repr::Small(s) => s.remove(a as usize, b as usize),
            Repr::Blocks(blocks) => {
                blocks.remove(a, b);
                if blocks.len as usize <= SMALL / 2 {
                    let ts: Vec<u64> = blocks.iter().collect();
                    let mut small = Small::default();
                    if let (Some(lo), Some(hi)) = (ts.first(), ts.last())
                        && hi - lo <= u64::from(u32::MAX)
                    {
                        small = Small::of(&ts);
                    }
                    if small.len() == ts.len() {
                        self.repr = Repr::Small(small);
                    }
                }
            }
        }
    }

    /// Removes every timestamp at or before `cutoff`; returns how many went.
    pub fn trim(&mut self, cutoff: i64) -> u64 {
        let Ok(cutoff) = u64::try_from(cutoff) else {
            return 0;
        };
        let m = self.count_le(cutoff);
        self.remove(0, m);
        m
    }

    /// Removes up to `n` of the newest timestamps at or before `through`; returns how many went.
    pub fn refund(&mut self, through: u64, n: u64) -> u64 {
        let end = self.count_le(through);
        let m = n.min(end);
        self.remove(end - m, end);
        m
    }

    /// Adds `n` timestamps `ts`, after every equal one.
    pub fn add(&mut self, ts: u64, n: u64) {
        if n == 0 || ts > MAX_TS {
            return;
        }
        if let Repr::Small(s) = &mut self.repr {
            if s.add(ts, n) {
                return;
            }
            self.repr = Repr::Blocks(Blocks::from_sorted(&s.values()));
        }
        if let Repr::Blocks(b) = &mut self.repr {
            b.add(ts, n);
        }
    }

    /// Every timestamp, oldest first.
    pub fn iter(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match &self.repr {
            Repr::Small(s) => Box::new((0..s.len()).filter_map(|i| s.get(i))),
            Repr::Blocks(b) => Box::new(b.iter()),
        }
    }

    /// Runs of equal timestamps, oldest first: `(timestamp, count)`.
    pub fn runs(&self) -> Runs<'_> {
        Runs { log: self, next: 0 }
    }

    /// Bytes of heap the log owns besides the value itself (its blocks and their index), as
    /// the allocator's size classes count them.
    pub fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::Small(_) => 0,
            Repr::Blocks(b) => b.heap_bytes(),
        }
    }

    /// Separate allocations the log owns besides the value itself.
    pub fn allocations(&self) -> usize {
        match &self.repr {
            Repr::Small(_) => 0,
            Repr::Blocks(b) => b.blocks.len() + 1 + usize::from(!b.tree.is_empty()),
        }
    }

    /// Hands every heap buffer to `mover`, which may replace it by a copy.
    pub fn move_buffers(&mut self, mover: &mut impl Mover) {
        if let Repr::Blocks(b) = &mut self.repr {
            mover.vec(&mut b.blocks);
            mover.vec(&mut b.tree);
            for block in &mut b.blocks {
                mover.bytes(&mut block.buf);
            }
        }
    }
}

/// Iterator over runs of equal timestamps.
pub struct Runs<'a> {
    log: &'a CompactLog,
    next: u64,
}

impl Iterator for Runs<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        let ts = self.log.kth_oldest(self.next + 1)?;
        // The run ends where timestamps exceed `ts`: a search, not a walk.
        let end = self.log.count_le(ts);
        let n = end.saturating_sub(self.next).max(1);
        self.next += n;
        Some((ts, n))
    }
}

#[cfg(test)]
impl CompactLog {
    /// A log of these timestamps, one request each (for the tests of this folder).
    pub(super) fn of(ts: &[u64]) -> CompactLog {
        let mut log = CompactLog::default();
        for &t in ts {
            log.add(t, 1);
        }
        log
    }

    /// Every block's width and length, oldest first (none while the log is inside the value).
    fn shape(&self) -> Vec<(usize, usize)> {
        match &self.repr {
            Repr::Small(_) => Vec::new(),
            Repr::Blocks(b) => b.blocks.iter().map(|b| (b.w(), b.len())).collect(),
        }
    }

    /// Checks the layout's invariants: sorted blocks, each fitting, counts and tree right.
    fn check(&self) {
        if let Repr::Blocks(b) = &self.repr {
            let mut prev = 0;
            let mut total = 0;
            for (i, block) in b.blocks.iter().enumerate() {
                assert!(block.len() > 0, "block {i} empty");
                assert!(block.len() * block.w() <= BLOCK_BYTES, "block {i} too big");
                assert!(
                    (usize::from(block.start) + block.len()) * block.w() <= block.buf.len(),
                    "block {i} overflows"
                );
                assert_eq!(block.first, block.get(0), "block {i}'s first");
                assert!(block.first() >= prev, "block {i} out of order");
                assert_eq!(b.before(i), total, "count before block {i}");
                prev = block.last();
                total += block.len() as u64;
            }
            assert_eq!(total, b.len);
            assert_eq!(b.tree.is_empty(), b.blocks.len() < FENWICK_MIN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(log: &CompactLog) -> Vec<u64> {
        log.iter().collect()
    }

    #[test]
    fn a_small_log_lives_in_one_small_allocation() {
        assert!(size_of::<CompactLog>() <= 64, "{}", size_of::<CompactLog>());
        let t = 1_700_000_000_000;
        let log = CompactLog::of(&(0..SMALL as u64).map(|i| t + i * 1000).collect::<Vec<_>>());
        assert_eq!((log.heap_bytes(), log.allocations()), (0, 0));
        assert_eq!(log.len(), SMALL as u64);
    }

    #[test]
    fn adds_keep_order_wherever_they_land() {
        // (timestamps added one by one, the log after)
        let cases: &[(&[u64], &[u64])] = &[
            (&[], &[]),
            (&[5], &[5]),
            (&[1, 2, 3], &[1, 2, 3]),
            (&[3, 1, 2], &[1, 2, 3]),
            (&[10, 10, 5, 10, 7], &[5, 7, 10, 10, 10]),
            (&[0, MAX_TS], &[0, MAX_TS]),
            (&[MAX_TS, 0, 1 << 40], &[0, 1 << 40, MAX_TS]),
            (&[1 << 33, 5, 1 << 33], &[5, 1 << 33, 1 << 33]),
        ];
        for (added, want) in cases {
            assert_eq!(all(&CompactLog::of(added)), *want, "{added:?}");
        }
    }

    #[test]
    fn each_block_takes_the_width_of_its_own_span() {
        let t = 1_700_000_000_000u64;
        // (gap between requests, width of the blocks): ms apart, seconds, minutes, days, eons.
        for (gap, width) in [
            (0, 1),
            (1, 2),
            (5, 2),
            (1000, 3),
            (60_000, 4),
            (86_400_000, 5),
            (1 << 30, 5),
            (1 << 36, 6),
            (1 << 44, 7),
        ] {
            let n = 3000u64.min(MAX_TS / gap.max(1));
            let mut log = CompactLog::default();
            log.add(t.min(MAX_TS - gap * (n - 1)), 1);
            let first = log.newest().unwrap_or(0);
            for i in 1..n {
                log.add(first + i * gap, 1);
            }
            log.check();
            let shape = log.shape();
            // Full blocks at their width; only the last may be a partial or narrower one.
            for (w, _) in shape.iter().take(shape.len() - 1) {
                assert_eq!(*w, width, "gap {gap}: {shape:?}");
            }
            let bytes = log.heap_bytes() + 64;
            assert!(
                bytes as u64 <= n * width as u64 + n * width as u64 / 8 + 256,
                "gap {gap}: {bytes} bytes for {n}"
            );
        }
        // A dense log of a million requests, a ms apart: about 2 bytes a request.
        let mut log = CompactLog::default();
        for i in 0..1_000_000u64 {
            log.add(t + i, 1);
        }
        let per = (log.heap_bytes() + 64) as f64 / 1e6;
        assert!(per < 2.05, "{per} bytes a request");
    }

    #[test]
    fn a_late_insert_touches_one_block() {
        let t = 1_700_000_000_000u64;
        let mut log = CompactLog::default();
        // 30 ms apart: full blocks of 2-byte slots.
        for i in 0..100_000u64 {
            log.add(t + i * 30, 1);
        }
        let before = log.shape();
        assert!(before.iter().rev().skip(1).all(|b| *b == (2, 2048)));
        // 25 minutes late: one block splits, the others stay as they were.
        log.add(t + 100_000 * 30 - 1_500_000, 1);
        let after = log.shape();
        assert_eq!(after.len(), before.len() + 1, "{before:?}\n{after:?}");
        let same_front = before
            .iter()
            .zip(&after)
            .take_while(|(a, b)| a == b)
            .count();
        let same_back = before
            .iter()
            .rev()
            .zip(after.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        assert_eq!(same_front + same_back, before.len() - 1);
        log.check();
    }

    #[test]
    fn trims_count_rank_and_refund() {
        let mut log = CompactLog::of(&[100, 200, 200, 300, 400]);
        // (query, count_through)
        for (score, want) in [
            (f64::NEG_INFINITY, 0),
            (f64::NAN, 0),
            (-0.5, 0),
            (99.9, 0),
            (100.0, 1),
            (200.0, 3),
            (250.5, 3),
            (400.0, 5),
            (1e300, 5),
            (f64::INFINITY, 5),
        ] {
            assert_eq!(log.count_through(score), want, "{score}");
        }
        assert_eq!(log.kth_oldest(0), None);
        assert_eq!(log.kth_oldest(3), Some(200));
        assert_eq!(log.kth_oldest(6), None);
        assert_eq!(log.newest(), Some(400));
        assert_eq!(log.refund(250, 1), 1);
        assert_eq!(all(&log), [100, 200, 300, 400]);
        assert_eq!(log.refund(MAX_TS, 2), 2);
        assert_eq!(all(&log), [100, 200]);
        assert_eq!(log.refund(50, 9), 0);
        assert_eq!(log.trim(-5), 0);
        assert_eq!(log.trim(100), 1);
        assert_eq!(all(&log), [200]);
        assert_eq!(log.trim(i64::MAX), 1);
        assert!(log.is_empty());
        assert_eq!(log.newest(), None);
        assert_eq!(log.refund(MAX_TS, 1), 0);
    }

    #[test]
    fn runs_group_equal_timestamps() {
        let mut log = CompactLog::of(&[1, 1, 2, 5, 5, 5]);
        log.add(9, 10_000);
        log.add(3, 5000);
        log.check();
        let runs: Vec<(u64, u64)> = log.runs().collect();
        assert_eq!(runs, [(1, 2), (2, 1), (3, 5000), (5, 3), (9, 10_000)]);
        // A burst takes a byte a request.
        assert!(log.heap_bytes() < 16_000, "{}", log.heap_bytes());
        assert_eq!(log.refund(9, 9_999), 9_999);
        assert_eq!(log.refund(4, 4_999), 4_999);
        assert_eq!(all(&log), [1, 1, 2, 3, 5, 5, 5, 9]);
        log.check();
    }

    #[test]
    fn buffers_fill_size_classes() {
        // (bytes asked, the class)
        for (bytes, class) in [
            (0, 0),
            (1, 8),
            (12, 16),
            (20, 32),
            (129, 160),
            (256, 256),
            (257, 320),
            (4097, 5120),
            (240_000, 262_144),
        ] {
            assert_eq!(size_class(bytes), class, "{bytes}");
        }
        // Growing or shrinking, a log holds at most about a quarter more than it needs (the
        // block being cut from the front at most twice its live part).
        let mut log = CompactLog::default();
        for i in 0..20_000u64 {
            log.add(1_000_000 + i * 3, 1);
            let need = log.len() as usize * 2;
            assert!(
                log.heap_bytes() * 4 <= need * 5 + 512,
                "{} requests: {} bytes",
                i + 1,
                log.heap_bytes()
            );
        }
        for i in 0..20_000u64 {
            log.trim((1_000_000 + i * 3) as i64);
            let need = log.len() as usize * 2;
            assert!(
                log.heap_bytes() * 4 <= need * 5 + 3 * BLOCK_BYTES,
                "{} left: {} bytes",
                log.len(),
                log.heap_bytes()
            );
        }
        assert_eq!((log.heap_bytes(), log.allocations()), (0, 0));
    }

    /// Random adds, trims and refunds against a plain sorted vector: every kind of insert,
    /// spans from 1 ms to 2^53 ms, widths changing per block, many blocks.
    #[test]
    fn matches_a_sorted_vector() {
        let mut rng = crate::core::rng::Rng::new(11);
        for round in 0..6u64 {
            let mut log = CompactLog::default();
            let mut model: Vec<u64> = Vec::new();
            let mut now: u64 = rng.range(0, MAX_TS);
            // Each round moves time at its own scale, up to all of it.
            let scale = [1u64, 50, 5000, 1 << 20, 1 << 36, MAX_TS][round as usize];
            for step in 0..30_000 {
                now = match rng.range(0, 19) {
                    0 => now.saturating_sub(rng.range(0, scale * 100)),
                    1 => now.saturating_add(rng.range(0, scale * 10)),
                    2 => rng.range(0, MAX_TS),
                    3..=6 => now.saturating_sub(rng.range(0, scale)),
                    _ => now.saturating_add(rng.range(0, scale)),
                }
                .min(MAX_TS);
                match rng.range(0, 19) {
                    0..=13 => {
                        let n = if rng.range(0, 200) == 0 {
                            rng.range(1, 10_000)
                        } else {
                            rng.range(1, 4)
                        };
                        log.add(now, n);
                        let at = model.partition_point(|t| *t <= now);
                        model.splice(at..at, std::iter::repeat_n(now, n as usize));
                    }
                    14..=16 => {
                        let through = match rng.range(0, 3) {
                            0 => MAX_TS,
                            _ => now.saturating_sub(rng.range(0, scale)),
                        };
                        let n = rng.range(0, 50);
                        let end = model.partition_point(|t| *t <= through);
                        let m = (n as usize).min(end);
                        model.drain(end - m..end);
                        assert_eq!(log.refund(through, n), m as u64, "step {step}");
                    }
                    _ => {
                        let cutoff = now as i64 - rng.range(0, scale * 20) as i64;
                        let gone = log.trim(cutoff);
                        let keep = model.partition_point(|t| (*t as i64) <= cutoff);
                        model.drain(..keep);
                        assert_eq!(gone, keep as u64, "step {step}");
                    }
                }
                assert_eq!(log.len(), model.len() as u64, "step {step}");
                assert_eq!(log.newest(), model.last().copied(), "step {step}");
                let k = rng.range(0, model.len() as u64 + 2);
                let want = (k as usize)
                    .checked_sub(1)
                    .and_then(|i| model.get(i).copied());
                assert_eq!(log.kth_oldest(k), want, "step {step}");
                let t = now.saturating_sub(rng.range(0, scale * 10));
                let want = model.partition_point(|x| *x <= t) as u64;
                assert_eq!(log.count_through(t as f64), want, "step {step}");
                if step % 499 == 0 {
                    log.check();
                    assert_eq!(all(&log), model, "round {round} step {step}");
                }
            }
            log.check();
            assert_eq!(all(&log), model, "round {round}");
        }
    }
}

#[cfg(test)]
mod speed {
    use super::*;

    #[test]
    #[ignore = "timing, by hand: cargo test --release --lib speed -- --ignored --nocapture"]
    fn appends_and_late_inserts() {
        let t = 1_700_000_000_000u64;
        let mut log = CompactLog::default();
        let n = 2_000_000u64;
        let start = std::time::Instant::now();
        for i in 0..n {
            log.add(t + i * 43, 1);
        }
        println!("fill: {:?} an add", start.elapsed() / n as u32);
        let start = std::time::Instant::now();
        for j in 0..200_000u64 {
            log.trim((t + j * 43) as i64);
        }
        println!("trim: {:?} a call", start.elapsed() / 200_000);
        let start = std::time::Instant::now();
        for j in 0..200_000u64 {
            let _ = log.count_through((t + j * 43) as f64);
        }
        println!("count: {:?} a call", start.elapsed() / 200_000);
        let newest = t + (n - 1) * 43;
        let start = std::time::Instant::now();
        for j in 0..200_000u64 {
            let now = newest + (j + 1) * 43;
            log.trim((now - 86_400_000) as i64);
            let _ = log.count_through(now as f64);
            log.add(now, 1);
        }
        println!("append: {:?} a call", start.elapsed() / 200_000);
        let newest = log.newest().unwrap_or(0);
        for behind in [1000u64, 60_000, 1_500_000] {
            let start = std::time::Instant::now();
            for j in 0..200_000u64 {
                log.add(newest - behind + j % 1000, 1);
            }
            println!("{behind} ms late: {:?} a call", start.elapsed() / 200_000);
        }
    }
}
