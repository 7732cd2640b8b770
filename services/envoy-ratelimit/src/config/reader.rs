//! The reader: envoyproxy/ratelimit's YAML format into the model. What the reference's parser
//! accepts is accepted and what it refuses is refused, with the file and the path named.

use super::model::{Branch, Config, ConfigError, LeaseSpec, Level, Limit, Pattern, Rule, Unit};
use crate::stat::{StatKey, sanitize};
use crate::yaml::{self, Kind, Node};
use slidingwindow_client::MAX_EXACT;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Every field name the reference's parser knows; it accepts each of them at any level (those
/// without a meaning there are ignored), and refuses any other.
const FIELDS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

const ROOT_FIELDS: [&str; 2] = ["domain", "descriptors"];
const DESCRIPTOR_FIELDS: [&str; 10] = [
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];
/// The fields of `rate_limit`, `lease` and `precision` (this service's extensions, which the
/// reference refuses) included; they are accepted nowhere else.
const RATE_LIMIT_FIELDS: [&str; 7] = [
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    LEASE,
    PRECISION,
];
const PRECISION: &str = "precision";
const LEASE: &str = "lease";
const LEASE_FIELDS: [&str; 2] = ["size", "duration_ms"];

impl Config {
    /// The config of these files' texts, in this order.
    pub fn from_texts(texts: &[(PathBuf, String)], merge: bool) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let mut origin: HashMap<String, PathBuf> = HashMap::new();
        for (file, text) in texts {
            config.files.push(file.clone());
            let mut reader = Reader {
                file,
                ignored: &mut config.ignored,
                leases: &mut config.leases,
                precise: &mut config.precise,
            };
            let (root, documents) = yaml::load(text).map_err(|e| reader.error("", e))?;
            if documents > 1 {
                reader.note(
                    "",
                    "documents after the first (the reference reads the first one)",
                );
            }
            let root = root.unwrap_or(Node::Map(Vec::new()));
            reader.validate(&root, "")?;
            let domain = reader
                .string(root.get("domain"), "domain")?
                .unwrap_or_default();
            if domain.is_empty() {
                return Err(reader.error("domain", "config file cannot have empty domain".into()));
            }
            reader.extra(&root, "", &ROOT_FIELDS);
            let level = match (config.domains.get_mut(&domain), origin.get(&domain)) {
                (Some(level), Some(_)) if merge => level,
                (Some(_), Some(first)) => {
                    return Err(reader.error(
                        "domain",
                        format!(
                            "domain {domain:?} is already defined in {} (MERGE_DOMAIN_CONFIG merges them)",
                            first.display()
                        ),
                    ));
                }
                _ => {
                    origin.insert(domain.clone(), file.clone());
                    config.domains.entry(domain.clone()).or_default()
                }
            };
            let stat = StatKey {
                domain: domain.clone(),
                parts: Vec::new(),
            };
            reader.level(level, root.get("descriptors"), "descriptors", &stat)?;
        }
        Ok(config)
    }
}

/// Reads one file's YAML, keeping the path for errors.
struct Reader<'a> {
    file: &'a Path,
    ignored: &'a mut Vec<String>,
    leases: &'a mut BTreeSet<LeaseSpec>,
    precise: &'a mut bool,
}

impl Reader<'_> {
    fn error(&self, path: &str, message: String) -> ConfigError {
        ConfigError {
            file: self.file.to_path_buf(),
            path: path.to_owned(),
            message,
        }
    }

    fn note(&mut self, path: &str, why: &str) {
        let at = if path.is_empty() {
            String::new()
        } else {
            format!(" {path}")
        };
        self.ignored
            .push(format!("{}:{at} ({why})", self.file.display()));
    }

    /// The reference's first pass over the whole file: every key a known field name, every list
    /// a list of mappings, every other value a string, integer, boolean or nothing (a float is
    /// refused); `metadata` holds anything.
    fn validate(&self, node: &Node, path: &str) -> Result<(), ConfigError> {
        let Node::Map(pairs) = node else {
            return Err(self.error(
                path,
                format!("expected a mapping, found {}", node.kind_name()),
            ));
        };
        for (k, v) in pairs {
            let Some(name) = k.as_str() else {
                return Err(self.error(
                    path,
                    format!("a key must be a string, found {}", k.kind_name()),
                ));
            };
            let at = join(path, name);
            if name == LEASE || name == PRECISION {
                // Our extensions: read (and checked) with their limit.
                if !path.ends_with("rate_limit") {
                    return Err(self.error(
                        &at,
                        format!("{name} (this service's extension) belongs in a rate_limit"),
                    ));
                }
                continue;
            }
            if !FIELDS.contains(&name) {
                return Err(self.error(&at, "unknown field".into()));
            }
            if name == "metadata" {
                continue;
            }
            match v {
                Node::Seq(items) => {
                    for (i, item) in items.iter().enumerate() {
                        let item_at = format!("{at}[{i}]");
                        if !matches!(item, Node::Map(_)) {
                            return Err(self.error(
                                &item_at,
                                format!("a list holds mappings only, found {}", item.kind_name()),
                            ));
                        }
                        self.validate(item, &item_at)?;
                    }
                }
                Node::Map(_) => self.validate(v, &at)?,
                Node::Scalar {
                    kind: Kind::Float, ..
                } => {
                    return Err(self.error(
                        &at,
                        "a number with a fraction or exponent is not a valid value".into(),
                    ));
                }
                Node::Scalar {
                    kind: Kind::Int(n), ..
                } if i64::try_from(*n).is_err() => {
                    return Err(self.error(&at, "an integer beyond 64 bits".into()));
                }
                Node::Scalar { .. } => {}
            }
        }
        Ok(())
    }

    /// Known field names that mean nothing where they stand: accepted, as the reference does.
    fn extra(&mut self, node: &Node, path: &str, meaningful: &[&str]) {
        if let Node::Map(pairs) = node {
            for (k, _) in pairs {
                if let Some(name) = k.as_str()
                    && !meaningful.contains(&name)
                {
                    self.note(&join(path, name), "has no meaning here");
                }
            }
        }
    }

    /// A scalar's text, as yaml.v2 puts it in a string field (`value: 500` is "500").
    fn string(&self, node: Option<&Node>, path: &str) -> Result<Option<String>, ConfigError> {
        match node {
            None => Ok(None),
            Some(n) if n.is_null() => Ok(None),
            Some(Node::Scalar { text, .. }) => Ok(Some(text.clone())),
            Some(other) => Err(self.error(
                path,
                format!("expected a string, found {}", other.kind_name()),
            )),
        }
    }

    fn boolean(&self, node: Option<&Node>, path: &str) -> Result<bool, ConfigError> {
        match node {
            None => Ok(false),
            Some(n) if n.is_null() => Ok(false),
            Some(Node::Scalar {
                kind: Kind::Bool(b),
                ..
            }) => Ok(*b),
            Some(other) => Err(self.error(
                path,
                format!("expected true or false, found {}", other.kind_name()),
            )),
        }
    }

    /// A list of descriptors (absent or empty: none) added to `level`.
    fn level(
        &mut self,
        level: &mut Level,
        node: Option<&Node>,
        path: &str,
        parent: &StatKey,
    ) -> Result<(), ConfigError> {
        let items = match node {
            None => return Ok(()),
            Some(n) if n.is_null() => return Ok(()),
            Some(Node::Seq(items)) => items,
            Some(other) => {
                return Err(self.error(
                    path,
                    format!("expected a list, found {}", other.kind_name()),
                ));
            }
        };
        for (i, item) in items.iter().enumerate() {
            let at = format!("{path}[{i}]");
            self.descriptor(level, item, &at, parent)?;
        }
        Ok(())
    }

    fn descriptor(
        &mut self,
        level: &mut Level,
        item: &Node,
        at: &str,
        parent: &StatKey,
    ) -> Result<(), ConfigError> {
        self.extra(item, at, &DESCRIPTOR_FIELDS);
        let key = self
            .string(item.get("key"), &join(at, "key"))?
            .unwrap_or_default();
        if key.is_empty() {
            return Err(self.error(at, "descriptor has empty key".into()));
        }
        // `value: ''` is no value: the key alone, as the reference reads it.
        let value = self
            .string(item.get("value"), &join(at, "value"))?
            .unwrap_or_default();
        let name = if value.is_empty() {
            key.clone()
        } else {
            format!("{key}_{value}")
        };
        let mut stat = parent.clone();
        stat.parts.push(sanitize(&name));
        if !level.names.insert(name.clone()) {
            return Err(self.error(
                at,
                format!(
                    "duplicate descriptor composite key '{}.{}'",
                    parent.domain,
                    stat.parts.join(".")
                ),
            ));
        }
        let flag = |r: &Self, field: &str| r.boolean(item.get(field), &join(at, field));
        let shadow = flag(self, "shadow_mode")?;
        let quota = flag(self, "quota_mode")?;
        let detailed_metric = flag(self, "detailed_metric")?;
        let value_to_metric = flag(self, "value_to_metric")?;
        let share_threshold = flag(self, "share_threshold")?;
        if share_threshold && !name.contains('*') {
            return Err(self.error(
                &join(at, "share_threshold"),
                format!(
                    "share_threshold can only be used with wildcard values (containing '*'), but found key '{name}'"
                ),
            ));
        }
        match item.get("metadata") {
            None | Some(Node::Map(_)) => {}
            Some(n) if n.is_null() => {}
            Some(other) => {
                return Err(self.error(
                    &join(at, "metadata"),
                    format!("expected a mapping, found {}", other.kind_name()),
                ));
            }
        }
        let rule = match item.get("rate_limit") {
            None => None,
            Some(n) if n.is_null() => None,
            Some(n) => Some(self.rule(
                n,
                &join(at, "rate_limit"),
                Flags {
                    shadow,
                    quota,
                    detailed_metric,
                },
                &stat,
            )?),
        };
        let mut node = Branch {
            rule,
            children: Level::default(),
            value_to_metric,
            share_threshold,
            stat_part: name,
        };
        self.level(
            &mut node.children,
            item.get("descriptors"),
            &join(at, "descriptors"),
            &stat,
        )?;
        if value.is_empty() {
            level.any.insert(key, node);
        } else if value.contains('*') {
            level.wildcard.push((key, Pattern::new(&value), node));
        } else {
            level.exact.insert((key, value), node);
        }
        Ok(())
    }

    fn rule(
        &mut self,
        node: &Node,
        path: &str,
        flags: Flags,
        stat: &StatKey,
    ) -> Result<Rule, ConfigError> {
        if !matches!(node, Node::Map(_)) {
            return Err(self.error(
                path,
                format!("expected a mapping, found {}", node.kind_name()),
            ));
        }
        self.extra(node, path, &RATE_LIMIT_FIELDS);
        let unit_path = join(path, "unit");
        let unit_text = self
            .string(node.get("unit"), &unit_path)?
            .unwrap_or_default();
        let unit = Unit::parse(&unit_text);
        let unlimited = self.boolean(node.get("unlimited"), &join(path, "unlimited"))?;
        let name = self
            .string(node.get("name"), &join(path, "name"))?
            .unwrap_or_default();
        let replaces = self.replaces(node.get("replaces"), &join(path, "replaces"), &name)?;
        let precision_path = join(path, PRECISION);
        let precision = self.precision(node.get(PRECISION), &precision_path)?;
        if unlimited && precision.is_some() {
            return Err(self.error(
                &precision_path,
                "precision is for a counted limit, not with unlimited".into(),
            ));
        }
        let lease_path = join(path, LEASE);
        let lease = self
            .lease(node.get(LEASE), &lease_path)?
            .map(|l| LeaseSpec { precision, ..l });
        if lease.is_some() {
            let mode = if unlimited {
                Some("unlimited")
            } else if flags.shadow {
                Some("shadow_mode")
            } else if flags.quota {
                Some("quota_mode")
            } else {
                None
            };
            if let Some(mode) = mode {
                return Err(self.error(
                    &lease_path,
                    format!("a lease is for an enforced limit, not with {mode}"),
                ));
            }
        }
        if unlimited {
            if unit.is_some() {
                return Err(self.error(
                    &unit_path,
                    "should not specify rate limit unit when unlimited".into(),
                ));
            }
            return Ok(Rule::Unlimited { replaces });
        }
        let Some(unit) = unit else {
            return Err(self.error(
                &unit_path,
                format!(
                    "invalid rate limit unit '{unit_text}': expected second, minute, hour, day, week, month or year"
                ),
            ));
        };
        let rpu_path = join(path, "requests_per_unit");
        // Missing, it is 0 (every request over the limit), as the reference reads it.
        let requests_per_unit = match node.get("requests_per_unit") {
            None => 0,
            Some(n) if n.is_null() => 0,
            Some(Node::Scalar {
                kind: Kind::Int(n), ..
            }) => u32::try_from(*n).map_err(|_| {
                self.error(&rpu_path, "expected an integer from 0 to 4294967295".into())
            })?,
            Some(other) => {
                return Err(self.error(
                    &rpu_path,
                    format!(
                        "expected an integer from 0 to 4294967295, found {}",
                        other.kind_name()
                    ),
                ));
            }
        };
        if let Some(l) = lease {
            if l.size > u64::from(requests_per_unit) {
                return Err(self.error(
                    &join(&lease_path, "size"),
                    format!(
                        "a lease holds at most the limit's requests_per_unit ({requests_per_unit}), not {}",
                        l.size
                    ),
                ));
            }
            self.leases.insert(l);
        }
        Ok(Rule::Limit(Arc::new(Limit {
            requests_per_unit,
            unit,
            name,
            shadow: flags.shadow,
            quota: flags.quota,
            replaces,
            detailed_metric: flags.detailed_metric,
            stat: stat.clone(),
            counters: OnceLock::new(),
            lease,
            precision,
        })))
    }

    /// `precision: MS`, an integer from 1 to 2^53 (the module's `PRECISION` range).
    fn precision(&mut self, node: Option<&Node>, path: &str) -> Result<Option<u64>, ConfigError> {
        let bad = |found: &str| {
            self.error(
                path,
                format!("expected an integer number of ms from 1 to {MAX_EXACT}, found {found}"),
            )
        };
        let p = match node {
            None => return Ok(None),
            Some(n) => exact(n).map_err(bad)?,
        };
        *self.precise = true;
        Ok(Some(p))
    }

    /// `lease: {size: N, duration_ms: D}`, both integers of at least 1, nothing else.
    fn lease(&self, node: Option<&Node>, path: &str) -> Result<Option<LeaseSpec>, ConfigError> {
        let pairs = match node {
            None => return Ok(None),
            Some(Node::Map(pairs)) => pairs,
            Some(other) => {
                return Err(self.error(
                    path,
                    format!(
                        "expected a mapping {{size: N, duration_ms: D}}, found {}",
                        other.kind_name()
                    ),
                ));
            }
        };
        for (k, _) in pairs {
            match k.as_str() {
                Some(name) if LEASE_FIELDS.contains(&name) => {}
                Some(name) => {
                    return Err(self.error(
                        &join(path, name),
                        "unknown field (a lease has size and duration_ms)".into(),
                    ));
                }
                None => {
                    return Err(self.error(
                        path,
                        format!("a key must be a string, found {}", k.kind_name()),
                    ));
                }
            }
        }
        let field = |name: &str| {
            let at = join(path, name);
            let bad = |found: &str| {
                self.error(
                    &at,
                    format!("expected an integer from 1 to {MAX_EXACT}, found {found}"),
                )
            };
            match node.and_then(|n| n.get(name)) {
                None => Err(self.error(&at, "missing: a lease has size and duration_ms".into())),
                Some(n) => exact(n).map_err(bad),
            }
        };
        Ok(Some(LeaseSpec {
            size: field("size")?,
            duration_ms: field("duration_ms")?,
            precision: None,
        }))
    }

    fn replaces(
        &mut self,
        node: Option<&Node>,
        path: &str,
        own: &str,
    ) -> Result<Vec<String>, ConfigError> {
        let items = match node {
            None => return Ok(Vec::new()),
            Some(n) if n.is_null() => return Ok(Vec::new()),
            Some(Node::Seq(items)) => items,
            Some(other) => {
                return Err(self.error(
                    path,
                    format!("expected a list, found {}", other.kind_name()),
                ));
            }
        };
        let mut names = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = format!("{path}[{i}]");
            self.extra(item, &at, &["name"]);
            let name = self
                .string(item.get("name"), &join(&at, "name"))?
                .unwrap_or_default();
            if name.is_empty() {
                return Err(self.error(&at, "should not have an empty replaces entry".into()));
            }
            if name == own {
                return Err(self.error(
                    &at,
                    "replaces should not contain name of same descriptor".into(),
                ));
            }
            names.push(name);
        }
        Ok(names)
    }
}

#[derive(Clone, Copy)]
struct Flags {
    shadow: bool,
    quota: bool,
    detailed_metric: bool,
}

/// An integer from 1 to `MAX_EXACT`, else what was found instead (the text, or the kind).
fn exact(node: &Node) -> Result<u64, &str> {
    match node {
        Node::Scalar {
            kind: Kind::Int(n),
            text,
        } => u64::try_from(*n)
            .ok()
            .filter(|v| (1..=MAX_EXACT).contains(v))
            .ok_or(text.as_str()),
        other => Err(other.kind_name()),
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}
