//! One block of the compact log, free of Redis: a sorted run of timestamps, each stored as its
//! offset from the block's base in the fewest bytes (1 to 7) the block's own span needs, in a
//! buffer sized on the allocator's size classes and never more than `BLOCK_BYTES` of slots.
//!
//! A block keeps its buffer tight as requests leave it: after a removal it is re-laid (a new
//! base, the narrowest width its span allows or one byte more, the smallest size class that
//! holds it) once its buffer is larger than that layout with two slots to spare. The spare
//! slots and the spare byte keep one request coming and going at a class boundary or at a
//! width's reach from re-laying it each time.

/// Bytes of slots in one block at most: one allocator class, moved whole at most once a call.
#[cfg(not(fuzzing))]
pub const BLOCK_BYTES: usize = 4096;
/// Tiny blocks under the fuzzer, so that a short input splits and merges many.
#[cfg(fuzzing)]
pub const BLOCK_BYTES: usize = 32;

/// Offsets below this fit a slot of `width` bytes (1 to 7).
fn reach(width: usize) -> u64 {
    1u64 << (8 * width.clamp(1, 7) as u32)
}

/// The fewest bytes a slot needs for offsets up to `span`.
pub fn width_for(span: u64) -> usize {
    (1..=7).find(|w| span < reach(*w)).unwrap_or(7)
}

/// The allocator's size class for `bytes`: four classes per doubling (16-byte steps up to 128).
pub fn size_class(bytes: usize) -> usize {
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

/// Whether `len` timestamps spanning `span` fit one block.
pub fn fits(len: usize, span: u64) -> bool {
    len * width_for(span) <= BLOCK_BYTES
}

/// A sorted run of timestamps, each stored as its offset from `base` in `width` little-endian
/// bytes; the live slots are `start..start + len` of `buf`. The first timestamp is kept beside
/// them, so that searching the blocks reads no buffer but one. An empty block (the log's last,
/// kept for the next append) keeps the first timestamp it had, which orders it among the others.
#[derive(Debug, Clone)]
pub struct Block {
    first: u64,
    base: u64,
    buf: Box<[u8]>,
    start: u16,
    len: u16,
    width: u8,
}

/// A zeroed buffer of `bytes`.
fn zeroed(bytes: usize) -> Box<[u8]> {
    vec![0u8; bytes].into_boxed_slice()
}

impl Block {
    /// A block holding `ts` (sorted, from `lo`, fitting `BLOCK_BYTES` at `width`), with `spare`
    /// more slots of room (within the same bound).
    fn laid(
        ts: impl ExactSizeIterator<Item = u64> + Clone,
        lo: u64,
        width: usize,
        spare: usize,
    ) -> Block {
        let len = ts.len();
        let slots = (len + spare).min((BLOCK_BYTES / width).max(len));
        let mut buf = zeroed(size_class(slots * width));
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
            len: len as u16,
            width: width as u8,
        }
    }

    /// A block holding `ts` (sorted, fitting `BLOCK_BYTES` at their width).
    pub fn from_sorted(ts: &[u64]) -> Block {
        let lo = ts.first().copied().unwrap_or(0);
        let hi = ts.last().copied().unwrap_or(0);
        Block::laid(ts.iter().copied(), lo, width_for(hi - lo), 0)
    }

    /// `n` copies of `ts`, one byte each (`n` at most `BLOCK_BYTES`).
    pub fn run(ts: u64, n: usize) -> Block {
        Block {
            first: ts,
            base: ts,
            buf: zeroed(size_class(n)),
            start: 0,
            len: n as u16,
            width: 1,
        }
    }

    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn w(&self) -> usize {
        usize::from(self.width)
    }

    /// Bytes of its buffer (a size class).
    pub fn buf_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Whether one more timestamp at this block's width would exceed `BLOCK_BYTES`.
    pub fn is_full(&self) -> bool {
        (self.len() + 1) * self.w() > BLOCK_BYTES
    }

    /// The `i`-th timestamp of the block (below its length).
    pub fn get(&self, i: usize) -> u64 {
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

    pub fn first(&self) -> u64 {
        self.first
    }

    /// The last timestamp (the first one of an empty block).
    pub fn last(&self) -> u64 {
        match self.len() {
            0 => self.first,
            n => self.get(n - 1),
        }
    }

    /// Timestamps at or before `t`.
    pub fn count_le(&self, t: u64) -> usize {
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

    pub fn values(&self) -> impl ExactSizeIterator<Item = u64> + Clone + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Writes `offset` into the `n` slots from byte `at`.
    fn fill(&mut self, at: usize, n: usize, offset: u64) {
        let w = self.w();
        if let (Some(span), Some(bytes)) = (
            self.buf.get_mut(at..at + n * w),
            offset.to_le_bytes().get(..w),
        ) {
            for slot in span.chunks_exact_mut(w) {
                slot.copy_from_slice(bytes);
            }
        }
    }

    /// Inserts `n` copies of `ts` at `p` when the block can take them within `BLOCK_BYTES`
    /// (re-laid out if its base or width must change); false leaves it untouched. The slots
    /// that move are those on the shorter side of `p` when the buffer has room there.
    pub fn insert(&mut self, p: usize, ts: u64, n: usize) -> bool {
        let len = self.len();
        let p = p.min(len);
        if len == 0 {
            // Nothing to keep: a new base, the narrowest width, the buffer if it is big enough.
            if n > BLOCK_BYTES {
                return false;
            }
            if self.buf.len() < n {
                self.buf = zeroed(size_class(n));
            }
            (self.first, self.base, self.start, self.width) = (ts, ts, 0, 1);
            self.fill(0, n, 0);
            self.len = n as u16;
            return true;
        }
        let (lo, hi) = (self.first.min(ts), self.last().max(ts));
        // Offsets count from the base, which removals from the front leave behind the first; a
        // block one byte wider than its span needs may fit more once narrowed.
        if ts < self.base
            || width_for(hi - self.base) > self.w()
            || (len + n) * self.w() > BLOCK_BYTES
        {
            if !fits(len + n, hi - lo) {
                return false;
            }
            let values = self.values();
            let ts_all = values
                .clone()
                .take(p)
                .chain(std::iter::repeat_n(ts, n))
                .chain(values.skip(p));
            let ts_all: Vec<u64> = ts_all.collect();
            *self = Block::laid(ts_all.iter().copied(), lo, width_for(hi - lo), 0);
            return true;
        }
        let w = self.w();
        let start = usize::from(self.start);
        let cap = self.buf.len() / w;
        let (room_before, room_after) = (start >= n, start + len + n <= cap);
        if room_before && (p * 2 <= len || !room_after) {
            // Room before the live slots: the first `p` move down.
            self.buf
                .copy_within(start * w..(start + p) * w, (start - n) * w);
            self.start = (start - n) as u16;
        } else if room_after {
            // Room after them: the last `len - p` move up.
            self.buf
                .copy_within((start + p) * w..(start + len) * w, (start + p + n) * w);
        } else {
            // Into a buffer of the class the new length needs (this one if it is enough), the
            // gap opened as the slots are copied.
            let bytes = size_class((len + n) * w).max(self.buf.len());
            let mut buf = zeroed(bytes);
            if let (Some(to), Some(from)) = (
                buf.get_mut(..p * w),
                self.buf.get(start * w..(start + p) * w),
            ) {
                to.copy_from_slice(from);
            }
            if let (Some(to), Some(from)) = (
                buf.get_mut((p + n) * w..(len + n) * w),
                self.buf.get((start + p) * w..(start + len) * w),
            ) {
                to.copy_from_slice(from);
            }
            self.buf = buf;
            self.start = 0;
        }
        self.fill((usize::from(self.start) + p) * w, n, ts - self.base);
        self.len = (len + n) as u16;
        self.first = self.first.min(ts);
        true
    }

    /// Removes slots `a..b` (within the length), moving the shorter side, then re-lays the block
    /// if its buffer is larger than its live slots need (see the top of this file).
    pub fn remove(&mut self, a: usize, b: usize) {
        let (len, w) = (self.len(), self.w());
        let (a, b) = (a.min(len), b.min(len));
        if a >= b {
            return;
        }
        let start = usize::from(self.start);
        if a <= len - b {
            // The first `a` move up to close the gap.
            self.buf
                .copy_within(start * w..(start + a) * w, (start + b - a) * w);
            self.start = (start + b - a) as u16;
        } else {
            self.buf
                .copy_within((start + b) * w..(start + len) * w, (start + a) * w);
        }
        self.len = (len - (b - a)) as u16;
        if self.len > 0 {
            self.first = self.get(0);
        }
        self.settle();
    }

    /// Re-lays the block when its buffer holds more than its slots at the narrowest width with
    /// two to spare: into the smallest class that holds them (one slot for an empty block). Costs
    /// one block's length; a block just re-laid is re-laid again only after removals that take
    /// it below the next smaller class (past 128 bytes, a class step is an eighth to a quarter
    /// of its size).
    fn settle(&mut self) {
        let len = self.len();
        let width = self.kept_width();
        if self.buf.len() <= size_class((len + 2) * width) {
            return;
        }
        if width != self.w() {
            *self = Block::laid(self.values(), self.first, width, usize::from(len == 0));
            return;
        }
        // The same slots into a smaller class: copied as they are, no re-encoding.
        let (w, start) = (self.w(), usize::from(self.start));
        let mut buf = zeroed(size_class(len.max(1) * w));
        if let (Some(to), Some(from)) = (
            buf.get_mut(..len * w),
            self.buf.get(start * w..(start + len) * w),
        ) {
            to.copy_from_slice(from);
        }
        (self.buf, self.start) = (buf, 0);
    }

    /// The width a re-layout keeps: the block's own while it is at most one byte more than its
    /// span needs (so that a request coming and going across a width's reach does not re-lay it
    /// each time), else the narrowest.
    fn kept_width(&self) -> usize {
        let narrowest = width_for(self.last() - self.first);
        match self.w() {
            w if w <= narrowest + 1 => w,
            _ => narrowest,
        }
    }

    /// Hands its buffer to `mover`.
    pub fn move_buffer(&mut self, mover: &mut impl super::index::Mover) {
        mover.bytes(&mut self.buf);
    }

    /// Where its buffer lives (for the tests of this folder: a block re-laid or moved has a new
    /// one).
    #[cfg(test)]
    pub fn buf_ptr(&self) -> *const u8 {
        self.buf.as_ptr()
    }

    /// Checks the block's invariants (for the tests of this folder).
    #[cfg(test)]
    pub fn check(&self) {
        let (len, w) = (self.len(), self.w());
        assert!(len * w <= BLOCK_BYTES, "too big");
        assert!(
            (usize::from(self.start) + len) * w <= self.buf.len(),
            "overflows"
        );
        assert!((1..=7).contains(&w), "width {w}");
        if len > 0 {
            assert_eq!(self.first, self.get(0), "first");
            assert!(self.base <= self.first, "base");
            assert!(width_for(self.last() - self.base) <= w, "width");
            assert!(
                self.values()
                    .zip(self.values().skip(1))
                    .all(|(a, b)| a <= b)
            );
        }
        let width = self.kept_width();
        assert!(
            self.buf.len() <= size_class((len + 2) * width).max(size_class(len * w)),
            "a buffer of {} for {len} slots of {w} (kept {width})",
            self.buf.len()
        );
        let narrowest = width_for(self.last() - self.first);
        assert!(
            w <= narrowest + 1 || self.buf.len() <= size_class((len + 2) * narrowest),
            "width {w} for {len} slots, {narrowest} would do"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    /// Inserts and removals anywhere in one block against a vector: the order, the buffer's
    /// bound, the side that moves.
    #[test]
    fn inserts_and_removals_anywhere() {
        let mut rng = crate::core::rng::Rng::new(5);
        for scale in [1u64, 300, 70_000, 1 << 30, 1 << 50] {
            let mut model: Vec<u64> = vec![1 << 52];
            let mut block = Block::from_sorted(&model);
            for step in 0..20_000 {
                if rng.range(0, 2) == 0 || model.len() < 3 {
                    let ts = (1u64 << 52) + rng.range(0, scale) - scale / 2;
                    let n = rng.range(1, 4) as usize;
                    let p = model.partition_point(|t| *t <= ts);
                    let span = match (model.first(), model.last()) {
                        (Some(lo), Some(hi)) => ts.max(*hi) - ts.min(*lo),
                        _ => 0,
                    };
                    let took = block.insert(p, ts, n);
                    assert_eq!(took, fits(model.len() + n, span), "step {step}");
                    if took {
                        model.splice(p..p, std::iter::repeat_n(ts, n));
                    }
                } else {
                    let a = rng.range(0, model.len() as u64) as usize;
                    let b = (a + rng.range(1, 5) as usize).min(model.len());
                    block.remove(a, b);
                    model.drain(a..b);
                }
                block.check();
                assert_eq!(block.values().collect::<Vec<_>>(), model, "step {step}");
            }
        }
    }

    #[test]
    fn removals_narrow_and_shrink_a_block() {
        // A 5-byte-wide block whose outlier leaves: the rest takes 2 bytes a slot.
        let mut ts: Vec<u64> = vec![0];
        ts.extend((0..800u64).map(|i| (1 << 36) + i));
        let mut block = Block::from_sorted(&ts);
        assert_eq!((block.w(), block.buf_bytes()), (5, 4096));
        block.remove(0, 1);
        assert_eq!((block.w(), block.buf_bytes()), (2, 1792));
        // Half refunded from the end: the buffer follows.
        block.remove(400, 800);
        assert_eq!(block.buf_bytes(), 896);
        // One request in and out at the new class's edge re-lays nothing.
        let before = block.buf.as_ptr();
        for _ in 0..10 {
            let last = block.last();
            assert!(block.insert(block.len(), last, 1));
            block.remove(block.len() - 1, block.len());
        }
        assert_eq!(block.buf.as_ptr(), before);
        // Emptied, it keeps a one-slot buffer and takes anything next.
        block.remove(0, block.len());
        assert_eq!((block.len(), block.buf_bytes()), (0, 8));
        assert!(block.insert(0, 7, 3));
        assert_eq!(block.values().collect::<Vec<_>>(), [7, 7, 7]);
        block.check();
    }
}
