//! The rate limit configuration: envoyproxy/ratelimit's YAML format, read from one file or a
//! directory of files, checked whole before the service starts.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use yaml_rust2::{Yaml, YamlLoader};

/// The time unit of a limit; a limit of `requests_per_unit` per unit is a rolling window of the
/// unit's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
}

impl Unit {
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
        }
    }

    fn parse(text: &str) -> Option<Unit> {
        match text.to_ascii_lowercase().as_str() {
            "second" => Some(Unit::Second),
            "minute" => Some(Unit::Minute),
            "hour" => Some(Unit::Hour),
            "day" => Some(Unit::Day),
            "week" => Some(Unit::Week),
            _ => None,
        }
    }
}

/// A limit: at most `requests_per_unit` requests in any window of one `unit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub name: String,
    /// Counted and reported, never refused.
    pub shadow: bool,
}

/// What a matched descriptor is subject to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Limit(Limit),
    /// Never counted: OK without a Redis call.
    Unlimited,
}

/// One level of nested descriptors.
#[derive(Debug, Default)]
struct Level {
    /// `key: k, value: v`.
    exact: HashMap<(String, String), Node>,
    /// `key: k, value: prefix*`, in the file's order.
    wildcard: Vec<(String, String, Node)>,
    /// `key: k` without a value: any value, each value counted on its own.
    any: HashMap<String, Node>,
}

#[derive(Debug, Default)]
struct Node {
    rule: Option<Rule>,
    children: Level,
}

/// Every domain's descriptor tree.
#[derive(Debug, Default)]
pub struct Config {
    domains: HashMap<String, Level>,
    /// Fields read but not implemented (`file: path`), reported once at start.
    pub ignored: Vec<String>,
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

/// Fields of the reference format this service reads and ignores: it keeps no metrics, and
/// `replaces` has no effect here.
const IGNORED: [&str; 2] = ["detailed_metric", "replaces"];

impl Config {
    /// One YAML file, or every `*.yaml`/`*.yml` file of a directory (not recursive, dot files
    /// skipped). A domain may be defined in one file only.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let err = |file: &Path, message: String| ConfigError {
            file: file.to_path_buf(),
            path: String::new(),
            message,
        };
        let files = if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|e| err(path, e.to_string()))?;
            let mut files = Vec::new();
            for entry in entries {
                let p = entry.map_err(|e| err(path, e.to_string()))?.path();
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
                if yaml && !name.starts_with('.') && p.is_file() {
                    files.push(p);
                }
            }
            files.sort();
            if files.is_empty() {
                return Err(err(
                    path,
                    "no *.yaml or *.yml file in this directory".into(),
                ));
            }
            files
        } else {
            vec![path.to_path_buf()]
        };
        let mut config = Config::default();
        let mut origin: HashMap<String, PathBuf> = HashMap::new();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|e| err(&file, e.to_string()))?;
            let (domain, level) = config.parse(&file, &text)?;
            if let Some(first) = origin.get(&domain) {
                return Err(ConfigError {
                    file,
                    path: "domain".into(),
                    message: format!(
                        "domain {domain:?} is already defined in {}",
                        first.display()
                    ),
                });
            }
            origin.insert(domain.clone(), file);
            config.domains.insert(domain, level);
        }
        Ok(config)
    }

    /// One file's text: its domain and descriptor tree.
    fn parse(&mut self, file: &Path, text: &str) -> Result<(String, Level), ConfigError> {
        let mut reader = Reader {
            file,
            ignored: &mut self.ignored,
        };
        let docs = YamlLoader::load_from_str(text).map_err(|e| reader.error("", e.to_string()))?;
        let root = match docs.as_slice() {
            [root] => root,
            [] => return Err(reader.error("", "the file is empty".into())),
            _ => return Err(reader.error("", "one YAML document per file".into())),
        };
        let map = reader.mapping(root, "", &["domain", "descriptors"])?;
        let domain = match reader.string(map.get("domain").copied(), "domain")? {
            Some(d) if !d.is_empty() => d,
            _ => return Err(reader.error("domain", "a non-empty domain is required".into())),
        };
        let level = reader.level(map.get("descriptors").copied(), "descriptors")?;
        Ok((domain, level))
    }

    /// The rule for one descriptor's entries, as the reference matches them: at each level
    /// `key` and `value` first, then a `value: prefix*` wildcard, then `key` alone; a rule
    /// applies only at the depth of the descriptor's last entry.
    pub fn lookup<'a>(&'a self, domain: &str, entries: &[(&str, &str)]) -> Option<&'a Rule> {
        let mut level = self.domains.get(domain)?;
        let last = entries.len().checked_sub(1)?;
        for (i, &(key, value)) in entries.iter().enumerate() {
            let node = level
                .exact
                .get(&(key.to_owned(), value.to_owned()))
                .or_else(|| {
                    level
                        .wildcard
                        .iter()
                        .find(|(k, prefix, _)| k == key && value.starts_with(prefix.as_str()))
                        .map(|(_, _, n)| n)
                })
                .or_else(|| level.any.get(key))?;
            if i == last {
                return node.rule.as_ref();
            }
            level = &node.children;
        }
        None
    }

    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }
}

/// Walks one file's YAML, keeping the path for errors.
struct Reader<'a> {
    file: &'a Path,
    ignored: &'a mut Vec<String>,
}

type Map<'y> = HashMap<&'y str, &'y Yaml>;

impl Reader<'_> {
    fn error(&self, path: &str, message: String) -> ConfigError {
        ConfigError {
            file: self.file.to_path_buf(),
            path: path.to_owned(),
            message,
        }
    }

    /// A mapping whose keys are all in `known` (or in IGNORED, noted once).
    fn mapping<'y>(
        &mut self,
        y: &'y Yaml,
        path: &str,
        known: &[&str],
    ) -> Result<Map<'y>, ConfigError> {
        let Yaml::Hash(hash) = y else {
            return Err(self.error(path, format!("expected a mapping, found {}", kind(y))));
        };
        let mut map = HashMap::new();
        for (k, v) in hash {
            let Yaml::String(k) = k else {
                return Err(self.error(path, format!("a key must be a string, found {}", kind(k))));
            };
            let field = join(path, k);
            if IGNORED.contains(&k.as_str()) {
                self.ignored
                    .push(format!("{}: {field}", self.file.display()));
            } else if !known.contains(&k.as_str()) {
                return Err(self.error(&field, "unknown field".into()));
            }
            map.insert(k.as_str(), v);
        }
        Ok(map)
    }

    /// A scalar as text (YAML reads `value: 500` as a number; the reference takes it as "500").
    fn string(&self, y: Option<&Yaml>, path: &str) -> Result<Option<String>, ConfigError> {
        match y {
            None | Some(Yaml::Null) => Ok(None),
            Some(Yaml::String(s) | Yaml::Real(s)) => Ok(Some(s.clone())),
            Some(Yaml::Integer(i)) => Ok(Some(i.to_string())),
            Some(Yaml::Boolean(b)) => Ok(Some(b.to_string())),
            Some(other) => {
                Err(self.error(path, format!("expected a string, found {}", kind(other))))
            }
        }
    }

    fn boolean(&self, y: Option<&Yaml>, path: &str) -> Result<bool, ConfigError> {
        match y {
            None | Some(Yaml::Null) => Ok(false),
            Some(Yaml::Boolean(b)) => Ok(*b),
            Some(other) => Err(self.error(
                path,
                format!("expected true or false, found {}", kind(other)),
            )),
        }
    }

    /// A list of descriptors (absent: none).
    fn level(&mut self, y: Option<&Yaml>, path: &str) -> Result<Level, ConfigError> {
        let mut level = Level::default();
        let items = match y {
            None | Some(Yaml::Null) => return Ok(level),
            Some(Yaml::Array(items)) => items,
            Some(other) => {
                return Err(self.error(path, format!("expected a list, found {}", kind(other))));
            }
        };
        for (i, item) in items.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let map = self.mapping(
                item,
                &at,
                &["key", "value", "rate_limit", "shadow_mode", "descriptors"],
            )?;
            let key = match self.string(map.get("key").copied(), &join(&at, "key"))? {
                Some(k) if !k.is_empty() => k,
                _ => return Err(self.error(&at, "a descriptor needs a non-empty key".into())),
            };
            let value = self.string(map.get("value").copied(), &join(&at, "value"))?;
            let shadow =
                self.boolean(map.get("shadow_mode").copied(), &join(&at, "shadow_mode"))?;
            let rule = match map.get("rate_limit").copied() {
                None | Some(Yaml::Null) => None,
                Some(y) => Some(self.rule(y, &join(&at, "rate_limit"), shadow)?),
            };
            let node = Node {
                rule,
                children: self.level(map.get("descriptors").copied(), &join(&at, "descriptors"))?,
            };
            let duplicate = match value {
                Some(v) if v.ends_with('*') => {
                    let prefix = v[..v.len() - 1].to_owned();
                    let dup = level
                        .wildcard
                        .iter()
                        .any(|(k, p, _)| *k == key && *p == prefix);
                    level.wildcard.push((key.clone(), prefix, node));
                    dup
                }
                Some(v) => level.exact.insert((key.clone(), v), node).is_some(),
                None => level.any.insert(key.clone(), node).is_some(),
            };
            if duplicate {
                return Err(self.error(
                    &at,
                    format!("another descriptor at this level has the same key {key:?} and value"),
                ));
            }
        }
        Ok(level)
    }

    fn rule(&mut self, y: &Yaml, path: &str, shadow: bool) -> Result<Rule, ConfigError> {
        let map = self.mapping(y, path, &["unit", "requests_per_unit", "unlimited", "name"])?;
        let unit_path = join(path, "unit");
        let unit = self.string(map.get("unit").copied(), &unit_path)?;
        if self.boolean(map.get("unlimited").copied(), &join(path, "unlimited"))? {
            if unit.is_some() {
                return Err(self.error(&unit_path, "an unlimited rate_limit has no unit".into()));
            }
            return Ok(Rule::Unlimited);
        }
        let unit = match unit {
            None => {
                return Err(self.error(
                    &unit_path,
                    "required: second, minute, hour, day or week".into(),
                ));
            }
            Some(u) => Unit::parse(&u).ok_or_else(|| {
                let why = if matches!(u.to_ascii_lowercase().as_str(), "month" | "year") {
                    " (a rolling window needs a fixed length: use day or week)"
                } else {
                    ""
                };
                self.error(
                    &unit_path,
                    format!("unknown unit {u:?}: expected second, minute, hour, day or week{why}"),
                )
            })?,
        };
        let rpu_path = join(path, "requests_per_unit");
        let requests_per_unit = match map.get("requests_per_unit").copied() {
            Some(Yaml::Integer(n)) => u32::try_from(*n).ok(),
            None => {
                return Err(self.error(
                    &rpu_path,
                    "required: an integer from 0 to 4294967295".into(),
                ));
            }
            Some(_) => None,
        }
        .ok_or_else(|| self.error(&rpu_path, "expected an integer from 0 to 4294967295".into()))?;
        let name = self
            .string(map.get("name").copied(), &join(path, "name"))?
            .unwrap_or_default();
        Ok(Rule::Limit(Limit {
            requests_per_unit,
            unit,
            name,
            shadow,
        }))
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

fn kind(y: &Yaml) -> &'static str {
    match y {
        Yaml::Real(_) => "a number",
        Yaml::Integer(_) => "an integer",
        Yaml::String(_) => "a string",
        Yaml::Boolean(_) => "a boolean",
        Yaml::Array(_) => "a list",
        Yaml::Hash(_) => "a mapping",
        Yaml::Alias(_) => "an alias",
        Yaml::Null => "nothing",
        Yaml::BadValue => "an invalid value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        let (domain, level) = c.parse(Path::new("t.yaml"), text)?;
        c.domains.insert(domain, level);
        Ok(c)
    }

    fn limit(c: &Config, entries: &[(&str, &str)]) -> Option<(u32, Unit)> {
        match c.lookup("d", entries) {
            Some(Rule::Limit(l)) => Some((l.requests_per_unit, l.unit)),
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
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: ldap
    rate_limit: {unlimited: true}
";

    #[test]
    fn most_specific_match() {
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
        assert_eq!(limit(&c, &[("path", "/other")]), None);
        let nested = [("message_type", "marketing"), ("to_number", "2061111111")];
        assert_eq!(limit(&c, &nested), Some((5, Unit::Day)));
        // Depth must match: the first entry alone has no rule, nor a deeper request.
        assert_eq!(limit(&c, &nested[..1]), None);
        assert_eq!(limit(&c, &[("remote_address", "1"), ("x", "y")]), None);
        assert_eq!(c.lookup("d", &[("ldap", "u")]), Some(&Rule::Unlimited));
        assert_eq!(c.lookup("other", &[("ldap", "u")]), None);
        assert_eq!(c.lookup("d", &[]), None);
    }

    #[test]
    fn errors_name_the_path() {
        let cases = [
            (
                "descriptors: []",
                "domain",
                "a non-empty domain is required",
            ),
            (
                "domain: d\ndescriptors:\n  - value: v",
                "descriptors[0]",
                "a descriptor needs a non-empty key",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}",
                "descriptors[0].rate_limit.unit",
                "unknown unit \"fortnight\": expected second, minute, hour, day or week",
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
                "another descriptor at this level has the same key \"k\" and value",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}",
                "descriptors[0].rate_limit.unit",
                "an unlimited rate_limit has no unit",
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
    fn ignored_fields_are_noted() {
        let c = parse(
            "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 3, replaces: [{name: x}]}",
        )
        .unwrap();
        assert_eq!(
            c.ignored,
            [
                "t.yaml: descriptors[0].detailed_metric",
                "t.yaml: descriptors[0].rate_limit.replaces"
            ]
        );
        assert_eq!(limit(&c, &[("k", "v")]), Some((3, Unit::Hour)));
    }
}
