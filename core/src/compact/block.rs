//! One block of the compact log, free of Redis: a sorted run of timestamps, each slot storing one
//! timestamp as its offset from the block's base in the fewest bytes (1 to 7) the block's own span
//! needs, in a buffer sized on the allocator's size classes and never more than `BLOCK_BYTES` of
//! slots and counts together.
//!
//! Two forms: plain (a slot per request) and counted (a slot per distinct timestamp, with its
//! count beside it in the fewest bytes, 1 to 4, the block's largest count needs). A block is
//! laid out in whichever takes fewer bytes; a plain block that fills up is re-laid counted when
//! that is smaller, and an append on a counted block's newest timestamp bumps its count. So
//! equal timestamps cost one slot together, however many.
//!
//! A block keeps its buffer tight as requests leave it: after a removal it is re-laid (a new
//! base, the narrowest width its span allows or one byte more, the smallest size class that
//! holds it) once its buffer is larger than that layout with two slots to spare. The spare
//! slots and the spare byte keep one request coming and going at a class boundary or at a
//! width's reach from re-laying it each time.
//!
//! A block that the log will not append to any more is sealed (`seal`): the same slots coded in
//! bits (`bits`, Elias-Fano), plain or counted, whichever is smaller. A sealed block holds what
//! its byte form could hold; removals at either end move its live slots' ends or cut a count in
//! place, and it is encoded again from its live slots once it holds less than three quarters of
//! those it encodes; an insert or a removal inside it decodes it, edits and seals it again. The
//! log may instead open a sealed block (`open`): back in the byte form and marked open, it takes
//! inserts and removals as the byte form does, until the log seals it again.

use super::bits::{Ef, count_bits, plan};

/// Bytes of slots (and counts) in one block at most: one allocator class, moved whole at most
/// once a call.
#[cfg(not(fuzzing))]
pub const BLOCK_BYTES: usize = 4096;
/// Tiny blocks under the fuzzer, so that a short input splits and merges many.
#[cfg(fuzzing)]
pub const BLOCK_BYTES: usize = 32;

/// Requests a block holds at most (and so one slot's count).
pub const MAX_LEN: usize = u32::MAX as usize;

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

/// Whether `len` timestamps spanning `span` fit one block in the plain form.
pub fn fits(len: usize, span: u64) -> bool {
    len * width_for(span) <= BLOCK_BYTES
}

/// The fewest bytes (1 to 4) a count up to `most` needs.
fn count_width(most: usize) -> usize {
    width_for(most as u64).min(4)
}

/// Bytes of the smaller form for `len` requests in `runs` distinct timestamps of `width` bytes,
/// the largest count `most`; and the count width of that form (0: plain).
fn form_bytes(len: usize, runs: usize, width: usize, most: usize) -> (usize, usize) {
    let cw = count_width(most);
    let (plain, counted) = (len * width, runs * (width + cw));
    if counted < plain {
        (counted, cw)
    } else {
        (plain, 0)
    }
}

/// Whether `len` timestamps in `runs` distinct ones spanning `span`, the largest count `most`,
/// fit one block in its smaller form.
pub fn fits_runs(len: usize, runs: usize, span: u64, most: usize) -> bool {
    len <= MAX_LEN && form_bytes(len, runs, width_for(span), most).0 <= BLOCK_BYTES
}

/// Runs of equal timestamps in sorted `ts`.
fn runs(ts: impl Iterator<Item = u64>) -> Vec<(u64, u32)> {
    let mut out: Vec<(u64, u32)> = Vec::new();
    for t in ts {
        match out.last_mut() {
            Some((v, n)) if *v == t => *n += 1,
            _ => out.push((t, 1)),
        }
    }
    out
}

/// The length and the largest count of `runs`.
fn totals(runs: &[(u64, u32)]) -> (usize, usize) {
    runs.iter().fold((0, 0), |(len, most), (_, n)| {
        (len + *n as usize, most.max(*n as usize))
    })
}

/// A sorted run of timestamps, each slot storing its offset from `base` in `width` little-endian
/// bytes; the live slots are `start..start + slots` of `buf`. In the plain form (`cw` 0) a slot
/// is a request; in the counted form the buffer holds `cap = len / (width + cw)` slots and then
/// `cap` counts of `cw` bytes, each slot's requests at the same index. The first timestamp is kept beside them, so that searching the blocks reads no buffer
/// but one. An empty block (the log's last, kept for the next append) keeps the first timestamp
/// it had, which orders it among the others.
#[derive(Debug, Clone)]
pub struct Block {
    first: u64,
    base: u64,
    buf: Box<[u8]>,
    len: u32,
    start: u16,
    slots: u16,
    width: u8,
    cw: u8,
    /// Sealed (see `bits`): the slots encoded (0: the byte form), their low bits and count bits.
    ef_n: u16,
    low: u8,
    cb: u8,
    /// Open: taken out of the sealed form to be edited in bytes, to be sealed again (`seal`).
    open: bool,
}

/// A zeroed buffer of `bytes`.
fn zeroed(bytes: usize) -> Box<[u8]> {
    vec![0u8; bytes].into_boxed_slice()
}

/// The timestamps of a block, oldest first.
#[derive(Clone)]
pub struct Values<'a> {
    block: &'a Block,
    slot: usize,
    left: usize,
    remaining: usize,
    /// A sealed block's slots, decoded in one pass (empty for the byte form).
    decoded: Vec<(u64, u64)>,
}

impl Values<'_> {
    fn count_of(&self, s: usize) -> usize {
        match self.decoded.get(s) {
            Some((_, n)) => *n as usize,
            None if self.decoded.is_empty() => self.block.count_at(s),
            None => 0,
        }
    }
}

impl Iterator for Values<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.remaining == 0 {
            return None;
        }
        while self.left == 0 {
            self.slot += 1;
            self.left = self.count_of(self.slot);
        }
        self.left -= 1;
        self.remaining -= 1;
        Some(match self.decoded.get(self.slot) {
            Some((t, _)) => *t,
            None => self.block.slot(self.slot),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Values<'_> {}

impl Block {
    /// A block holding `runs` (sorted, from `lo`, fitting `BLOCK_BYTES` at `width` with counts
    /// of `cw` bytes, 0 for the plain form), with `spare` more slots of room (within the same
    /// bound).
    fn laid(runs: &[(u64, u32)], lo: u64, width: usize, spare: usize, cw: usize) -> Block {
        let (len, _) = totals(runs);
        let counted = cw > 0;
        let slots = if counted { runs.len() } else { len };
        let per = width + cw;
        let cap = (slots + spare).min((BLOCK_BYTES / per).max(slots));
        let mut buf = zeroed(size_class(cap * per));
        let off = buf.len() / per * width;
        let (slot_bytes, counts) = buf.split_at_mut(off);
        let mut chunks = slot_bytes.chunks_exact_mut(width);
        let mut count_chunks = counts.chunks_exact_mut(cw.max(1));
        for (t, n) in runs {
            let bytes = t.saturating_sub(lo).to_le_bytes();
            let copies = if counted { 1 } else { *n as usize };
            if counted
                && let (Some(c), Some(from)) = (count_chunks.next(), n.to_le_bytes().get(..cw))
            {
                c.copy_from_slice(from);
            }
            for slot in chunks.by_ref().take(copies) {
                if let Some(b) = bytes.get(..width) {
                    slot.copy_from_slice(b);
                }
            }
        }
        Block {
            first: lo,
            base: lo,
            buf,
            len: len as u32,
            start: 0,
            slots: slots as u16,
            width: width as u8,
            cw: cw as u8,
            ef_n: 0,
            low: 0,
            cb: 0,
            open: false,
        }
    }

    /// A block holding `runs` in its smaller form with `spare` slots of room, or None when it
    /// does not fit.
    pub fn best(runs: &[(u64, u32)], width: Option<usize>, spare: usize) -> Option<Block> {
        let (Some(lo), Some(hi)) = (runs.first(), runs.last()) else {
            return Some(Block::laid(&[], 0, 1, spare, 0));
        };
        let width = width.unwrap_or_else(|| width_for(hi.0 - lo.0));
        let (len, most) = totals(runs);
        let (bytes, cw) = form_bytes(len, runs.len(), width, most);
        (bytes <= BLOCK_BYTES && len <= MAX_LEN).then(|| Block::laid(runs, lo.0, width, spare, cw))
    }

    /// A block holding `ts` (sorted, fitting `BLOCK_BYTES` in the plain form at their width).
    pub fn from_sorted(ts: &[u64]) -> Block {
        let runs = runs(ts.iter().copied());
        let lo = ts.first().copied().unwrap_or(0);
        let hi = ts.last().copied().unwrap_or(0);
        let width = width_for(hi - lo);
        let (len, most) = totals(&runs);
        let (_, cw) = form_bytes(len, runs.len(), width, most);
        Block::laid(&runs, lo, width, 0, cw)
    }

    /// `n` copies of `ts` (`n` at most `MAX_LEN`).
    pub fn run(ts: u64, n: usize) -> Block {
        let n = n.min(MAX_LEN);
        let (_, cw) = form_bytes(n, 1, 1, n);
        Block::laid(&[(ts, n as u32)], ts, 1, 0, cw)
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn w(&self) -> usize {
        usize::from(self.width)
    }

    #[inline]
    fn counted(&self) -> bool {
        if self.sealed() {
            self.cb > 0
        } else {
            self.cw > 0
        }
    }

    /// Whether the block is in the sealed (bit) form.
    #[inline]
    pub fn sealed(&self) -> bool {
        self.ef_n > 0
    }

    fn ef(&self) -> Ef {
        Ef {
            n: usize::from(self.ef_n),
            low: u32::from(self.low),
            cb: u32::from(self.cb),
        }
    }

    fn cw(&self) -> usize {
        usize::from(self.cw)
    }

    /// Slots the buffer holds.
    fn cap(&self) -> usize {
        self.buf.len() / (self.w() + self.cw())
    }

    /// Where the counts start in the buffer (counted form).
    fn counts_at(&self) -> usize {
        self.cap() * self.w()
    }

    /// Sets the count of buffer slot `i` (counted form; `n` fits its count width).
    fn set_count(&mut self, i: usize, n: usize) {
        if self.sealed() {
            let ef = self.ef();
            ef.set_count(&mut self.buf, i, n as u64);
            return;
        }
        let (cw, at) = (self.cw(), self.counts_at() + i * self.cw());
        if let (Some(to), Some(from)) = (self.buf.get_mut(at..at + cw), n.to_le_bytes().get(..cw)) {
            to.copy_from_slice(from);
        }
    }

    /// The count of buffer slot `i` (counted form).
    fn read_count(&self, i: usize) -> usize {
        if self.sealed() {
            return self.ef().count(&self.buf, i) as usize;
        }
        let (cw, at) = (self.cw(), self.counts_at() + i * self.cw());
        let mut bytes = [0u8; 8];
        if let (Some(to), Some(from)) = (bytes.get_mut(..cw), self.buf.get(at..at + cw)) {
            to.copy_from_slice(from);
        }
        u64::from_le_bytes(bytes) as usize
    }

    /// Whether a count of `n` fits this block's count width.
    fn count_fits(&self, n: usize) -> bool {
        (n as u64) < reach(self.cw())
    }

    /// Live slots.
    pub fn slots(&self) -> usize {
        usize::from(self.slots)
    }

    /// Bytes of its live slots and counts in the byte form (for a sealed block in the plain form
    /// that was counted in bytes: its requests' plain bytes, at most `BLOCK_BYTES`).
    pub fn bytes(&self) -> usize {
        if self.sealed() && !self.counted() && self.cw > 0 {
            return (self.slots() * self.w()).min(BLOCK_BYTES);
        }
        self.slots() * (self.w() + self.cw())
    }

    /// Bytes of its buffer (a size class).
    pub fn buf_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Whether one more slot would exceed `BLOCK_BYTES`, or one more request `MAX_LEN`.
    pub fn is_full(&self) -> bool {
        self.len() >= MAX_LEN || self.bytes() + self.w() + self.cw() > BLOCK_BYTES
    }

    /// Requests of slot `s` (1 past the live slots: 0).
    fn count_at(&self, s: usize) -> usize {
        if s >= self.slots() {
            return 0;
        }
        if !self.counted() {
            return 1;
        }
        self.read_count(usize::from(self.start) + s)
    }

    /// Requests in slots `a..b` (counted form).
    fn sum(&self, a: usize, b: usize) -> usize {
        let start = usize::from(self.start);
        (start + a..start + b).map(|i| self.read_count(i)).sum()
    }

    /// Requests in the slots before slot `s`: summed from the nearer end.
    #[inline]
    fn prefix(&self, s: usize) -> usize {
        if !self.counted() {
            return s;
        }
        if s * 2 <= self.slots() {
            self.sum(0, s)
        } else {
            self.len() - self.sum(s, self.slots())
        }
    }

    /// The slot holding request `i` (below the length) and the requests before that slot,
    /// walked from the nearer end.
    #[inline]
    fn locate(&self, i: usize) -> (usize, usize) {
        if !self.counted() {
            return (i, i);
        }
        let slots = self.slots();
        if i * 2 <= self.len() {
            let mut before = 0;
            for s in 0..slots {
                let n = self.count_at(s);
                if i < before + n {
                    return (s, before);
                }
                before += n;
            }
            (slots.saturating_sub(1), before)
        } else {
            let mut after = self.len();
            for s in (0..slots).rev() {
                after -= self.count_at(s);
                if i >= after {
                    return (s, after);
                }
            }
            (0, 0)
        }
    }

    /// The timestamp of slot `s` (below the live slots).
    #[inline]
    fn slot(&self, s: usize) -> u64 {
        if self.sealed() {
            return self.sealed_slot(s);
        }
        let w = self.w();
        let at = (usize::from(self.start) + s) * w;
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

    /// The timestamp of slot `s` of a sealed block, kept out of line so that the byte form's
    /// reads stay inline.
    #[inline(never)]
    fn sealed_slot(&self, s: usize) -> u64 {
        let i = usize::from(self.start) + s;
        self.base.saturating_add(self.ef().get(&self.buf, i))
    }

    /// `count_le` on a sealed block (below its last timestamp).
    #[inline(never)]
    fn sealed_count_le(&self, t: u64) -> usize {
        let (start, end) = (
            usize::from(self.start),
            usize::from(self.start) + self.slots(),
        );
        let rank = t
            .checked_sub(self.base)
            .map_or(0, |off| self.ef().rank(&self.buf, off));
        self.prefix(rank.clamp(start, end) - start)
    }

    /// The `i`-th timestamp of the block (below its length).
    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        self.slot(self.locate(i).0)
    }

    pub fn first(&self) -> u64 {
        self.first
    }

    /// The last timestamp (the first one of an empty block).
    #[inline]
    pub fn last(&self) -> u64 {
        match self.slots() {
            0 => self.first,
            n => self.slot(n - 1),
        }
    }

    /// Timestamps at or before `t`.
    #[inline]
    pub fn count_le(&self, t: u64) -> usize {
        if self.last() <= t {
            return self.len();
        }
        if self.sealed() {
            return self.sealed_count_le(t);
        }
        let (mut lo, mut hi) = (0, self.slots());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.slot(mid) <= t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.prefix(lo)
    }

    pub fn values(&self) -> Values<'_> {
        let decoded = if self.sealed() {
            self.decoded()
        } else {
            Vec::new()
        };
        let mut values = Values {
            block: self,
            slot: 0,
            left: 0,
            remaining: self.len(),
            decoded,
        };
        values.left = values.count_of(0);
        values
    }

    /// Its live slots as (timestamp, requests), oldest first: one pass.
    pub fn decoded(&self) -> Vec<(u64, u64)> {
        if self.sealed() {
            let start = usize::from(self.start);
            let mut slots = self.ef().decode(&self.buf, start, start + self.slots());
            for (t, _) in &mut slots {
                *t = self.base.saturating_add(*t);
            }
            return slots;
        }
        (0..self.slots())
            .map(|s| (self.slot(s), self.count_at(s) as u64))
            .collect()
    }

    /// The block's runs (equal neighbours merged) with `n` copies of `ts` inserted at request
    /// `p` and requests `a..b` left out (of the block before the insertion): O(slots).
    pub fn runs_with(&self, p: usize, ts: u64, n: usize, a: usize, b: usize) -> Vec<(u64, u32)> {
        fn push(out: &mut Vec<(u64, u32)>, t: u64, k: usize) {
            match out.last_mut() {
                _ if k == 0 => {}
                Some((v, c)) if *v == t => *c += k as u32,
                _ => out.push((t, k as u32)),
            }
        }
        let mut out: Vec<(u64, u32)> = Vec::with_capacity(self.slots() + 2);
        let mut at = 0;
        let mut inserted = n == 0;
        for (t, c) in self.decoded() {
            let c = c as usize;
            let cut = (at + c).min(b).saturating_sub(at.max(a));
            let kept = c - cut;
            if !inserted && p < at + c {
                let head = p.saturating_sub(at).min(kept);
                push(&mut out, t, head);
                push(&mut out, ts, n);
                push(&mut out, t, kept - head);
                inserted = true;
            } else {
                push(&mut out, t, kept);
            }
            at += c;
        }
        if !inserted {
            push(&mut out, ts, n);
        }
        out
    }

    /// Its runs, equal neighbours merged: O(slots).
    pub fn slot_runs(&self) -> Vec<(u64, u32)> {
        self.runs_with(0, 0, 0, 0, 0)
    }

    /// `a` and `b` (in order) as one block of at most `bytes`, built from their slots; None when
    /// the estimate from their slots or the block itself is larger.
    pub fn merged(a: &Block, b: &Block, bytes: usize) -> Option<Block> {
        let w = width_for(b.last().saturating_sub(a.first()));
        let plain = (a.len() + b.len()) * w;
        let counted = (a.slots() + b.slots()) * (w + a.cw().max(b.cw()).max(1));
        if plain.min(counted) > bytes {
            return None;
        }
        let mut runs = a.slot_runs();
        for (t, n) in b.slot_runs() {
            match runs.last_mut() {
                Some((v, c)) if *v == t => *c += n,
                _ => runs.push((t, n)),
            }
        }
        Block::best(&runs, None, 0).filter(|m| m.bytes() <= bytes)
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
    /// (re-laid out if its base, width or form must change); false leaves it untouched. In the
    /// plain form the slots that move are those on the shorter side of `p` when the buffer has
    /// room there; in the counted form an insert after an equal timestamp bumps its count and an
    /// append takes the next slot.
    #[inline]
    pub fn insert(&mut self, p: usize, ts: u64, n: usize) -> bool {
        if self.open {
            let done = self.insert_bytes(p, ts, n);
            self.open = !self.sealed() && !self.is_empty();
            return done;
        }
        self.insert_bytes(p, ts, n)
    }

    /// `insert`, whatever the block's flag.
    #[inline]
    fn insert_bytes(&mut self, p: usize, ts: u64, n: usize) -> bool {
        let len = self.len();
        let p = p.min(len);
        if len + n > MAX_LEN {
            return false;
        }
        if self.sealed() {
            return self.insert_sealed(p, ts, n);
        }
        // An append on a counted block's newest timestamp: its count bumped.
        if self.counted() && p == len && len > 0 {
            let i = usize::from(self.start) + self.slots() - 1;
            let c = self.read_count(i);
            if self.slot(self.slots() - 1) == ts && self.count_fits(c + n) {
                self.set_count(i, c + n);
                self.len += n as u32;
                return true;
            }
        }
        if len == 0 {
            // Nothing to keep: a new base, the narrowest width, the buffer if it is big enough.
            if n > MAX_LEN {
                return false;
            }
            if n <= 2 && !self.counted() && self.buf.len() >= n {
                (self.first, self.base, self.start, self.width) = (ts, ts, 0, 1);
                self.fill(0, n, 0);
                (self.slots, self.len) = (n as u16, n as u32);
            } else {
                *self = Block::run(ts, n);
            }
            return true;
        }
        let (lo, hi) = (self.first.min(ts), self.last().max(ts));
        if self.counted() {
            if self.insert_counted(p, ts, n) {
                return true;
            }
            // A new slot that cannot fit at the width the span needs: no re-layout would help.
            let equal = p > 0 && self.get(p - 1) == ts;
            if !equal && (self.slots() + 1) * (width_for(hi - lo) + self.cw()) > BLOCK_BYTES {
                return false;
            }
        } else if ts >= self.base
            && width_for(hi - self.base) <= self.w()
            && (len + n) * self.w() <= BLOCK_BYTES
            && !self.run_ends_at(p, ts, n)
        {
            self.insert_plain(p, ts, n);
            return true;
        } else if !fits(len + n, hi - lo) && !self.may_count(p, ts, n) {
            // Too many for the plain form, and no sign that the counted one is smaller.
            return false;
        }
        // Re-laid in its smaller form, if that fits.
        match Block::best(&self.runs_with(p, ts, n, 0, 0), None, 0) {
            Some(block) => {
                *self = block;
                true
            }
            None => false,
        }
    }

    /// Whether an append on a plain block is a point at which it tries the counted form: the
    /// block reaches a multiple of 256 requests while ending in at least 3 copies of `ts` (at
    /// most 16 tries a block, each O(block)).
    fn run_ends_at(&self, p: usize, ts: u64, n: usize) -> bool {
        let len = self.len();
        p == len
            && (len + n) % 256 < n
            && p >= 3
            && self.slot(p - 1) == ts
            && self.slot(p - 3) == ts
    }

    /// Whether a plain block too full for `n` more copies of `ts` at `p` shows equal neighbours
    /// (the insert's own, or at its middle and ends), so that the counted form may be smaller.
    fn may_count(&self, p: usize, ts: u64, n: usize) -> bool {
        let len = self.len();
        let equal = |i: usize| i + 1 < len && self.slot(i) == self.slot(i + 1);
        n > 1 || (p > 0 && self.get(p - 1) == ts) || equal(0) || equal(len / 2) || equal(len - 2)
    }

    /// A counted block's cheap inserts: a count bumped after an equal timestamp, an append into
    /// the next free slot. False: neither applies (nothing changed).
    fn insert_counted(&mut self, p: usize, ts: u64, n: usize) -> bool {
        let start = usize::from(self.start);
        if p > 0 {
            let (s, before) = self.locate(p - 1);
            let c = self.count_at(s);
            if before + c == p
                && self.slot(s) == ts
                && self.count_fits(c + n)
                && self.len() + n <= MAX_LEN
            {
                self.set_count(start + s, c + n);
                self.len += n as u32;
                return true;
            }
        }
        let (w, slots) = (self.w(), self.slots());
        let end = start + slots;
        if p == self.len()
            && ts >= self.base
            && width_for(ts - self.base) <= w
            && self.count_fits(n)
            && self.len() + n <= MAX_LEN
            && !self.is_full()
            && end < self.cap()
        {
            self.fill(end * w, 1, ts - self.base);
            self.set_count(end, n);
            self.slots += 1;
            self.len += n as u32;
            return true;
        }
        false
    }

    /// Inserts `n` copies of `ts` at `p` in a plain block that has the width and room for them.
    fn insert_plain(&mut self, p: usize, ts: u64, n: usize) {
        let len = self.len();
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
        self.len = (len + n) as u32;
        self.slots = (len + n) as u16;
        self.first = self.first.min(ts);
    }

    /// Removes requests `a..b` (within the length): in the plain form moving the shorter side,
    /// in the counted form dropping slots and cutting counts at either end (re-laid for a cut
    /// inside); then re-lays the block if its buffer is larger than its live slots need (see the
    /// top of this file).
    pub fn remove(&mut self, a: usize, b: usize) {
        let open = self.open;
        self.remove_bytes(a, b);
        self.open = open && !self.sealed() && !self.is_empty();
    }

    /// `remove`, whatever the block's flag.
    fn remove_bytes(&mut self, a: usize, b: usize) {
        let len = self.len();
        let (a, b) = (a.min(len), b.min(len));
        if a >= b {
            return;
        }
        let start = usize::from(self.start);
        if self.sealed() && !self.counted() && (a == 0 || b == len) {
            // Plain and sealed: the live slots' ends move, nothing is re-encoded.
            if a == 0 {
                self.start = (start + b) as u16;
            }
            self.slots -= (b - a) as u16;
            self.len = (len - (b - a)) as u32;
        } else if !self.counted() && !self.sealed() {
            let w = self.w();
            if a <= len - b {
                // The first `a` move up to close the gap.
                self.buf
                    .copy_within(start * w..(start + a) * w, (start + b - a) * w);
                self.start = (start + b - a) as u16;
            } else {
                self.buf
                    .copy_within((start + b) * w..(start + len) * w, (start + a) * w);
            }
            self.len = (len - (b - a)) as u32;
            self.slots = self.len as u16;
        } else if a == 0 {
            let (s, before) = self.locate(b - 1);
            let c = self.count_at(s);
            let cut = b - before;
            let drop = if cut == c {
                s + 1
            } else {
                self.set_count(start + s, c - cut);
                s
            };
            self.start = (start + drop) as u16;
            self.slots -= drop as u16;
            self.len = (len - b) as u32;
        } else if b == len {
            let (s, before) = self.locate(a);
            if before < a {
                self.set_count(start + s, a - before);
            }
            self.slots = (s + usize::from(before < a)) as u16;
            self.len = a as u32;
        } else {
            let runs = self.runs_with(0, 0, 0, a, b);
            let width = width_for(runs.last().map_or(0, |r| r.0) - self.first);
            let (kept, most) = totals(&runs);
            let (_, cw) = form_bytes(kept, runs.len(), width, most);
            let sealed = self.sealed();
            *self = Block::laid(&runs, self.first, width, 0, cw);
            if sealed {
                self.seal();
            }
        }
        if self.len > 0 {
            self.first = self.slot(0);
        }
        if self.sealed() {
            self.settle_sealed();
        } else {
            self.settle();
        }
    }

    /// A sealed block after a removal: emptied, back to an empty byte block; holding less than
    /// three quarters of the slots it encodes, encoded again from its live slots (so each
    /// re-encoding follows removals of a quarter of its slots or more).
    fn settle_sealed(&mut self) {
        if self.len == 0 {
            *self = Block::laid(&[], self.first, 1, 1, 0);
        } else if self.slots() * 4 < usize::from(self.ef_n) * 3
            && let Some(mut block) = Block::best(&self.slot_runs(), None, 0)
        {
            block.seal();
            *self = block;
        }
    }

    /// An insert into a sealed block: decoded, edited and sealed again when the result fits a
    /// block (O(block)); false leaves it untouched.
    fn insert_sealed(&mut self, p: usize, ts: u64, n: usize) -> bool {
        match Block::best(&self.runs_with(p, ts, n, 0, 0), None, 0) {
            Some(mut block) => {
                block.seal();
                *self = block;
                true
            }
            None => false,
        }
    }

    /// Re-lays the block in the sealed form (see `bits`): Elias-Fano over its requests (plain)
    /// or over its distinct timestamps with their counts (counted), whichever is smaller, when
    /// that takes a smaller buffer than the byte form. O(block).
    pub fn seal(&mut self) {
        self.open = false;
        if self.sealed() || self.is_empty() {
            return;
        }
        let slots = self.decoded();
        let (first, len) = (self.first, self.len());
        let top = self.last() - first;
        let most = slots.iter().map(|s| s.1).max().unwrap_or(1);
        let limit = usize::from(u16::MAX);
        let plain = (len <= limit).then(|| plan(len, top, 0));
        let counted =
            (most > 1 && slots.len() <= limit).then(|| plan(slots.len(), top, count_bits(most)));
        // The counted form on a tie: its `bytes` are exact.
        let Some((ef, bytes)) = [counted, plain]
            .into_iter()
            .flatten()
            .min_by_key(|(_, bytes)| *bytes)
        else {
            return;
        };
        if size_class(bytes) >= self.buf.len() {
            return;
        }
        let mut buf = zeroed(size_class(bytes));
        if ef.cb == 0 {
            let each = slots
                .iter()
                .flat_map(|&(t, c)| std::iter::repeat_n((t - first, 1), c as usize));
            ef.encode(&mut buf, each);
        } else {
            ef.encode(&mut buf, slots.iter().map(|&(t, c)| (t - first, c)));
        }
        *self = Block {
            first,
            base: first,
            buf,
            len: len as u32,
            start: 0,
            slots: ef.n as u16,
            width: self.width,
            cw: self.cw,
            ef_n: ef.n as u16,
            low: ef.low as u8,
            cb: ef.cb as u8,
            open: false,
        };
    }

    /// A sealed block back in the byte form (for appends), when that fits.
    pub fn unseal(&mut self) {
        if self.sealed()
            && let Some(block) = Block::best(&self.slot_runs(), None, 0)
        {
            *self = block;
        }
    }

    /// A sealed block back in the byte form and marked open, for edits in bytes until `seal`
    /// (when that fits: else it stays sealed).
    pub fn open(&mut self) {
        self.unseal();
        self.open = !self.sealed() && !self.is_empty();
    }

    /// Whether the block is open (see `open`).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Re-lays the block when its buffer holds more than its slots at the narrowest width with
    /// two to spare: into the smallest class that holds them (one slot for an empty block), in
    /// its smaller form. Costs one block's length; a block just re-laid is re-laid again only
    /// after removals that take it below the next smaller class (past 128 bytes, a class step
    /// is an eighth to a quarter of its size).
    fn settle(&mut self) {
        let slots = self.slots();
        let width = self.kept_width();
        if self.buf.len() <= size_class((slots + 2) * (width + self.cw())) {
            return;
        }
        if width != self.w() || self.counted() {
            let runs = self.slot_runs();
            let (len, most) = totals(&runs);
            let (_, cw) = form_bytes(len, runs.len(), width, most);
            *self = Block::laid(&runs, self.first, width, usize::from(slots == 0), cw);
            return;
        }
        // The same slots into a smaller class: copied as they are, no re-encoding.
        let (w, start) = (self.w(), usize::from(self.start));
        let mut buf = zeroed(size_class(slots.max(1) * w));
        if let (Some(to), Some(from)) = (
            buf.get_mut(..slots * w),
            self.buf.get(start * w..(start + slots) * w),
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

    /// Hands its buffers to `mover`.
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
        let (len, slots, w) = (self.len(), self.slots(), self.w());
        let start = usize::from(self.start);
        assert!(
            !self.open || (!self.sealed() && len > 0),
            "open: sealed or empty"
        );
        if self.sealed() {
            let values: Vec<u64> = self.values().collect();
            assert!(self.bytes() <= BLOCK_BYTES, "too big");
            assert!(start + slots <= usize::from(self.ef_n), "overflows");
            assert!(slots * 4 >= usize::from(self.ef_n) * 3, "loose");
            assert!(len > 0, "an empty sealed block");
            if self.counted() {
                assert!((0..slots).all(|s| self.count_at(s) >= 1), "a zero count");
                assert_eq!(self.sum(0, slots), len, "counts");
            } else {
                assert_eq!(slots, len, "plain slots");
            }
            assert_eq!(values.len(), len, "values");
            assert!(values.windows(2).all(|v| v[0] <= v[1]), "order");
            assert_eq!(Some(&self.first), values.first(), "first");
            assert_eq!(self.get(len - 1), self.last(), "last");
            return;
        }
        assert!(self.bytes() <= BLOCK_BYTES, "too big");
        assert!(start + slots <= self.cap(), "overflows");
        assert!((1..=7).contains(&w), "width {w}");
        if self.counted() {
            assert!((1..=4).contains(&self.cw()), "count width");
            assert!((0..slots).all(|s| self.count_at(s) >= 1), "a zero count");
            assert_eq!(self.sum(0, slots), len, "counts");
        } else {
            assert_eq!(slots, len, "plain slots");
        }
        if len > 0 {
            assert_eq!(self.first, self.get(0), "first");
            assert!(self.base <= self.first, "base");
            assert!(width_for(self.last() - self.base) <= w, "width");
            assert!(
                self.values()
                    .zip(self.values().skip(1))
                    .all(|(a, b)| a <= b)
            );
            assert_eq!(self.values().count(), len, "values");
        }
        let width = self.kept_width();
        let per = self.cw();
        assert!(
            self.buf.len()
                <= size_class((slots + 2) * (width + per)).max(size_class(slots * (w + per))),
            "a buffer of {} for {slots} slots of {w} (kept {width})",
            self.buf.len()
        );
        let narrowest = width_for(self.last() - self.first);
        assert!(
            w <= narrowest + 1 || self.buf.len() <= size_class((slots + 2) * (narrowest + per)),
            "width {w} for {slots} slots, {narrowest} would do"
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
        let mut rng = crate::rng::Rng::new(5);
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
                    let mut after = model.clone();
                    after.splice(p..p, std::iter::repeat_n(ts, n));
                    let runs = runs(after.iter().copied());
                    let (_, most) = totals(&runs);
                    // Taken when it fits one form (the counted one tried on signs of repeats).
                    assert!(!took || fits_runs(after.len(), runs.len(), span, most));
                    assert!(took || !fits(after.len(), span), "step {step}");
                    if took {
                        model.splice(p..p, std::iter::repeat_n(ts, n));
                    }
                } else {
                    let a = rng.range(0, model.len() as u64) as usize;
                    let b = (a + rng.range(1, 5) as usize).min(model.len());
                    block.remove(a, b);
                    model.drain(a..b);
                }
                // Sealed now and then: its edits decode and seal again, its cuts at the ends
                // stay in place.
                if rng.range(0, 40) == 0 {
                    block.seal();
                }
                block.check();
                assert_eq!(block.values().collect::<Vec<_>>(), model, "step {step}");
                if let Some(&probe) = model.get(model.len() / 2) {
                    let at = model.partition_point(|t| *t <= probe);
                    assert_eq!(block.count_le(probe), at, "step {step}");
                    assert_eq!(
                        block.count_le(probe - 1),
                        model.partition_point(|t| *t < probe)
                    );
                    assert_eq!(block.get(at - 1), probe, "step {step}");
                }
            }
        }
    }

    /// Appends on the newest timestamp bump its count once the block is counted: a slot and a
    /// count for each timestamp, front trims and refunds at the end cut counts.
    #[test]
    fn equal_timestamps_share_a_slot() {
        let t = 1u64 << 40;
        let mut block = Block::from_sorted(&[t, t, t, t, t + 1]);
        assert!(block.counted());
        for i in 0..3000u64 {
            assert!(block.insert(block.len(), t + 1 + i / 10, 1), "request {i}");
            block.check();
        }
        // 301 timestamps: 301 slots of 2 bytes and a count each.
        assert_eq!(
            (block.len(), block.slots(), block.bytes()),
            (3005, 301, 903)
        );
        block.remove(0, 5);
        assert_eq!(
            (block.first(), block.len(), block.slots()),
            (t + 1, 3000, 300)
        );
        block.remove(2990, 3000);
        assert_eq!((block.last(), block.len()), (t + 299, 2990));
        assert_eq!(block.count_le(t + 150), 1500);
        assert_eq!(block.get(1500), t + 151);
        block.remove(100, 2000);
        block.check();
        let mut want: Vec<u64> = (0..2990u64).map(|i| t + 1 + i / 10).collect();
        want.drain(100..2000);
        assert_eq!(block.values().collect::<Vec<_>>(), want);
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
