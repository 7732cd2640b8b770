//! A block's sealed form: sealing it into bits (`bits`, Elias-Fano) and back, opening it for edits
//! in bytes, and the edits of a sealed block (an insert decodes, edits and seals it again; a
//! removal settles it, encoded again from its live slots once it holds less than three quarters of
//! those it encodes).

use super::super::bits::{count_bits, plan};
use super::super::heap::size_class;
use super::{BLOCK_BYTES, Block, runs, width_for, zeroed};

impl Block {
    /// A sealed block after a removal: emptied, back to an empty byte block; holding less than
    /// three quarters of the slots it encodes, encoded again from its live slots (so each
    /// re-encoding follows removals of a quarter of its slots or more).
    pub(super) fn settle_sealed(&mut self) {
        if self.is_empty() {
            *self = Block::laid(&[], self.first, 1, 1, 0);
        } else if self.slots() * 4 < usize::from(self.ef_n) * 3 {
            // A plain block's slots decoded once, for either path.
            let merged = if self.counted() {
                self.slot_runs()
            } else {
                let live = self.decoded();
                if let Some(block) = Block::resealed_distinct(&live) {
                    *self = block;
                    return;
                }
                runs(live.iter().map(|s| s.0))
            };
            if let Some(mut block) = Block::best(&merged, None, 0) {
                block.seal();
                *self = block;
            }
        }
    }

    /// A plain sealed block's `live` slots, when its timestamps are all distinct, encoded again
    /// straight from them: the block `Block::best` then `seal` make of them, without the byte
    /// form between. None when they are not distinct, or where that block stays in the byte form.
    pub(super) fn resealed_distinct(live: &[(u64, u64)]) -> Option<Block> {
        let (first, last) = (live.first()?.0, live.last()?.0);
        if live.windows(2).any(|p| p[0].0 >= p[1].0) {
            return None;
        }
        let (len, width) = (live.len(), width_for(last - first));
        if len > usize::from(u16::MAX) || len * width > BLOCK_BYTES {
            return None;
        }
        let (ef, bytes) = plan(len, last - first, 0);
        if size_class(bytes) >= size_class(len * width) {
            return None;
        }
        let mut buf = zeroed(size_class(bytes));
        ef.encode(&mut buf, live.iter().map(|&(t, _)| (t - first, 1)));
        Some(Block {
            first,
            base: first,
            buf,
            len: len as u32,
            len_hi: 0,
            start: 0,
            slots: ef.n as u16,
            width: width as u8,
            cw: 0,
            ef_n: ef.n as u16,
            low: ef.low as u8,
            cb: 0,
        })
    }

    /// An insert into a sealed block: decoded, edited and sealed again when the result fits a
    /// block (O(block)); false leaves it untouched.
    pub(super) fn insert_sealed(&mut self, p: usize, ts: u64, n: usize) -> bool {
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
        self.set_open(false);
        if self.sealed() || self.is_empty() {
            return;
        }
        // A counted block's slots decoded once; a plain one's read in place, a request each.
        let slots = self.counted().then(|| self.decoded());
        let (first, len) = (self.first, self.len());
        let top = self.last() - first;
        let most = slots.iter().flatten().map(|s| s.1).max().unwrap_or(1);
        let distinct = slots.as_ref().map_or(len, Vec::len);
        let limit = usize::from(u16::MAX);
        let plain = (len <= limit).then(|| plan(len, top, 0));
        let counted =
            (most > 1 && distinct <= limit).then(|| plan(distinct, top, count_bits(most)));
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
        match &slots {
            None => ef.encode(&mut buf, (0..len).map(|s| (self.slot(s) - first, 1))),
            Some(slots) if ef.cb == 0 => {
                let each = slots
                    .iter()
                    .flat_map(|&(t, c)| std::iter::repeat_n((t - first, 1), c as usize));
                ef.encode(&mut buf, each);
            }
            Some(slots) => ef.encode(&mut buf, slots.iter().map(|&(t, c)| (t - first, c))),
        }
        *self = Block {
            first,
            base: first,
            buf,
            len: len as u32,
            len_hi: (len >> 32) as u16,
            start: 0,
            slots: ef.n as u16,
            width: self.width,
            cw: self.cw,
            ef_n: ef.n as u16,
            low: ef.low as u8,
            cb: ef.cb as u8,
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
        self.set_open(!self.sealed() && !self.is_empty());
    }

    /// Whether the block is open (see `open`).
    pub fn is_open(&self) -> bool {
        self.low & super::OPEN != 0
    }

    /// Marks the block open or not.
    pub(super) fn set_open(&mut self, open: bool) {
        self.low = if open {
            self.low | super::OPEN
        } else {
            self.low & !super::OPEN
        };
    }
}
