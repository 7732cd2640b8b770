//! What one ShouldRateLimit request asks of Redis: per descriptor, its limit (configured, or
//! Envoy's override), key, cost and how it meets its log, after the reference's `replaces`; and
//! how the charged descriptors are split into ALLOWALL calls. No I/O here.

use crate::config::{Config, Limit, Lookup, Rule, Unit};
use crate::metrics::Metrics;
use crate::stat::{Counters, StatKey, sanitize};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use std::collections::HashSet;
use std::sync::Arc;

/// SLIDINGWINDOW.ALLOWALL takes at most 16 keys.
pub const MAX_KEYS_PER_CALL: usize = 16;

/// How a counted descriptor meets its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Charged: in an ALLOWALL with the request's other enforced descriptors (all or none), or on
    /// its own ALLOW for `shadow_mode` (never refuses) and `quota_mode` (refuses only with every
    /// quota descriptor of the request).
    Charge,
    /// `is_negative_hits`: its hits are given back with SLIDINGWINDOW.REFUND.
    Refund,
    /// A hits_addend of 0: looked at, not charged; over the limit when one more request would be.
    Look,
    /// Charged with a permit from its lease (our `lease` extension, see leases.rs): no call.
    Leased,
}

#[derive(Debug, Clone)]
pub enum Action {
    /// No config entry matches, the domain is unknown, or another limit `replaces` this one:
    /// OK, nothing read or written.
    Unknown,
    /// `unlimited: true`: OK, never counted.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over the limit (no Redis call).
    Zero {
        limit: Arc<Limit>,
        counters: Arc<Counters>,
        cost: u64,
    },
    Count {
        key: Vec<u8>,
        limit: Arc<Limit>,
        counters: Arc<Counters>,
        cost: u64,
        mode: Mode,
    },
}

impl Action {
    pub fn limit(&self) -> Option<&Limit> {
        match self {
            Action::Zero { limit, .. } | Action::Count { limit, .. } => Some(limit),
            Action::Unknown | Action::Unlimited => None,
        }
    }

    /// Charged in the request's ALLOWALL: enforced, neither shadow nor quota.
    pub fn in_allowall(&self) -> bool {
        matches!(self, Action::Count { limit, mode: Mode::Charge, .. } if !limit.shadow && !limit.quota)
    }

    /// An enforced limit that refuses every request (not shadow, not quota).
    pub fn refuses_all(&self) -> bool {
        matches!(self, Action::Zero { limit, .. } if !limit.shadow && !limit.quota)
    }
}

/// A request the service cannot serve (gRPC INVALID_ARGUMENT).
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

/// One action per descriptor, in request order.
pub fn actions(
    config: &Config,
    metrics: &Metrics,
    prefix: &str,
    domain: &str,
    request_hits: u32,
    descriptors: &[RateLimitDescriptor],
) -> Result<Vec<Action>, Invalid> {
    // An unset (0) request hits_addend counts 1, as Envoy documents.
    let request_cost = u64::from(request_hits.max(1));
    let known = config.has_domain(domain);
    let mut replaced: HashSet<&str> = HashSet::new();
    // First every descriptor's rule (collecting what the matched rules replace), then the
    // actions, the replaced limits dropped.
    let mut found = Vec::with_capacity(descriptors.len());
    for (i, d) in descriptors.iter().enumerate() {
        let entries: Vec<(&str, &str)> = d
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        let cost = d.hits_addend.as_ref().map_or(request_cost, |v| v.value);
        let negative = d.is_negative_hits;
        // Envoy's per-descriptor override replaces the configured limit, for a known domain.
        if let Some(o) = &d.limit
            && known
        {
            let unit = override_unit(o.unit).ok_or_else(|| {
                Invalid(format!(
                    "descriptors[{i}].limit.unit: {} is not a unit this service can count in (second to year)",
                    o.unit
                ))
            })?;
            let stat = override_stat(domain, &entries);
            let limit = Arc::new(Limit::overriding(o.requests_per_unit, unit, stat));
            let counters = metrics.of(&limit, None);
            let key = key(prefix, domain, &entries, None);
            found.push(Found::Limit(limit, counters, key, cost, negative));
            continue;
        }
        found.push(match config.lookup(domain, &entries) {
            Lookup::NoDomain => {
                metrics.domain_not_found(domain);
                Found::Nothing
            }
            Lookup::NoMatch => Found::Nothing,
            Lookup::Found(m) => {
                replaced.extend(m.rule.replaces().iter().map(String::as_str));
                match m.rule {
                    Rule::Unlimited { .. } => Found::Unlimited,
                    Rule::Limit(l) => Found::Limit(
                        l.clone(),
                        metrics.of(l, m.stat.as_ref()),
                        key(prefix, domain, &entries, m.shared.as_deref()),
                        cost,
                        negative,
                    ),
                }
            }
        });
    }
    Ok(found
        .into_iter()
        .map(|f| {
            let (limit, counters, key, cost, negative) = match f {
                Found::Nothing => return Action::Unknown,
                Found::Unlimited => return Action::Unlimited,
                Found::Limit(l, c, k, cost, n) => (l, c, k, cost, n),
            };
            // A named limit that another matched descriptor replaces is dropped, as the reference
            // drops it (no status, no count).
            if !limit.name.is_empty() && replaced.contains(limit.name.as_str()) {
                return Action::Unknown;
            }
            if limit.requests_per_unit == 0 {
                return Action::Zero {
                    limit,
                    counters,
                    cost,
                };
            }
            let mode = if cost == 0 {
                Mode::Look
            } else if negative {
                Mode::Refund
            } else {
                Mode::Charge
            };
            Action::Count {
                key,
                limit,
                counters,
                cost,
                mode,
            }
        })
        .collect())
}

/// A descriptor's rule before `replaces` is applied.
enum Found {
    Nothing,
    Unlimited,
    Limit(Arc<Limit>, Arc<Counters>, Vec<u8>, u64, bool),
}

/// The reference's statistics key of an override: `domain.k_v.k2_v2` from the request.
fn override_stat(domain: &str, entries: &[(&str, &str)]) -> StatKey {
    StatKey {
        domain: domain.to_owned(),
        parts: entries
            .iter()
            .map(|(k, v)| {
                sanitize(&if v.is_empty() {
                    (*k).to_owned()
                } else {
                    format!("{k}_{v}")
                })
            })
            .collect(),
    }
}

/// The override's unit, with the reference's lengths; UNKNOWN (or a value outside the enum) is
/// no unit, and the request is refused with an error rather than left unlimited.
fn override_unit(unit: i32) -> Option<Unit> {
    match PbUnit::try_from(unit).ok()? {
        PbUnit::Second => Some(Unit::Second),
        PbUnit::Minute => Some(Unit::Minute),
        PbUnit::Hour => Some(Unit::Hour),
        PbUnit::Day => Some(Unit::Day),
        PbUnit::Week => Some(Unit::Week),
        PbUnit::Month => Some(Unit::Month),
        PbUnit::Year => Some(Unit::Year),
        PbUnit::Unknown => None,
    }
}

/// `<prefix>ratelimit:{domain}:k1=v1:k2=v2`. The domain is the hash tag, so a request's keys
/// share one cluster slot; `%`, `:`, `=`, `{` and `}` are percent-escaped so that distinct
/// descriptors never share a key and the tag is always the domain. An entry whose descriptor
/// shares one threshold (`share_threshold`) has the configured wildcard value in its place.
pub fn key(
    prefix: &str,
    domain: &str,
    entries: &[(&str, &str)],
    shared: Option<&[Option<&str>]>,
) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 16 + domain.len() + 24 * entries.len());
    k.extend_from_slice(prefix.as_bytes());
    k.extend_from_slice(b"ratelimit:{");
    escape(&mut k, domain);
    k.push(b'}');
    for (i, (key, value)) in entries.iter().enumerate() {
        k.push(b':');
        escape(&mut k, key);
        k.push(b'=');
        match shared.and_then(|s| s.get(i).copied().flatten()) {
            Some(pattern) => escape(&mut k, pattern),
            None => escape(&mut k, value),
        }
    }
    k
}

fn escape(out: &mut Vec<u8>, s: &str) {
    for &b in s.as_bytes() {
        if matches!(b, b'%' | b':' | b'=' | b'{' | b'}') {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
}

/// The ALLOWALL descriptors (indexes into `actions`) split into calls: one call when they share
/// one cost and one `precision`, have distinct keys and number at most 16 (the usual case);
/// otherwise one call per cost and precision, with a repeated key or a 17th key starting another
/// call.
pub fn groups(actions: &[Action]) -> Vec<(u64, Vec<usize>)> {
    let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
    for (i, a) in actions.iter().enumerate() {
        let Action::Count {
            key, cost, limit, ..
        } = a
        else {
            continue;
        };
        if !a.in_allowall() {
            continue;
        }
        let fits = |(c, members): &&mut (u64, Vec<usize>)| {
            *c == *cost
                && members.len() < MAX_KEYS_PER_CALL
                && members.iter().all(|&m| {
                    actions[m]
                        .limit()
                        .is_some_and(|l| l.precision == limit.precision)
                })
                && members.iter().all(|&m| match &actions[m] {
                    Action::Count { key: other, .. } => other != key,
                    _ => true,
                })
        };
        match groups.iter_mut().find(|g| fits(g)) {
            Some((_, members)) => members.push(i),
            None => groups.push((*cost, vec![i])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
        Entry, RateLimitOverride,
    };
    use envoy_types::pb::google::protobuf::UInt64Value;
    use std::path::PathBuf;

    fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn config(text: &str) -> Config {
        Config::from_texts(&[(PathBuf::from("t.yaml"), text.to_owned())], false).unwrap()
    }

    #[test]
    fn keys_are_injective_tagged_and_prefixed() {
        assert_eq!(key("", "d", &[("a", "b")], None), b"ratelimit:{d}:a=b");
        assert_eq!(
            key("p:", "d}{", &[("a:", "=b%")], None),
            b"p:ratelimit:{d%7D%7B}:a%3A=%3Db%25"
        );
        assert_ne!(
            key("", "d", &[("a", "b:c=d")], None),
            key("", "d", &[("a", "b"), ("c", "d")], None)
        );
        assert_eq!(
            key(
                "",
                "d",
                &[("f", "files/a"), ("u", "1")],
                Some(&[Some("files/*"), None])
            ),
            b"ratelimit:{d}:f=files/*:u=1"
        );
    }

    const CONFIG: &str = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: s\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: z\n    rate_limit: {unit: second, requests_per_unit: 0}\n  - key: u\n    rate_limit: {unlimited: true}\n  - key: q\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 2}\n";

    fn cost_mode(a: &Action) -> Option<(u64, Mode)> {
        match a {
            Action::Count { cost, mode, .. } => Some((*cost, *mode)),
            _ => None,
        }
    }

    #[test]
    fn costs_and_modes() {
        let config = config(CONFIG);
        let m = Metrics::new(0.8);
        let mut own = desc(&[("a", "2")]);
        own.hits_addend = Some(UInt64Value { value: 4 });
        let mut back = desc(&[("a", "3")]);
        back.is_negative_hits = true;
        let mut zero = desc(&[("a", "4")]);
        zero.hits_addend = Some(UInt64Value { value: 0 });
        let ds = [
            desc(&[("a", "1")]),
            own,
            back,
            zero,
            desc(&[("s", "1")]),
            desc(&[("z", "1")]),
            desc(&[("u", "1")]),
            desc(&[("nope", "1")]),
            desc(&[("q", "1")]),
        ];
        let acts = actions(&config, &m, "", "d", 0, &ds).unwrap();
        let got: Vec<_> = acts.iter().map(cost_mode).collect();
        assert_eq!(
            got,
            [
                Some((1, Mode::Charge)),
                Some((4, Mode::Charge)),
                Some((1, Mode::Refund)),
                Some((0, Mode::Look)),
                Some((1, Mode::Charge)),
                None,
                None,
                None,
                Some((1, Mode::Charge)),
            ]
        );
        assert!(acts[5].refuses_all());
        assert!(matches!(acts[6], Action::Unlimited));
        assert!(matches!(acts[7], Action::Unknown));
        assert!(!acts[4].in_allowall() && !acts[8].in_allowall());
        assert_eq!(groups(&acts), [(1, vec![0]), (4, vec![1])]);
        let three = actions(&config, &m, "", "d", 3, &ds[..1]).unwrap();
        assert_eq!(cost_mode(&three[0]), Some((3, Mode::Charge)));
    }

    #[test]
    fn replaces_and_overrides() {
        let config = config(
            "domain: d\ndescriptors:\n  - key: foo\n    rate_limit: {unit: minute, requests_per_unit: 1, name: base}\n  - key: over\n    rate_limit: {unit: minute, requests_per_unit: 9, replaces: [{name: base}]}\n",
        );
        let m = Metrics::new(0.8);
        let alone = actions(&config, &m, "", "d", 0, &[desc(&[("foo", "x")])]).unwrap();
        assert!(matches!(alone[0], Action::Count { .. }));
        let both = [desc(&[("foo", "x")]), desc(&[("over", "y")])];
        let acts = actions(&config, &m, "", "d", 0, &both).unwrap();
        assert!(matches!(acts[0], Action::Unknown));
        assert_eq!(acts[1].limit().map(|l| l.requests_per_unit), Some(9));
        let mut o = desc(&[("foo", "x")]);
        o.limit = Some(RateLimitOverride {
            requests_per_unit: 3,
            unit: PbUnit::Year as i32,
        });
        let acts = actions(&config, &m, "", "d", 0, std::slice::from_ref(&o)).unwrap();
        let l = acts[0].limit().unwrap();
        assert_eq!((l.requests_per_unit, l.unit.seconds()), (3, 31_536_000));
        assert_eq!(l.stat.parts, ["foo_x"]);
        o.limit = Some(RateLimitOverride {
            requests_per_unit: 3,
            unit: PbUnit::Unknown as i32,
        });
        assert!(actions(&config, &m, "", "d", 0, std::slice::from_ref(&o)).is_err());
        // An override for an unknown domain is not applied.
        let acts = actions(&config, &m, "", "other", 0, &[o]).unwrap();
        assert!(matches!(acts[0], Action::Unknown));
    }

    #[test]
    fn groups_split_on_repeats_and_size() {
        let config = config(CONFIG);
        let m = Metrics::new(0.8);
        let mut ds: Vec<RateLimitDescriptor> =
            (0..17).map(|i| desc(&[("a", &i.to_string())])).collect();
        ds.push(desc(&[("a", "0")]));
        let acts = actions(&config, &m, "", "d", 0, &ds).unwrap();
        let g = groups(&acts);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].1, (0..16).collect::<Vec<_>>());
        assert_eq!(g[1].1, [16, 17]);
    }

    #[test]
    fn groups_split_on_precision() {
        let config = config(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: p\n    rate_limit: {unit: minute, requests_per_unit: 5, precision: 1000}\n  - key: q\n    rate_limit: {unit: minute, requests_per_unit: 5, precision: 1000}\n",
        );
        let m = Metrics::new(0.8);
        let ds = [
            desc(&[("a", "x")]),
            desc(&[("p", "x")]),
            desc(&[("q", "x")]),
        ];
        let acts = actions(&config, &m, "", "d", 0, &ds).unwrap();
        let g = groups(&acts);
        assert_eq!(
            g.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>(),
            [vec![0], vec![1, 2]]
        );
    }
}
