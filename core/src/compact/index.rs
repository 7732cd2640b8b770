//! The compact log's index over its blocks, free of Redis: an order-statistic B-tree.
//!
//! Items (the blocks) sit in order in the leaves; every inner node keeps, for each child, the
//! totals of the child's subtree: timestamps, items, heap bytes, allocations, and the key (first
//! timestamp) of its first item. So the item holding the k-th timestamp, the last item whose key
//! is at or before a time, and item `i` are each one walk from the root; an item changed in place
//! updates the totals on that walk; an item comes or goes (a split, a merge, a node's split or
//! merge) in O(log B) for B items; the totals of the whole log are read in O(1). A node holds at
//! most `MAX` children and, but for the root, at least `MIN`: a node splits in equal shares past
//! `MAX` and takes from or merges with a sibling below `MIN`, so a tree of B items is at most
//! log_MIN(B) + 1 levels deep. A tree made from a row of items is built bottom-up, in one pass.

use super::heap::{Mover, size_class};

/// Children of a node at most; equal shares of a node split past it keep MAX / 2 or more.
#[cfg(not(any(test, fuzzing)))]
const MAX: usize = 32;
/// Small nodes under the tests and the fuzzer, so that a few hundred items make a deep tree.
#[cfg(any(test, fuzzing))]
const MAX: usize = 8;
/// Children of a node but the root at least.
const MIN: usize = MAX / 4;

/// What the tree keeps in order: the log's blocks.
pub trait Item {
    /// Timestamps it holds.
    fn count(&self) -> u64;
    /// Heap bytes it owns (0: no allocation).
    fn heap(&self) -> usize;
    /// Its first timestamp: the items are in order of it.
    fn key(&self) -> u64;
    /// Whether it is marked (the log's block open for edits): the tree finds the marked one.
    fn marked(&self) -> bool;
    fn move_heap(&mut self, mover: &mut impl Mover);
}

/// A subtree's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Sum {
    count: u64,
    items: usize,
    heap: usize,
    allocs: usize,
    marked: usize,
    key: u64,
}

/// What an in-place change did to one item's totals, as wrapping differences.
#[derive(Clone, Copy)]
struct Delta {
    count: u64,
    heap: usize,
    allocs: usize,
    marked: usize,
}

impl Sum {
    fn apply(&mut self, d: Delta) {
        self.count = self.count.wrapping_add(d.count);
        self.heap = self.heap.wrapping_add(d.heap);
        self.allocs = self.allocs.wrapping_add(d.allocs);
        self.marked = self.marked.wrapping_add(d.marked);
    }
}

#[derive(Debug, Clone)]
enum Node<T> {
    Leaf(Vec<T>),
    Inner(Vec<Entry<T>>),
}

/// A child and its subtree's totals.
#[derive(Debug, Clone)]
struct Entry<T> {
    sum: Sum,
    node: Node<T>,
}

impl<T: Item> Entry<T> {
    fn of(node: Node<T>) -> Entry<T> {
        Entry {
            sum: node.sum(),
            node,
        }
    }
}

/// Heap bytes of a vector's buffer, as the allocator's size classes count them.
fn vec_heap<U>(v: &Vec<U>) -> usize {
    size_class(v.capacity() * size_of::<U>())
}

/// `v` cut into the fewest equal shares (differing by one at most) of at most `MAX`, each in a
/// buffer of its own length.
fn shares<U>(v: Vec<U>) -> Vec<Vec<U>> {
    let k = v.len().div_ceil(MAX).max(1);
    let (share, extra) = (v.len() / k, v.len() % k);
    let mut rest = v.into_iter();
    (0..k)
        .map(|s| rest.by_ref().take(share + usize::from(s < extra)).collect())
        .collect()
}

/// Splits `v` in equal shares if it holds more than `MAX`: it keeps the first, the others are
/// returned in order.
fn overflow<U>(v: &mut Vec<U>) -> Vec<Vec<U>> {
    if v.len() <= MAX {
        return Vec::new();
    }
    let mut parts = shares(std::mem::take(v)).into_iter();
    *v = parts.next().unwrap_or_default();
    parts.collect()
}

/// Evens out two siblings: `y` emptied into `x` when both fit one node (true), else halves.
fn even<U>(x: &mut Vec<U>, y: &mut Vec<U>) -> bool {
    let n = x.len() + y.len();
    if n <= MAX {
        x.append(y);
        return true;
    }
    let want = n / 2;
    if x.len() > want {
        let moved = x.split_off(want);
        y.splice(0..0, moved);
    } else {
        let k = want - x.len();
        x.extend(y.drain(..k));
    }
    false
}

impl<T: Item> Node<T> {
    fn len(&self) -> usize {
        match self {
            Node::Leaf(v) => v.len(),
            Node::Inner(v) => v.len(),
        }
    }

    fn key(&self) -> u64 {
        match self {
            Node::Leaf(v) => v.first().map_or(0, Item::key),
            Node::Inner(v) => v.first().map_or(0, |e| e.sum.key),
        }
    }

    /// The node's totals, from its children's: O(MAX).
    fn sum(&self) -> Sum {
        let mut s = Sum {
            key: self.key(),
            ..Sum::default()
        };
        match self {
            Node::Leaf(v) => {
                for x in v {
                    let heap = x.heap();
                    s.count += x.count();
                    s.heap += heap;
                    s.allocs += usize::from(heap > 0);
                    s.marked += usize::from(x.marked());
                }
                s.items = v.len();
                s.heap += vec_heap(v);
                s.allocs += usize::from(v.capacity() > 0);
            }
            Node::Inner(v) => {
                for e in v {
                    s.count += e.sum.count;
                    s.items += e.sum.items;
                    s.heap += e.sum.heap;
                    s.allocs += e.sum.allocs;
                    s.marked += e.sum.marked;
                }
                s.heap += vec_heap(v);
                s.allocs += usize::from(v.capacity() > 0);
            }
        }
        s
    }
}

/// The child of `v` (a node of `items` items) that holds item `i` (the last for `i` past the
/// end), and the items before it; counted from the nearer end.
fn child_at<T>(v: &[Entry<T>], items: usize, i: usize) -> (usize, usize) {
    if i * 2 < items {
        let mut before = 0;
        for (c, e) in v.iter().enumerate() {
            if i < before + e.sum.items {
                return (c, before);
            }
            before += e.sum.items;
        }
    } else {
        let mut before = items;
        for (c, e) in v.iter().enumerate().rev() {
            before = before.saturating_sub(e.sum.items);
            if i >= before || c == 0 {
                return (c, before);
            }
        }
    }
    (v.len().saturating_sub(1), 0)
}

/// Timestamps and items in `v[..c]` of a node holding `sum`, summed from the nearer end.
fn before<T>(v: &[Entry<T>], sum: Sum, c: usize) -> (u64, usize) {
    if c * 2 <= v.len() {
        let head = v.get(..c).unwrap_or_default();
        (
            head.iter().map(|e| e.sum.count).sum(),
            head.iter().map(|e| e.sum.items).sum(),
        )
    } else {
        let tail = v.get(c..).unwrap_or_default();
        (
            sum.count - tail.iter().map(|e| e.sum.count).sum::<u64>(),
            sum.items - tail.iter().map(|e| e.sum.items).sum::<usize>(),
        )
    }
}

/// Runs `f` on `x`: what it returns, and what it did to the item's totals.
#[inline]
fn change<T: Item, R>(x: &mut T, f: impl FnOnce(&mut T) -> R) -> (R, Delta) {
    let (count, heap, marked) = (x.count(), x.heap(), x.marked());
    let r = f(x);
    let d = Delta {
        count: x.count().wrapping_sub(count),
        heap: x.heap().wrapping_sub(heap),
        allocs: usize::from(x.heap() > 0).wrapping_sub(usize::from(heap > 0)),
        marked: usize::from(x.marked()).wrapping_sub(usize::from(marked)),
    };
    (r, d)
}

fn edit<T: Item, R>(
    node: &mut Node<T>,
    items: usize,
    i: usize,
    f: impl FnOnce(&mut T) -> R,
) -> Option<(R, Delta)> {
    match node {
        Node::Leaf(v) => Some(change(v.get_mut(i)?, f)),
        Node::Inner(v) => {
            let (c, before) = child_at(v, items, i);
            let e = v.get_mut(c)?;
            let (r, d) = edit(&mut e.node, e.sum.items, i - before, f)?;
            e.sum.apply(d);
            e.sum.key = e.node.key();
            Some((r, d))
        }
    }
}

/// Inserts `new` before item `i` of `node`; returns the nodes it overflowed into, which follow
/// it in order.
fn insert<T: Item>(node: &mut Node<T>, items: usize, i: usize, new: Vec<T>) -> Vec<Node<T>> {
    match node {
        Node::Leaf(v) => {
            let i = i.min(v.len());
            v.splice(i..i, new);
            overflow(v).into_iter().map(Node::Leaf).collect()
        }
        Node::Inner(v) => {
            let (c, before) = child_at(v, items, i);
            let Some(e) = v.get_mut(c) else {
                return Vec::new();
            };
            let extra = insert(&mut e.node, e.sum.items, i - before, new);
            e.sum = e.node.sum();
            v.splice(c + 1..c + 1, extra.into_iter().map(Entry::of));
            overflow(v).into_iter().map(Node::Inner).collect()
        }
    }
}

/// Removes item `i` of `node`, evening out a child left with fewer than `MIN` children.
fn remove<T: Item>(node: &mut Node<T>, items: usize, i: usize) -> Option<T> {
    match node {
        Node::Leaf(v) => (i < v.len()).then(|| v.remove(i)),
        Node::Inner(v) => {
            let (c, before) = child_at(v, items, i);
            let e = v.get_mut(c)?;
            let x = remove(&mut e.node, e.sum.items, i - before)?;
            e.sum = e.node.sum();
            if e.node.len() < MIN {
                rebalance(v, c);
            }
            Some(x)
        }
    }
}

/// Evens out child `c` of `v` with a sibling (merging them when both fit one node).
fn rebalance<T: Item>(v: &mut Vec<Entry<T>>, c: usize) {
    if v.len() < 2 {
        return;
    }
    let l = c.min(v.len() - 2);
    let merged = match v.get_mut(l..l + 2) {
        Some([left, right]) => {
            let merged = match (&mut left.node, &mut right.node) {
                (Node::Leaf(x), Node::Leaf(y)) => even(x, y),
                (Node::Inner(x), Node::Inner(y)) => even(x, y),
                // Siblings are as deep as each other.
                _ => return,
            };
            left.sum = left.node.sum();
            right.sum = right.node.sum();
            merged
        }
        _ => false,
    };
    if merged {
        v.remove(l + 1);
    }
}

/// Hands every allocation of `node` (whose first item is item `base`) from item `from` on to
/// `mover`; `Err(i)` when it stopped before item `i`.
fn walk<T: Item>(
    node: &mut Node<T>,
    base: usize,
    from: usize,
    mover: &mut impl Mover,
) -> Result<(), usize> {
    match node {
        Node::Leaf(v) => {
            if base >= from {
                mover.vec(v);
            }
            for (j, x) in v.iter_mut().enumerate() {
                if base + j < from {
                    continue;
                }
                x.move_heap(mover);
                if mover.should_stop() {
                    return Err(base + j + 1);
                }
            }
        }
        Node::Inner(v) => {
            if base >= from {
                mover.vec(v);
            }
            let mut base = base;
            for e in v.iter_mut() {
                if base + e.sum.items > from {
                    walk(&mut e.node, base, from, mover)?;
                }
                base += e.sum.items;
            }
        }
    }
    Ok(())
}

/// The items in order, with the totals of every subtree.
#[derive(Debug, Clone)]
pub struct Tree<T> {
    root: Node<T>,
    sum: Sum,
}

impl<T: Item> Default for Tree<T> {
    fn default() -> Self {
        Tree::from_vec(Vec::new())
    }
}

impl<T: Item> Tree<T> {
    /// A tree of `items` (in order), built bottom-up: O(items).
    pub fn from_vec(items: Vec<T>) -> Tree<T> {
        let mut level: Vec<Node<T>> = shares(items).into_iter().map(Node::Leaf).collect();
        while level.len() > 1 {
            let entries: Vec<Entry<T>> = level.into_iter().map(Entry::of).collect();
            level = shares(entries).into_iter().map(Node::Inner).collect();
        }
        let root = level.pop().unwrap_or(Node::Leaf(Vec::new()));
        Tree {
            sum: root.sum(),
            root,
        }
    }

    /// Timestamps in all items.
    pub fn count(&self) -> u64 {
        self.sum.count
    }

    pub fn items(&self) -> usize {
        self.sum.items
    }

    /// Heap bytes of the items and of the tree's nodes.
    pub fn heap(&self) -> usize {
        self.sum.heap
    }

    /// Allocations of the items and of the tree's nodes.
    pub fn allocs(&self) -> usize {
        self.sum.allocs
    }

    /// The first item's key (0 without items), from the totals: no walk.
    #[inline]
    pub fn first_key(&self) -> u64 {
        self.sum.key
    }

    pub fn first(&self) -> Option<&T> {
        let mut node = &self.root;
        loop {
            match node {
                Node::Leaf(v) => return v.first(),
                Node::Inner(v) => node = &v.first()?.node,
            }
        }
    }

    pub fn last(&self) -> Option<&T> {
        let mut node = &self.root;
        loop {
            match node {
                Node::Leaf(v) => return v.last(),
                Node::Inner(v) => node = &v.last()?.node,
            }
        }
    }

    /// Item `i`.
    pub fn get(&self, i: usize) -> Option<&T> {
        match (i + 1).cmp(&self.items()) {
            std::cmp::Ordering::Greater => return None,
            std::cmp::Ordering::Equal => return self.last(),
            std::cmp::Ordering::Less => {}
        }
        let (mut node, mut items, mut i) = (&self.root, self.items(), i);
        loop {
            match node {
                Node::Leaf(v) => return v.get(i),
                Node::Inner(v) => {
                    let (c, before) = child_at(v, items, i);
                    let e = v.get(c)?;
                    (node, items, i) = (&e.node, e.sum.items, i - before);
                }
            }
        }
    }

    /// The item holding the `k`-th timestamp (0-based, below the count): its index, where in it,
    /// and the item.
    pub fn find_rank(&self, k: u64) -> Option<(usize, u64, &T)> {
        if k >= self.count() {
            return None;
        }
        // The ends, where trims and appends land, down one side of the tree.
        if let Some(x) = self.first()
            && k < x.count()
        {
            return Some((0, k, x));
        }
        if let Some(x) = self.last()
            && let Some(from) = self.count().checked_sub(x.count())
            && k >= from
        {
            return Some((self.items() - 1, k - from, x));
        }
        let (mut node, mut k, mut before) = (&self.root, k, 0);
        loop {
            match node {
                Node::Leaf(v) => {
                    for (j, x) in v.iter().enumerate() {
                        if k < x.count() {
                            return Some((before + j, k, x));
                        }
                        k -= x.count();
                    }
                    return None;
                }
                Node::Inner(v) => {
                    let e = v.iter().find(|e| {
                        if k < e.sum.count {
                            return true;
                        }
                        k -= e.sum.count;
                        before += e.sum.items;
                        false
                    })?;
                    node = &e.node;
                }
            }
        }
    }

    /// The last item whose key is at or before `t` (the first item if none is): its index, the
    /// timestamps before it, and the item.
    pub fn find_key(&self, t: u64) -> Option<(usize, u64, &T)> {
        if let Some(x) = self.last()
            && x.key() <= t
        {
            return Some((self.items() - 1, self.count() - x.count(), x));
        }
        let (mut node, mut sum) = (&self.root, self.sum);
        let (mut i, mut count) = (0, 0);
        loop {
            match node {
                Node::Leaf(v) => {
                    let j = v.partition_point(|x| x.key() <= t).saturating_sub(1);
                    let head = v.get(..j).unwrap_or_default();
                    let n: u64 = head.iter().map(Item::count).sum();
                    return v.get(j).map(|x| (i + j, count + n, x));
                }
                Node::Inner(v) => {
                    let c = v.partition_point(|e| e.sum.key <= t).saturating_sub(1);
                    let (n, items) = before(v, sum, c);
                    let e = v.get(c)?;
                    (node, sum) = (&e.node, e.sum);
                    (i, count) = (i + items, count + n);
                }
            }
        }
    }

    /// Marked items.
    pub fn marked(&self) -> usize {
        self.sum.marked
    }

    /// The first marked item's index (the last's if `last`): one walk from the root.
    pub fn find_marked(&self, last: bool) -> Option<usize> {
        let (mut node, mut i) = (&self.root, 0);
        loop {
            match node {
                Node::Leaf(v) if last => return v.iter().rposition(Item::marked).map(|j| i + j),
                Node::Leaf(v) => return v.iter().position(Item::marked).map(|j| i + j),
                Node::Inner(v) => {
                    let c = if last {
                        v.iter().rposition(|e| e.sum.marked > 0)?
                    } else {
                        v.iter().position(|e| e.sum.marked > 0)?
                    };
                    i += v.iter().take(c).map(|e| e.sum.items).sum::<usize>();
                    node = &v.get(c)?.node;
                }
            }
        }
    }

    /// Runs `f` on item `i` alone, keeping the totals in step with it.
    pub fn edit<R>(&mut self, i: usize, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let (r, d) = edit(&mut self.root, self.sum.items, i, f)?;
        self.sum.apply(d);
        self.sum.key = self.root.key();
        Some(r)
    }

    /// `edit` of the last item: down the last child at each level, then its change added to
    /// the totals on the same path.
    pub fn edit_last<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let mut node = &mut self.root;
        let x = loop {
            match node {
                Node::Leaf(v) => break v.last_mut()?,
                Node::Inner(v) => node = &mut v.last_mut()?.node,
            }
        };
        let (r, d) = change(x, f);
        let mut node = &mut self.root;
        while let Node::Inner(v) = node {
            let Some(e) = v.last_mut() else {
                break;
            };
            e.sum.apply(d);
            e.sum.key = e.node.key();
            node = &mut e.node;
        }
        self.sum.apply(d);
        self.sum.key = self.root.key();
        Some(r)
    }

    /// Inserts `new` (in order with the items around) before item `i`.
    pub fn insert(&mut self, i: usize, new: Vec<T>) {
        if new.is_empty() {
            return;
        }
        let extra = insert(&mut self.root, self.sum.items, i, new);
        if !extra.is_empty() {
            // The root split: a new one above it, as many levels as the shares need.
            let old = std::mem::replace(&mut self.root, Node::Leaf(Vec::new()));
            let mut entries: Vec<Entry<T>> =
                std::iter::once(old).chain(extra).map(Entry::of).collect();
            loop {
                let more = overflow(&mut entries);
                if more.is_empty() {
                    break;
                }
                entries = std::iter::once(entries)
                    .chain(more)
                    .map(|v| Entry::of(Node::Inner(v)))
                    .collect();
            }
            self.root = Node::Inner(entries);
        }
        self.sum = self.root.sum();
    }

    /// Removes item `i`.
    pub fn remove(&mut self, i: usize) -> Option<T> {
        let x = remove(&mut self.root, self.sum.items, i)?;
        // A root left with one child gives way to it.
        while let Node::Inner(v) = &mut self.root {
            if v.len() != 1 {
                break;
            }
            let Some(e) = v.pop() else {
                break;
            };
            self.root = e.node;
        }
        self.sum = self.root.sum();
        Some(x)
    }

    pub fn iter(&self) -> Iter<'_, T> {
        let mut it = Iter {
            stack: Vec::new(),
            leaf: [].iter(),
        };
        match &self.root {
            Node::Leaf(v) => it.leaf = v.iter(),
            Node::Inner(v) => it.stack.push(v.iter()),
        }
        it
    }

    /// Hands every allocation from item `from` on to `mover`, until it says to stop: then the
    /// item to resume from.
    pub fn defrag(&mut self, from: usize, mover: &mut impl Mover) -> Option<usize> {
        walk(&mut self.root, 0, from, mover).err()
    }
}

/// The items in order.
pub struct Iter<'a, T> {
    stack: Vec<std::slice::Iter<'a, Entry<T>>>,
    leaf: std::slice::Iter<'a, T>,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        loop {
            if let Some(x) = self.leaf.next() {
                return Some(x);
            }
            let e = loop {
                let top = self.stack.last_mut()?;
                match top.next() {
                    Some(e) => break e,
                    None => {
                        self.stack.pop();
                    }
                }
            };
            match &e.node {
                Node::Leaf(v) => self.leaf = v.iter(),
                Node::Inner(v) => self.stack.push(v.iter()),
            }
        }
    }
}

#[cfg(test)]
impl<T: Item> Tree<T> {
    /// Checks the tree's invariants: totals, occupancy, one depth, keys in order.
    pub fn check(&self) {
        fn depth<T: Item>(node: &Node<T>, root: bool) -> usize {
            let n = node.len();
            assert!(n <= MAX, "a node of {n}");
            assert!(root || n >= MIN, "a node of {n}");
            match node {
                Node::Leaf(_) => 1,
                Node::Inner(v) => {
                    let depths: Vec<usize> = v
                        .iter()
                        .map(|e| {
                            assert_eq!(e.sum, e.node.sum(), "a child's totals");
                            depth(&e.node, false)
                        })
                        .collect();
                    assert!(depths.windows(2).all(|d| d[0] == d[1]), "{depths:?}");
                    depths.first().copied().unwrap_or(0) + 1
                }
            }
        }
        assert_eq!(self.sum, self.root.sum(), "the totals");
        depth(&self.root, true);
        let keys: Vec<u64> = self.iter().map(Item::key).collect();
        assert!(keys.windows(2).all(|k| k[0] <= k[1]), "keys out of order");
        assert_eq!(keys.len(), self.items());
    }

    /// Levels from the root to the leaves.
    pub fn height(&self) -> usize {
        let mut node = &self.root;
        let mut h = 1;
        while let Node::Inner(v) = node {
            let Some(e) = v.first() else {
                break;
            };
            (node, h) = (&e.node, h + 1);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// A test item: a sorted run of timestamps in a vector of its own.
    #[derive(Debug, Clone, PartialEq)]
    struct Run(Vec<u64>);

    impl Item for Run {
        fn count(&self) -> u64 {
            self.0.len() as u64
        }
        fn heap(&self) -> usize {
            vec_heap(&self.0)
        }
        fn key(&self) -> u64 {
            self.0.first().copied().unwrap_or(0)
        }
        fn marked(&self) -> bool {
            self.0.len() % 5 == 1
        }
        fn move_heap(&mut self, mover: &mut impl Mover) {
            mover.vec(&mut self.0);
        }
    }

    /// The model: the same runs in a plain vector.
    fn expect(tree: &Tree<Run>, model: &[Run], rng: &mut Rng) {
        assert!(
            model.windows(2).all(|w| w[0].0.last() <= w[1].0.first()),
            "the model"
        );
        assert!(tree.iter().eq(model.iter()));
        tree.check();
        assert_eq!(tree.find_marked(false), model.iter().position(Item::marked));
        assert_eq!(tree.find_marked(true), model.iter().rposition(Item::marked));
        assert_eq!(tree.marked(), model.iter().filter(|r| r.marked()).count());
        assert_eq!(tree.items(), model.len());
        let count: usize = model.iter().map(|r| r.0.len()).sum();
        assert_eq!(tree.count(), count as u64);
        let heap: usize = model.iter().map(Item::heap).sum();
        assert!(tree.heap() >= heap, "heap {} < items' {heap}", tree.heap());
        let allocs = model.iter().filter(|r| r.heap() > 0).count();
        assert!(tree.allocs() > allocs || model.is_empty());
        assert!(tree.iter().eq(model.iter()));
        if model.is_empty() {
            assert_eq!(tree.find_rank(0), None);
            return;
        }
        let flat: Vec<(usize, u64, u64)> = model
            .iter()
            .enumerate()
            .flat_map(|(i, r)| r.0.iter().enumerate().map(move |(j, t)| (i, j as u64, *t)))
            .collect();
        for _ in 0..20 {
            // Rank: the item and offset of the k-th timestamp.
            let k = rng.range(0, flat.len() as u64 + 1);
            let want = flat.get(k as usize).map(|(i, j, _)| (*i, *j, &model[*i]));
            assert_eq!(tree.find_rank(k), want, "rank {k}");
            // Key: the last run whose first timestamp is at or before t, and the count before.
            let t = rng.range(0, 1 << 20);
            let i = model.partition_point(|r| r.key() <= t).saturating_sub(1);
            let before: usize = model[..i].iter().map(|r| r.0.len()).sum();
            assert_eq!(
                tree.find_key(t),
                Some((i, before as u64, &model[i])),
                "key {t}"
            );
            let i = rng.range(0, model.len() as u64) as usize;
            assert_eq!(tree.get(i), model.get(i), "item {i}");
        }
    }

    /// Random splits, merges, edits and removals against a vector of runs, from one item to
    /// thousands (a tree of several levels of 8-child nodes), then down to none.
    #[test]
    fn matches_a_vector_of_runs() {
        let mut rng = Rng::new(0x1DE);
        let mut tree: Tree<Run> = Tree::default();
        let mut model: Vec<Run> = Vec::new();
        let mut high = 0;
        for step in 0..12_000u32 {
            // Growing for the first two thirds, shrinking after.
            let grow = step < 8000;
            match rng.range(0, 10) {
                0..=3 if grow || model.is_empty() => {
                    // A run splits: it gives way to up to 40 runs of the same span.
                    let i = rng.range(0, model.len() as u64) as usize;
                    let lo = model
                        .get(i.wrapping_sub(1))
                        .map_or(0, |r| *r.0.last().unwrap_or(&0));
                    let hi = model.get(i).map_or(lo + 1000, Run::key);
                    let most = if rng.chance(5) { 40 } else { 3 };
                    let k = rng.range(1, most) as usize;
                    let mut ts: Vec<u64> = (0..k * 3).map(|_| rng.range(lo, hi)).collect();
                    ts.sort_unstable();
                    let new: Vec<Run> = ts.chunks(3).map(|c| Run(c.to_vec())).collect();
                    tree.insert(i, new.clone());
                    model.splice(i..i, new);
                }
                4..=6 if !model.is_empty() => {
                    // Two neighbours merge, or one goes.
                    let i = rng.range(0, model.len() as u64 - 1) as usize;
                    if i + 1 < model.len() && rng.chance(50) {
                        let next = model.remove(i + 1);
                        model[i].0.extend(&next.0);
                        let merged = model[i].clone();
                        assert_eq!(tree.remove(i + 1), Some(next));
                        tree.edit(i, |r| *r = merged);
                    } else {
                        assert_eq!(tree.remove(i), Some(model.remove(i)));
                    }
                }
                _ if !model.is_empty() => {
                    // One changes in place (now and then the last, through `edit_last`): it
                    // loses its last timestamp, or repeats it.
                    let last = rng.chance(25);
                    let i = if last {
                        model.len() - 1
                    } else {
                        rng.range(0, model.len() as u64 - 1) as usize
                    };
                    let grow_run = rng.chance(60) || model[i].0.len() < 2;
                    let change = |r: &mut Run| {
                        if grow_run {
                            let last = r.0.last().copied().unwrap_or(0);
                            r.0.push(last);
                        } else {
                            r.0.pop();
                            r.0.shrink_to_fit();
                        }
                    };
                    change(&mut model[i]);
                    let done = if last {
                        tree.edit_last(change)
                    } else {
                        tree.edit(i, change)
                    };
                    assert_eq!(done, Some(()));
                }
                _ => {}
            }
            high = high.max(tree.items());
            assert_eq!(tree.items(), model.len(), "step {step}");
            if step % 16 == 0 {
                expect(&tree, &model, &mut rng);
            }
        }
        assert!(high > 2000, "{high} items at most");
        // Everything goes, from the front: the tree collapses to an empty leaf.
        while !model.is_empty() {
            assert_eq!(tree.remove(0), Some(model.remove(0)));
            if model.len().is_multiple_of(97) {
                expect(&tree, &model, &mut rng);
            }
        }
        expect(&tree, &model, &mut rng);
        assert_eq!(tree.height(), 1);
    }

    #[test]
    fn built_in_one_pass_as_by_inserts() {
        let mut rng = Rng::new(7);
        for n in [0usize, 1, 7, 8, 9, 63, 64, 65, 1000, 4097] {
            let runs: Vec<Run> = (0..n as u64)
                .map(|i| Run(vec![i * 10, i * 10 + 1]))
                .collect();
            let built = Tree::from_vec(runs.clone());
            expect(&built, &runs, &mut rng);
            // Full leaves: the fewest levels for n items.
            let mut levels = 1;
            let mut width = MAX;
            while width < n {
                (levels, width) = (levels + 1, width * MAX);
            }
            assert_eq!(built.height(), levels, "{n} items");
            let mut grown: Tree<Run> = Tree::default();
            for r in &runs {
                grown.insert(grown.items(), vec![r.clone()]);
            }
            expect(&grown, &runs, &mut rng);
            // A batch larger than a node splits into equal shares at every level.
            let mut batch: Tree<Run> = Tree::default();
            batch.insert(0, runs.clone());
            expect(&batch, &runs, &mut rng);
        }
    }

    /// A mover that counts what it is given and says stop every `every` items.
    struct Counter {
        vecs: usize,
        items: usize,
        every: usize,
        asked: usize,
    }

    impl Mover for Counter {
        fn bytes(&mut self, _: &mut Box<[u8]>) {}
        fn vec<U>(&mut self, v: &mut Vec<U>) {
            // A copy in a new buffer, as the defragmenter would make.
            let mut moved = Vec::with_capacity(v.capacity());
            moved.append(v);
            *v = moved;
            self.vecs += 1;
        }
        fn boxed<U>(&mut self, _: &mut Box<U>) {}
        fn should_stop(&mut self) -> bool {
            self.asked += 1;
            self.asked.is_multiple_of(self.every)
        }
    }

    #[test]
    fn defrag_resumes_where_it_stopped() {
        let runs: Vec<Run> = (0..1000u64).map(|i| Run(vec![i; 3])).collect();
        let mut tree = Tree::from_vec(runs.clone());
        let nodes = tree.allocs() - runs.len();
        for every in [1, 7, 64, 5000] {
            let mut m = Counter {
                vecs: 0,
                items: 0,
                every,
                asked: 0,
            };
            let (mut from, mut steps) = (0, 0);
            while let Some(next) = tree.defrag(from, &mut m) {
                assert!(next > from, "{next} after {from}");
                (from, steps) = (next, steps + 1);
            }
            m.items = m.asked;
            // Every item and every node once, in as many steps as the stops.
            assert_eq!(m.items, runs.len(), "every {every}");
            assert_eq!(m.vecs, runs.len() + nodes, "every {every}");
            assert_eq!(steps, runs.len() / every, "every {every}");
            expect(&tree, &runs, &mut Rng::new(1));
        }
    }
}
