//! A block's edits in the byte form: inserts (a run of one timestamp, plain or counted, splitting
//! nothing: false when it does not fit), removals of a range of requests, and the re-layout that
//! keeps its buffer tight after them. A sealed block is edited through its own path (`seal`).

use super::super::heap::size_class;
use super::{BLOCK_BYTES, Block, MAX_LEN, fits, form_bytes, reach, totals, width_for, zeroed};

impl Block {
    /// Writes `offset` into the `n` slots from byte `at`: one slot with one 8-byte load and
    /// store (the bytes past it kept) where the buffer has 8 bytes left, else byte by byte
    /// (`fill_slots`).
    #[inline]
    fn fill(&mut self, at: usize, n: usize, offset: u64) {
        let w = self.w();
        if n == 1
            && let Some(Ok(word)) = self.buf.get_mut(at..at + 8).map(<&mut [u8; 8]>::try_from)
        {
            let mask = u64::MAX >> (64 - 8 * w as u32);
            let kept = u64::from_le_bytes(*word) & !mask;
            *word = (kept | (offset & mask)).to_le_bytes();
            return;
        }
        self.fill_slots(at, n, offset);
    }

    /// `fill` byte by byte.
    #[inline(never)]
    fn fill_slots(&mut self, at: usize, n: usize, offset: u64) {
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
        if self.is_open() {
            let done = self.insert_bytes(p, ts, n);
            self.set_open(!self.sealed() && !self.is_empty());
            return done;
        }
        self.insert_bytes(p, ts, n)
    }

    /// `insert` of `n` copies of `ts` at the end, in the byte form, when that keeps the block's
    /// form, base and width: a counted block's newest timestamp's count bumped or its next slot
    /// taken, a plain block's slots written after its live ones. False: the block is unchanged
    /// and `insert` applies (the same edits as `insert` where this one makes them).
    #[inline]
    pub fn append(&mut self, ts: u64, n: usize) -> bool {
        let (len, slots) = (self.len(), self.slots());
        if self.sealed() || slots == 0 || len + n > MAX_LEN {
            return false;
        }
        let last = self.slot(slots - 1);
        if ts < last || ts - self.base >= reach(self.w()) {
            return false;
        }
        let (w, end) = (self.w(), usize::from(self.start) + slots);
        if self.counted() {
            if ts == last {
                if !self.add_count(end - 1, n) {
                    return false;
                }
            } else if self.count_fits(n) && !self.is_full() && end < self.cap() {
                self.fill(end * w, 1, ts - self.base);
                self.set_count(end, n);
                self.slots += 1;
            } else {
                return false;
            }
            self.set_len(len + n);
            return true;
        }
        if (len + n) * w > BLOCK_BYTES || self.run_ends_at(len, ts, n) {
            return false;
        }
        if (end + n) * w <= self.buf.len() {
            // Room after the live slots: written there, nothing moves.
            self.fill(end * w, n, ts - self.base);
            self.set_len(len + n);
            self.slots = (len + n) as u16;
        } else {
            self.insert_plain(len, ts, n);
        }
        true
    }

    /// Adds `n` copies of `ts` to a counted block in the byte form where no request position is
    /// needed: the count of an equal timestamp bumped, or a new slot opened in place (the slots
    /// and counts on one side of it moved by one) when the block's base, width, count width and
    /// buffer take it. The slot is found by halving the timestamps, no count summed. False:
    /// nothing changed, and `insert` applies.
    pub fn add_run(&mut self, ts: u64, n: usize) -> bool {
        if self.sealed() || !self.counted() || self.len() + n > MAX_LEN {
            return false;
        }
        let (slots, start) = (self.slots(), usize::from(self.start));
        let s = self.first_past(ts, 0, slots);
        if s > 0 && self.slot(s - 1) == ts {
            if !self.add_count(start + s - 1, n) {
                return false;
            }
        } else {
            if ts < self.base
                || width_for(ts - self.base) > self.w()
                || !self.count_fits(n)
                || self.is_full()
            {
                return false;
            }
            let (w, cw, at, end) = (self.w(), self.cw(), self.counts_at(), start + slots);
            let i = if end < self.cap() {
                // Room after the live slots: those from `s` move up one.
                let from = start + s;
                self.buf.copy_within(from * w..end * w, (from + 1) * w);
                self.buf
                    .copy_within(at + from * cw..at + end * cw, at + (from + 1) * cw);
                from
            } else if start > 0 {
                // Room before them: those before `s` move down one.
                let to = start - 1;
                self.buf.copy_within(start * w..(start + s) * w, to * w);
                self.buf
                    .copy_within(at + start * cw..at + (start + s) * cw, at + to * cw);
                self.start -= 1;
                to + s
            } else {
                return false;
            };
            self.fill(i * w, 1, ts - self.base);
            self.set_count(i, n);
            self.slots += 1;
            self.first = self.first.min(ts);
        }
        self.set_len(self.len() + n);
        true
    }

    /// Adds `n` to the count of buffer slot `i` (counted byte form) where the sum fits the count
    /// width, its bytes located once; false leaves it unchanged.
    #[inline(always)]
    fn add_count(&mut self, i: usize, n: usize) -> bool {
        let (cw, at) = (self.cw(), self.counts_at() + i * self.cw());
        // One 8-byte load and store that end with the count (the bytes before it kept) where the
        // buffer has 8 bytes up to its end, else byte by byte.
        if (1..=7).contains(&cw)
            && let Some(Ok(word)) = (at + cw)
                .checked_sub(8)
                .and_then(|from| self.buf.get_mut(from..at + cw))
                .map(<&mut [u8; 8]>::try_from)
        {
            let shift = 64 - 8 * cw as u32;
            let x = u64::from_le_bytes(*word);
            let c = (x >> shift) + n as u64;
            if c >= reach(cw) {
                return false;
            }
            *word = (x & (u64::MAX >> (8 * cw)) | c << shift).to_le_bytes();
            return true;
        }
        let Some(bytes) = self.buf.get_mut(at..at + cw) else {
            return false;
        };
        let mut word = [0u8; 8];
        if let Some(to) = word.get_mut(..cw) {
            to.copy_from_slice(bytes);
        }
        let c = u64::from_le_bytes(word) + n as u64;
        match c.to_le_bytes().get(..cw) {
            Some(from) if c < reach(cw) => {
                bytes.copy_from_slice(from);
                true
            }
            _ => false,
        }
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
                self.set_len(self.len() + n);
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
                self.slots = n as u16;
                self.set_len(n);
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
    #[inline]
    fn run_ends_at(&self, p: usize, ts: u64, n: usize) -> bool {
        let len = self.len();
        p == len && (len + n) % 256 < n && p >= 3 && self.ends_in(p, ts)
    }

    /// Whether the slots before `p` (at least 3) end in 3 copies of `ts`.
    #[inline(never)]
    fn ends_in(&self, p: usize, ts: u64) -> bool {
        self.slot(p - 1) == ts && self.slot(p - 3) == ts
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
                self.set_len(self.len() + n);
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
            self.set_len(self.len() + n);
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
        if p == len && room_after {
            // An append with room after the live slots: nothing moves.
        } else if p == len && len + n <= cap {
            // An append with the room before them: they move to the buffer's start, so that the
            // appends after this one find all the room after them.
            self.buf.copy_within(start * w..(start + len) * w, 0);
            self.start = 0;
        } else if room_before && (p * 2 <= len || !room_after) {
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
        self.set_len(len + n);
        self.slots = (len + n) as u16;
        self.first = self.first.min(ts);
    }

    /// Removes requests `a..b` (within the length): in the plain form moving the shorter side,
    /// in the counted form dropping slots and cutting counts at either end (re-laid for a cut
    /// inside); then re-lays the block if its buffer is larger than its live slots need (see the
    /// top of this file).
    pub fn remove(&mut self, a: usize, b: usize) {
        let open = self.is_open();
        self.remove_bytes(a, b);
        self.set_open(open && !self.sealed() && !self.is_empty());
    }

    /// `remove`, whatever the block's flag.
    fn remove_bytes(&mut self, a: usize, b: usize) {
        let len = self.len();
        let (a, b) = (a.min(len), b.min(len));
        if a >= b {
            return;
        }
        let start = usize::from(self.start);
        // The new first timestamp where the cut tells it without a search from the block's end.
        let mut first = None;
        if self.sealed() && !self.counted() && (a == 0 || b == len) {
            // Plain and sealed: the live slots' ends move, nothing is re-encoded; the new first
            // slot's bit counted on from the old one's.
            if a == 0 {
                first = (b < len).then(|| self.sealed_slot_on(b));
                self.start = (start + b) as u16;
            } else {
                first = Some(self.first);
            }
            self.slots -= (b - a) as u16;
            self.set_len(len - (b - a));
        } else if !self.counted() && !self.sealed() {
            let w = self.w();
            if a <= len - b {
                // The first `a` move up to close the gap (none for a cut at the front).
                if a > 0 {
                    self.buf
                        .copy_within(start * w..(start + a) * w, (start + b - a) * w);
                }
                self.start = (start + b - a) as u16;
            } else {
                self.buf
                    .copy_within((start + b) * w..(start + len) * w, (start + a) * w);
            }
            self.set_len(len - (b - a));
            self.slots = self.len() as u16;
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
            self.set_len(len - b);
        } else if b == len {
            let (s, before) = self.locate(a);
            if before < a {
                self.set_count(start + s, a - before);
            }
            self.slots = (s + usize::from(before < a)) as u16;
            self.set_len(a);
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
        if !self.is_empty() {
            self.first = match first {
                Some(t) => t,
                None => self.slot(0),
            };
        }
        if self.sealed() {
            self.settle_sealed();
        } else {
            self.settle();
        }
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
    pub(super) fn kept_width(&self) -> usize {
        let narrowest = width_for(self.last() - self.first);
        match self.w() {
            w if w <= narrowest + 1 => w,
            _ => narrowest,
        }
    }
}
