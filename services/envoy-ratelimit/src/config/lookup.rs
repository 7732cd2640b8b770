//! The lookup: a request's descriptor matched against the tree as the reference matches it, and
//! the keys its values make.

use super::model::{Branch, Config, Level, Pattern, Rule};
use crate::stat::{StatKey, sanitize};

impl Pattern {
    /// The reference's wildcard match: the first part a prefix, the last a suffix, the others
    /// found in order between them.
    pub(super) fn matches(&self, value: &str) -> bool {
        let (first, last) = match self.parts.as_slice() {
            [only] => return only == value,
            [first, .., last] => (first, last),
            [] => return false,
        };
        let fixed: usize = self.parts.iter().map(String::len).sum();
        if value.len() < fixed
            || !value.starts_with(first.as_str())
            || !value.ends_with(last.as_str())
        {
            return false;
        }
        let mut rest = &value[first.len()..value.len() - last.len()];
        for part in &self.parts[1..self.parts.len() - 1] {
            match rest.find(part.as_str()) {
                Some(i) => rest = &rest[i + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// How a level was matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Exact,
    Wildcard,
    Any,
}

/// A matched descriptor's rule, and what the request's values change about it.
#[derive(Debug, PartialEq, Eq)]
pub struct Match<'a> {
    pub rule: &'a Rule,
    /// Per entry, the configured wildcard value that replaces the request's in the log's key
    /// (`share_threshold`); None when no entry shares one.
    pub shared: Option<Vec<Option<&'a str>>>,
    /// The statistics key when the request's values are part of it (`detailed_metric`,
    /// `value_to_metric`); None: the limit's own.
    pub stat: Option<StatKey>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// No config for this domain.
    NoDomain,
    /// No entry matches, or it has no rate_limit.
    NoMatch,
    Found(Match<'a>),
}

impl Config {
    /// The rule for one descriptor's entries, as the reference matches them: at each level
    /// `key` and `value` first, then the wildcard values (the first in file order that matches),
    /// then `key` alone; a rule applies only at the depth of the descriptor's last entry.
    pub fn lookup<'a>(&'a self, domain: &str, entries: &[(&str, &str)]) -> Lookup<'a> {
        let Some(mut level) = self.domains.get(domain) else {
            return Lookup::NoDomain;
        };
        let Some(last) = entries.len().checked_sub(1) else {
            return Lookup::NoMatch;
        };
        // Whether the request's values reach the statistics key or the log's key.
        let (mut dynamic, mut shared) = (false, false);
        for (i, &(key, value)) in entries.iter().enumerate() {
            let Some((node, by)) = find(level, key, value) else {
                return Lookup::NoMatch;
            };
            dynamic |= node.value_to_metric
                && match by {
                    By::Wildcard => true,
                    By::Any => !value.is_empty(),
                    By::Exact => false,
                };
            shared |= by == By::Wildcard && node.share_threshold;
            if i == last {
                let Some(rule) = &node.rule else {
                    return Lookup::NoMatch;
                };
                let detailed = matches!(rule, Rule::Limit(l) if l.detailed_metric);
                if !(dynamic || shared || detailed) {
                    return Lookup::Found(Match {
                        rule,
                        shared: None,
                        stat: None,
                    });
                }
                return Lookup::Found(self.resolve(domain, entries, rule, detailed));
            }
            if node.children.is_empty() {
                return Lookup::NoMatch;
            }
            level = &node.children;
        }
        Lookup::NoMatch
    }

    /// The second walk, for a match whose keys depend on the request's values: the shared
    /// wildcard values, and the statistics key as the reference builds it.
    fn resolve<'a>(
        &'a self,
        domain: &str,
        entries: &[(&str, &str)],
        rule: &'a Rule,
        detailed: bool,
    ) -> Match<'a> {
        let mut walk = Vec::with_capacity(entries.len());
        let mut level = self.domains.get(domain);
        for &(key, value) in entries {
            let Some((node, by)) = level.and_then(|l| find(l, key, value)) else {
                break;
            };
            let pattern = (by == By::Wildcard && node.share_threshold)
                .then(|| node.stat_part.get(key.len() + 1..))
                .flatten();
            walk.push((key, value, node, by, pattern));
            level = Some(&node.children);
        }
        let any_shared = walk.iter().any(|w| w.4.is_some());
        let parts = walk.iter().map(|&(key, value, node, by, pattern)| {
            let with = |v: &str| format!("{key}_{v}");
            match (pattern, detailed, by) {
                (Some(p), _, _) => with(p),
                // detailed_metric: every value as sent (the reference writes `key_` for an
                // empty one, unless some entry shares a threshold).
                (None, true, _) if any_shared && value.is_empty() => key.to_owned(),
                (None, true, _) => with(value),
                (None, false, By::Exact) => with(value),
                (None, false, By::Wildcard) if node.value_to_metric => with(value),
                (None, false, By::Wildcard) => node.stat_part.clone(),
                (None, false, By::Any) if node.value_to_metric && !value.is_empty() => with(value),
                (None, false, By::Any) => key.to_owned(),
            }
        });
        let stat = StatKey {
            domain: domain.to_owned(),
            parts: parts.map(|p| sanitize(&p)).collect(),
        };
        let own = match rule {
            Rule::Limit(l) => Some(&l.stat),
            Rule::Unlimited { .. } => None,
        };
        Match {
            rule,
            shared: any_shared.then(|| walk.iter().map(|w| w.4).collect()),
            stat: (own != Some(&stat)).then_some(stat),
        }
    }
}

/// One level's entry for `key`/`value`: exact, then wildcard, then key alone.
fn find<'l>(level: &'l Level, key: &str, value: &str) -> Option<(&'l Branch, By)> {
    if let Some(n) = level.exact.get(&(key.to_owned(), value.to_owned())) {
        return Some((n, By::Exact));
    }
    if let Some((_, _, n)) = level
        .wildcard
        .iter()
        .find(|(k, p, _)| k == key && p.matches(value))
    {
        return Some((n, By::Wildcard));
    }
    level.any.get(key).map(|n| (n, By::Any))
}
