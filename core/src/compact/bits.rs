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
//! end, a popcount each); counting the slots at or below an offset finds the end of its high
//! part's bucket (the same scan over zeros) and walks the bucket's slots.

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

/// Position of the `k`-th (0-based) set bit in `w` (which has more than `k`).
#[inline]
fn select_in_word(mut w: u64, k: u32) -> usize {
    for _ in 0..k {
        w &= w - 1;
    }
    w.trailing_zeros() as usize
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

    fn words(&self, buf: &[u8]) -> (usize, usize) {
        let at = high_at(self.n, self.low, self.cb);
        (at, buf.len().saturating_sub(at) / 8)
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
    fn select(&self, buf: &[u8], i: usize) -> usize {
        let (at, words) = self.words(buf);
        if i * 2 <= self.n {
            let mut seen = 0;
            for k in 0..words {
                let w = word_at(buf, at + k * 8);
                let ones = w.count_ones() as usize;
                if seen + ones > i {
                    return k * 64 + select_in_word(w, (i - seen) as u32);
                }
                seen += ones;
            }
        } else {
            // Counted from the end: the slot's bit is the `n - 1 - i`-th set bit from the top.
            let mut after = self.n;
            for k in (0..words).rev() {
                let w = word_at(buf, at + k * 8);
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

    /// Slots whose offset is at most `off` (`off` below the largest offset).
    pub fn rank(&self, buf: &[u8], off: u64) -> usize {
        let h = usize::try_from(off >> self.low).unwrap_or(usize::MAX);
        let (at, words) = self.words(buf);
        // The position just after the `h`-th zero: every slot before it has a smaller high part.
        let mut pos = 0;
        if h > 0 {
            let mut zeros = 0;
            let mut found = false;
            for k in 0..words {
                let w = !word_at(buf, at + k * 8);
                let z = w.count_ones() as usize;
                if zeros + z >= h {
                    pos = k * 64 + select_in_word(w, (h - 1 - zeros) as u32) + 1;
                    found = true;
                    break;
                }
                zeros += z;
            }
            if !found {
                return self.n;
            }
        }
        let mut i = pos - h;
        let low = off & ((1u64 << self.low) - 1);
        while i < self.n && bits_at(buf, at * 8 + pos, 1) == 1 && self.low_of(buf, i) <= low {
            i += 1;
            pos += 1;
        }
        i
    }

    /// Slots `from..to` as (offset, count) in one pass.
    pub fn decode(&self, buf: &[u8], from: usize, to: usize) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(to.saturating_sub(from));
        let (at, words) = self.words(buf);
        let mut i = 0;
        'words: for k in 0..words {
            let mut w = word_at(buf, at + k * 8);
            while w != 0 {
                if i >= to {
                    break 'words;
                }
                let pos = k * 64 + w.trailing_zeros() as usize;
                w &= w - 1;
                if i >= from {
                    let off = (((pos - i) as u64) << self.low) | self.low_of(buf, i);
                    let count = if self.cb > 0 { self.count(buf, i) } else { 1 };
                    out.push((off, count));
                }
                i += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

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
            let mut off = 0u64;
            let slots: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    off += rng.range(0, gap + 1);
                    (off, rng.range(1, 20))
                })
                .collect();
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
                    assert_eq!(ef.rank(&buf, q), want, "{n} {gap} rank {q}");
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
            let (ef, bytes) = plan(n, n as u64, cb);
            let mut buf = vec![0u8; bytes];
            ef.encode(&mut buf, slots.iter().copied());
            for _ in 0..300 {
                let a = rng.range(0, n as u64 + 1) as usize;
                let b = rng.range(a as u64, n as u64 + 1) as usize;
                let want: u64 = (a..b).map(|i| ef.count(&buf, i)).sum();
                assert_eq!(ef.count_sum(&buf, a, b), want, "cb {cb} {a}..{b}");
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
