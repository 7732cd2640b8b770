//! The shared spec (`spec/cases.json`, made from testkit's contract model): every call on both
//! storages, each reply and error exactly as the spec says; and the file is current.

use testkit::harness;

use harness::{Server, call, error_line};
use redis::Value;
use serde_json::Value as Json;

const SPEC: &str = include_str!("../spec/cases.json");

/// The reply in the spec's terms: integers and arrays of them; an error as its line.
fn as_json(v: &Value) -> Result<Json, String> {
    match v {
        Value::Int(n) => Ok(Json::from(*n)),
        Value::Array(items) => items
            .iter()
            .map(as_json)
            .collect::<Result<_, _>>()
            .map(Json::Array),
        other => Err(error_line(other).unwrap_or_else(|| format!("{other:?}"))),
    }
}

/// Replays every case on `s`, its keys under the hash tag `{tag-<case>}`.
pub fn replay(s: &Server, tag: &str) -> usize {
    let spec: Json = serde_json::from_str(SPEC).expect("spec/cases.json is JSON");
    let mut c = s.client();
    let mut calls = 0;
    for (i, case) in spec["cases"].as_array().expect("cases").iter().enumerate() {
        let name = case["name"].as_str().expect("name");
        let key_tag = format!("{{{tag}-{i}}}");
        for call_spec in case["calls"].as_array().expect("calls") {
            let argv: Vec<String> = call_spec["argv"]
                .as_array()
                .expect("argv")
                .iter()
                .map(|w| w.as_str().expect("word").replace("{t}", &key_tag))
                .collect();
            let mut words = vec![format!("SLIDINGWINDOW.{}", argv[0])];
            words.extend(argv[1..].iter().cloned());
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let got = as_json(&call(&mut c, &words));
            let want = match call_spec.get("error") {
                Some(e) => Err(e.as_str().expect("error").to_string()),
                None => Ok(call_spec["reply"].clone()),
            };
            assert_eq!(got, want, "{name}: {}", words.join(" "));
            calls += 1;
        }
    }
    calls
}

#[test]
fn every_case_on_both_storages() {
    for storage in ["zset", "compact"] {
        let s = Server::builder().storage(storage).start();
        assert!(replay(&s, storage) > 400, "{storage}");
    }
}

#[test]
fn the_spec_is_what_the_model_makes() {
    assert!(
        SPEC == testkit::spec::render(&testkit::spec::cases()),
        "spec/cases.json is stale: cargo run -p testkit --bin spec > spec/cases.json"
    );
}

#[test]
fn the_header_spec_is_what_testkit_makes() {
    let made = testkit::spec_headers::render(&testkit::spec_headers::cases());
    assert!(
        include_str!("../spec/headers.json") == made,
        "spec/headers.json is stale: cargo run -p testkit --bin spec -- headers > spec/headers.json"
    );
}

#[test]
fn the_lease_spec_is_what_testkit_makes() {
    let made = testkit::spec_leases::render(&testkit::spec_leases::scenarios());
    assert!(
        include_str!("../spec/leases.json") == made,
        "spec/leases.json is stale: cargo run -p testkit --bin spec -- leases > spec/leases.json"
    );
}
