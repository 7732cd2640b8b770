//! The rate limit configuration: envoyproxy/ratelimit's YAML format, read from one file or a
//! directory of files, checked whole before it is used. What the reference's parser accepts is
//! accepted and what it refuses is refused, with the file and the path named.

use crate::yaml::{self, Kind, Node};
use slidingwindow_client::MAX_EXACT;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The time unit of a limit; a limit of `requests_per_unit` per unit is a rolling window of the
/// length the reference divides time by (a month is 30 days, a year 365).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// As the reference reads it: the proto enum's name in any case (UNKNOWN is no unit).
    pub fn parse(text: &str) -> Option<Unit> {
        match text.to_uppercase().as_str() {
            "SECOND" => Some(Unit::Second),
            "MINUTE" => Some(Unit::Minute),
            "HOUR" => Some(Unit::Hour),
            "DAY" => Some(Unit::Day),
            "WEEK" => Some(Unit::Week),
            "MONTH" => Some(Unit::Month),
            "YEAR" => Some(Unit::Year),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }
}

/// Where a limit's statistics are counted: the domain and one part per descriptor level
/// (`key` or `key_value`), named as the reference names them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatKey {
    pub domain: String,
    pub parts: Vec<String>,
}

/// A limit: at most `requests_per_unit` requests in any window of one `unit`.
#[derive(Debug)]
pub struct Limit {
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub name: String,
    /// Counted and reported, never refused.
    pub shadow: bool,
    /// Refuses the request only when every quota-mode descriptor of it is over its limit.
    pub quota: bool,
    /// Names of other limits this one drops from a request that matches both.
    pub replaces: Vec<String>,
    /// Statistics per request value (`detailed_metric` on the descriptor holding the limit).
    pub detailed_metric: bool,
    /// The entry's own statistics key (values as configured).
    pub stat: StatKey,
    /// The counters of `stat`, found on first use (see metrics.rs).
    pub counters: OnceLock<Arc<crate::metrics::Counters>>,
    /// Our extension `lease: {size, duration_ms}`: permits taken in bulk for busy keys.
    pub lease: Option<LeaseSpec>,
    /// Our extension `precision: MS`: `PRECISION MS` on this limit's calls.
    pub precision: Option<u64>,
}

/// A `rate_limit`'s `lease` (this service's extension): `size` permits for `duration_ms`, with
/// the limit's `precision` if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseSpec {
    pub size: u64,
    pub duration_ms: u64,
    pub precision: Option<u64>,
}

impl Limit {
    /// An Envoy descriptor's own `limit` override (the reference neither shadows nor names it).
    pub fn overriding(requests_per_unit: u32, unit: Unit, stat: StatKey) -> Limit {
        Limit {
            requests_per_unit,
            unit,
            name: String::new(),
            shadow: false,
            quota: false,
            replaces: Vec::new(),
            detailed_metric: false,
            stat,
            counters: OnceLock::new(),
            lease: None,
            precision: None,
        }
    }
}

impl PartialEq for Limit {
    fn eq(&self, o: &Limit) -> bool {
        (
            self.requests_per_unit,
            self.unit,
            &self.name,
            self.shadow,
            self.quota,
            &self.replaces,
            self.detailed_metric,
            &self.stat,
            self.lease,
            self.precision,
        ) == (
            o.requests_per_unit,
            o.unit,
            &o.name,
            o.shadow,
            o.quota,
            &o.replaces,
            o.detailed_metric,
            &o.stat,
            o.lease,
            o.precision,
        )
    }
}

impl Eq for Limit {}

/// What a matched descriptor is subject to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Limit(Arc<Limit>),
    /// Never counted: OK without a Redis call. Its `replaces` still drop other limits.
    Unlimited {
        replaces: Vec<String>,
    },
}

impl Rule {
    pub fn replaces(&self) -> &[String] {
        match self {
            Rule::Limit(l) => &l.replaces,
            Rule::Unlimited { replaces } => replaces,
        }
    }
}

/// A `value` with `*` in it: each `*` matches zero or more characters, in order.
#[derive(Debug)]
struct Pattern {
    parts: Vec<String>,
}

impl Pattern {
    fn new(text: &str) -> Pattern {
        Pattern {
            parts: text.split('*').map(str::to_owned).collect(),
        }
    }

    /// The reference's wildcard match: the first part a prefix, the last a suffix, the others
    /// found in order between them.
    fn matches(&self, value: &str) -> bool {
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

/// One level of nested descriptors.
#[derive(Debug, Default)]
struct Level {
    /// `key: k, value: v`.
    exact: HashMap<(String, String), Branch>,
    /// `key: k, value` with `*`, in the file's order (the first match wins).
    wildcard: Vec<(String, Pattern, Branch)>,
    /// `key: k` without a value: any value, each value counted on its own.
    any: HashMap<String, Branch>,
    /// `key` or `key_value`, as the reference names entries (two alike are an error there).
    names: HashSet<String>,
}

impl Level {
    fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[derive(Debug)]
struct Branch {
    rule: Option<Rule>,
    children: Level,
    value_to_metric: bool,
    share_threshold: bool,
    /// `key` or `key_value` (the configured value): this level's part of a statistics key.
    stat_part: String,
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

/// Every domain's descriptor tree.
#[derive(Debug, Default)]
pub struct Config {
    domains: HashMap<String, Level>,
    /// Fields read and ignored (`file: path (why)`), reported when the config is loaded.
    pub ignored: Vec<String>,
    /// The files read.
    pub files: Vec<PathBuf>,
    /// Every `lease` the limits carry.
    pub leases: BTreeSet<LeaseSpec>,
    /// Some limit carries a `precision`.
    pub precise: bool,
}

/// A config that cannot be used: the file, the path inside it, what is wrong.
#[derive(Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}: {}: {}",
                self.file.display(),
                self.path,
                self.message
            )
        }
    }
}

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
    /// One YAML file, or every `*.yaml`/`*.yml` file of a directory (not recursive, dot files
    /// skipped). A domain is defined in one file only, unless `merge` (MERGE_DOMAIN_CONFIG): then
    /// each file's descriptors join the domain's top level.
    pub fn load(path: &Path, merge: bool) -> Result<Config, ConfigError> {
        Config::from_texts(&Config::read_texts(path)?, merge)
    }

    /// The files a `--config` path names, with their texts.
    pub fn read_texts(path: &Path) -> Result<Vec<(PathBuf, String)>, ConfigError> {
        let mut texts = Vec::new();
        for file in files(path)? {
            let text = std::fs::read_to_string(&file).map_err(|e| ConfigError {
                file: file.clone(),
                path: String::new(),
                message: e.to_string(),
            })?;
            texts.push((file, text));
        }
        Ok(texts)
    }

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

    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    pub fn domains(&self) -> usize {
        self.domains.len()
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

/// The reference's statistics names: `:` and `|` become `_`, as do the dots of an IPv4 address.
pub fn sanitize(s: &str) -> String {
    let mut out: Vec<u8> = s
        .bytes()
        .map(|b| if b == b':' || b == b'|' { b'_' } else { b })
        .collect();
    let mut i = 0;
    while i < out.len() {
        match ipv4_at(&out, i) {
            Some(end) => {
                for b in &mut out[i..end] {
                    if *b == b'.' {
                        *b = b'_';
                    }
                }
                i = end;
            }
            None => i += 1,
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// `\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}` starting at `i`: where it ends.
fn ipv4_at(s: &[u8], i: usize) -> Option<usize> {
    let mut at = i;
    for group in 0..4 {
        let run = s[at..].iter().take_while(|b| b.is_ascii_digit()).count();
        if run == 0 || (group < 3 && run > 3) {
            return None;
        }
        at += run.min(3);
        if group < 3 {
            if s.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
    }
    Some(at)
}

/// The files a `--config` path names.
fn files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let err = |message: String| ConfigError {
        file: path.to_path_buf(),
        path: String::new(),
        message,
    };
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| err(e.to_string()))? {
        let p = entry.map_err(|e| err(e.to_string()))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        if yaml && !name.starts_with('.') && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(err("no *.yaml or *.yml file in this directory".into()));
    }
    Ok(files)
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
            Some(Node::Scalar {
                kind: Kind::Int(n),
                text,
            }) => u64::try_from(*n)
                .ok()
                .filter(|v| (1..=MAX_EXACT).contains(v))
                .ok_or_else(|| bad(text))?,
            Some(other) => return Err(bad(other.kind_name())),
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
                Some(Node::Scalar {
                    kind: Kind::Int(n),
                    text,
                }) => u64::try_from(*n)
                    .ok()
                    .filter(|v| (1..=MAX_EXACT).contains(v))
                    .ok_or_else(|| bad(text)),
                Some(other) => Err(bad(other.kind_name())),
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

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_texts(&[(PathBuf::from("t.yaml"), text.to_owned())], false)
    }

    fn limit(c: &Config, entries: &[(&str, &str)]) -> Option<(u32, Unit)> {
        match c.lookup("d", entries) {
            Lookup::Found(Match {
                rule: Rule::Limit(l),
                ..
            }) => Some((l.requests_per_unit, l.unit)),
            _ => None,
        }
    }

    const MATCHING: &str = "
domain: d
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: path
    value: /v1/*/orders/*
    rate_limit: {unit: hour, requests_per_unit: 8}
  - key: mid
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: blank
    value: ''
    rate_limit: {unit: month, requests_per_unit: 2}
";

    #[test]
    fn most_specific_match_and_wildcards_anywhere() {
        let c = parse(MATCHING).unwrap();
        assert_eq!(
            limit(&c, &[("remote_address", "1.2.3.4")]),
            Some((10, Unit::Second))
        );
        assert_eq!(
            limit(&c, &[("remote_address", "50.0.0.5")]),
            Some((0, Unit::Second))
        );
        assert_eq!(limit(&c, &[("path", "/api/x")]), Some((7, Unit::Minute)));
        assert_eq!(
            limit(&c, &[("path", "/v1/u7/orders/9")]),
            Some((8, Unit::Hour))
        );
        assert_eq!(limit(&c, &[("path", "/v1/u7/carts/9")]), None);
        assert_eq!(limit(&c, &[("mid", "barab")]), Some((20, Unit::Minute)));
        assert_eq!(limit(&c, &[("mid", "barb")]), Some((20, Unit::Minute)));
        assert_eq!(limit(&c, &[("mid", "bar")]), None);
        assert_eq!(limit(&c, &[("path", "/other")]), None);
        let nested = [("message_type", "marketing"), ("to_number", "2061111111")];
        assert_eq!(limit(&c, &nested), Some((5, Unit::Day)));
        // Depth must match: the first entry alone has no rule, nor a deeper request.
        assert_eq!(limit(&c, &nested[..1]), None);
        assert_eq!(limit(&c, &[("remote_address", "1"), ("x", "y")]), None);
        assert!(matches!(
            c.lookup("d", &[("ldap", "u")]),
            Lookup::Found(Match {
                rule: Rule::Unlimited { .. },
                ..
            })
        ));
        assert_eq!(c.lookup("other", &[("ldap", "u")]), Lookup::NoDomain);
        assert_eq!(c.lookup("d", &[]), Lookup::NoMatch);
        // `value: ''` is the key alone.
        assert_eq!(limit(&c, &[("blank", "anything")]), Some((2, Unit::Month)));
    }

    #[test]
    fn patterns() {
        let p = |t: &str, v: &str| Pattern::new(t).matches(v);
        assert!(p("a*", "a") && p("a*", "abc") && !p("a*", "b"));
        assert!(p("*", "") && p("*x", "yx") && !p("*x", "xy"));
        assert!(p("a*b*c", "abc") && p("a*b*c", "aXbYc") && !p("a*b*c", "acb"));
        // The fixed parts may not overlap.
        assert!(!p("ab*ba", "aba") && p("ab*ba", "abba"));
    }

    #[test]
    fn units_are_the_references_dividers() {
        let secs: Vec<u64> = ["second", "MINUTE", "Hour", "day", "week", "month", "year"]
            .iter()
            .map(|u| Unit::parse(u).unwrap().seconds())
            .collect();
        assert_eq!(secs, [1, 60, 3600, 86_400, 604_800, 2_592_000, 31_536_000]);
        assert_eq!(Unit::parse("unknown"), None);
        assert_eq!(Unit::parse("fortnight"), None);
    }

    #[test]
    fn errors_name_the_path() {
        let cases = [
            (
                "descriptors: []",
                "domain",
                "config file cannot have empty domain",
            ),
            (
                "domain: d\ndescriptors:\n  - value: v",
                "descriptors[0]",
                "descriptor has empty key",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}",
                "descriptors[0].rate_limit.unit",
                "invalid rate limit unit 'fortnight': expected second, minute, hour, day, week, month or year",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        rate_limit: {unit: second, requests_per_unit: -1}",
                "descriptors[0].descriptors[0].rate_limit.requests_per_unit",
                "expected an integer from 0 to 4294967295",
            ),
            ("domain: d\nfoo: 1", "foo", "unknown field"),
            (
                "domain: d\ndescriptors:\n  - key: k\n  - key: k",
                "descriptors[1]",
                "duplicate descriptor composite key 'd.k'",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a_b\n  - key: a\n    value: b",
                "descriptors[1]",
                "duplicate descriptor composite key 'd.a_b'",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}",
                "descriptors[0].rate_limit.unit",
                "should not specify rate limit unit when unlimited",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, replaces: [{}]}",
                "descriptors[0].rate_limit.replaces[0]",
                "should not have an empty replaces entry",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, name: n, replaces: [{name: n}]}",
                "descriptors[0].rate_limit.replaces[0]",
                "replaces should not contain name of same descriptor",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true",
                "descriptors[0].share_threshold",
                "share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1.5}",
                "descriptors[0].rate_limit.requests_per_unit",
                "a number with a fraction or exponent is not a valid value",
            ),
            (
                "domain: d\ndescriptors: [k]",
                "descriptors[0]",
                "a list holds mappings only, found a string",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, lease: 100}",
                "descriptors[0].rate_limit.lease",
                "expected a mapping {size: N, duration_ms: D}, found an integer",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    lease: {size: 1, duration_ms: 1}",
                "descriptors[0].lease",
                "lease (this service's extension) belongs in a rate_limit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, lease: {size: 0, duration_ms: 10}}",
                "descriptors[0].rate_limit.lease.size",
                "expected an integer from 1 to 9007199254740992, found 0",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, lease: {size: 11, duration_ms: 10}}",
                "descriptors[0].rate_limit.lease.size",
                "a lease holds at most the limit's requests_per_unit (10), not 11",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, lease: {size: 5, duration_ms: -1}}",
                "descriptors[0].rate_limit.lease.duration_ms",
                "expected an integer from 1 to 9007199254740992, found -1",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, lease: {size: 5, duration_ms: 0.5}}",
                "descriptors[0].rate_limit.lease.duration_ms",
                "expected an integer from 1 to 9007199254740992, found a number with a fraction",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, lease: {size: 5}}",
                "descriptors[0].rate_limit.lease.duration_ms",
                "missing: a lease has size and duration_ms",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, lease: {size: 5, duration_ms: 5, ttl: 1}}",
                "descriptors[0].rate_limit.lease.ttl",
                "unknown field (a lease has size and duration_ms)",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, lease: {size: 5, duration_ms: 5}}",
                "descriptors[0].rate_limit.lease",
                "a lease is for an enforced limit, not with unlimited",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 10, lease: {size: 5, duration_ms: 5}}",
                "descriptors[0].rate_limit.lease",
                "a lease is for an enforced limit, not with shadow_mode",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    precision: 100",
                "descriptors[0].precision",
                "precision (this service's extension) belongs in a rate_limit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, precision: 100}",
                "descriptors[0].rate_limit.precision",
                "precision is for a counted limit, not with unlimited",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, precision: 0}",
                "descriptors[0].rate_limit.precision",
                "expected an integer number of ms from 1 to 9007199254740992, found 0",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, precision: 9007199254740993}",
                "descriptors[0].rate_limit.precision",
                "expected an integer number of ms from 1 to 9007199254740992, found 9007199254740993",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, precision: -5}",
                "descriptors[0].rate_limit.precision",
                "expected an integer number of ms from 1 to 9007199254740992, found -5",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, precision: 1s}",
                "descriptors[0].rate_limit.precision",
                "expected an integer number of ms from 1 to 9007199254740992, found a string",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, precision: 2.5}",
                "descriptors[0].rate_limit.precision",
                "expected an integer number of ms from 1 to 9007199254740992, found a number with a fraction",
            ),
        ];
        for (text, path, message) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!(
                (e.path.as_str(), e.message.as_str()),
                (path, message),
                "{text}"
            );
            assert_eq!(e.to_string(), format!("t.yaml: {path}: {message}"));
        }
        assert!(
            parse("domain: [")
                .unwrap_err()
                .to_string()
                .starts_with("t.yaml: ")
        );
    }

    #[test]
    fn what_the_reference_accepts() {
        let c = parse(
            "domain: d
descriptors:
  - key: k
    name: not-here
    detailed_metric: true
    quota_mode: yes
    metadata: {owner: team-a, nested: {list: [1, 2.5]}}
    rate_limit: {unit: year, name: n, replaces: [{name: x}]}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: z
    value: 0123
    rate_limit: {unit: Minute, requests_per_unit: 0x10}
",
        )
        .unwrap();
        let Lookup::Found(m) = c.lookup("d", &[("k", "v")]) else {
            panic!()
        };
        let Rule::Limit(l) = m.rule else { panic!() };
        // A missing requests_per_unit is 0.
        assert_eq!(
            (l.requests_per_unit, l.unit, l.quota, l.detailed_metric),
            (0, Unit::Year, true, true)
        );
        assert_eq!(l.replaces, ["x"]);
        assert_eq!(
            c.ignored,
            ["t.yaml: descriptors[0].name (has no meaning here)"]
        );
        // detailed_metric: the request's value is in the statistics key.
        assert_eq!(m.stat.unwrap().parts, ["k_v"]);
        let Lookup::Found(files) = c.lookup("d", &[("files", "files/a.pdf")]) else {
            panic!()
        };
        assert_eq!(files.shared, Some(vec![Some("files/*")]));
        assert_eq!(files.stat, None);
        assert_eq!(limit(&c, &[("z", "0123")]), Some((16, Unit::Minute)));
    }

    #[test]
    fn statistics_keys() {
        let c = parse(
            "domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value: GET
        descriptors:
          - key: subject
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: act
    value: read*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 60}
",
        )
        .unwrap();
        let stat = |entries: &[(&str, &str)]| match c.lookup("d", entries) {
            Lookup::Found(m) => m.stat.map(|s| s.parts).unwrap_or_else(|| match m.rule {
                Rule::Limit(l) => l.stat.parts.clone(),
                Rule::Unlimited { .. } => vec![],
            }),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            stat(&[("route", "api"), ("method", "GET"), ("subject", "7")]),
            ["route_api", "method_GET", "subject"]
        );
        assert_eq!(stat(&[("ip", "1.2.3.4")]), ["ip"]);
        assert_eq!(stat(&[("act", "readfile")]), ["act_readfile"]);
        assert_eq!(sanitize("ip_10.0.0.1:80|x"), "ip_10_0_0_1_80_x");
        assert_eq!(sanitize("v1.2.3"), "v1.2.3");
        assert_eq!(sanitize("1234.5.6.7"), "1234_5_6_7");
    }

    #[test]
    fn leases() {
        // The third limit's max: below its lease's size, then above.
        let text = |max: u32| {
            format!(
                "domain: d
descriptors:
  - key: a
    rate_limit: {{unit: second, requests_per_unit: 100, lease: {{size: 100, duration_ms: 50}}}}
  - key: b
    rate_limit: {{unit: minute, requests_per_unit: 10}}
  - key: c
    rate_limit: {{unit: hour, requests_per_unit: {max}, lease: {{duration_ms: 50, size: 100}}}}
"
            )
        };
        assert_eq!(
            parse(&text(50)).unwrap_err().to_string(),
            "t.yaml: descriptors[2].rate_limit.lease.size: a lease holds at most the limit's requests_per_unit (50), not 100"
        );
        let c = parse(&text(1000)).unwrap();
        let lease = |key: &str| match c.lookup("d", &[(key, "x")]) {
            Lookup::Found(Match {
                rule: Rule::Limit(l),
                ..
            }) => l.lease,
            other => panic!("{other:?}"),
        };
        let spec = LeaseSpec {
            size: 100,
            duration_ms: 50,
            precision: None,
        };
        assert_eq!(
            (lease("a"), lease("b"), lease("c")),
            (Some(spec), None, Some(spec))
        );
        assert_eq!(c.leases.iter().copied().collect::<Vec<_>>(), vec![spec]);
    }

    #[test]
    fn precision() {
        let c = parse(
            "domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 100, precision: 1000, lease: {size: 10, duration_ms: 50}}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 10, precision: 250}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 10, lease: {size: 10, duration_ms: 50}}
",
        )
        .unwrap();
        let of = |key: &str| match c.lookup("d", &[(key, "x")]) {
            Lookup::Found(Match {
                rule: Rule::Limit(l),
                ..
            }) => (l.precision, l.lease),
            other => panic!("{other:?}"),
        };
        let spec = |precision| LeaseSpec {
            size: 10,
            duration_ms: 50,
            precision,
        };
        assert_eq!(of("a"), (Some(1000), Some(spec(Some(1000)))));
        assert_eq!(of("b"), (Some(250), None));
        assert_eq!(of("c"), (None, Some(spec(None))));
        // One lease map per spec: the same lease with and without a precision are two.
        assert_eq!(c.leases.len(), 2);
        assert!(c.precise);
        let plain = parse(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
        );
        assert!(!plain.unwrap().precise);
    }

    #[test]
    fn merge_domains() {
        let texts = [
            (PathBuf::from("a.yaml"), "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n".to_string()),
            (PathBuf::from("b.yaml"), "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n".to_string()),
        ];
        let e = Config::from_texts(&texts, false).unwrap_err();
        assert_eq!(e.file, PathBuf::from("b.yaml"));
        let c = Config::from_texts(&texts, true).unwrap();
        assert_eq!(limit(&c, &[("a", "x")]), Some((1, Unit::Second)));
        assert_eq!(limit(&c, &[("b", "x")]), Some((2, Unit::Second)));
        let again = [texts[0].clone(), texts[0].clone()];
        let e = Config::from_texts(&again, true).unwrap_err();
        assert_eq!(e.message, "duplicate descriptor composite key 'd.a'");
    }
}
