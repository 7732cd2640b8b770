//! Lease objects by key, for a program whose hot keys are not known in advance (a gateway's
//! tenants, an Envoy descriptor's values): one [`Lease`] per key, made on a key's first call
//! with the limits the caller gives, leasing only while the key's traffic fills a lease within
//! its duration (`when_busy`), so that quiet keys get one exact call per request. Bounded in
//! keys and bytes: a new key first evicts the least recently used ones idle for longer than
//! `idle`, then as many as the bounds need; an evicted object is closed (its unused permits
//! go back). [`LeaseMap::close_all`] closes every object, for shutdown.

use crate::client::Client;
use crate::error::Error;
use crate::lease::{Charge, Clock, Counters, Lease, LeaseConfig, LeaseReply, Source, Stats, Take};
use crate::limit::{Limit, Now, logged_score};
use crate::lru::Lru;
use crate::reply::Reply;
use crate::request::{Call, Check, Refund};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How a lease map leases and how large it may grow.
#[derive(Clone)]
pub struct LeaseMapConfig {
    /// Every object's configuration (`when_busy` is on by default here).
    pub lease: LeaseConfig,
    /// Most keys held.
    pub max_keys: usize,
    /// Most bytes held, counting each key, its object and the map's entry.
    pub max_bytes: usize,
    /// A key unused for this long is evicted before any other when a new key comes.
    pub idle: Duration,
}

impl LeaseMapConfig {
    /// Leases of `size` permits for `duration_ms` on the server's clock, for busy keys only; at
    /// most 10,000 keys and 16 MiB, keys idle for 10 s evicted first.
    pub fn new(size: u64, duration_ms: u64) -> LeaseMapConfig {
        LeaseMapConfig {
            lease: LeaseConfig::new(size, duration_ms).when_busy(true),
            max_keys: 10_000,
            max_bytes: 16 << 20,
            idle: Duration::from_secs(10),
        }
    }
}

setters!(LeaseMapConfig {
    lease: LeaseConfig,
    max_keys: usize,
    max_bytes: usize,
    idle: Duration,
});

/// The map's counters: every object's, summed (see [`Stats`]), and its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapStats {
    pub leases: Stats,
    /// Keys held now.
    pub keys: usize,
    /// Bytes they are counted as.
    pub bytes: usize,
    /// Objects made (a key's first call, or again after its eviction).
    pub created: u64,
    /// Objects evicted (idle, or to make room).
    pub evicted: u64,
}

/// Shared by every clone; cheap to clone.
#[derive(Clone)]
pub struct LeaseMap {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    cfg: LeaseMapConfig,
    state: Mutex<State>,
    stats: Arc<Counters>,
    created: AtomicU64,
    evicted: AtomicU64,
    /// Evicted objects still closing (close_all waits for them).
    closing: AtomicUsize,
    closed_one: Notify,
}

struct State {
    lru: Lru<Entry>,
    closed: bool,
}

struct Entry {
    lease: Lease,
    last: Instant,
}

impl LeaseMap {
    /// Checks the configuration once (as [`Lease::new`] would for a key); objects are made on
    /// each key's first call.
    pub fn new(client: Client, cfg: LeaseMapConfig) -> Result<LeaseMap, Error> {
        if cfg.lease.size == 0 || cfg.lease.duration_ms == 0 {
            return Err(Error::Invalid(format!(
                "a lease holds at least 1 permit for at least 1 ms, not {} for {} ms",
                cfg.lease.size, cfg.lease.duration_ms
            )));
        }
        Ok(LeaseMap {
            inner: Arc::new(Inner {
                client,
                state: Mutex::new(State {
                    lru: Lru::new(cfg.max_keys, cfg.max_bytes),
                    closed: false,
                }),
                cfg,
                stats: Arc::default(),
                created: AtomicU64::new(0),
                evicted: AtomicU64::new(0),
                closing: AtomicUsize::new(0),
                closed_one: Notify::new(),
            }),
        })
    }

    /// Without waiting, as [`Lease::try_take`] on `key`'s object (made now if the key has none,
    /// or none for these limits). An error: the limits cannot be leased (a max below the size).
    /// After [`LeaseMap::close_all`]: always [`Take::Exact`].
    pub fn try_take(
        &self,
        key: &[u8],
        limits: &[Limit],
        at_ms: Option<u64>,
    ) -> Result<Take, Error> {
        let inner = &self.inner;
        let mut st = inner.lock();
        if st.closed {
            return Ok(Take::Exact);
        }
        let now = Instant::now();
        if let Some(e) = st.lru.get(key).filter(|e| e.lease.has_limits(limits)) {
            e.last = now;
            return Ok(e.lease.try_take(at_ms));
        }
        if entry_bytes(key, limits) > inner.cfg.max_bytes {
            // Larger than the whole map: never held, so never leased.
            return Ok(Take::Exact);
        }
        let lease = Lease::counted(
            inner.client.clone(),
            key,
            limits,
            inner.cfg.lease.clone(),
            inner.stats.clone(),
        )?;
        inner.created.fetch_add(1, Ordering::Relaxed);
        let take = lease.try_take(at_ms);
        inner.insert(&mut st, key, lease, now);
        Ok(take)
    }

    /// As [`Lease::take`] on `key`'s object: a permit from a lease, a refusal from memory, or
    /// `None` for an exact call of the caller's own.
    pub async fn take(&self, key: &[u8], limits: &[Limit]) -> Result<Option<LeaseReply>, Error> {
        loop {
            match self.try_take(key, limits, None)? {
                Take::Permit(r) | Take::Refused(r) => return Ok(Some(r)),
                Take::Exact => return Ok(None),
                Take::Wait(p) => {
                    if !p.wait().await? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// One request on `key`: a permit from its lease or a refusal from memory, else one exact
    /// ALLOW (on the objects' clock, its refusal then remembered by the key's object), the same
    /// typed reply either way.
    pub async fn allow(&self, key: &[u8], limits: &[Limit]) -> Result<LeaseReply, Error> {
        if let Some(r) = self.take(key, limits).await? {
            return Ok(r);
        }
        let clock = &self.inner.cfg.lease.clock;
        let now = match clock {
            Clock::Server => Now::Server,
            Clock::Own(f) => Now::Ms(f()),
        };
        let precision = self.inner.cfg.lease.precision;
        let check = Check::new(key, limits).now(now).precision(precision);
        let call = Call::allow(&check.detail(now == Now::Server))?;
        let stats = &self.inner.stats;
        stats.bump_exact();
        let mut reply = self.inner.client.call(&call).await.inspect_err(|_| {
            stats.bump_error();
        })?;
        let at_ms = match now {
            Now::Ms(t) => t,
            Now::Server => reply.detail.take().map_or(0, |d| d.now_ms),
        };
        let charge = reply.allowed.then(|| {
            stats.bump_exact_admitted();
            Charge::exact(logged_score(at_ms, precision))
        });
        self.remember(key, limits, &reply, at_ms);
        Ok(LeaseReply {
            reply,
            at_ms,
            source: Source::Exact,
            charge,
        })
    }

    /// Remembers the refusal of an exact call on `key` with these limits, decided at `at_ms`
    /// (the `now` sent, or DETAIL's), in the key's object: its requests are then refused from
    /// memory until the reply's retry time (or a refund of the object's). For a caller whose own
    /// exact call (after [`Take::Exact`]) was on this key and limits alone; an admission, a
    /// refusal that never fits, or a key without an object changes nothing.
    pub fn remember(&self, key: &[u8], limits: &[Limit], reply: &Reply, at_ms: u64) {
        let lease = self
            .inner
            .lock()
            .lru
            .peek(key)
            .filter(|e| e.lease.has_limits(limits))
            .map(|e| e.lease.clone());
        if let Some(lease) = lease {
            lease.remember(reply, at_ms);
        }
    }

    /// Gives an admitted request's permit on `key` back: into the live lease it came from (no
    /// call), else `REFUND key 1 AT` the time it was logged at (also when the key's object has
    /// been evicted since).
    pub async fn give_back(&self, key: &[u8], charge: Charge) -> Result<u64, Error> {
        let lease = self.inner.lock().lru.peek(key).map(|e| e.lease.clone());
        match lease {
            Some(lease) => lease.give_back(charge).await,
            None => {
                let stats = &self.inner.stats;
                stats.bump_refund(1);
                let at = Now::Ms(charge.logged_at());
                let removed = self.inner.client.refund(&Refund::new(key, 1).at(at)).await;
                if removed.is_err() {
                    stats.bump_error();
                }
                if let (Ok(_), Some(hook)) = (&removed, self.inner.cfg.lease.refund_hook()) {
                    hook(key);
                }
                removed.map(|_| 1)
            }
        }
    }

    /// Closes every object (their unused permits go back, leases in flight are waited for) and
    /// waits for evicted ones still closing; later calls are exact ([`Take::Exact`]). How many
    /// permits went back here; the first error, if any refund failed (the others still ran).
    pub async fn close_all(&self) -> Result<u64, Error> {
        let inner = &self.inner;
        let entries = {
            let mut st = inner.lock();
            st.closed = true;
            st.lru.drain()
        };
        let mut closes = tokio::task::JoinSet::new();
        for (_, e) in entries {
            closes.spawn(async move { e.lease.close().await });
        }
        let mut back = 0;
        let mut first_error = None;
        while let Some(done) = closes.join_next().await {
            match done {
                Ok(Ok(n)) => back += n,
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(join) => {
                    first_error.get_or_insert(Error::Invalid(format!("close failed: {join}")));
                }
            }
        }
        loop {
            let done = inner.closed_one.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if inner.closing.load(Ordering::Acquire) == 0 {
                break;
            }
            done.await;
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(back),
        }
    }

    pub fn stats(&self) -> MapStats {
        let inner = &self.inner;
        let (keys, bytes) = {
            let st = inner.lock();
            (st.lru.len(), st.lru.bytes())
        };
        MapStats {
            leases: inner.stats.snapshot(),
            keys,
            bytes,
            created: inner.created.load(Ordering::Relaxed),
            evicted: inner.evicted.load(Ordering::Relaxed),
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change under the lock is one map operation: the state is whole whatever a
        // panicking holder did.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `key`'s object: keys idle for longer than `idle` leave first, then the bounds evict
    /// the least recently used. Every object that leaves is closed in a task of its own.
    fn insert(self: &Arc<Self>, st: &mut State, key: &[u8], lease: Lease, now: Instant) {
        let mut gone = Vec::new();
        while let Some((_, e)) = st.lru.oldest() {
            if now.saturating_duration_since(e.last) < self.cfg.idle {
                break;
            }
            match st.lru.pop_oldest() {
                Some((_, e)) => gone.push(e.lease),
                None => break,
            }
        }
        let extra = entry_bytes(key, lease.limits()) - key.len() - Lru::<Entry>::ENTRY_BYTES;
        st.lru
            .insert(key, Entry { lease, last: now }, extra, |_, e| {
                gone.push(e.lease)
            });
        for lease in gone {
            self.evicted.fetch_add(1, Ordering::Relaxed);
            self.closing.fetch_add(1, Ordering::AcqRel);
            let this = self.clone();
            tokio::spawn(async move {
                // A failed refund is counted in the objects' errors; the permits then stay until
                // their window passes, as a dead process's would.
                let _ = lease.close().await;
                this.closing.fetch_sub(1, Ordering::AcqRel);
                this.closed_one.notify_waiters();
            });
        }
    }
}

/// What a key's entry is counted as: the key in the map and in its object, the object, the map's
/// entry.
fn entry_bytes(key: &[u8], limits: &[Limit]) -> usize {
    2 * key.len() + Lease::object_bytes(limits.len()) + Lru::<Entry>::ENTRY_BYTES
}

/// A request that is not admitted gives each of its leased permits back ([`LeaseMap::give_back`]:
/// each `(map, key, charge)`), so that it is charged to every key or to none. Every permit is
/// tried; the first error is answered.
pub async fn give_back_all<'a>(
    permits: impl IntoIterator<Item = (&'a LeaseMap, &'a [u8], Charge)>,
) -> Result<(), Error> {
    let mut first = Ok(());
    for (map, key, charge) in permits {
        if let Err(e) = map.give_back(key, charge).await
            && first.is_ok()
        {
            first = Err(e);
        }
    }
    first
}
