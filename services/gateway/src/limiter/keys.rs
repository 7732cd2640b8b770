//! The keys a request is counted on: the identity's, its tenant's and the global one.

use super::{GLOBAL_KEY, Limiter};

/// The keys a request is counted on, in this order: the limits' and the headers' names' too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Identity = 0,
    Tenant = 1,
    Global = 2,
}

pub(super) const PARTS: [Part; 3] = [Part::Identity, Part::Tenant, Part::Global];
/// The keys that are shared between identities, and leased with --lease.
pub(super) const SHARED: [Part; 2] = [Part::Tenant, Part::Global];

/// A request's keys in one buffer: `rl:{identity}`, or with tenants `rl:{tenant}` then
/// `:identity` (the identity's key has the tenant's as its prefix); the global key is constant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub(super) buf: Vec<u8>,
    /// Where the tenant's key ends in `buf` (0: no tenant key).
    pub(super) tenant_end: usize,
    pub(super) identity: bool,
    pub(super) global: bool,
}

impl Keys {
    pub(super) fn get(&self, p: Part) -> Option<&[u8]> {
        match p {
            Part::Identity => self.identity.then_some(self.buf.as_slice()),
            Part::Tenant => self
                .buf
                .get(..self.tenant_end)
                .filter(|_| self.tenant_end > 0),
            Part::Global => self.global.then_some(GLOBAL_KEY),
        }
    }

    /// The deny cache's and the admission log's key: the first of them.
    pub fn first(&self) -> &[u8] {
        PARTS
            .iter()
            .find_map(|&p| self.get(p))
            .unwrap_or(GLOBAL_KEY)
    }
}

impl Limiter {
    pub(super) fn limits_of(&self, p: Part) -> &[slidingwindow_client::Limit] {
        &self.parts[p as usize]
    }

    /// The keys a request is counted on: `rl:{identity}`; with tenants `rl:{tenant}:<identity>`
    /// (when there are identity limits) and `rl:{tenant}`, one hash tag for one cluster slot;
    /// and `rl:global` with global limits.
    pub(super) fn keys(&self, identity: &[u8], tenant: Option<&[u8]>) -> Keys {
        let has_identity = !self.limits_of(Part::Identity).is_empty();
        let tenant = tenant.filter(|_| self.tenants);
        // A global limit alone has no key to build here: no allocation.
        let mut buf = match (tenant, has_identity) {
            (None, false) => Vec::new(),
            _ => Vec::with_capacity(8 + identity.len() + tenant.map_or(0, <[u8]>::len)),
        };
        let mut tenant_end = 0;
        match tenant {
            Some(t) => {
                buf.extend_from_slice(b"rl:{");
                buf.extend_from_slice(t);
                buf.push(b'}');
                tenant_end = buf.len();
                if has_identity {
                    buf.push(b':');
                    buf.extend_from_slice(identity);
                }
            }
            None if has_identity => {
                buf.extend_from_slice(b"rl:{");
                buf.extend_from_slice(identity);
                buf.push(b'}');
            }
            None => {}
        }
        Keys {
            buf,
            tenant_end,
            identity: has_identity,
            global: !self.limits_of(Part::Global).is_empty(),
        }
    }
}
