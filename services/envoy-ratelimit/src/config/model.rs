//! The config's model: units, limits and their rules, the descriptor tree of every domain, and
//! the error a config that cannot be used is.

use crate::stat::{Counters, StatKey};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
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
    pub counters: OnceLock<Arc<Counters>>,
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
pub(super) struct Pattern {
    pub(super) parts: Vec<String>,
}

impl Pattern {
    pub(super) fn new(text: &str) -> Pattern {
        Pattern {
            parts: text.split('*').map(str::to_owned).collect(),
        }
    }
}

/// One level of nested descriptors.
#[derive(Debug, Default)]
pub(super) struct Level {
    /// `key: k, value: v`.
    pub(super) exact: HashMap<(String, String), Branch>,
    /// `key: k, value` with `*`, in the file's order (the first match wins).
    pub(super) wildcard: Vec<(String, Pattern, Branch)>,
    /// `key: k` without a value: any value, each value counted on its own.
    pub(super) any: HashMap<String, Branch>,
    /// `key` or `key_value`, as the reference names entries (two alike are an error there).
    pub(super) names: HashSet<String>,
}

impl Level {
    pub(super) fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[derive(Debug)]
pub(super) struct Branch {
    pub(super) rule: Option<Rule>,
    pub(super) children: Level,
    pub(super) value_to_metric: bool,
    pub(super) share_threshold: bool,
    /// `key` or `key_value` (the configured value): this level's part of a statistics key.
    pub(super) stat_part: String,
}

/// Every domain's descriptor tree.
#[derive(Debug, Default)]
pub struct Config {
    pub(super) domains: HashMap<String, Level>,
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

impl Config {
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    pub fn domains(&self) -> usize {
        self.domains.len()
    }
}
