//! What one ShouldRateLimit request asks of Redis: per descriptor, its rule, key and cost, and
//! how the charged descriptors are split into ALLOWALL calls. No I/O here.

use crate::config::{Config, Limit, Rule, Unit};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;

/// SLIDINGWINDOW.ALLOWALL takes at most 16 keys.
pub const MAX_KEYS_PER_CALL: usize = 16;

/// How a counted descriptor meets its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Charged in an ALLOWALL with the request's other charged descriptors: all or none.
    Charge,
    /// `shadow_mode`: charged on its own (SLIDINGWINDOW.ALLOW), never refuses the request.
    Shadow,
    /// `is_negative_hits`: its hits are given back with SLIDINGWINDOW.REFUND.
    Refund,
    /// A hits_addend of 0: looked at (PEEK), not charged.
    Look,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// No config entry matches: OK, nothing read or written.
    Unknown,
    /// `unlimited: true`: OK, never counted.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over the limit (no Redis call; a shadow one is
    /// reported only).
    Zero(Limit),
    Count {
        key: Vec<u8>,
        limit: Limit,
        cost: u64,
        how: How,
    },
}

impl Action {
    pub fn limit(&self) -> Option<&Limit> {
        match self {
            Action::Zero(l) | Action::Count { limit: l, .. } => Some(l),
            Action::Unknown | Action::Unlimited => None,
        }
    }

    /// An enforced limit that refuses every request.
    pub fn refuses_all(&self) -> bool {
        matches!(self, Action::Zero(l) if !l.shadow)
    }
}

/// One action per descriptor, in request order.
pub fn actions(
    config: &Config,
    domain: &str,
    request_hits: u32,
    descriptors: &[RateLimitDescriptor],
) -> Vec<Action> {
    // An unset (0) request hits_addend counts 1, as Envoy documents.
    let request_cost = u64::from(request_hits.max(1));
    descriptors
        .iter()
        .map(|d| {
            let entries: Vec<(&str, &str)> = d
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            let rule = match &d.limit {
                // Envoy's per-descriptor override replaces the configured limit (known domains only).
                Some(o) if config.has_domain(domain) && !entries.is_empty() => {
                    override_unit(o.unit).map(|unit| {
                        Rule::Limit(Limit {
                            requests_per_unit: o.requests_per_unit,
                            unit,
                            name: String::new(),
                            shadow: false,
                        })
                    })
                }
                _ => config.lookup(domain, &entries).cloned(),
            };
            let limit = match rule {
                None => return Action::Unknown,
                Some(Rule::Unlimited) => return Action::Unlimited,
                Some(Rule::Limit(l)) => l,
            };
            if limit.requests_per_unit == 0 {
                return Action::Zero(limit);
            }
            let cost = d.hits_addend.map_or(request_cost, |v| v.value);
            let how = if cost == 0 {
                How::Look
            } else if d.is_negative_hits {
                How::Refund
            } else if limit.shadow {
                How::Shadow
            } else {
                How::Charge
            };
            Action::Count {
                key: key(domain, &entries),
                limit,
                cost,
                how,
            }
        })
        .collect()
}

/// The override's unit; month and year have no fixed length and are not applied.
fn override_unit(unit: i32) -> Option<Unit> {
    match PbUnit::try_from(unit).ok()? {
        PbUnit::Second => Some(Unit::Second),
        PbUnit::Minute => Some(Unit::Minute),
        PbUnit::Hour => Some(Unit::Hour),
        PbUnit::Day => Some(Unit::Day),
        PbUnit::Week => Some(Unit::Week),
        PbUnit::Unknown | PbUnit::Month | PbUnit::Year => None,
    }
}

/// `ratelimit:{domain}:k1=v1:k2=v2`. The domain is the hash tag, so a request's keys share one
/// cluster slot; `%`, `:`, `=`, `{` and `}` are percent-escaped so that distinct descriptors
/// never share a key and the tag is always the domain.
pub fn key(domain: &str, entries: &[(&str, &str)]) -> Vec<u8> {
    let mut k = b"ratelimit:{".to_vec();
    escape(&mut k, domain);
    k.push(b'}');
    for (key, value) in entries {
        k.push(b':');
        escape(&mut k, key);
        k.push(b'=');
        escape(&mut k, value);
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

/// Charged descriptors (indexes into `actions`) split into ALLOWALL calls: one call when they
/// share one cost, have distinct keys and number at most 16 (the usual case); otherwise one call
/// per cost, with a repeated key or a 17th key starting another call.
pub fn groups(actions: &[Action]) -> Vec<(u64, Vec<usize>)> {
    let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
    for (i, a) in actions.iter().enumerate() {
        let Action::Count {
            key,
            cost,
            how: How::Charge,
            ..
        } = a
        else {
            continue;
        };
        let fits = |(c, members): &&mut (u64, Vec<usize>)| {
            *c == *cost
                && members.len() < MAX_KEYS_PER_CALL
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
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::google::protobuf::UInt64Value;

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

    #[test]
    fn keys_are_injective_and_tagged() {
        assert_eq!(key("d", &[("a", "b")]), b"ratelimit:{d}:a=b");
        assert_eq!(
            key("d}{", &[("a:", "=b%")]),
            b"ratelimit:{d%7D%7B}:a%3A=%3Db%25"
        );
        assert_ne!(
            key("d", &[("a", "b:c=d")]),
            key("d", &[("a", "b"), ("c", "d")])
        );
    }

    #[test]
    fn costs_and_kinds() {
        let path = std::env::temp_dir().join(format!("envoy-plan-{}.yaml", std::process::id()));
        std::fs::write(
            &path,
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: s\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: z\n    rate_limit: {unit: second, requests_per_unit: 0}\n  - key: u\n    rate_limit: {unlimited: true}\n",
        )
        .unwrap();
        let config = Config::load(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
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
        ];
        let acts = actions(&config, "d", 0, &ds);
        let cost_how = |a: &Action| match a {
            Action::Count { cost, how, .. } => Some((*cost, *how)),
            _ => None,
        };
        let got: Vec<_> = acts.iter().map(cost_how).collect();
        assert_eq!(
            got,
            [
                Some((1, How::Charge)),
                Some((4, How::Charge)),
                Some((1, How::Refund)),
                Some((0, How::Look)),
                Some((1, How::Shadow)),
                None,
                None,
                None
            ]
        );
        assert!(acts[5].refuses_all());
        assert_eq!(acts[6], Action::Unlimited);
        assert_eq!(acts[7], Action::Unknown);
        assert_eq!(groups(&acts), [(1, vec![0]), (4, vec![1])]);
        assert_eq!(actions(&config, "d", 3, &ds[..1])[0].clone(), {
            let Action::Count { key, limit, .. } = acts[0].clone() else {
                panic!()
            };
            Action::Count {
                key,
                limit,
                cost: 3,
                how: How::Charge,
            }
        });
    }

    #[test]
    fn groups_split_on_repeats_and_size() {
        let limit = Limit {
            requests_per_unit: 1,
            unit: Unit::Second,
            name: String::new(),
            shadow: false,
        };
        let charge = |k: &str| Action::Count {
            key: k.as_bytes().to_vec(),
            limit: limit.clone(),
            cost: 1,
            how: How::Charge,
        };
        let mut acts: Vec<Action> = (0..17).map(|i| charge(&i.to_string())).collect();
        acts.push(charge("0"));
        let g = groups(&acts);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].1, (0..16).collect::<Vec<_>>());
        assert_eq!(g[1].1, [16, 17]);
    }
}
