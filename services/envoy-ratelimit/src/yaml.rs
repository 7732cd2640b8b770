//! YAML read as envoyproxy/ratelimit reads it (gopkg.in/yaml.v2, YAML 1.1): every scalar keeps
//! its text, and a plain one also resolves as yaml.v2 resolves it (null, the YAML 1.1 booleans
//! `yes`/`no`/`on`/`off`, Go's integer forms, floats), so that `value: 0123` is the string
//! "0123" and `shadow_mode: yes` is true, as there.

use std::collections::HashMap;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Scalar {
        text: String,
        kind: Kind,
    },
    Seq(Vec<Node>),
    /// In the file's order; a repeated key is kept, and the last one counts (as in yaml.v2).
    Map(Vec<(Node, Node)>),
}

/// What a scalar resolves to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Str,
    Null,
    Bool(bool),
    Int(i128),
    Float,
}

impl Node {
    /// The value of `key` in a mapping (the last one if repeated).
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(pairs) => pairs
                .iter()
                .rev()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// A string scalar's text (a key).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Scalar {
                text,
                kind: Kind::Str,
            } => Some(text),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(
            self,
            Node::Scalar {
                kind: Kind::Null,
                ..
            }
        )
    }

    pub fn kind_name(&self) -> &'static str {
        match self {
            Node::Seq(_) => "a list",
            Node::Map(_) => "a mapping",
            Node::Scalar { kind, .. } => match kind {
                Kind::Str => "a string",
                Kind::Null => "nothing",
                Kind::Bool(_) => "a boolean",
                Kind::Int(_) => "an integer",
                Kind::Float => "a number with a fraction",
            },
        }
    }
}

/// The first document of `text` (None for an empty stream), and how many documents there were:
/// yaml.v2 reads the first one only.
pub fn load(text: &str) -> Result<(Option<Node>, usize), String> {
    let mut builder = Builder::default();
    Parser::new_from_str(text)
        .load(&mut builder, true)
        .map_err(|e| e.to_string())?;
    if let Some(e) = builder.error {
        return Err(e);
    }
    let count = builder.docs.len();
    Ok((builder.docs.into_iter().next(), count))
}

enum Frame {
    Seq(usize, Vec<Node>),
    Map(usize, Vec<(Node, Node)>, Option<Node>),
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    docs: Vec<Node>,
    anchors: HashMap<usize, Node>,
    error: Option<String>,
}

impl Builder {
    fn value(&mut self, node: Node) {
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq(_, items)) => items.push(node),
            Some(Frame::Map(_, pairs, key)) => match key.take() {
                None => *key = Some(node),
                Some(k) => pairs.push((k, node)),
            },
        }
    }

    fn anchored(&mut self, anchor: usize, node: Node) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        self.value(node);
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, _mark: Marker) {
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                let explicit_str = tag.as_ref().is_some_and(|t| t.suffix == "str");
                let kind = if style == TScalarStyle::Plain && !explicit_str {
                    resolve(&text)
                } else {
                    Kind::Str
                };
                self.anchored(anchor, Node::Scalar { text, kind });
            }
            Event::SequenceStart(anchor, _) => self.stack.push(Frame::Seq(anchor, Vec::new())),
            Event::MappingStart(anchor, _) => {
                self.stack.push(Frame::Map(anchor, Vec::new(), None));
            }
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Seq(anchor, items)) => self.anchored(anchor, Node::Seq(items)),
                Some(Frame::Map(anchor, pairs, _)) => self.anchored(anchor, Node::Map(pairs)),
                None => {}
            },
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(node) => self.value(node),
                None => self.error = Some(format!("unknown anchor (alias {id})")),
            },
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

/// yaml.v2's resolution of a plain scalar.
fn resolve(text: &str) -> Kind {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Kind::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Kind::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Kind::Bool(false);
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF"
        | ".nan" | ".NaN" | ".NAN" => return Kind::Float,
        _ => {}
    }
    let plain: String = text.chars().filter(|&c| c != '_').collect();
    if let Some(n) = go_int(&plain) {
        return Kind::Int(n);
    }
    if is_float(&plain) {
        return Kind::Float;
    }
    Kind::Str
}

/// Go's `strconv.ParseInt(s, 0, 64)` then `ParseUint(s, 0, 64)`: a sign, then `0x`, `0o`, `0b`,
/// a leading `0` (octal) or decimal digits.
fn go_int(s: &str) -> Option<i128> {
    let (negative, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    let n = i128::from(magnitude);
    match negative {
        true if n <= i128::from(i64::MAX) + 1 => Some(-n),
        true => None,
        false => Some(n),
    }
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`, yaml.v2's float form.
fn is_float(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(text: &str) -> Kind {
        match load(&format!("v: {text}")).unwrap().0.unwrap().get("v") {
            Some(Node::Scalar { kind, .. }) => *kind,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn scalars_resolve_as_yaml_v2() {
        assert_eq!(scalar("yes"), Kind::Bool(true));
        assert_eq!(scalar("Off"), Kind::Bool(false));
        assert_eq!(scalar("'yes'"), Kind::Str);
        assert_eq!(scalar("~"), Kind::Null);
        assert_eq!(scalar(""), Kind::Null);
        assert_eq!(scalar("0123"), Kind::Int(83));
        assert_eq!(scalar("0x1F"), Kind::Int(31));
        assert_eq!(scalar("1_000"), Kind::Int(1000));
        assert_eq!(scalar("-5"), Kind::Int(-5));
        assert_eq!(scalar("1.5"), Kind::Float);
        assert_eq!(scalar("1e3"), Kind::Float);
        assert_eq!(scalar(".inf"), Kind::Float);
        // Not octal, so a float to yaml.v2 (its float form takes any digits).
        assert_eq!(scalar("089"), Kind::Float);
        assert_eq!(scalar("!!str 5"), Kind::Str);
        assert_eq!(scalar("/api/*"), Kind::Str);
        // The text is kept as written.
        let doc = load("v: 0123").unwrap().0.unwrap();
        assert_eq!(
            doc.get("v"),
            Some(&Node::Scalar {
                text: "0123".into(),
                kind: Kind::Int(83)
            })
        );
    }

    #[test]
    fn documents_anchors_and_repeats() {
        let (first, n) = load("a: 1\n---\na: 2\n").unwrap();
        assert_eq!(n, 2);
        assert_eq!(first.unwrap().get("a").unwrap().as_str(), None);
        // (`y` would be the boolean true to yaml.v2, as `yes`.)
        let (doc, _) = load("x: &l {k: v}\nz: *l\nk: 1\nk: two\n").unwrap();
        let doc = doc.unwrap();
        assert_eq!(doc.get("x"), doc.get("z"));
        assert_eq!(doc.get("k").and_then(Node::as_str), Some("two"));
        assert_eq!(load("").unwrap(), (None, 0));
        assert!(load("a: [").is_err());
    }
}
