//! The rate limit configuration: envoyproxy/ratelimit's YAML format, read from one file or a
//! directory of files, checked whole before it is used. What the reference's parser accepts is
//! accepted and what it refuses is refused, with the file and the path named. `model` is what a
//! config is, `lookup` how a request's descriptor is matched in it, `reader` how its YAML is
//! read, `files` which files a `--config` path names, `source` where reload reads it from.

mod files;
mod lookup;
mod model;
mod reader;
pub mod source;

pub use lookup::Lookup;
pub use model::{Config, ConfigError, LeaseSpec, Limit, Rule, Unit};

/// One line naming the fields read and ignored.
pub fn warn_ignored(config: &Config) {
    if !config.ignored.is_empty() {
        eprintln!(
            "envoy-ratelimit: warning: ignoring, as the reference does: {}",
            config.ignored.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::lookup::Match;
    use super::model::Pattern;
    use super::*;
    use crate::stat::sanitize;
    use std::path::PathBuf;

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
