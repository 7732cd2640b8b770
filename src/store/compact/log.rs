//! The compact log itself, free of Redis: the timestamps of logged requests, oldest first, as
//! offsets from a base in a ring of fixed-width slots.
//!
//! A slot takes the fewest bytes (4 to 7) that hold the log's span: 4 bytes while it spans less
//! than 2^32 ms (49 days), 5 up to 34 years, 6 up to 8,900 years. The width is chosen with room
//! to spare and changes only when the span outgrows it or shrinks to an eighth of the narrower
//! width's reach, so a log never flips back and forth. Buffers are sized on the allocator's size
//! classes, so at most a quarter of one is spare.
//!
//! Trimming from the front moves the head, O(1); appending at the back is O(1) amortised; an
//! older request is inserted by shifting the shorter side of the ring; counting through a score
//! is a binary search; the k-th oldest and the newest are one slot read.

/// Largest timestamp a log holds: every argument is at most 2^53.
pub const MAX_TS: u64 = 1 << 53;

/// A ring of `W`-byte little-endian offsets; logical index 0 is the oldest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring<const W: usize> {
    buf: Box<[[u8; W]]>,
    head: usize,
    len: usize,
}

impl<const W: usize> Ring<W> {
    /// Offsets below this fit a slot.
    const REACH: u64 = 1 << (8 * W as u32);

    fn with_slots(slots: usize) -> Self {
        Ring {
            buf: vec![[0u8; W]; slots].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    fn cap(&self) -> usize {
        self.buf.len()
    }

    /// Where logical index `i` (below the capacity) lives.
    fn at(&self, i: usize) -> usize {
        let p = self.head + i;
        if p >= self.cap() { p - self.cap() } else { p }
    }

    fn get(&self, i: usize, base: u64) -> u64 {
        let mut bytes = [0u8; 8];
        if let (Some(to), Some(slot)) = (bytes.get_mut(..W), self.buf.get(self.at(i))) {
            to.copy_from_slice(slot);
        }
        base.saturating_add(u64::from_le_bytes(bytes))
    }

    fn encode(ts: u64, base: u64) -> Option<[u8; W]> {
        let offset = ts.checked_sub(base).filter(|d| *d < Self::REACH)?;
        let mut slot = [0u8; W];
        slot.copy_from_slice(offset.to_le_bytes().get(..W)?);
        Some(slot)
    }

    fn set(&mut self, i: usize, slot: [u8; W]) {
        let p = self.at(i);
        if let Some(s) = self.buf.get_mut(p) {
            *s = slot;
        }
    }

    fn copy(&mut self, from: usize, to: usize) {
        if let Some(&slot) = self.buf.get(self.at(from)) {
            self.set(to, slot);
        }
    }

    /// Moves every slot into a buffer of `slots` (at least `len`), oldest first.
    fn realloc(&mut self, slots: usize) {
        let mut next = Ring::with_slots(slots.max(self.len));
        for i in 0..self.len {
            if let Some(&slot) = self.buf.get(self.at(i)) {
                next.set(i, slot);
            }
        }
        next.len = self.len;
        *self = next;
    }

    /// Room for `extra` more slots: the smallest size class that holds them. Classes grow by
    /// at least an eighth, so appends stay O(1) amortised.
    fn reserve(&mut self, extra: usize) {
        let need = self.len.saturating_add(extra);
        if need > self.cap() {
            self.realloc(slots_for::<W>(need));
        }
    }

    /// Drops the `m` oldest slots, and gives memory back once a smaller class would hold an
    /// eighth more than is left (a shrink needs a tenth of the ring trimmed since the last one).
    fn drop_front(&mut self, m: usize) {
        let m = m.min(self.len);
        self.head = if m == self.len { 0 } else { self.at(m) };
        self.len -= m;
        if slots_for::<W>(self.len + self.len / 8) < self.cap() {
            self.realloc(slots_for::<W>(self.len));
        }
    }

    /// Inserts `n` copies of `slot` at logical index `pos`, shifting the shorter side.
    fn insert(&mut self, pos: usize, slot: [u8; W], n: usize) {
        let pos = pos.min(self.len);
        self.reserve(n);
        if self.len - pos <= pos {
            for i in (pos..self.len).rev() {
                self.copy(i, i + n);
            }
        } else {
            self.head = self.at(self.cap() - n);
            for i in 0..pos {
                self.copy(i + n, i);
            }
        }
        for i in pos..pos + n {
            self.set(i, slot);
        }
        self.len += n;
    }

    /// Inserts `n` copies of `ts` (which fits) at `pos`.
    fn insert_ts(&mut self, pos: usize, ts: u64, base: u64, n: usize) {
        if let Some(slot) = Self::encode(ts, base) {
            self.insert(pos, slot, n);
        }
    }

    /// A ring of another width holding `ts` (sorted), offsets from `base`.
    fn from_sorted(ts: &[u64], base: u64) -> Self {
        let mut ring = Ring::with_slots(slots_for::<W>(ts.len()));
        for (i, t) in ts.iter().enumerate() {
            ring.set(i, Self::encode(*t, base).unwrap_or([0u8; W]));
        }
        ring.len = ts.len();
        ring
    }
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

/// Slots of width `W` filling the size class that holds `slots` of them.
fn slots_for<const W: usize>(slots: usize) -> usize {
    size_class(slots.saturating_mul(W)) / W
}

/// The log's slots, in the width its span needs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slots {
    W4(Ring<4>),
    W5(Ring<5>),
    W6(Ring<6>),
    W7(Ring<7>),
}

/// Runs `$body` with `$ring` bound to whichever ring the log holds.
macro_rules! each {
    ($slots:expr, $ring:ident => $body:expr) => {
        match $slots {
            Slots::W4($ring) => $body,
            Slots::W5($ring) => $body,
            Slots::W6($ring) => $body,
            Slots::W7($ring) => $body,
        }
    };
}

/// A sorted log of request timestamps (ms), each at most 2^53.
#[derive(Debug, Clone)]
pub struct CompactLog {
    base: u64,
    slots: Slots,
}

/// Two logs are equal when they hold the same timestamps, whatever their layout.
impl PartialEq for CompactLog {
    fn eq(&self, other: &CompactLog) -> bool {
        self.count() == other.count() && self.iter().eq(other.iter())
    }
}

impl Eq for CompactLog {}

impl Default for CompactLog {
    fn default() -> Self {
        CompactLog {
            base: 0,
            slots: Slots::W4(Ring::with_slots(0)),
        }
    }
}

impl CompactLog {
    /// Logged requests.
    pub fn len(&self) -> u64 {
        self.count() as u64
    }

    fn count(&self) -> usize {
        each!(&self.slots, r => r.len)
    }

    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// The `i`-th oldest timestamp, 0-based (below the length).
    fn at(&self, i: usize) -> u64 {
        each!(&self.slots, r => r.get(i, self.base))
    }

    /// The `k`-th oldest timestamp, 1-based.
    pub fn kth_oldest(&self, k: u64) -> Option<u64> {
        let i = usize::try_from(k.checked_sub(1)?).ok()?;
        (i < self.count()).then(|| self.at(i))
    }

    pub fn newest(&self) -> Option<u64> {
        self.count().checked_sub(1).map(|i| self.at(i))
    }

    /// Timestamps at or before `score` (any f64: fractions, infinities).
    pub fn count_through(&self, score: f64) -> u64 {
        // Timestamps are at most 2^53, exact as f64.
        self.partition(|ts| ts as f64 <= score) as u64
    }

    /// The first index whose timestamp fails `pred`, which holds for a prefix.
    fn partition(&self, pred: impl Fn(u64) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.count());
        // The common cases, the whole log or none of it, without a search.
        if hi == 0 || pred(self.at(hi - 1)) {
            return hi;
        }
        if !pred(self.at(0)) {
            return 0;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(self.at(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Removes every timestamp at or before `cutoff`; returns how many went.
    pub fn trim(&mut self, cutoff: i64) -> u64 {
        let Ok(cutoff) = u64::try_from(cutoff) else {
            return 0;
        };
        let m = self.partition(|ts| ts <= cutoff);
        if m == 0 {
            return 0;
        }
        each!(&mut self.slots, r => r.drop_front(m));
        // A span shrunk to an eighth of a narrower width's reach: narrow it.
        if let Some(span) = self.span(None)
            && self.width() > 4
            && span < reach(self.width() - 1) / 8
        {
            self.rebuild(None);
        }
        m as u64
    }

    /// Removes up to `n` of the newest timestamps at or before `through` (`MAX_TS`: any);
    /// returns how many went. Rebuilds the log: O(N).
    pub fn refund(&mut self, through: u64, n: u64) -> u64 {
        let end = self.partition(|ts| ts <= through);
        let start = end.saturating_sub(usize::try_from(n).unwrap_or(usize::MAX));
        if start == end {
            return 0;
        }
        let mut kept = CompactLog::default();
        for (i, ts) in self.iter().enumerate() {
            if i < start || i >= end {
                kept.add(ts, 1);
            }
        }
        *self = kept;
        (end - start) as u64
    }

    /// Adds `n` timestamps `ts`, after every equal one.
    pub fn add(&mut self, ts: u64, n: u64) {
        let Ok(n) = usize::try_from(n) else {
            return;
        };
        if n == 0 || ts > MAX_TS {
            return;
        }
        if !self.fits(ts) {
            self.rebuild(Some(ts));
        }
        let pos = match self.newest() {
            Some(newest) if newest > ts => self.partition(|t| t <= ts),
            _ => self.count(),
        };
        let base = self.base;
        each!(&mut self.slots, r => r.insert_ts(pos, ts, base, n));
    }

    fn fits(&self, ts: u64) -> bool {
        ts >= self.base && ts - self.base < reach(self.width())
    }

    /// Bytes a slot takes now.
    pub fn width(&self) -> usize {
        slot_width(&self.slots)
    }

    /// Newest minus oldest, counting `extra` in.
    fn span(&self, extra: Option<u64>) -> Option<u64> {
        let lo = [self.kth_oldest(1), extra].into_iter().flatten().min()?;
        let hi = [self.newest(), extra].into_iter().flatten().max()?;
        Some(hi - lo)
    }

    /// Lays the log out anew (with `extra` to come): the narrowest width whose reach is four
    /// times the span, and the base in the middle of the room left, so that time can move
    /// either way before the next rebuild.
    fn rebuild(&mut self, extra: Option<u64>) {
        let ts: Vec<u64> = (0..self.count()).map(|i| self.at(i)).collect();
        let Some(span) = self.span(extra) else {
            *self = CompactLog::default();
            return;
        };
        let lo = ts
            .first()
            .copied()
            .into_iter()
            .chain(extra)
            .min()
            .unwrap_or(0);
        let width = (4..=7).find(|w| span <= reach(*w) / 4).unwrap_or(7);
        let room = reach(width) - 1 - span.min(reach(width) - 1);
        self.base = lo.saturating_sub(room / 2);
        self.slots = match width {
            4 => Slots::W4(Ring::from_sorted(&ts, self.base)),
            5 => Slots::W5(Ring::from_sorted(&ts, self.base)),
            6 => Slots::W6(Ring::from_sorted(&ts, self.base)),
            _ => Slots::W7(Ring::from_sorted(&ts, self.base)),
        };
    }

    /// Every timestamp, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.count()).map(|i| self.at(i))
    }

    /// Runs of equal timestamps, oldest first: `(timestamp, count)`.
    pub fn runs(&self) -> Runs<'_> {
        Runs { log: self, next: 0 }
    }

    /// The slot buffer: where it starts, and its length in bytes.
    pub fn buffer(&self) -> (*const u8, usize) {
        each!(&self.slots, r => (r.buf.as_ptr().cast::<u8>(), r.cap() * slot_width(&self.slots)))
    }
}

/// Offsets below this fit a slot of `width` bytes.
fn reach(width: usize) -> u64 {
    match width {
        4 => Ring::<4>::REACH,
        5 => Ring::<5>::REACH,
        6 => Ring::<6>::REACH,
        _ => Ring::<7>::REACH,
    }
}

fn slot_width(slots: &Slots) -> usize {
    match slots {
        Slots::W4(_) => 4,
        Slots::W5(_) => 5,
        Slots::W6(_) => 6,
        Slots::W7(_) => 7,
    }
}

/// Iterator over runs of equal timestamps.
pub struct Runs<'a> {
    log: &'a CompactLog,
    next: usize,
}

impl Iterator for Runs<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        let len = self.log.count();
        if self.next >= len {
            return None;
        }
        let ts = self.log.at(self.next);
        // The run ends where timestamps exceed `ts`: a binary search from here.
        let (mut lo, mut hi) = (self.next + 1, len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.log.at(mid) <= ts {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let n = (lo - self.next) as u64;
        self.next = lo;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(log: &CompactLog) -> Vec<u64> {
        log.iter().collect()
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
    fn the_width_follows_the_span_with_room_to_spare() {
        let t = 1_700_000_000_000u64;
        // (timestamps, width): a day, a month, a year, a millennium, all of time.
        let cases: &[(&[u64], usize)] = &[
            (&[t, t + 86_400_000], 4),
            (&[t, t + 30 * 86_400_000], 5),
            (&[t, t + 365 * 86_400_000], 5),
            (&[t, t + 1000 * 365 * 86_400_000], 6),
            (&[0, MAX_TS], 7),
        ];
        for (ts, width) in cases {
            assert_eq!(CompactLog::of(ts).width(), *width, "{ts:?}");
        }
        // Trimmed back to a day, a wide log narrows again.
        let mut log = CompactLog::of(&[t, t + (1 << 40), t + (1 << 40) + 1000]);
        assert_eq!(log.width(), 6);
        log.trim((t + 1) as i64);
        assert_eq!(log.width(), 4);
        assert_eq!(all(&log), [t + (1 << 40), t + (1 << 40) + 1000]);
        // A clock far behind, within reach: a rebase, still narrow.
        log.add(t + (1 << 40) - (1 << 28), 1);
        assert_eq!(log.width(), 4);
        assert_eq!(log.kth_oldest(1), Some(t + (1 << 40) - (1 << 28)));
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
        // Growing, a log holds at most a quarter more than it needs (one size class); shrinking,
        // at most the class of an eighth more.
        let mut log = CompactLog::default();
        for i in 0..5000u64 {
            log.add(1_000_000 + i, 1);
            let need = log.count() * log.width();
            assert!(
                log.buffer().1 * 4 <= need * 5 + 64,
                "{} requests: {} bytes",
                i + 1,
                log.buffer().1
            );
        }
        for i in 0..5000u64 {
            log.trim((1_000_000 + i) as i64);
            let need = log.count() * log.width();
            assert!(
                log.buffer().1 * 100 <= need * 141 + 6400,
                "{} left: {} bytes",
                log.count(),
                log.buffer().1
            );
        }
    }

    #[test]
    fn trims_count_and_rank() {
        let mut log = CompactLog::of(&[100, 200, 200, 300, 400]);
        // (query, count_through)
        for (score, want) in [
            (f64::NEG_INFINITY, 0),
            (99.9, 0),
            (100.0, 1),
            (200.0, 3),
            (250.5, 3),
            (400.0, 5),
            (f64::INFINITY, 5),
        ] {
            assert_eq!(log.count_through(score), want, "{score}");
        }
        assert_eq!(log.kth_oldest(0), None);
        assert_eq!(log.kth_oldest(3), Some(200));
        assert_eq!(log.kth_oldest(6), None);
        assert_eq!(log.newest(), Some(400));
        assert_eq!(log.trim(-5), 0);
        assert_eq!(log.trim(200), 3);
        assert_eq!(all(&log), [300, 400]);
        assert_eq!(log.trim(i64::MAX), 2);
        assert!(log.is_empty());
        assert_eq!(log.newest(), None);
    }

    #[test]
    fn runs_group_equal_timestamps() {
        let mut log = CompactLog::of(&[1, 1, 2, 5, 5, 5]);
        log.add(9, 1000);
        let runs: Vec<(u64, u64)> = log.runs().collect();
        assert_eq!(runs, [(1, 2), (2, 1), (5, 3), (9, 1000)]);
    }

    /// The ring against a plain sorted vector, through wrap-arounds, growth, shrinking, rebases,
    /// width changes and every kind of insert.
    #[test]
    fn matches_a_sorted_vector() {
        let mut rng = crate::core::rng::Rng::new(11);
        let mut log = CompactLog::default();
        let mut model: Vec<u64> = Vec::new();
        let mut now: u64 = 1_000_000;
        for step in 0..20_000 {
            now = match rng.range(0, 19) {
                0 => now.saturating_sub(rng.range(0, 5000)),
                1 => now + rng.range(0, 1 << 34),
                2 => now.saturating_sub(rng.range(0, 1 << 34)),
                3 => rng.range(0, MAX_TS),
                _ => now + rng.range(0, 50),
            }
            .min(MAX_TS);
            match rng.range(0, 9) {
                0..=5 => {
                    let n = rng.range(1, 5);
                    log.add(now, n);
                    let at = model.partition_point(|t| *t <= now);
                    model.splice(at..at, std::iter::repeat_n(now, n as usize));
                }
                _ => {
                    let cutoff = now as i64 - rng.range(0, 3000) as i64;
                    let gone = log.trim(cutoff);
                    let keep = model.partition_point(|t| (*t as i64) <= cutoff);
                    model.drain(..keep);
                    assert_eq!(gone, keep as u64, "step {step}");
                }
            }
            assert_eq!(log.len(), model.len() as u64, "step {step}");
            assert_eq!(log.newest(), model.last().copied(), "step {step}");
            if step % 97 == 0 {
                assert_eq!(all(&log), model, "step {step}");
            }
        }
    }
}
