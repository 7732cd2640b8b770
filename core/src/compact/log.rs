//! The compact log itself, free of Redis: the timestamps of logged requests, oldest first.
//!
//! A few requests (up to `small::MAX_LEN`) live bit-packed inside the value itself or in one small
//! buffer (`small`), one timestamp's copies in a word the data type keeps in its pointer's place.
//! Past that, the log is a row of sorted blocks (`block`), each with its own base and slot width,
//! in an order-statistic B-tree (`index`) whose nodes keep their subtrees' counts and bytes.
//!
//! Every operation costs O(log N + M) for M timestamps removed, wherever it lands: a walk down the
//! tree finds the block holding a time or a rank, then a search inside the block (an append at the
//! log's end, the common call, goes straight to the last block); an insert changes
//! one block in place, or splits it into blocks with room on both sides, which enter the tree in
//! O(log B) for B blocks; a late insert into a sealed block with room opens it (back in bytes until
//! a late insert opens a third block, which seals again the open one farther from it), so that
//! inserts in a row into one block, or into two neighbours, decode and seal each once, and two
//! blocks at most are open; a removal cuts at most two blocks and takes out the whole blocks
//! between, each in O(log B) (a block holds hundreds of timestamps or more, but for the few that a
//! split or a removal leaves small). Blocks come and go with hysteresis, so that one request added
//! and taken back at a block's edge makes no block appear and vanish each time: an append past a
//! full last block opens a new block, which stays, emptied, while the block before it is full; a
//! split leaves two blocks with room; two blocks merge only once together they fit half a block. A
//! log rebuilt from sorted timestamps (an RDB load, RESTORE) packs its blocks full in one pass and
//! builds the tree bottom-up.

use super::block::{BLOCK_BYTES, Block, MAX_LEN, fits_runs};
use super::heap::{Mover, size_class};
use super::index::{Item, Iter, Tree};
use super::small::Small;

/// Largest timestamp a log holds: every argument is at most 2^53.
pub const MAX_TS: u64 = 1 << 53;

/// A log in blocks goes back to a small form once it holds this many timestamps or fewer (and
/// they fit one): half of `small::MAX_LEN`, so that one request coming and going at a form's
/// edge does not move the log between the two each time.
const BACK_TO_SMALL: usize = super::small::MAX_LEN / 2;

/// Blocks open for late inserts at most (see `Blocks::open`).
const OPEN_MAX: usize = 2;

impl Item for Block {
    fn count(&self) -> u64 {
        self.len() as u64
    }

    fn heap(&self) -> usize {
        self.buf_bytes()
    }

    fn key(&self) -> u64 {
        self.first()
    }

    fn marked(&self) -> bool {
        self.is_open()
    }

    fn move_heap(&mut self, mover: &mut impl Mover) {
        self.move_buffer(mover);
    }
}

/// Blocks holding `runs` (sorted timestamps and their counts): the fewest equal shares of the
/// runs that each fit a block, so that a split leaves room on both sides.
fn pack(runs: &[(u64, u64)]) -> Vec<Block> {
    let mut k = 1;
    while k < runs.len() {
        let share = runs.len().div_ceil(k);
        let blocks: Option<Vec<Block>> = runs
            .chunks(share)
            .map(|c| Block::best(c, None, 0).map(sealed))
            .collect();
        if let Some(blocks) = blocks {
            return blocks;
        }
        k += 1;
    }
    runs.iter().flat_map(|&(ts, n)| runs_of(ts, n)).collect()
}

/// `block` in the sealed form (when that is smaller).
fn sealed(mut block: Block) -> Block {
    block.seal();
    block
}

/// `n` copies of `ts` as full counted blocks (one, up to `MAX_LEN`; 33 at 2^53).
fn runs_of(ts: u64, n: u64) -> Vec<Block> {
    let full = (n / MAX_LEN as u64) as usize;
    let rest = (n % MAX_LEN as u64) as usize;
    let mut blocks: Vec<Block> = Vec::with_capacity(full + 1);
    blocks.extend((0..full).map(|_| Block::run(ts, MAX_LEN)));
    if rest > 0 {
        blocks.push(Block::run(ts, rest));
    }
    blocks
}

/// Builds a log from sorted timestamps in one pass: each block as full as its width and form
/// allow, then the tree over them bottom-up.
#[derive(Default)]
pub struct Builder {
    blocks: Vec<Block>,
    run: Vec<u64>,
    /// Distinct timestamps in `run`, requests on its last one, and the most on any.
    slots: usize,
    last_count: usize,
    most: usize,
}

impl Builder {
    /// Appends `ts`, at or after every timestamp pushed before.
    pub fn push(&mut self, ts: u64) {
        let same = self.run.last() == Some(&ts);
        let slots = self.slots + usize::from(!same);
        let count = if same { self.last_count + 1 } else { 1 };
        if let Some(&lo) = self.run.first()
            && !fits_runs(
                self.run.len() + 1,
                slots,
                ts.saturating_sub(lo),
                self.most.max(count),
            )
        {
            self.blocks.push(sealed(Block::from_sorted(&self.run)));
            self.run.clear();
            (self.slots, self.last_count, self.most) = (0, 0, 0);
        }
        let same = self.run.last() == Some(&ts);
        self.slots += usize::from(!same);
        self.last_count = if same { self.last_count + 1 } else { 1 };
        self.most = self.most.max(self.last_count);
        self.run.push(ts);
    }

    pub fn finish(self) -> CompactLog {
        let repr = match Small::fit(&self.run) {
            Some(small) if self.blocks.is_empty() => Repr::Small(small),
            _ => Repr::Blocks(Box::new(self.into_blocks())),
        };
        CompactLog { repr }
    }

    fn into_blocks(mut self) -> Blocks {
        if !self.run.is_empty() {
            self.blocks.push(Block::from_sorted(&self.run));
        }
        Blocks {
            tree: Tree::from_vec(self.blocks),
        }
    }
}

/// Builds a log from sorted runs of equal timestamps in one pass, O(runs): each block as full as
/// its width and form allow (a count above a block's `MAX_LEN` in full blocks of its own), then
/// the tree over them bottom-up. A log of few requests goes through `Builder`, for its small form.
#[derive(Default)]
pub struct RunBuilder {
    blocks: Vec<Block>,
    run: Vec<(u64, u64)>,
    /// Requests in `run`, and the most on one timestamp.
    len: u64,
    most: u64,
}

impl RunBuilder {
    /// Appends `n` (at least 1) copies of `ts`, after every timestamp pushed before.
    pub fn push(&mut self, ts: u64, n: u64) {
        if n == 0 {
            return;
        }
        if n > MAX_LEN as u64 {
            self.flush();
            self.blocks.extend(runs_of(ts, n).into_iter().map(sealed));
            return;
        }
        if let Some(&(lo, _)) = self.run.first()
            && !fits_runs(
                (self.len + n) as usize,
                self.run.len() + 1,
                ts.saturating_sub(lo),
                self.most.max(n) as usize,
            )
        {
            self.flush();
        }
        self.run.push((ts, n));
        self.len += n;
        self.most = self.most.max(n);
    }

    fn flush(&mut self) {
        if let Some(block) = Block::best(&self.run, None, 0) {
            self.blocks.push(sealed(block));
        }
        self.run.clear();
        (self.len, self.most) = (0, 0);
    }

    pub fn finish(mut self) -> CompactLog {
        let total = self.len + self.blocks.iter().map(|b| b.len() as u64).sum::<u64>();
        if total as usize <= super::small::MAX_LEN {
            // Few requests (in blocks already where blocks are tiny, under the fuzzer): the
            // one-by-one builder, for its small form.
            let mut builder = Builder::default();
            for ts in self.blocks.iter().flat_map(Block::values) {
                builder.push(ts);
            }
            for (ts, n) in self.run {
                for _ in 0..n {
                    builder.push(ts);
                }
            }
            return builder.finish();
        }
        if !self.run.is_empty()
            && let Some(block) = Block::best(&self.run, None, 0)
        {
            self.blocks.push(block);
        }
        CompactLog {
            repr: Repr::Blocks(Box::new(Blocks {
                tree: Tree::from_vec(self.blocks),
            })),
        }
    }
}

/// The blocks of a log too large for a small form, in their tree. At most one block is empty: the
/// last, kept for the next append while the block before it is full.
#[derive(Debug, Clone)]
struct Blocks {
    tree: Tree<Block>,
}

impl Blocks {
    #[inline]
    fn len(&self) -> u64 {
        self.tree.count()
    }

    /// The `k`-th oldest (0-based).
    fn get(&self, k: u64) -> Option<u64> {
        let (_, at, block) = self.tree.find_rank(k)?;
        Some(block.get(at as usize))
    }

    #[inline]
    fn newest(&self) -> Option<u64> {
        let last = self.tree.last()?;
        if !last.is_empty() {
            return Some(last.last());
        }
        let before = self.tree.get(self.tree.items().checked_sub(2)?)?;
        (!before.is_empty()).then(|| before.last())
    }

    /// Timestamps at or before `t`.
    #[inline]
    fn count_le(&self, t: u64) -> u64 {
        match self.tree.find_key(t) {
            Some((_, before, block)) => before + block.count_le(t) as u64,
            None => 0,
        }
    }

    /// `count_le`, searched from the front of the first block: its count when a timestamp of
    /// it is past `t`, else through the tree.
    #[inline]
    fn count_le_front(&self, t: u64) -> u64 {
        match self
            .tree
            .first()
            .map(|block| (block.count_le_front(t), block.len()))
        {
            Some((n, len)) if n < len => n as u64,
            _ => self.count_le(t),
        }
    }

    /// The common add, an append at the log's end that the last block takes in bytes as it is:
    /// no search, no re-layout. False: nothing changed, and `add` applies.
    #[inline]
    fn append(&mut self, ts: u64, n: u64) -> bool {
        usize::try_from(n).is_ok_and(|m| self.tree.edit_last(|b| b.append(ts, m)) == Some(true))
    }

    /// Adds `n` copies of `ts` after every equal one, where `append` does not.
    fn add(&mut self, ts: u64, n: u64) {
        let Some((i, _, block)) = self.tree.find_key(ts) else {
            self.tree = Tree::from_vec(runs_of(ts, n));
            return;
        };
        let last = i + 1 == self.tree.items();
        if last && block.sealed() {
            // The last block takes appends in the byte form.
            self.tree.edit(i, Block::unseal);
        } else if block.sealed() && !block.is_full() {
            self.open(i);
        }
        let Some(mut block) = self.tree.get(i) else {
            return;
        };
        let small = usize::try_from(n).ok().filter(|n| *n <= MAX_LEN);
        if let Some(m) = small
            && block.counted_in_bytes()
        {
            if self.tree.edit(i, |b| b.add_run(ts, m)) == Some(true) {
                return;
            }
            let Some(after) = self.tree.get(i) else {
                return;
            };
            block = after;
        }
        let p = block.count_le(ts);
        let at_end = p == block.len();
        let empty = block.is_empty();
        if let Some(m) = small {
            if self.tree.edit(i, |b| b.insert(p, ts, m)) == Some(true) {
                return;
            }
            // Between two blocks: the front of the next may have room.
            if at_end
                && !last
                && self
                    .tree
                    .get(i + 1)
                    .is_some_and(|b| b.sealed() && !b.is_full())
            {
                self.open(i + 1);
            }
            if at_end && !last && self.tree.edit(i + 1, |b| b.insert(0, ts, m)) == Some(true) {
                return;
            }
        }
        if at_end && last && !empty {
            // An append past a full last block starts a new one, leaving the others full and
            // sealed.
            self.tree.edit(i, Block::seal);
            self.tree.insert(i + 1, runs_of(ts, n));
            return;
        }
        // The block gives way to blocks holding it and the new timestamps, with room in each.
        let Some(block) = self.tree.get(i) else {
            return;
        };
        let len = block.len();
        let mut fresh = match small {
            Some(m) if len + m <= MAX_LEN => pack(&block.runs_with(p, ts, m, 0, 0)),
            _ => {
                let mut fresh = pack(&block.runs_with(0, 0, 0, p, len));
                fresh.extend(runs_of(ts, n));
                fresh.extend(pack(&block.runs_with(0, 0, 0, 0, p)));
                fresh
            }
        };
        let rest = fresh.split_off(1.min(fresh.len()));
        if let Some(first) = fresh.pop() {
            self.tree.edit(i, |b| *b = first);
        }
        self.tree.insert(i + 1, rest);
    }

    /// Opens block `i` (sealed) for a late insert: it is edited in bytes from now on, so that
    /// inserts into it cost what they cost in the last block. With `OPEN_MAX` blocks open
    /// already, the one farther from `i` of the first and the last open is sealed again first.
    /// So a block is decoded and sealed once for any number of inserts in a row into it, or
    /// into it and a neighbour (at the edge between two blocks).
    fn open(&mut self, i: usize) {
        if self.tree.marked() >= OPEN_MAX {
            let ends = [false, true].map(|last| self.tree.find_marked(last));
            if let Some(k) = ends.into_iter().flatten().max_by_key(|k| k.abs_diff(i)) {
                self.tree.edit(k, Block::seal);
            }
        }
        self.tree.edit(i, Block::open);
    }

    /// Removes the timestamps `a..b` (0-based positions, oldest first).
    fn remove(&mut self, a: u64, b: u64) {
        let b = b.min(self.len());
        if a >= b {
            return;
        }
        // A cut inside the first block (a trim of the oldest) needs no rank search.
        let ranks = if self.tree.first().is_some_and(|x| b <= x.len() as u64) {
            Some(((0, a), (0, b - 1)))
        } else {
            match (self.tree.find_rank(a), self.tree.find_rank(b - 1)) {
                (Some((i, pa, _)), Some((j, pb, _))) => Some(((i, pa), (j, pb))),
                _ => None,
            }
        };
        let Some(((i, pa), (j, pb))) = ranks else {
            return;
        };
        let (pa, pb) = (pa as usize, pb as usize);
        // Whether a block the cut leaves may go or merge: emptied, or within half a block.
        let small = |b: &Block| b.bytes() <= BLOCK_BYTES / 2;
        let left_small = if i == j {
            self.tree.edit(i, |block| {
                block.remove(pa, pb + 1);
                small(block)
            })
        } else {
            let right = self.tree.edit(j, |block| {
                block.remove(0, pb + 1);
                small(block)
            });
            let left = self.tree.edit(i, |block| {
                block.remove(pa, block.len());
                small(block)
            });
            // The whole blocks between, each out of the tree in O(log B).
            for _ in i + 1..j {
                self.tree.remove(i + 1);
            }
            Some(left == Some(true) || right == Some(true))
        };
        // Nothing to tidy when the cut left its blocks large (none emptied, none to merge) and
        // no last block is kept empty (the common trim and refund: most of a block stays), nor
        // in a log of one block (it has no neighbour; emptied, the log goes back to the small
        // form).
        if self.tree.items() > 1
            && (left_small == Some(true) || self.tree.last().is_some_and(Block::is_empty))
        {
            self.tidy(i);
        }
    }

    /// After a cut through blocks `i` and `i + 1`: emptied blocks go (the last stays while the
    /// one before it is full), and where the cut ended, blocks that fit half a block merge.
    fn tidy(&mut self, i: usize) {
        for k in [i + 1, i] {
            if !self.tree.get(k).is_some_and(Block::is_empty) {
                continue;
            }
            let n = self.tree.items();
            let keep = k + 1 == n && k > 0 && self.tree.get(k - 1).is_some_and(Block::is_full);
            if !keep {
                self.tree.remove(k);
            }
        }
        // A last block kept empty goes once the block before it has room again.
        let n = self.tree.items();
        if n >= 2
            && self.tree.last().is_some_and(Block::is_empty)
            && self.tree.get(n - 2).is_some_and(|b| !b.is_full())
        {
            self.tree.remove(n - 1);
        }
        let at = i.min(self.tree.items().saturating_sub(1));
        for k in [at + 1, at] {
            self.merge(k);
        }
    }

    /// Merges blocks `k - 1` and `k` when together they fit half a block.
    fn merge(&mut self, k: usize) {
        let half = |b: &Block| !b.is_empty() && b.bytes() <= BLOCK_BYTES / 2;
        let Some(b) = self.tree.get(k).filter(|b| half(b)) else {
            return;
        };
        let Some(a) = k
            .checked_sub(1)
            .and_then(|j| self.tree.get(j))
            .filter(|a| half(a))
        else {
            return;
        };
        let Some(merged) = Block::merged(a, b, BLOCK_BYTES / 2) else {
            return;
        };
        self.tree.remove(k);
        self.tree.edit(k - 1, |x| *x = sealed(merged));
    }

    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.tree.iter().flat_map(Block::values)
    }

    /// Heap bytes: the tree (its nodes and blocks) and the box holding it.
    #[inline]
    fn heap_bytes(&self) -> usize {
        size_class(size_of::<Blocks>()) + self.tree.heap()
    }
}

#[derive(Debug, Clone)]
enum Repr {
    Small(Small),
    Blocks(Box<Blocks>),
}

/// A sorted log of request timestamps (ms), each at most 2^53.
#[derive(Debug, Clone)]
pub struct CompactLog {
    repr: Repr,
}

/// Two logs are equal when they hold the same timestamps, whatever their layout: compared run by
/// run (a timestamp and its count), so in O(distinct timestamps) however large the counts.
impl PartialEq for CompactLog {
    fn eq(&self, other: &CompactLog) -> bool {
        self.len() == other.len() && self.runs().eq(other.runs())
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

impl CompactLog {
    /// Logged requests.
    #[inline]
    pub fn len(&self) -> u64 {
        match &self.repr {
            Repr::Small(s) => s.len() as u64,
            Repr::Blocks(b) => b.len(),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `k`-th oldest timestamp, 1-based.
    #[inline]
    pub fn kth_oldest(&self, k: u64) -> Option<u64> {
        let i = k.checked_sub(1).filter(|i| *i < self.len())?;
        match &self.repr {
            Repr::Small(s) => s.get(usize::try_from(i).ok()?),
            // The oldest, which every trim reads: the first block's first, the tree's first key.
            Repr::Blocks(b) if i == 0 => Some(b.tree.first_key()),
            Repr::Blocks(b) => b.get(i),
        }
    }

    #[inline]
    pub fn newest(&self) -> Option<u64> {
        match &self.repr {
            Repr::Small(s) => s.newest(),
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
    #[inline]
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
                if blocks.len() as usize <= BACK_TO_SMALL {
                    let ts: Vec<u64> = blocks.iter().collect();
                    if let Some(small) = Small::fit(&ts) {
                        self.repr = Repr::Small(small);
                    }
                }
            }
        }
    }

    /// Removes every timestamp at or before `cutoff`; returns how many went.
    #[inline]
    pub fn trim(&mut self, cutoff: i64) -> u64 {
        let m = self.count_trimmed(cutoff);
        self.remove(0, m);
        m
    }

    /// Timestamps at or before `cutoff`, which `trim` removes: searched from the oldest, in
    /// O(log m) for the m it finds when they lie in the first block.
    #[inline]
    pub fn count_trimmed(&self, cutoff: i64) -> u64 {
        let Ok(cutoff) = u64::try_from(cutoff) else {
            return 0;
        };
        match &self.repr {
            Repr::Small(s) => s.count_le(cutoff) as u64,
            Repr::Blocks(b) => b.count_le_front(cutoff),
        }
    }

    /// Removes the `m` oldest timestamps (what `count_trimmed` counted).
    pub fn remove_oldest(&mut self, m: u64) {
        self.remove(0, m);
    }

    /// Removes up to `n` of the newest timestamps at or before `through`; returns how many went.
    pub fn refund(&mut self, through: u64, n: u64) -> u64 {
        let end = self.count_le(through);
        let m = n.min(end);
        self.remove(end - m, end);
        m
    }

    /// Adds `n` timestamps `ts`, after every equal one.
    #[inline]
    pub fn add(&mut self, ts: u64, n: u64) {
        if n == 0 || ts > MAX_TS {
            return;
        }
        if let Repr::Blocks(b) = &mut self.repr
            && b.append(ts, n)
        {
            return;
        }
        self.add_slow(ts, n);
    }

    /// `add` past the last block's append: into the small form, out of it, or anywhere in the
    /// blocks.
    #[inline(never)]
    fn add_slow(&mut self, ts: u64, n: u64) {
        if let Repr::Small(s) = &mut self.repr {
            if s.add(ts, n) {
                return;
            }
            let mut builder = Builder::default();
            for t in s.values() {
                builder.push(t);
            }
            self.repr = Repr::Blocks(Box::new(builder.into_blocks()));
            if let Repr::Blocks(b) = &mut self.repr
                && b.append(ts, n)
            {
                return;
            }
        }
        if let Repr::Blocks(b) = &mut self.repr {
            b.add(ts, n);
        }
    }

    /// The log as one word below 2^60 when it holds copies of one timestamp (see `small`).
    #[inline]
    pub fn word(&self) -> Option<u64> {
        match &self.repr {
            Repr::Small(s) => s.word(),
            Repr::Blocks(_) => None,
        }
    }

    /// The log `word` gave, if it is one.
    pub fn from_word(word: u64) -> Option<CompactLog> {
        Some(CompactLog {
            repr: Repr::Small(Small::from_word(word)?),
        })
    }

    /// Every timestamp, oldest first.
    pub fn iter(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match &self.repr {
            Repr::Small(s) => Box::new(s.values().into_iter()),
            Repr::Blocks(b) => Box::new(b.iter()),
        }
    }

    /// Runs of equal timestamps, oldest first: `(timestamp, count)`.
    pub fn runs(&self) -> Runs<'_> {
        match &self.repr {
            Repr::Small(s) => {
                let mut small: Vec<(u64, u64)> = Vec::new();
                for t in s.values() {
                    match small.last_mut() {
                        Some((last, n)) if *last == t => *n += 1,
                        _ => small.push((t, 1)),
                    }
                }
                Runs {
                    small: small.into_iter(),
                    blocks: None,
                    block: Vec::new().into_iter(),
                }
            }
            Repr::Blocks(b) => Runs {
                small: Vec::new().into_iter(),
                blocks: Some(b.tree.iter()),
                block: Vec::new().into_iter(),
            },
        }
    }

    /// Bytes of heap the log owns besides the value itself (its blocks and their index), as
    /// the allocator's size classes count them: O(1).
    #[inline]
    pub fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::Small(s) => s.heap_bytes(),
            Repr::Blocks(b) => b.heap_bytes(),
        }
    }

    /// Separate allocations the log owns besides the value itself: O(1).
    pub fn allocations(&self) -> usize {
        match &self.repr {
            Repr::Small(s) => usize::from(s.heap_bytes() > 0),
            Repr::Blocks(b) => 1 + b.tree.allocs(),
        }
    }

    /// Hands its heap allocations to `mover`, from block `from` on (0: all of them, the tree's
    /// box first), until the mover says to stop: then the block to resume from.
    pub fn move_buffers(&mut self, mover: &mut impl Mover, from: u64) -> Option<u64> {
        let b = match &mut self.repr {
            Repr::Small(s) => {
                s.move_buffer(mover);
                return None;
            }
            Repr::Blocks(b) => b,
        };
        if from == 0 {
            mover.boxed(b);
        }
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        b.tree.defrag(from, mover).map(|next| next as u64)
    }
}

/// Iterator over runs of equal timestamps: a block's slots in turn, equal neighbours (within a
/// block or across two) merged.
pub struct Runs<'a> {
    small: std::vec::IntoIter<(u64, u64)>,
    blocks: Option<Iter<'a, Block>>,
    /// The current block's runs, decoded in one pass.
    block: std::vec::IntoIter<(u64, u64)>,
}

impl Iterator for Runs<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        if let Some(run) = self.small.next() {
            return Some(run);
        }
        let mut run: Option<(u64, u64)> = None;
        loop {
            let Some(&(ts, n)) = self.block.as_slice().first() else {
                let next = self.blocks.as_mut().and_then(Iterator::next);
                let Some(next) = next else {
                    return run;
                };
                self.block = next.slot_runs().into_iter();
                continue;
            };
            if run.is_some_and(|(t, _)| t != ts) {
                return run;
            }
            run = Some((ts, run.map_or(0, |(_, m)| m) + n));
            self.block.next();
        }
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
            Repr::Blocks(b) => b.tree.iter().map(|b| (b.w(), b.len())).collect(),
        }
    }

    /// The indexes of its open blocks, and of its blocks in the byte form (open or not).
    fn open_and_bytes(&self) -> (Vec<usize>, Vec<usize>) {
        let Repr::Blocks(b) = &self.repr else {
            return (Vec::new(), Vec::new());
        };
        let blocks: Vec<&Block> = b.tree.iter().collect();
        let which = |f: &dyn Fn(&Block) -> bool| -> Vec<usize> {
            (0..blocks.len()).filter(|&i| f(blocks[i])).collect()
        };
        (which(&Block::is_open), which(&|x| !x.sealed()))
    }

    /// Whether the log's last block is full.
    fn last_block_full(&self) -> bool {
        match &self.repr {
            Repr::Small(_) => false,
            Repr::Blocks(b) => b.tree.last().is_some_and(Block::is_full),
        }
    }

    /// Every block's buffer, oldest first: the same pointers mean no block was re-laid.
    fn buffers(&self) -> Vec<*const u8> {
        match &self.repr {
            Repr::Small(_) => Vec::new(),
            Repr::Blocks(b) => b.tree.iter().map(Block::buf_ptr).collect(),
        }
    }

    /// Checks the layout's invariants: the tree's, each block's, and at most one empty block,
    /// the last, while the one before it is full.
    fn check(&self) {
        if let Repr::Blocks(b) = &self.repr {
            b.tree.check();
            assert!(b.tree.marked() <= OPEN_MAX, "{} open", b.tree.marked());
            let blocks: Vec<&Block> = b.tree.iter().collect();
            for (i, block) in blocks.iter().enumerate() {
                block.check();
                if block.is_empty() {
                    assert_eq!(i + 1, blocks.len(), "block {i} of {} empty", blocks.len());
                }
            }
            // Its runs, not its requests: a count may be 2^53.
            let runs: Vec<(u64, u64)> = self.runs().collect();
            assert!(runs.windows(2).all(|w| w[0].0 < w[1].0), "out of order");
            assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), b.len());
            assert!(
                b.len() as usize > BACK_TO_SMALL
                    || Small::fit(&b.iter().collect::<Vec<_>>()).is_none(),
                "a short log in blocks"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::block::fits;
    use super::*;

    fn all(log: &CompactLog) -> Vec<u64> {
        log.iter().collect()
    }

    #[test]
    fn a_small_log_lives_in_one_small_allocation() {
        // 16 bytes: the allocator's class for the value's box is its size.
        assert_eq!(size_of::<CompactLog>(), 16);
        let t = 1_700_000_000_000;
        let every_second = |n: u64| (0..n).map(|i| t + i * 1000).collect::<Vec<_>>();
        let log = CompactLog::of(&every_second(5));
        assert_eq!((log.heap_bytes(), log.allocations(), log.len()), (0, 0, 5));
        assert_eq!(log.word(), None);
        let log = CompactLog::of(&every_second(20));
        assert_eq!(
            (log.heap_bytes(), log.allocations(), log.len()),
            (32, 1, 20)
        );
        // One timestamp's copies: a word.
        let mut log = CompactLog::default();
        log.add(t, 3);
        let word = log.word().unwrap();
        assert_eq!(CompactLog::from_word(word), Some(log));
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
    fn late_inserts_edit_one_open_block_in_bytes() {
        let t = 1_700_000_000_000u64;
        let mut model: Vec<u64> = (0..100_000u64).map(|i| t + i * 30).collect();
        let mut log = CompactLog::default();
        for &ts in &model {
            log.add(ts, 1);
        }
        fn add(log: &mut CompactLog, model: &mut Vec<u64>, ts: u64) {
            log.add(ts, 1);
            let at = model.partition_point(|x| *x <= ts);
            model.insert(at, ts);
        }
        // 25 minutes late, into a full sealed block: it splits into sealed blocks with room.
        let late = t + 100_000 * 30 - 1_500_000;
        add(&mut log, &mut model, late);
        let (open, bytes) = log.open_and_bytes();
        let n = log.shape().len();
        assert_eq!((open, bytes), (vec![], vec![n - 1]));
        // The next: the block holding it opens, in bytes, and stays open while inserts land in
        // it; no other block changes.
        add(&mut log, &mut model, late + 1);
        let (open, _) = log.open_and_bytes();
        assert_eq!(open.len(), 1);
        let buffers = log.buffers();
        for k in 2..40 {
            add(&mut log, &mut model, late + k);
            assert_eq!(log.open_and_bytes(), (open.clone(), vec![open[0], n - 1]));
            let now = log.buffers();
            let others = |b: &[*const u8]| -> Vec<*const u8> {
                b.iter()
                    .enumerate()
                    .filter(|(i, _)| *i != open[0])
                    .map(|(_, p)| *p)
                    .collect()
            };
            assert_eq!(others(&now), others(&buffers), "insert {k}");
        }
        log.check();
        // Two late inserts at `ts`: the open blocks, the blocks in bytes and the block count.
        fn two(
            log: &mut CompactLog,
            model: &mut Vec<u64>,
            ts: u64,
        ) -> (Vec<usize>, Vec<usize>, usize) {
            add(log, model, ts);
            add(log, model, ts + 1);
            let (open, bytes) = log.open_and_bytes();
            (open, bytes, log.shape().len())
        }
        // Late inserts into another block: it opens too (two at most).
        let earlier = late - 600_000;
        let (open2, bytes, n) = two(&mut log, &mut model, earlier);
        assert_eq!(open2.len(), 2);
        assert_eq!(open2[1], open[0] + 1, "{open2:?} {open:?}");
        assert_eq!(bytes, vec![open2[0], open2[1], n - 1]);
        // And into a third, before both: the one farther from it (the latest) is sealed again.
        let (open3, bytes, n) = two(&mut log, &mut model, late - 1_200_000);
        assert_eq!(open3.len(), 2);
        assert_eq!(open3[1], open2[0] + 1, "{open3:?} {open2:?}");
        assert!(open3[0] < open3[1]);
        assert_eq!(bytes, vec![open3[0], open3[1], n - 1]);
        log.check();
        assert!(log.iter().eq(model.iter().copied()));
        // Refunds and trims through the open block keep it whole.
        assert_eq!(log.refund(earlier + 1, 2), 2);
        let end = model.partition_point(|x| *x <= earlier + 1);
        model.drain(end - 2..end);
        log.check();
        assert!(log.iter().eq(model.iter().copied()));
        log.trim((late + 20) as i64);
        model.retain(|x| *x > late + 20);
        log.check();
        assert!(log.iter().eq(model.iter().copied()));
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

    /// Counts around 2^32 and up to 2^53 on one timestamp, across blocks (tiny under the
    /// fuzzing cfg): adds beside it, trims of older timestamps, refunds, merges; nothing wraps.
    #[test]
    fn counts_never_wrap() {
        let t = 1_700_000_000_000u64;
        let big = MAX_LEN as u64;
        // (copies of `t`, added in calls of)
        for (total, step) in [
            ((1u64 << 32) - 1, 1u64 << 31),
            (1 << 32, 1 << 30),
            ((1 << 32) + 1, 10_000_000),
            (4_300_000_000, 10_000_000),
            (big + 1, big / 2 + 1),
            (MAX_TS - 1, 1 << 52),
            (MAX_TS, big),
        ] {
            let mut log = CompactLog::default();
            log.add(t - 5, 3);
            let mut left = total;
            while left > 0 {
                let n = left.min(step);
                log.add(t, n);
                left -= n;
            }
            log.add(t + 1, 2);
            log.check();
            let want = |log: &CompactLog, ts: &[(u64, u64)]| {
                assert_eq!(log.runs().collect::<Vec<_>>(), ts, "{total}");
                assert_eq!(log.len(), ts.iter().map(|r| r.1).sum::<u64>(), "{total}");
            };
            want(&log, &[(t - 5, 3), (t, total), (t + 1, 2)]);
            assert_eq!(log.count_through(t as f64), total + 3);
            assert_eq!(log.kth_oldest(total + 3), Some(t));
            assert_eq!(log.kth_oldest(total + 4), Some(t + 1));
            // A refund of the newer timestamps and one of `t`'s: the rest of `t` stays.
            assert_eq!(log.refund(MAX_TS, 3), 3);
            log.check();
            want(&log, &[(t - 5, 3), (t, total - 1)]);
            // A trim of the older one, and refunds that cut `t`'s blocks down to one request.
            assert_eq!(log.trim((t - 1) as i64), 3);
            log.check();
            want(&log, &[(t, total - 1)]);
            if total > 2 {
                assert_eq!(log.refund(t, total - 2), total - 2);
                log.check();
                want(&log, &[(t, 1)]);
            }
            let left = log.len();
            assert_eq!(log.trim(t as i64), left);
            assert!(log.is_empty());
        }
    }

    /// Blocks of `MAX_LEN` copies merge (after a cut) only into a block that holds their sum.
    #[test]
    fn a_merge_near_the_block_limit_keeps_every_count() {
        let t = 1u64 << 40;
        let big = MAX_LEN as u64;
        let mut log = CompactLog::default();
        for i in 0..200u64 {
            log.add(t + i, 1);
        }
        log.add(t + 500, big);
        log.add(t + 500, big);
        log.add(t + 501, 5);
        log.check();
        // A cut through the small blocks leaves them to merge beside the full ones.
        assert_eq!(log.trim((t + 150) as i64), 151);
        assert_eq!(log.refund(MAX_TS, 5), 5);
        log.check();
        let mut want: Vec<(u64, u64)> = (151..200u64).map(|i| (t + i, 1)).collect();
        want.push((t + 500, 2 * big));
        assert_eq!(log.runs().collect::<Vec<_>>(), want);
        assert_eq!(log.refund(MAX_TS, big + 7), big + 7);
        log.check();
        assert_eq!(log.len(), 49 + big - 7);
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

    /// A million requests on each of 3000 timestamps: one slot each, and inserts inside full
    /// counted blocks, trims and refunds work on slots, never on the requests one by one.
    #[test]
    fn huge_counts_cost_their_slots() {
        let t = 1u64 << 40;
        let mut log = CompactLog::default();
        let mut model: Vec<(u64, u64)> = Vec::new();
        for i in 0..3000u64 {
            log.add(t + 2 * i, 1_000_000);
            model.push((t + 2 * i, 1_000_000));
        }
        assert!(log.shape().len() > 2, "{:?}", log.shape().len());
        assert!(log.heap_bytes() < 32_000, "{}", log.heap_bytes());
        for i in (1..3000u64).step_by(7) {
            log.add(t + 2 * i - 1, 3);
            let at = model.partition_point(|r| r.0 < t + 2 * i - 1);
            model.insert(at, (t + 2 * i - 1, 3));
        }
        log.trim((t + 1000) as i64);
        model.retain(|r| r.0 > t + 1000);
        assert_eq!(log.refund(t + 3000, 2_500_000), 2_500_000);
        let mut left = 2_500_000u64;
        for r in model.iter_mut().rev().skip_while(|r| r.0 > t + 3000) {
            let cut = left.min(r.1);
            r.1 -= cut;
            left -= cut;
        }
        model.retain(|r| r.1 > 0);
        assert_eq!(log.runs().collect::<Vec<_>>(), model);
        assert_eq!(log.len(), model.iter().map(|r| r.1).sum::<u64>());
        assert!(log.heap_bytes() < 64_000, "{}", log.heap_bytes());
    }

    #[test]
    fn a_log_grown_or_trimmed_holds_little_more_than_it_needs() {
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

    /// One request added and taken back at a block's edge, again and again, makes no block
    /// appear or vanish, and re-lays none, after the first time: past a full last block, and
    /// across the edge between two full blocks in the middle.
    #[test]
    fn blocks_neither_appear_nor_vanish_at_an_edge() {
        let t = 1_700_000_000_000u64;
        // Counted blocks of 3 requests a ms (3 bytes a timestamp), the last one exactly full.
        let mut log = CompactLog::default();
        let mut newest = t;
        while !log.last_block_full() {
            newest += 1;
            log.add(newest, 3);
        }
        let full = log.shape().len();
        let mut seen = Vec::new();
        for round in 0..50 {
            log.add(newest + 1000, 1);
            assert_eq!(log.refund(MAX_TS, 1), 1);
            if round == 0 {
                seen = log.buffers();
                assert_eq!(seen.len(), full + 1, "one block opened, kept empty");
            }
            assert_eq!(log.buffers(), seen, "round {round}");
            log.check();
        }
        assert_eq!(log.newest(), Some(newest));
        // A refund of the newest timestamp from the block before it: the empty one goes.
        assert_eq!(log.refund(MAX_TS, 3), 3);
        assert_eq!(log.shape().len(), full);
        log.check();
        // Requests a ms apart: full two-byte blocks (sealed, so re-encoded by each edit inside
        // them); the edge between the 20th and 21st: no block appears or vanishes.
        let mut log = CompactLog::default();
        for i in 0..100_000u64 {
            log.add(t + i, 1);
        }
        let per = BLOCK_BYTES as u64 / 2;
        for b in [t + 20 * per, t + 20 * per + per / 2] {
            let mut seen = Vec::new();
            for round in 0..50 {
                assert_eq!(log.refund(b, 2), 2);
                log.add(b - 1, 1);
                log.add(b, 1);
                if round == 0 {
                    seen = log.shape();
                }
                assert_eq!(log.shape(), seen, "{b}, round {round}");
            }
            assert_eq!(log.len(), 100_000);
            assert!(log.iter().eq((0..100_000).map(|i| t + i)));
            log.check();
        }
    }

    /// A log built from sorted timestamps in one pass holds what adds make, in full blocks.
    #[test]
    fn built_in_one_pass() {
        let t = 1_700_000_000_000u64;
        let mut rng = crate::rng::Rng::new(3);
        for (n, gap) in [
            (0u64, 1u64),
            (5, 1),
            (11, 1 << 40),
            (12, 1),
            (30_000, 1),
            (30_000, 7000),
        ] {
            let mut ts: Vec<u64> = (0..n).map(|i| t + i * gap).collect();
            // Bursts among them.
            for _ in 0..n / 1000 {
                let at = rng.range(0, n - 1) as usize;
                let burst = vec![ts[at]; rng.range(1, 9000) as usize];
                ts.splice(at..at, burst);
            }
            let mut builder = Builder::default();
            for &x in &ts {
                builder.push(x);
            }
            let built = builder.finish();
            built.check();
            assert_eq!(built, CompactLog::of(&ts), "{n} a gap of {gap}");
            assert!(built.iter().eq(ts.iter().copied()));
            // Every block but the last is full: the next timestamp would not have fit it.
            let mut at = 0;
            for (_, len) in built.shape() {
                if let Some(next) = ts.get(at + len) {
                    assert!(
                        !fits(len + 1, next - ts[at]),
                        "{n} a gap of {gap}: {len} at {at}"
                    );
                }
                at += len;
            }
        }
    }

    /// The defragmenter's turns: every allocation handed over once, in steps that resume where
    /// the last stopped, the log unchanged.
    #[test]
    fn buffers_move_in_steps() {
        struct Count {
            moved: usize,
            every: usize,
            asked: usize,
        }
        impl Mover for Count {
            fn bytes(&mut self, buf: &mut Box<[u8]>) {
                *buf = buf.clone();
                self.moved += 1;
            }
            fn vec<T>(&mut self, v: &mut Vec<T>) {
                let mut moved = Vec::with_capacity(v.capacity());
                moved.append(v);
                *v = moved;
                self.moved += 1;
            }
            fn boxed<T>(&mut self, _: &mut Box<T>) {
                self.moved += 1;
            }
            fn should_stop(&mut self) -> bool {
                self.asked += 1;
                self.asked.is_multiple_of(self.every)
            }
        }
        let mut log = CompactLog::default();
        for i in 0..200_000u64 {
            log.add(1_000_000 + i * 3, 1);
        }
        let copy = log.clone();
        let blocks = log.shape().len();
        for every in [1, 10, 1000] {
            let mut mover = Count {
                moved: 0,
                every,
                asked: 0,
            };
            let (mut from, mut turns) = (0, 1);
            while let Some(next) = log.move_buffers(&mut mover, from) {
                assert!(next > from);
                (from, turns) = (next, turns + 1);
            }
            assert_eq!(mover.moved, log.allocations(), "every {every}");
            assert_eq!(turns, blocks / every + 1, "every {every}");
            assert_eq!(log, copy);
            log.check();
        }
        assert_eq!(
            CompactLog::of(&[5]).move_buffers(
                &mut Count {
                    moved: 0,
                    every: 1,
                    asked: 0
                },
                0
            ),
            None
        );
    }

    /// Random adds, trims and refunds against a plain sorted vector: every kind of insert,
    /// spans from 1 ms to 2^53 ms, widths changing per block, many blocks.
    #[test]
    fn matches_a_sorted_vector() {
        let mut rng = crate::rng::Rng::new(11);
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
    #[ignore = "timing, by hand: cargo test --release -p slidingwindow-core --lib speed -- --ignored --nocapture"]
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

    /// A log of `n` timestamps a ms apart, built as a load builds it.
    fn dense(n: u64) -> CompactLog {
        let mut b = Builder::default();
        for i in 0..n {
            b.push(1_700_000_000_000 + i);
        }
        b.finish()
    }

    #[test]
    #[ignore = "timing, by hand: cargo test --release -p slidingwindow-core --lib speed -- --ignored --nocapture"]
    fn edges_openings_and_loads() {
        let time = |what: &str, calls: u32, f: &mut dyn FnMut()| {
            let start = std::time::Instant::now();
            for _ in 0..calls {
                f();
            }
            println!("{what}: {:?} a call", start.elapsed() / calls);
        };
        let sizes: Vec<u64> = match std::env::var("SPEED_SIZES") {
            Ok(v) => v.split(',').filter_map(|s| s.parse().ok()).collect(),
            Err(_) => vec![1_000_000, 100_000_000],
        };
        for n in sizes {
            let mut log = dense(n);
            let t = 1_700_000_000_000u64;
            let per = BLOCK_BYTES as u64 / 2;
            let edge = t + (n / per / 2) * per;
            for (what, b) in [("edge", edge), ("inside", edge + per / 2)] {
                time(
                    &format!("{n}: middle churn at the {what}"),
                    100_000,
                    &mut || {
                        log.refund(b, 2);
                        log.add(b - 1, 1);
                        log.add(b, 1);
                    },
                );
            }
            let newest = log.newest().unwrap_or(0);
            time(&format!("{n}: tail churn"), 100_000, &mut || {
                log.add(newest + 1000, 1);
                log.refund(MAX_TS, 1);
            });
            let mut next = newest + 2000;
            time(&format!("{n}: block opening"), 20_000, &mut || {
                log.add(next, BLOCK_BYTES as u64);
                next += 1;
            });
        }
        for n in [10_000_000u64, 200_000_000] {
            let (count, bytes) = super::super::codec::encode(&dense(n));
            let start = std::time::Instant::now();
            let log = super::super::codec::decode(1, count, &bytes);
            println!("decode {n}: {:?}", start.elapsed());
            assert_eq!(log.map(|l| l.len()), Ok(n));
        }
    }
}
