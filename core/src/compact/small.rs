//! The smallest logs, free of Redis: up to `MAX_LEN` timestamps bit-packed inside the value (13
//! bytes) or in one small buffer (32 or 64 bytes): the first timestamp in 54 bits, then each
//! one's distance from the one before in the fewest bits the largest distance needs (none for
//! copies of one timestamp). A log of one timestamp, however many copies up to `MAX_LEN`, is
//! also one word (`word`), which the data type keeps in its pointer's place.
//!
//! Every operation decodes the whole log (at most `MAX_LEN` timestamps): a constant.

/// Timestamps a small log holds at most.
pub const MAX_LEN: usize = 64;
/// Bits of the first timestamp: every timestamp is at most 2^53.
const BASE_BITS: usize = 54;
/// Bytes of bits inside the value.
const INLINE: usize = 13;

/// A small log: `len` timestamps, the first in `BASE_BITS` bits, then `len - 1` distances of
/// `width` bits each, least significant bit first.
#[derive(Debug, Clone)]
pub enum Small {
    Inline {
        len: u8,
        width: u8,
        bits: [u8; INLINE],
    },
    Buf32 {
        len: u8,
        width: u8,
        bits: Box<[u8; 32]>,
    },
    Buf64 {
        len: u8,
        width: u8,
        bits: Box<[u8; 64]>,
    },
}

impl Default for Small {
    fn default() -> Self {
        Small::Inline {
            len: 0,
            width: 0,
            bits: [0; INLINE],
        }
    }
}

fn mask(w: usize) -> u64 {
    match w {
        0 => 0,
        64.. => u64::MAX,
        w => (1u64 << w) - 1,
    }
}

/// The `w` bits (at most 57) of `bits` from bit `at`: one 8-byte load where 8 bytes remain.
#[inline]
fn take(bits: &[u8], at: usize, w: usize) -> u64 {
    let byte = at / 8;
    let word = match bits
        .get(byte..byte + 8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
    {
        Some(word) => word,
        None => tail(bits, byte),
    };
    (u64::from_le_bytes(word) >> (at % 8)) & mask(w)
}

/// The bytes of `bits` from `byte` on, fewer than 8, zero-padded to 8.
#[cold]
fn tail(bits: &[u8], byte: usize) -> [u8; 8] {
    let mut word = [0u8; 8];
    let end = (byte + 8).min(bits.len());
    if let (Some(to), Some(from)) = (
        word.get_mut(..end.saturating_sub(byte)),
        bits.get(byte..end),
    ) {
        to.copy_from_slice(from);
    }
    word
}

/// Writes `v` (below 2^`w`, `w` at most 57) into the `w` bits of `bits` from bit `at`.
fn put(bits: &mut [u8], at: usize, w: usize, v: u64) {
    let byte = at / 8;
    let end = (byte + 8).min(bits.len());
    let Some(span) = bits.get_mut(byte..end) else {
        return;
    };
    let mut word = [0u8; 8];
    if let Some(to) = word.get_mut(..span.len()) {
        to.copy_from_slice(span);
    }
    let shift = at % 8;
    let old = u64::from_le_bytes(word) & !(mask(w) << shift);
    let new = (old | ((v & mask(w)) << shift)).to_le_bytes();
    if let Some(from) = new.get(..span.len()) {
        span.copy_from_slice(from);
    }
}

/// Bits a value up to `v` needs.
fn bits_for(v: u64) -> usize {
    (u64::BITS - v.leading_zeros()) as usize
}

impl Small {
    fn parts(&self) -> (usize, usize, &[u8]) {
        match self {
            Small::Inline { len, width, bits } => (*len as usize, *width as usize, &bits[..]),
            Small::Buf32 { len, width, bits } => (*len as usize, *width as usize, &bits[..]),
            Small::Buf64 { len, width, bits } => (*len as usize, *width as usize, &bits[..]),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.parts().0
    }

    /// Every timestamp, oldest first.
    #[inline(never)]
    pub fn values(&self) -> Vec<u64> {
        let mut all = [0; MAX_LEN];
        let len = self.decode(&mut all);
        all.get(..len).unwrap_or_default().to_vec()
    }

    /// The `i`-th oldest (0-based).
    #[inline(never)]
    pub fn get(&self, i: usize) -> Option<u64> {
        let (len, w, bits) = self.parts();
        if i >= len {
            return None;
        }
        let mut t = take(bits, 0, BASE_BITS);
        for k in 0..i {
            t += take(bits, BASE_BITS + k * w, w);
        }
        Some(t)
    }

    #[inline(never)]
    pub fn newest(&self) -> Option<u64> {
        self.get(self.len().checked_sub(1)?)
    }

    /// Timestamps at or before `t`: decoded from the oldest until one is later, nothing
    /// allocated.
    #[inline(never)]
    pub fn count_le(&self, t: u64) -> usize {
        let (len, w, bits) = self.parts();
        if len == 0 {
            return 0;
        }
        let mut ts = take(bits, 0, BASE_BITS);
        let mut i = 0;
        while ts <= t {
            i += 1;
            if i == len {
                break;
            }
            ts += take(bits, BASE_BITS + (i - 1) * w, w);
        }
        i
    }

    /// The bits of its form, its length and width, to write in place.
    fn parts_mut(&mut self) -> (&mut u8, &mut u8, &mut [u8]) {
        match self {
            Small::Inline { len, width, bits } => (len, width, &mut bits[..]),
            Small::Buf32 { len, width, bits } => (len, width, &mut bits[..]),
            Small::Buf64 { len, width, bits } => (len, width, &mut bits[..]),
        }
    }

    /// Appends `n` copies of `ts`, at or after the newest, in place when its distance from the
    /// newest takes no more bits than the others' and the form has room: what `fit` would
    /// write for the whole log then, byte for byte (the same form, the same width). False
    /// leaves it untouched.
    fn append_in_place(&mut self, ts: u64, n: usize) -> bool {
        let Some(newest) = self.newest().filter(|newest| ts >= *newest) else {
            return false;
        };
        let (len, width, bits) = self.parts_mut();
        let (at, w) = (usize::from(*len), usize::from(*width));
        if bits_for(ts - newest) > w || BASE_BITS + (at + n - 1) * w > 8 * bits.len() {
            return false;
        }
        put(bits, BASE_BITS + (at - 1) * w, w, ts - newest);
        // The copies after the first are 0 apart: bits already clear.
        *len += n as u8;
        true
    }

    /// Bytes of heap it owns: its buffer, if any.
    #[inline]
    pub fn heap_bytes(&self) -> usize {
        match self {
            Small::Inline { .. } => 0,
            Small::Buf32 { .. } => 32,
            Small::Buf64 { .. } => 64,
        }
    }

    /// The small form of `ts` (sorted, each at most 2^53), if it fits one: at most `MAX_LEN`,
    /// and their distances in the bits of the largest buffer. The first of the three forms that
    /// holds them.
    pub fn fit(ts: &[u64]) -> Option<Small> {
        let mut s = Small::default();
        s.refit(ts).then_some(s)
    }

    /// Becomes `fit(ts)`, written into its own form when that is the one `fit` chooses (no
    /// allocation); false, when none holds them, leaves it untouched.
    fn refit(&mut self, ts: &[u64]) -> bool {
        if ts.len() > MAX_LEN {
            return false;
        }
        let width = ts
            .windows(2)
            .map(|p| bits_for(p[1] - p[0]))
            .max()
            .unwrap_or(0);
        let need = match ts.len() {
            0 => 0,
            n => BASE_BITS + (n - 1) * width,
        };
        let bytes = match need.div_ceil(8) {
            0..=INLINE => INLINE,
            14..=32 => 32,
            33..=64 => 64,
            _ => return false,
        };
        if self.parts().2.len() != bytes {
            *self = match bytes {
                INLINE => Small::default(),
                32 => Small::Buf32 {
                    len: 0,
                    width: 0,
                    bits: Box::new([0; 32]),
                },
                _ => Small::Buf64 {
                    len: 0,
                    width: 0,
                    bits: Box::new([0; 64]),
                },
            };
        }
        let (len, w, bits) = self.parts_mut();
        (*len, *w) = (ts.len() as u8, width as u8);
        bits.fill(0);
        if let Some(&first) = ts.first() {
            put(bits, 0, BASE_BITS, first);
            for (i, p) in ts.windows(2).enumerate() {
                put(bits, BASE_BITS + i * width, width, p[1] - p[0]);
            }
        }
        true
    }

    /// Its timestamps into `out`, oldest first; how many.
    fn decode(&self, out: &mut [u64; MAX_LEN]) -> usize {
        let (len, w, bits) = self.parts();
        let mut t = take(bits, 0, BASE_BITS);
        for (i, slot) in out.iter_mut().take(len).enumerate() {
            if i > 0 {
                t += take(bits, BASE_BITS + (i - 1) * w, w);
            }
            *slot = t;
        }
        len.min(MAX_LEN)
    }

    /// Adds `n` copies of `ts` (at most 2^53) after every equal one, if the result fits a small
    /// form; false leaves it untouched.
    pub fn add(&mut self, ts: u64, n: u64) -> bool {
        let Some(n) = usize::try_from(n)
            .ok()
            .filter(|n| self.len() + n <= MAX_LEN)
        else {
            return false;
        };
        if self.append_in_place(ts, n) {
            return true;
        }
        let mut all = [0; MAX_LEN];
        let len = self.decode(&mut all);
        let p = all[..len].partition_point(|t| *t <= ts);
        all.copy_within(p..len, p + n);
        all[p..p + n].fill(ts);
        self.refit(&all[..len + n])
    }

    /// Removes positions `a..b` (oldest first).
    pub fn remove(&mut self, a: usize, b: usize) {
        let mut all = [0; MAX_LEN];
        let len = self.decode(&mut all);
        let b = b.min(len);
        let a = a.min(b);
        all.copy_within(b..len, a);
        // Fewer timestamps, none farther apart: they fit.
        self.refit(&all[..len - (b - a)]);
    }

    /// Hands its buffer, if any, to `mover`.
    pub fn move_buffer(&mut self, mover: &mut impl super::heap::Mover) {
        match self {
            Small::Inline { .. } => {}
            Small::Buf32 { bits, .. } => mover.boxed(bits),
            Small::Buf64 { bits, .. } => mover.boxed(bits),
        }
    }

    /// The log as one word below 2^60, when it holds copies of one timestamp: the timestamp in
    /// its low 54 bits, the copies less one above.
    #[inline]
    pub fn word(&self) -> Option<u64> {
        match self {
            Small::Inline {
                len: len @ 1..,
                width: 0,
                bits,
            } => Some(take(bits, 0, BASE_BITS) | (u64::from(*len - 1) << BASE_BITS)),
            _ => None,
        }
    }

    /// The log `word` gave; None for a word it never gives.
    pub fn from_word(word: u64) -> Option<Small> {
        let (ts, copies) = (word & mask(BASE_BITS), (word >> BASE_BITS) + 1);
        let copies = usize::try_from(copies).ok().filter(|n| *n <= MAX_LEN)?;
        (ts <= 1 << 53).then(|| Small::fit(&vec![ts; copies]))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fewest_bytes_that_hold_them() {
        let t = 1_700_000_000_000u64;
        // (timestamps, heap bytes): 5 a second apart inside the value, 20 in 32 bytes.
        let every = |n: u64, gap: u64| (0..n).map(|i| t + i * gap).collect::<Vec<_>>();
        for (ts, heap) in [
            (vec![], 0),
            (vec![t], 0),
            (every(5, 1000), 0),
            (every(20, 1000), 32),
            (every(40, 1000), 64),
            (every(64, 1), 32),
            (vec![t; 64], 0),
            (vec![0, 1 << 53], 32),
        ] {
            let s = Small::fit(&ts).unwrap();
            assert_eq!(s.heap_bytes(), heap, "{} timestamps", ts.len());
            assert_eq!(s.values(), ts);
            for (i, v) in ts.iter().enumerate() {
                assert_eq!(s.get(i), Some(*v));
            }
        }
        assert!(Small::fit(&every(50, 1000)).is_none());
        assert!(Small::fit(&every(65, 0)).is_none());
    }

    #[test]
    fn adds_and_removals_match_a_vector() {
        let mut rng = crate::rng::Rng::new(11);
        for scale in [0u64, 3, 1000, 1 << 40] {
            let mut s = Small::default();
            let mut model: Vec<u64> = Vec::new();
            for step in 0..5_000 {
                if rng.range(0, 2) == 0 {
                    // Half of them appended after the newest (in place when they fit it).
                    let ts = match model.last() {
                        Some(&last) if rng.range(0, 2) == 0 => last + rng.range(0, scale / 4 + 1),
                        _ => (1 << 52) + rng.range(0, scale + 1),
                    };
                    let n = rng.range(1, 4);
                    let mut want = model.clone();
                    let p = want.partition_point(|t| *t <= ts);
                    want.splice(p..p, std::iter::repeat_n(ts, n as usize));
                    let fits = Small::fit(&want).is_some();
                    assert_eq!(s.add(ts, n), fits, "step {step}");
                    if fits {
                        model = want;
                    }
                } else if !model.is_empty() {
                    let a = rng.range(0, model.len() as u64) as usize;
                    let b = (a + rng.range(1, 4) as usize).min(model.len());
                    s.remove(a, b);
                    model.drain(a..b);
                }
                assert_eq!(s.values(), model, "step {step}");
                // Byte for byte the form `fit` writes, however it was reached.
                let fitted = Small::fit(&model).map(|f| format!("{f:?}"));
                assert_eq!(Some(format!("{s:?}")), fitted, "step {step}");
                for t in [1 << 52, (1 << 52) + scale / 2, (1 << 52) + scale] {
                    assert_eq!(s.count_le(t), model.partition_point(|x| *x <= t));
                }
            }
        }
    }

    #[test]
    fn copies_of_one_timestamp_are_one_word() {
        for (ts, n) in [(0u64, 1usize), (1 << 53, 1), (1_700_000_000_000, MAX_LEN)] {
            let s = Small::fit(&vec![ts; n]).unwrap();
            let word = s.word().unwrap();
            assert!(word < 1 << 60);
            assert_eq!(Small::from_word(word).unwrap().values(), vec![ts; n]);
        }
        assert!(Small::default().word().is_none());
        assert!(Small::fit(&[1, 2]).unwrap().word().is_none());
        // Words it never gives.
        assert!(Small::from_word((1 << 53) + 1).is_none());
        assert!(Small::from_word(u64::MAX >> 1).is_none());
    }
}
