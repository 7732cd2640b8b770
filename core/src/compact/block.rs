//! One block of the compact log, free of Redis: a sorted run of timestamps, each slot storing one
//! timestamp as its offset from the block's base in the fewest bytes (1 to 7) the block's own span
//! needs, in a buffer sized on the allocator's size classes and never more than `BLOCK_BYTES` of
//! slots and counts together.
//!
//! Two forms: plain (a slot per request) and counted (a slot per distinct timestamp, with its
//! count beside it in the fewest bytes, 1 to 6, the block's largest count needs). A block is
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

mod edit;
mod seal;

use super::bits::Ef;
use super::heap::size_class;

/// Bytes of slots (and counts) in one block at most: one allocator class, moved whole at most
/// once a call.
#[cfg(not(fuzzing))]
pub const BLOCK_BYTES: usize = 4096;
/// Tiny blocks under the fuzzer, so that a short input splits and merges many.
#[cfg(fuzzing)]
pub const BLOCK_BYTES: usize = 32;

/// Requests a block holds at most (and so one slot's count): its length is 48 bits, so that the
/// block stays 48 bytes; a count above it (up to 2^53, the most a key logs) takes up to 33 blocks.
pub const MAX_LEN: usize = (1 << 48) - 1;

/// Slots whose counts `Block::locate` sums at once before walking them one by one.
const LOCATE_STEP: usize = 32;

/// The bit of `Block::low` that marks an open block (the low bits take at most 56, 6 bits).
const OPEN: u8 = 0x80;

/// Offsets below this fit a slot of `width` bytes (1 to 7).
fn reach(width: usize) -> u64 {
    1u64 << (8 * width.clamp(1, 7) as u32)
}

/// The fewest bytes a slot needs for offsets up to `span`.
pub fn width_for(span: u64) -> usize {
    (1..=7).find(|w| span < reach(*w)).unwrap_or(7)
}

/// Whether `len` timestamps spanning `span` fit one block in the plain form.
pub fn fits(len: usize, span: u64) -> bool {
    len * width_for(span) <= BLOCK_BYTES
}

/// The fewest bytes a count up to `most` needs (1 to 6 for counts up to `MAX_LEN`).
fn count_width(most: usize) -> usize {
    width_for(most as u64)
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
fn runs(ts: impl Iterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for t in ts {
        match out.last_mut() {
            Some((v, n)) if *v == t => *n += 1,
            _ => out.push((t, 1)),
        }
    }
    out
}

/// The length and the largest count of `runs`.
fn totals(runs: &[(u64, u64)]) -> (usize, usize) {
    runs.iter().fold((0, 0), |(len, most), (_, n)| {
        (len + *n as usize, most.max(*n as usize))
    })
}

/// The sum of the little-endian counts of `cw` bytes (1 to 8) packed in `bytes`: a loop of
/// its own for each of the narrow widths, which the compiler vectorizes.
fn sum_counts(bytes: &[u8], cw: usize) -> usize {
    match cw {
        1 => bytes.iter().map(|&b| usize::from(b)).sum(),
        2 => bytes
            .chunks_exact(2)
            .map(|c| <[u8; 2]>::try_from(c).map_or(0, |c| usize::from(u16::from_le_bytes(c))))
            .sum(),
        _ => bytes
            .chunks_exact(cw.clamp(1, 8))
            .map(|c| {
                let mut b = [0u8; 8];
                if let Some(to) = b.get_mut(..c.len()) {
                    to.copy_from_slice(c);
                }
                u64::from_le_bytes(b) as usize
            })
            .sum(),
    }
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
    /// Requests: `len_hi << 32 | len`.
    len: u32,
    len_hi: u16,
    start: u16,
    slots: u16,
    width: u8,
    cw: u8,
    /// Sealed (see `bits`): the slots encoded (0: the byte form), their low bits and count bits.
    /// Bit 7 of `low` (`OPEN`): taken out of the sealed form to be edited in bytes, to be sealed
    /// again (`seal`).
    ef_n: u16,
    low: u8,
    cb: u8,
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
    fn laid(runs: &[(u64, u64)], lo: u64, width: usize, spare: usize, cw: usize) -> Block {
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
            len_hi: (len >> 32) as u16,
            start: 0,
            slots: slots as u16,
            width: width as u8,
            cw: cw as u8,
            ef_n: 0,
            low: 0,
            cb: 0,
        }
    }

    /// A block holding `runs` in its smaller form with `spare` slots of room, or None when it
    /// does not fit.
    pub fn best(runs: &[(u64, u64)], width: Option<usize>, spare: usize) -> Option<Block> {
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
        Block::laid(&[(ts, n as u64)], ts, 1, 0, cw)
    }

    #[inline]
    pub fn len(&self) -> usize {
        (u64::from(self.len_hi) << 32 | u64::from(self.len)) as usize
    }

    /// Sets the length (at most `MAX_LEN`).
    fn set_len(&mut self, n: usize) {
        (self.len, self.len_hi) = (n as u32, (n >> 32) as u16);
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0 && self.len_hi == 0
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

    /// Whether the block is counted and in the byte form (where `add_run` applies).
    #[inline]
    pub fn counted_in_bytes(&self) -> bool {
        !self.sealed() && self.cw > 0
    }

    /// Whether the block is in the sealed (bit) form.
    #[inline]
    pub fn sealed(&self) -> bool {
        self.ef_n > 0
    }

    fn ef(&self) -> Ef {
        Ef {
            n: usize::from(self.ef_n),
            low: u32::from(self.low & !OPEN),
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

    /// Requests in slots `a..b` (counted form): one pass over their counts.
    fn sum(&self, a: usize, b: usize) -> usize {
        let start = usize::from(self.start);
        if self.sealed() {
            return self.ef().count_sum(&self.buf, start + a, start + b) as usize;
        }
        let (cw, at) = (self.cw(), self.counts_at());
        let bytes = self
            .buf
            .get(at + (start + a) * cw..at + (start + b) * cw)
            .unwrap_or_default();
        sum_counts(bytes, cw)
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
    /// walked from the nearer end: `LOCATE_STEP` slots' counts summed at once while it lies
    /// farther than that many requests from the end, then slot by slot.
    #[inline]
    fn locate(&self, i: usize) -> (usize, usize) {
        if !self.counted() {
            return (i, i);
        }
        self.locate_counted(i)
    }

    /// `locate` in the counted form, kept out of line so that the plain form's stays inline.
    #[inline(never)]
    fn locate_counted(&self, i: usize) -> (usize, usize) {
        let slots = self.slots();
        if i * 2 <= self.len() {
            let (mut s, mut before) = (0, 0);
            while i >= before + LOCATE_STEP && s + LOCATE_STEP <= slots {
                let n = self.sum(s, s + LOCATE_STEP);
                if i < before + n {
                    break;
                }
                (s, before) = (s + LOCATE_STEP, before + n);
            }
            while s < slots {
                let n = self.count_at(s);
                if i < before + n {
                    return (s, before);
                }
                (s, before) = (s + 1, before + n);
            }
            (slots.saturating_sub(1), before)
        } else {
            let (mut s, mut after) = (slots, self.len());
            while i + LOCATE_STEP < after && s >= LOCATE_STEP {
                let n = self.sum(s - LOCATE_STEP, s);
                if i >= after.saturating_sub(n) {
                    break;
                }
                (s, after) = (s - LOCATE_STEP, after - n);
            }
            while s > 0 {
                s -= 1;
                after = after.saturating_sub(self.count_at(s));
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

    /// Where the first live slot's bit is in a sealed block's high bits: its high part (from
    /// `first`, its timestamp) plus `start`.
    fn first_bit(&self, ef: &Ef) -> usize {
        let high = usize::try_from(self.first.saturating_sub(self.base) >> ef.low)
            .unwrap_or(usize::MAX / 2);
        high + usize::from(self.start)
    }

    /// The timestamp of live slot `s` of a sealed block, its bit counted on from the first live
    /// slot's (`first_bit`).
    fn sealed_slot_on(&self, s: usize) -> u64 {
        let (ef, start) = (self.ef(), usize::from(self.start));
        let off = ef.get_from(&self.buf, start + s, start, self.first_bit(&ef));
        self.base.saturating_add(off)
    }

    /// `count_le` on a sealed block: ranked on from the first live slot (`first_bit`).
    #[inline(never)]
    fn sealed_count_le(&self, t: u64) -> usize {
        if t < self.first {
            return 0;
        }
        let (start, end) = (
            usize::from(self.start),
            usize::from(self.start) + self.slots(),
        );
        let ef = self.ef();
        let at = self.first_bit(&ef);
        let rank = ef.rank_from(&self.buf, t.saturating_sub(self.base), start, at);
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
        self.prefix(self.first_past(t, 0, self.slots()))
    }

    /// The first slot of `lo..hi` past `t` (`hi` when none is), by halving.
    #[inline]
    fn first_past(&self, t: u64, mut lo: usize, mut hi: usize) -> usize {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.slot(mid) <= t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// `count_le` searched from the front: none before the first timestamp; a sealed block's
    /// rank without reading its last timestamp; in the byte form slots 0, 1, 3, 7, ... until one
    /// is past `t`, then halving: O(log k) for the k slots at or before `t`, which is few for a
    /// trim of the oldest requests.
    #[inline]
    pub fn count_le_front(&self, t: u64) -> usize {
        if t < self.first {
            return 0;
        }
        if self.sealed() {
            return self.sealed_count_le(t);
        }
        let slots = self.slots();
        if slots == 0 || self.last() <= t {
            return self.len();
        }
        // Slot `end` is the last, which is past `t`.
        let end = slots - 1;
        let (mut lo, mut hi) = (0, 0);
        while self.slot(hi) <= t {
            (lo, hi) = (hi + 1, (2 * hi + 1).min(end));
        }
        self.prefix(self.first_past(t, lo, hi))
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
    pub fn runs_with(&self, p: usize, ts: u64, n: usize, a: usize, b: usize) -> Vec<(u64, u64)> {
        fn push(out: &mut Vec<(u64, u64)>, t: u64, k: usize) {
            match out.last_mut() {
                _ if k == 0 => {}
                Some((v, c)) if *v == t => *c += k as u64,
                _ => out.push((t, k as u64)),
            }
        }
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(self.slots() + 2);
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
    pub fn slot_runs(&self) -> Vec<(u64, u64)> {
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

    /// Hands its buffers to `mover`.
    pub fn move_buffer(&mut self, mover: &mut impl super::heap::Mover) {
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
            !self.is_open() || (!self.sealed() && len > 0),
            "open: sealed or empty"
        );
        // Its slots, not its requests: a count may be 2^48.
        let decoded = self.decoded();
        let ordered = decoded.windows(2).all(|v| v[0].0 <= v[1].0);
        let total: u64 = decoded.iter().map(|s| s.1).sum();
        if self.sealed() {
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
            assert_eq!(total, len as u64, "values");
            assert!(ordered, "order");
            assert_eq!(Some(self.first), decoded.first().map(|s| s.0), "first");
            assert_eq!(self.get(len - 1), self.last(), "last");
            return;
        }
        assert!(self.bytes() <= BLOCK_BYTES, "too big");
        assert!(start + slots <= self.cap(), "overflows");
        assert!((1..=7).contains(&w), "width {w}");
        if self.counted() {
            assert!((1..=7).contains(&self.cw()), "count width");
            assert!((0..slots).all(|s| self.count_at(s) >= 1), "a zero count");
            assert_eq!(self.sum(0, slots), len, "counts");
        } else {
            assert_eq!(slots, len, "plain slots");
        }
        if len > 0 {
            assert_eq!(self.first, self.get(0), "first");
            assert!(self.base <= self.first, "base");
            assert!(width_for(self.last() - self.base) <= w, "width");
            assert!(ordered, "order");
            assert_eq!(total, len as u64, "values");
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

    /// The 48-bit length and the open flag inside `low` keep a block at 48 bytes.
    #[test]
    fn a_block_is_48_bytes() {
        assert_eq!(size_of::<Block>(), 48);
        let mut block = Block::run(7, MAX_LEN);
        assert_eq!(
            (block.len(), block.slots(), block.values().next()),
            (MAX_LEN, 1, Some(7))
        );
        block.remove(0, MAX_LEN - 3);
        block.check();
        assert_eq!(block.len(), 3);
        assert!(block.insert(3, 7, MAX_LEN - 3));
        assert!(!block.insert(0, 7, 1));
        block.check();
        // Two blocks whose counts add up past a block's: no merge.
        let half = Block::run(7, MAX_LEN / 2 + 1);
        assert!(Block::merged(&half, &half, BLOCK_BYTES).is_none());
        let both = Block::merged(&half, &Block::run(7, MAX_LEN / 2), BLOCK_BYTES);
        assert_eq!(both.map(|b| b.len()), Some(MAX_LEN));
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
                for &probe in model.iter().step_by(7).chain(model.last()) {
                    for q in [probe - 1, probe, probe + 1] {
                        let want = model.partition_point(|t| *t <= q);
                        assert_eq!(block.count_le_front(q), want, "step {step} at {q}");
                    }
                }
            }
        }
    }

    /// `append` makes the block `insert` at the end makes, wherever it takes the call: appends a
    /// few ms apart (plain), repeats of one timestamp (counted), with removals and seals between.
    #[test]
    fn an_append_is_an_insert_at_the_end() {
        let mut rng = crate::rng::Rng::new(58);
        for (gap, repeat) in [(1u64, 0u64), (3, 2), (1 << 20, 0), (0, 1), (300, 6)] {
            let mut block = Block::from_sorted(&[1 << 40]);
            let mut taken = 0;
            for step in 0..6_000 {
                let ts = block.last() + if rng.range(0, 8) < repeat { 0 } else { gap };
                let n = rng.range(1, 4) as usize;
                let mut appended = block.clone();
                let len = block.len();
                if appended.append(ts, n) {
                    assert!(block.insert(len, ts, n), "step {step}");
                    assert_eq!(format!("{appended:?}"), format!("{block:?}"), "step {step}");
                    taken += 1;
                } else {
                    assert_eq!(format!("{appended:?}"), format!("{block:?}"), "step {step}");
                    if !block.insert(len, ts, n) {
                        block = Block::from_sorted(&[ts]);
                    }
                }
                if rng.range(0, 500) == 0 {
                    block.remove(0, block.len() / 2);
                }
                // Sealed now and then, for a few calls (the log unseals its last block).
                if rng.range(0, 700) == 0 {
                    block.seal();
                } else if block.sealed() && rng.range(0, 20) == 0 {
                    block.unseal();
                }
                block.check();
            }
            assert!(taken > 5_000, "gap {gap}: {taken} appends taken");
        }
    }

    /// `add_run` on a counted block in bytes holds what `insert` after the equal timestamps
    /// holds, wherever it takes the call (a count bumped, a slot opened with room after or
    /// before the live ones), and leaves the block untouched where it does not.
    #[test]
    fn a_run_added_is_an_insert_after_the_equal_ones() {
        let mut rng = crate::rng::Rng::new(59);
        let mut down = 0;
        for span in [40u64, 300, 5_000, 1 << 20] {
            let t = 1u64 << 40;
            let runs: Vec<(u64, u64)> = (0..60u64).map(|s| (t + s * span / 60, 3)).collect();
            let mut block = Block::laid(&runs, t, width_for(span), 0, 1);
            let mut model: Vec<u64> = block.values().collect();
            let (mut bumped, mut opened) = (0, 0);
            for step in 0..4_000 {
                // Half of them on a timestamp the block holds.
                let ts = match model.get(rng.range(0, 2 * model.len() as u64) as usize) {
                    Some(&held) => held,
                    None => t + rng.range(0, span + span / 8) - span / 16,
                };
                let n = rng.range(1, 3) as usize;
                let p = model.partition_point(|x| *x <= ts);
                let before = format!("{block:?}");
                let (slots, start) = (block.slots(), block.start);
                if block.add_run(ts, n) {
                    if block.slots() == slots {
                        bumped += 1;
                    } else {
                        opened += 1;
                        down += usize::from(block.start < start);
                    }
                    model.splice(p..p, std::iter::repeat_n(ts, n));
                } else {
                    assert_eq!(format!("{block:?}"), before, "step {step}");
                    if block.insert(p, ts, n) {
                        model.splice(p..p, std::iter::repeat_n(ts, n));
                    }
                }
                if rng.range(0, 100) == 0 {
                    let a = rng.range(0, model.len() as u64 / 4) as usize;
                    block.remove(0, a);
                    model.drain(..a);
                }
                block.check();
                assert_eq!(block.values().collect::<Vec<_>>(), model, "step {step}");
            }
            assert!(
                bumped > 100 && opened > 50,
                "span {span}: {bumped} bumped, {opened} opened"
            );
        }
        assert!(
            down > 0,
            "no slot opened into the room before the live ones"
        );
    }

    /// Every request's timestamp and every time's rank in a counted block of hundreds of slots,
    /// in bytes and sealed (the counts summed in groups, from either end).
    #[test]
    fn counted_reads_everywhere() {
        let mut rng = crate::rng::Rng::new(58);
        let t = 1u64 << 40;
        let runs: Vec<(u64, u64)> = (0..700u64).map(|s| (t + 3 * s, rng.range(1, 9))).collect();
        let model: Vec<u64> = runs
            .iter()
            .flat_map(|&(ts, n)| std::iter::repeat_n(ts, n as usize))
            .collect();
        let mut block = Block::best(&runs, None, 0).expect("fits");
        for sealed in [false, true] {
            if sealed {
                block.seal();
            }
            assert_eq!((block.counted(), block.sealed()), (true, sealed));
            for (i, &ts) in model.iter().enumerate() {
                assert_eq!(block.get(i), ts, "sealed {sealed}, request {i}");
            }
            for q in t - 1..t + 3 * 700 {
                let want = model.partition_point(|x| *x <= q);
                assert_eq!(block.count_le(q), want, "sealed {sealed}, at {q}");
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

    #[test]
    fn a_distinct_sealed_block_is_encoded_again_as_through_the_byte_form() {
        let mut rng = crate::rng::Rng::new(58);
        let mut compared = 0;
        for step in 0..400 {
            let len = rng.range(1, 600) as usize;
            let gap = [1, 3, 40, 1 << 20][step % 4];
            let mut t = 1u64 << 40;
            let ts: Vec<u64> = (0..len)
                .map(|_| {
                    t += rng.range(1, gap + 1);
                    t
                })
                .collect();
            let mut block = Block::from_sorted(&ts);
            block.seal();
            if !block.sealed() || block.counted() {
                continue;
            }
            let (a, b) = (rng.range(0, len as u64) as usize, len);
            let front = rng.range(0, 2) == 0;
            let (a, b) = if front { (0, a) } else { (a, b) };
            if a == b || b - a == len {
                continue;
            }
            (block.start, block.slots) = if front {
                (b as u16, (len - b) as u16)
            } else {
                (0, a as u16)
            };
            block.set_len(usize::from(block.slots));
            block.first = block.slot(0);
            let through_bytes = Block::best(&block.slot_runs(), None, 0).map(|mut b| {
                b.seal();
                b
            });
            match Block::resealed_distinct(&block.decoded()) {
                Some(direct) => {
                    direct.check();
                    let direct = format!("{:?}", Some(direct));
                    assert_eq!(direct, format!("{through_bytes:?}"), "step {step}");
                    compared += 1;
                }
                None => assert!(through_bytes.is_none_or(|b| !b.sealed()), "step {step}"),
            }
        }
        assert!(compared > 100, "{compared} compared");
    }
}
