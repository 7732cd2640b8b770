//! The sealed form of a block, free of Redis: Elias-Fano over the offsets of its slots from the
//! block's base (a non-decreasing sequence), optionally with a count per slot.
//!
//! For `n` slots whose largest offset is `top`, each offset is split into `low` low bits, packed
//! one after another, and a high part `offset >> low`, written in unary: slot `i` sets bit
//! `(offset >> low) + i` of a bit vector of `n + (top >> low)` bits. In the counted form each
//! slot's count minus one follows the low bits in `cb` bits. Layout of the buffer: the low bits
//! (`n * low`), the counts (`n * cb`), padded to whole 8-byte words, then the high bit vector
//! in whole words. Bits are least significant first.
//!
//! Reading slot `i` finds the `i`-th set bit of the high vector (scanning words from the nearer
//! end, a popcount each, then the bit within the word by its bytes' counts); counting the slots
//! at or below an offset finds the end of its high part's bucket (the same scan over zeros, from
//! a slot whose bit is known: slot `i` with high part `h` sets bit `h + i`) and walks the
//! bucket's slots.

/// The shape of one encoding: slots, low bits, count bits (0: the plain form).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ef {
    pub n: usize,
    pub low: u32,
    pub cb: u32,
}

/// Bits a count up to `most` takes in the counted form (its count minus one; at least 1).
pub fn count_bits(most: u64) -> u32 {
    (u64::BITS - most.saturating_sub(1).leading_zeros()).max(1)
}

/// Byte where the high bit vector starts.
fn high_at(n: usize, low: u32, cb: u32) -> usize {
    (n * (low + cb) as usize).div_ceil(64) * 8
}

/// Bytes of an encoding of `n` slots up to offset `top` with `low` and `cb` bits.
fn size(n: usize, top: u64, low: u32, cb: u32) -> usize {
    let high_bits = n + usize::try_from(top >> low).unwrap_or(usize::MAX / 2);
    high_at(n, low, cb) + high_bits.div_ceil(64) * 8
}

/// The smallest encoding of `n` slots up to offset `top` with counts of `cb` bits: its shape and
/// bytes.
pub fn plan(n: usize, top: u64, cb: u32) -> (Ef, usize) {
    let ratio = (top + 1) / (n.max(1) as u64);
    let guess = if ratio > 1 {
        63 - ratio.leading_zeros()
    } else {
        0
    };
    let mut best: Option<(Ef, usize)> = None;
    for low in guess.saturating_sub(1)..=(guess + 1).min(56) {
        let bytes = size(n, top, low, cb);
        if best.is_none_or(|(_, b)| bytes < b) {
            best = Some((Ef { n, low, cb }, bytes));
        }
    }
    best.unwrap_or((Ef { n, low: 0, cb }, size(n, top, 0, cb)))
}

/// The 8 bytes from byte `at` as a little-endian word (zeros past the buffer's end).
#[inline]
fn word_at(buf: &[u8], at: usize) -> u64 {
    match buf.get(at..at + 8).map(<[u8; 8]>::try_from) {
        Some(Ok(bytes)) => u64::from_le_bytes(bytes),
        _ => {
            let mut bytes = [0u8; 8];
            let from = buf.get(at..).unwrap_or_default();
            let k = from.len().min(8);
            if let (Some(to), Some(from)) = (bytes.get_mut(..k), from.get(..k)) {
                to.copy_from_slice(from);
            }
            u64::from_le_bytes(bytes)
        }
    }
}

/// An 8-byte chunk as a little-endian word.
#[inline]
fn le_word(chunk: &[u8]) -> u64 {
    <[u8; 8]>::try_from(chunk).map_or(0, u64::from_le_bytes)
}

/// `width` bits (at most 57) from bit `bit`.
#[inline]
fn bits_at(buf: &[u8], bit: usize, width: u32) -> u64 {
    if width == 0 {
        return 0;
    }
    (word_at(buf, bit / 8) >> (bit % 8)) & (u64::MAX >> (64 - width))
}

/// Writes the `width` low bits of `v` at bit `bit`.
fn set_bits(buf: &mut [u8], bit: usize, width: u32, v: u64) {
    let (mut bit, mut left, mut v) = (bit, width as usize, v);
    while left > 0 {
        let off = bit % 8;
        let take = (8 - off).min(left);
        let mask = (((1u16 << take) - 1) as u8) << off;
        if let Some(b) = buf.get_mut(bit / 8) {
            *b = (*b & !mask) | (((v as u8) << off) & mask);
        }
        v >>= take;
        bit += take;
        left -= take;
    }
}

/// One in every byte.
const ONES: u64 = 0x0101_0101_0101_0101;
/// The top bit of every byte.
const TOPS: u64 = 0x8080_8080_8080_8080;

/// Each byte of `w` replaced by the number of its set bits.
#[inline]
fn byte_counts(w: u64) -> u64 {
    let s = w - ((w >> 1) & 0x5555_5555_5555_5555);
    let s = (s & 0x3333_3333_3333_3333) + ((s >> 2) & 0x3333_3333_3333_3333);
    (s + (s >> 4)) & 0x0f0f_0f0f_0f0f_0f0f
}

/// The first byte of `through` (running counts, each at most 64) past `k`, as a bit position
/// (8 times its index; 64 when none is).
#[inline]
fn first_past(through: u64, k: u32) -> u32 {
    // Top bit of byte j set where the count through byte j is at most `k` (no byte borrows from
    // the next).
    let at_most = (((u64::from(k & 63) * ONES) | TOPS) - through) & TOPS;
    (at_most ^ TOPS).trailing_zeros() & !7
}

/// Position of the `k`-th (0-based) set bit in `w` (which has more than `k`): the running counts
/// of set bits through each byte (one multiply) name the byte that holds it; that byte's bits,
/// one a byte, give the running counts that name the bit.
#[inline]
fn select_in_word(w: u64, k: u32) -> usize {
    let through = byte_counts(w).wrapping_mul(ONES);
    let byte = first_past(through, k).min(56);
    let before = ((through << 8) >> byte) as u8;
    // Bit j of the byte into byte j, then 1 where it is set.
    let spread = (u64::from((w >> byte) as u8) * ONES) & 0x8040_2010_0804_0201;
    let bits = ((spread + 0x7f7f_7f7f_7f7f_7f7f) & TOPS) >> 7;
    let bit = first_past(bits.wrapping_mul(ONES), k.saturating_sub(u32::from(before)));
    (byte + bit / 8) as usize
}

/// The position just after the `h`-th zero of the bit vector `high` (every slot before it has a
/// smaller high part), counted on from position `p0`, which has `zeros` (fewer than `h`) before
/// it; None past the end. Out of line: a trim within a bucket does not come here.
#[inline(never)]
fn after_zero(high: &[u8], h: usize, mut zeros: usize, p0: usize) -> Option<usize> {
    let mut k = p0 / 64;
    // The zeros from `p0` on.
    let mut w = !high.get(k * 8..k * 8 + 8).map_or(0, le_word) & (u64::MAX << (p0 % 64));
    loop {
        if k >= high.len() / 8 {
            return None;
        }
        let z = w.count_ones() as usize;
        if zeros + z >= h {
            return Some(k * 64 + select_in_word(w, (h - 1 - zeros) as u32) + 1);
        }
        zeros += z;
        k += 1;
        w = !high.get(k * 8..k * 8 + 8).map_or(0, le_word);
    }
}

impl Ef {
    /// Encodes `slots` (offsets, non-decreasing, with their counts) into a zeroed buffer of at
    /// least `plan`'s bytes.
    pub fn encode(&self, buf: &mut [u8], slots: impl Iterator<Item = (u64, u64)>) {
        let high = high_at(self.n, self.low, self.cb) * 8;
        for (i, (off, count)) in slots.enumerate().take(self.n) {
            set_bits(buf, i * self.low as usize, self.low, off);
            if self.cb > 0 {
                let at = self.n * self.low as usize + i * self.cb as usize;
                set_bits(buf, at, self.cb, count.saturating_sub(1));
            }
            let pos = high + usize::try_from(off >> self.low).unwrap_or(0) + i;
            set_bits(buf, pos, 1, 1);
        }
    }

    /// The high bit vector: the buffer's whole words from `high_at`.
    #[inline]
    fn high<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        let at = high_at(self.n, self.low, self.cb);
        let rest = buf.get(at..).unwrap_or_default();
        rest.get(..rest.len() / 8 * 8).unwrap_or_default()
    }

    /// Low bits of slot `i`.
    #[inline]
    fn low_of(&self, buf: &[u8], i: usize) -> u64 {
        bits_at(buf, i * self.low as usize, self.low)
    }

    /// The count of slot `i` (counted form).
    pub fn count(&self, buf: &[u8], i: usize) -> u64 {
        bits_at(
            buf,
            self.n * self.low as usize + i * self.cb as usize,
            self.cb,
        ) + 1
    }

    /// The counts of slots `a..b` summed (counted form): up to 8-bit counts a field group at a
    /// time (the groups that fit 56 bits read as one value, each of the field's bits weighted by
    /// a popcount over that bit of every field), wider ones one by one.
    pub fn count_sum(&self, buf: &[u8], a: usize, b: usize) -> u64 {
        let cb = self.cb as usize;
        let at = self.n * self.low as usize;
        let (mut i, mut sum) = (a, (b.saturating_sub(a)) as u64);
        if (1..=8).contains(&cb) {
            let per = 56 / cb;
            // Bit 0 of each of `per` fields; bit j of each is this shifted by j.
            let ones = (0..per).fold(0u64, |m, f| m | 1 << (f * cb));
            while i + per <= b {
                let group = bits_at(buf, at + i * cb, (per * cb) as u32);
                sum += (0..cb)
                    .map(|j| u64::from((group & ones << j).count_ones()) << j)
                    .sum::<u64>();
                i += per;
            }
        }
        for k in i..b {
            sum += bits_at(buf, at + k * cb, self.cb);
        }
        sum
    }

    /// Sets the count of slot `i` (counted form; 1 up to the count it had).
    pub fn set_count(&self, buf: &mut [u8], i: usize, count: u64) {
        let at = self.n * self.low as usize + i * self.cb as usize;
        set_bits(buf, at, self.cb, count.saturating_sub(1));
    }

    /// Position in the high vector of slot `i`'s bit (`i` below `n`), scanned from the nearer
    /// end.
    #[inline(always)]
    fn select(&self, buf: &[u8], i: usize) -> usize {
        let words = self.high(buf).chunks_exact(8).map(le_word).enumerate();
        if i * 2 <= self.n {
            let mut seen = 0;
            for (k, w) in words {
                let ones = w.count_ones() as usize;
                if seen + ones > i {
                    return k * 64 + select_in_word(w, (i - seen) as u32);
                }
                seen += ones;
            }
        } else {
            // Counted from the end: the slot's bit is the `n - 1 - i`-th set bit from the top.
            let mut after = self.n;
            for (k, w) in words.rev() {
                let ones = w.count_ones() as usize;
                if after - ones <= i {
                    return k * 64 + select_in_word(w, (i - (after - ones)) as u32);
                }
                after -= ones;
            }
        }
        0
    }

    /// The offset of slot `i` (below `n`).
    #[inline]
    pub fn get(&self, buf: &[u8], i: usize) -> u64 {
        let high = (self.select(buf, i) - i) as u64;
        (high << self.low) | self.low_of(buf, i)
    }

    /// The offset of slot `i` (below `n`), its bit counted on from slot `i0` (at most `i`),
    /// whose bit is at `p0`: the words from `p0`'s to `i`'s, not those before.
    pub fn get_from(&self, buf: &[u8], i: usize, i0: usize, p0: usize) -> u64 {
        let high = self.high(buf);
        let mut k = p0 / 64;
        // The set bits from `p0` on; slot `i`'s is the `i - i0`-th of them.
        let mut w = high.get(k * 8..k * 8 + 8).map_or(0, le_word) & (u64::MAX << (p0 % 64));
        let mut left = i.saturating_sub(i0);
        loop {
            let ones = w.count_ones() as usize;
            if left < ones {
                let pos = k * 64 + select_in_word(w, left as u32);
                return ((pos.saturating_sub(i) as u64) << self.low) | self.low_of(buf, i);
            }
            left -= ones;
            k += 1;
            match high.get(k * 8..k * 8 + 8) {
                Some(chunk) => w = le_word(chunk),
                None => return self.get(buf, i),
            }
        }
    }

    /// Slots whose offset is at most `off`, counted on from slot `i0` whose bit is at `p0` and
    /// whose offset is at most `off` (or from `i0` 0 at `p0` 0, every slot): at least `i0`.
    pub fn rank_from(&self, buf: &[u8], off: u64, i0: usize, p0: usize) -> usize {
        let h = usize::try_from(off >> self.low).unwrap_or(usize::MAX);
        let high = self.high(buf);
        let word = |k: usize| high.get(k * 8..k * 8 + 8).map_or(0, le_word);
        // Slot `i0` has `p0 - i0` zeros before it: when that is `h`, the bucket starts at or
        // before it.
        let mut pos = p0;
        if h > p0 - i0 {
            match after_zero(high, h, p0 - i0, p0) {
                Some(at) => pos = at,
                None => return self.n,
            }
        }
        let mut i = pos - h;
        let low = off & ((1u64 << self.low) - 1);
        while i < self.n && (word(pos / 64) >> (pos % 64)) & 1 == 1 && self.low_of(buf, i) <= low {
            i += 1;
            pos += 1;
        }
        i
    }

    /// Slots `from..to` as (offset, count): their high parts from the set bits after slot
    /// `from`'s, then, in a second pass where the form has them, the low bits and the counts.
    pub fn decode(&self, buf: &[u8], from: usize, to: usize) -> Vec<(u64, u64)> {
        let to = to.min(self.n);
        let mut out = Vec::with_capacity(to.saturating_sub(from));
        if from >= to {
            return out;
        }
        let at = self.select(buf, from);
        let (mut i, mut mask) = (from, u64::MAX << (at % 64));
        'words: for (k, w) in self
            .high(buf)
            .chunks_exact(8)
            .map(le_word)
            .enumerate()
            .skip(at / 64)
        {
            let mut w = w & mask;
            mask = u64::MAX;
            while w != 0 {
                out.push(((k * 64 + w.trailing_zeros() as usize - i) as u64, 1));
                w &= w - 1;
                i += 1;
                if i == to {
                    break 'words;
                }
            }
        }
        if self.low > 0 || self.cb > 0 {
            for (i, slot) in (from..).zip(out.iter_mut()) {
                slot.0 = (slot.0 << self.low) | self.low_of(buf, i);
                if self.cb > 0 {
                    slot.1 = self.count(buf, i);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// `n` non-decreasing offsets, each 0 to `gap` past the one before, with counts of 1 to 20.
    fn random_slots(rng: &mut Rng, n: usize, gap: u64) -> Vec<(u64, u64)> {
        let mut off = 0u64;
        (0..n)
            .map(|_| {
                off += rng.range(0, gap + 1);
                (off, rng.range(1, 20))
            })
            .collect()
    }

    /// `slots` encoded in a buffer of exactly `plan`'s bytes, counts in `cb` bits (0: plain).
    fn encoded(slots: &[(u64, u64)], top: u64, cb: u32) -> (Ef, Vec<u8>) {
        let (ef, bytes) = plan(slots.len(), top, cb);
        let mut buf = vec![0u8; bytes];
        ef.encode(&mut buf, slots.iter().copied());
        (ef, buf)
    }

    /// Random non-decreasing slots of every density: get, rank, decode and counts against them.
    #[test]
    fn reads_what_it_wrote() {
        let mut rng = Rng::new(36);
        for (n, gap) in [
            (1, 0),
            (1, 5),
            (7, 1),
            (100, 0),
            (300, 3),
            (2000, 1000),
            (500, 1 << 40),
        ] {
            let slots = random_slots(&mut rng, n, gap);
            let top = slots.last().map_or(0, |s| s.0);
            for cb in [0, count_bits(19)] {
                let (ef, bytes) = plan(n, top, cb);
                let mut buf = vec![0u8; bytes + rng.range(0, 9) as usize];
                ef.encode(&mut buf, slots.iter().copied());
                let want: Vec<(u64, u64)> = slots
                    .iter()
                    .map(|&(o, c)| (o, if cb > 0 { c } else { 1 }))
                    .collect();
                assert_eq!(ef.decode(&buf, 0, n), want, "{n} {gap} {cb}");
                assert_eq!(ef.decode(&buf, n / 3, n / 2), want[n / 3..n / 2]);
                for (i, &(o, _)) in slots.iter().enumerate() {
                    assert_eq!(ef.get(&buf, i), o, "{n} {gap} slot {i}");
                }
                for _ in 0..200 {
                    let q = rng.range(0, top.max(1));
                    let want = slots.partition_point(|s| s.0 <= q);
                    assert_eq!(ef.rank_from(&buf, q, 0, 0), want, "{n} {gap} rank {q}");
                }
                if cb > 0 {
                    ef.set_count(&mut buf, n - 1, 1);
                    assert_eq!(ef.count(&buf, n - 1), 1);
                    assert_eq!(ef.get(&buf, n - 1), top);
                }
            }
        }
    }

    /// Sums of counts of every width up to 12 bits over ranges of every length, against the
    /// counts read one by one.
    #[test]
    fn count_sums_match_the_counts() {
        let mut rng = Rng::new(58);
        for cb in 1..=12u32 {
            let n = 300;
            let slots: Vec<(u64, u64)> = (0..n as u64)
                .map(|i| (i, rng.range(1, (1 << cb) + 1)))
                .collect();
            let (ef, buf) = encoded(&slots, n as u64, cb);
            for _ in 0..300 {
                let a = rng.range(0, n as u64 + 1) as usize;
                let b = rng.range(a as u64, n as u64 + 1) as usize;
                let want: u64 = (a..b).map(|i| ef.count(&buf, i)).sum();
                assert_eq!(ef.count_sum(&buf, a, b), want, "cb {cb} {a}..{b}");
            }
        }
    }

    /// The `k`-th set bit by clearing the ones below it, one a step.
    fn select_by_steps(mut w: u64, k: u32) -> usize {
        for _ in 0..k {
            w &= w - 1;
        }
        w.trailing_zeros() as usize
    }

    /// Every `k` of random words of every density and of the edge words, against the simple
    /// loop.
    #[test]
    fn selects_in_a_word_as_the_simple_loop() {
        let mut rng = Rng::new(58);
        let mut words = vec![
            1,
            1 << 63,
            u64::MAX,
            u64::MAX - 1,
            u64::MAX >> 1,
            TOPS,
            ONES,
        ];
        words.extend((0..64).map(|b| 1u64 << b));
        for _ in 0..2000 {
            // Words a quarter to three quarters set, and an eighth.
            let (a, b) = (rng.next(), rng.next());
            words.extend([a, a & b, a | b, a & b & rng.next()]);
        }
        for w in words.into_iter().filter(|&w| w != 0) {
            for k in 0..w.count_ones() {
                assert_eq!(select_in_word(w, k), select_by_steps(w, k), "{w:#x} {k}");
            }
        }
    }

    /// Ranks counted on from any slot (its bit at its high part plus its index) agree with ranks
    /// from the start, at the slot's offset, between slots and past the last; and every later
    /// slot's offset counted on from it is the slot's own.
    #[test]
    fn ranks_and_offsets_from_any_slot_as_from_the_start() {
        let mut rng = Rng::new(59);
        for (n, gap) in [
            (1, 0),
            (2, 0),
            (64, 1),
            (300, 0),
            (700, 3),
            (2048, 1),
            (500, 300),
        ] {
            let slots = random_slots(&mut rng, n, gap);
            let top = slots.last().map_or(0, |s| s.0);
            let (ef, buf) = encoded(&slots, top, 0);
            for i0 in (0..n).step_by(n / 50 + 1).chain([n - 1]) {
                let p0 = (slots[i0].0 >> ef.low) as usize + i0;
                let ends = [slots[i0].0, slots[n - 1].0, top + 5];
                for q in ends
                    .into_iter()
                    .chain((0..20).map(|_| rng.range(slots[i0].0, top + 1)))
                {
                    let want = slots.partition_point(|s| s.0 <= q);
                    assert_eq!(ef.rank_from(&buf, q, i0, p0), want, "{n} {gap} {i0} {q}");
                    assert_eq!(ef.rank_from(&buf, q, 0, 0), want, "{n} {gap} {q}");
                }
                // Every slot's offset counted on from slot `i0`'s bit, in the form counted too.
                for i in (i0..n).step_by(n / 64 + 1).chain([i0, n - 1]) {
                    assert_eq!(
                        ef.get_from(&buf, i, i0, p0),
                        slots[i].0,
                        "{n} {gap} {i0} {i}"
                    );
                }
            }
            let fives: Vec<(u64, u64)> = slots.iter().map(|s| (s.0, 5)).collect();
            let (ef, buf) = encoded(&fives, top, 3);
            for i in (0..n).step_by(n / 64 + 1).chain([n - 1]) {
                let i0 = i / 2;
                let p0 = (slots[i0].0 >> ef.low) as usize + i0;
                assert_eq!(
                    ef.get_from(&buf, i, i0, p0),
                    slots[i].0,
                    "{n} {gap} {i0} {i}"
                );
            }
        }
    }

    #[test]
    fn dense_slots_take_two_bits() {
        // 2048 offsets 1 apart: 2 bits each.
        let (ef, bytes) = plan(2048, 2047, 0);
        assert_eq!((ef.low, bytes), (0, 512));
        // 100 apart: 6 low bits and about 2.6 high bits each.
        let (ef, bytes) = plan(1000, 99_900, 0);
        assert_eq!(ef.low, 6);
        assert!(bytes <= 1100, "{bytes}");
    }
}
