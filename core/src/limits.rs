//! The limits of one call (the positional `window max`, then each `LIMIT window max`), what each
//! says after the call, and the choice of the one that binds the reply.

pub use super::error::{MAX_KEYS, MAX_LIMITS};

/// One `window max` pair, window already in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limit {
    pub window_ms: u64,
    pub max: u64,
}

/// A call's limits: limit 0 is the positional one, then each `LIMIT` option in order. A call
/// without options allocates nothing, and the struct stays small enough to move for free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    first: Limit,
    more: Vec<Limit>,
}

impl Limits {
    /// The positional limit alone.
    pub fn new(first: Limit) -> Limits {
        Limits {
            first,
            more: Vec::new(),
        }
    }

    /// Adds a `LIMIT` option; false (and nothing added) when there are already `MAX_LIMITS`.
    pub fn push(&mut self, limit: Limit) -> bool {
        if self.count() >= MAX_LIMITS {
            return false;
        }
        self.more.push(limit);
        true
    }

    /// Every limit, in position order.
    pub fn iter(&self) -> impl Iterator<Item = &Limit> + Clone {
        std::iter::once(&self.first).chain(&self.more)
    }

    /// How many limits, the positional one included (never 0).
    pub fn count(&self) -> usize {
        1 + self.more.len()
    }

    /// The positional limit, when it is the only one.
    pub fn only(&self) -> Option<Limit> {
        self.more.is_empty().then_some(self.first)
    }

    /// Whether the call named `LIMIT` options (its reply then carries the binding limit).
    pub fn has_options(&self) -> bool {
        !self.more.is_empty()
    }

    /// `Wmax`: the log keeps this much, and an admission sets the TTL to it.
    pub fn longest_window_ms(&self) -> u64 {
        self.iter().fold(0, |w, l| w.max(l.window_ms))
    }
}

/// The limits of an ALLOWALL call over its `keys` keys: each `LIMIT keyno window max` in
/// position order, with its key (0-based); at most `MAX_LIMITS` on one key of at most `MAX_KEYS`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyedLimits {
    keys: usize,
    items: Vec<(usize, Limit)>,
    per_key: [u8; MAX_KEYS],
}

impl KeyedLimits {
    /// No limit yet on `keys` keys, with room for `n` limits, so that a well-formed call
    /// allocates once.
    pub fn with_capacity(keys: usize, n: usize) -> KeyedLimits {
        KeyedLimits {
            keys,
            items: Vec::with_capacity(n.min(MAX_KEYS * MAX_LIMITS)),
            per_key: [0; MAX_KEYS],
        }
    }

    /// How many limits `key` has so far.
    pub fn on_key(&self, key: usize) -> usize {
        self.per_key.get(key).map_or(0, |n| usize::from(*n))
    }

    /// Adds a limit on `key`; false (and nothing added) for a key past `MAX_KEYS` or one that
    /// has `MAX_LIMITS` already.
    pub fn push(&mut self, key: usize, limit: Limit) -> bool {
        match self.per_key.get_mut(key) {
            Some(n) if usize::from(*n) < MAX_LIMITS => {
                *n += 1;
                self.items.push((key, limit));
                true
            }
            _ => false,
        }
    }

    /// Every limit with its key, in position order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Limit)> + Clone + '_ {
        self.items.iter().copied()
    }

    pub fn count(&self) -> usize {
        self.items.len()
    }

    /// `Wmax_k`: key `key` keeps this much, and an admission sets its TTL to it.
    pub fn longest_window_ms(&self, key: usize) -> u64 {
        self.iter()
            .filter(|(k, _)| *k == key)
            .fold(0, |w, (_, l)| w.max(l.window_ms))
    }

    /// The first key without a limit.
    pub fn first_unlimited(&self) -> Option<usize> {
        (0..self.keys).find(|k| self.on_key(*k) == 0)
    }
}

/// A call's limits, whether one key's (`Limits`, ALLOW and PEEK) or several keys'
/// (`KeyedLimits`, ALLOWALL and PEEKALL): what the decision and the TTLs read of them.
pub trait Scope {
    /// Keys the call names, each with its log.
    fn keys(&self) -> usize;
    /// How many limits, over every key.
    fn count(&self) -> usize;
    /// Each limit with its key (an index into the call's logs), in position order.
    fn each(&self) -> impl Iterator<Item = (usize, Limit)> + Clone + '_;
    /// `Wmax_k`: key `key` keeps this much, and an admission sets its TTL to it.
    fn wmax(&self, key: usize) -> u64;
    /// Whether the reply names the binding limit (a sixth integer).
    fn named(&self) -> bool;
}

impl Scope for Limits {
    fn keys(&self) -> usize {
        1
    }

    fn count(&self) -> usize {
        Limits::count(self)
    }

    fn each(&self) -> impl Iterator<Item = (usize, Limit)> + Clone + '_ {
        self.iter().map(|l| (0, *l))
    }

    fn wmax(&self, _key: usize) -> u64 {
        self.longest_window_ms()
    }

    fn named(&self) -> bool {
        self.has_options()
    }
}

impl Scope for KeyedLimits {
    fn keys(&self) -> usize {
        self.keys
    }

    fn count(&self) -> usize {
        KeyedLimits::count(self)
    }

    fn each(&self) -> impl Iterator<Item = (usize, Limit)> + Clone + '_ {
        self.iter()
    }

    fn wmax(&self, key: usize) -> u64 {
        self.longest_window_ms(key)
    }

    fn named(&self) -> bool {
        true
    }
}

/// What one limit says after the call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Standing {
    pub window_ms: u64,
    pub count: u64,
    pub remaining: u64,
    /// -1 when the cost exceeds this limit's max; else ms until the cost fits this limit.
    pub retry_ms: i64,
}

/// Orders retries with -1 (never) above every wait.
fn retry_rank(retry_ms: i64) -> i128 {
    if retry_ms < 0 {
        i128::MAX
    } else {
        i128::from(retry_ms)
    }
}

/// The call's answer, gathered one limit at a time in position order, with no list kept: the
/// binding limit so far and the call's retry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    seen: usize,
    binding: usize,
    bound: Standing,
    retry_ms: i64,
}

impl Tally {
    #[inline]
    pub fn push(&mut self, s: Standing) {
        let key = |s: &Standing| {
            (
                std::cmp::Reverse(s.remaining),
                retry_rank(s.retry_ms),
                s.window_ms,
            )
        };
        // Strictly better only: on a full tie the earlier position stays.
        if self.seen == 0 || key(&s) > key(&self.bound) {
            self.binding = self.seen;
            self.bound = s;
        }
        self.retry_ms = if self.retry_ms < 0 || s.retry_ms < 0 {
            -1
        } else {
            self.retry_ms.max(s.retry_ms)
        };
        self.seen += 1;
    }

    /// The binding limit: the least remaining; ties go to the larger retry (-1 counting as
    /// infinite), then the longer window, then the earlier position. Its index and standing.
    pub fn binding(&self) -> (usize, Standing) {
        (self.binding, self.bound)
    }

    /// The call's `retry_after_ms`: -1 if any limit can never take the cost, else the longest
    /// wait, so that a call of the same cost then fits every limit.
    pub fn retry_ms(&self) -> i64 {
        self.retry_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(window_s: u64, remaining: u64, retry_ms: i64) -> Standing {
        Standing {
            window_ms: window_s * 1000,
            count: 0,
            remaining,
            retry_ms,
        }
    }

    #[test]
    fn the_binding_limit() {
        // (standings, binding index, combined retry)
        let cases: &[(&[Standing], usize, i64)] = &[
            (&[st(10, 3, 0)], 0, 0),
            // The least remaining wins, wherever it is.
            (&[st(10, 3, 0), st(60, 1, 500)], 1, 500),
            (&[st(10, 0, 900), st(60, 1, 0)], 0, 900),
            // Equal remaining: the larger retry.
            (&[st(60, 0, 100), st(1, 0, 800)], 1, 800),
            // -1 counts as infinite, both for the tie and for the combined retry.
            (&[st(60, 0, 100), st(1, 0, -1)], 1, -1),
            (&[st(60, 0, -1), st(1, 0, 100)], 0, -1),
            // -1 on a limit with more remaining: not binding, but the call can never pass.
            (&[st(60, 0, 100), st(1, 5, -1)], 0, -1),
            // Equal remaining and retry: the longer window.
            (&[st(1, 2, 0), st(60, 2, 0), st(10, 2, 0)], 1, 0),
            // Everything equal: the earlier position.
            (&[st(60, 2, 0), st(60, 2, 0), st(60, 2, 0)], 0, 0),
            (&[st(1, 9, 0), st(60, 2, 7), st(60, 2, 7)], 1, 7),
            // Both -1: longer window, then position.
            (&[st(1, 0, -1), st(5, 0, -1), st(5, 0, -1)], 1, -1),
            (&[], 0, 0),
        ];
        for (standings, b, retry) in cases {
            let mut tally = Tally::default();
            for s in *standings {
                tally.push(*s);
            }
            assert_eq!(tally.binding().0, *b, "{standings:?}");
            assert_eq!(tally.retry_ms(), *retry, "{standings:?}");
            if let Some(s) = standings.get(*b) {
                assert_eq!(tally.binding().1, *s);
            }
        }
    }

    #[test]
    fn keyed_limits_at_most_sixteen_a_key() {
        let l = |w: u64| Limit {
            window_ms: w * 1000,
            max: 1,
        };
        let mut all = KeyedLimits::with_capacity(2, 4);
        assert_eq!(all.first_unlimited(), Some(0));
        assert!(all.push(1, l(5)));
        assert!(all.push(0, l(1)));
        assert!(all.push(1, l(60)));
        assert_eq!(all.first_unlimited(), None);
        let mut three = all.clone();
        three.keys = 3;
        assert_eq!(three.first_unlimited(), Some(2));
        assert_eq!(Scope::keys(&all), 2);
        assert_eq!(all.wmax(1), 60_000);
        assert!(all.named());
        assert!(!Limits::new(l(1)).named());
        assert_eq!(Limits::new(l(7)).wmax(0), 7000);
        assert_eq!(Scope::keys(&Limits::new(l(7))), 1);
        assert_eq!(all.longest_window_ms(1), 60_000);
        assert_eq!(all.longest_window_ms(0), 1000);
        assert_eq!(all.longest_window_ms(2), 0);
        let order: Vec<usize> = all.iter().map(|(k, _)| k).collect();
        assert_eq!(order, [1, 0, 1]);
        for _ in 2..MAX_LIMITS {
            assert!(all.push(1, l(2)));
        }
        assert_eq!(all.on_key(1), MAX_LIMITS);
        assert!(!all.push(1, l(2)));
        assert!(!all.push(MAX_KEYS, l(2)));
        assert!(all.push(MAX_KEYS - 1, l(2)));
        assert_eq!(all.count(), MAX_LIMITS + 2);
    }

    #[test]
    fn at_most_sixteen_limits() {
        let one = Limit {
            window_ms: 1000,
            max: 1,
        };
        let mut limits = Limits::new(Limit {
            window_ms: 5000,
            max: 3,
        });
        assert!(!limits.has_options());
        assert_eq!(limits.only().map(|l| l.max), Some(3));
        assert_eq!(limits.longest_window_ms(), 5000);
        for i in 1..MAX_LIMITS {
            assert!(limits.push(Limit {
                window_ms: 1000 * (i as u64 + 1) * 2,
                ..one
            }));
        }
        assert_eq!(limits.count(), MAX_LIMITS);
        assert!(!limits.push(one));
        assert_eq!(limits.count(), MAX_LIMITS);
        assert!(limits.has_options());
        assert_eq!(limits.only(), None);
        assert_eq!(limits.longest_window_ms(), 32_000);
        assert_eq!(limits.iter().next().map(|l| l.max), Some(3));
        assert_eq!(limits.iter().count(), MAX_LIMITS);
        // Equality looks at the limits only.
        let mut a = Limits::new(one);
        let b = Limits::new(one);
        assert_eq!(a, b);
        a.push(one);
        assert_ne!(a, b);
    }
}
