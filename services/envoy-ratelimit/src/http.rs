//! The HTTP ports: `/json` (a RateLimitRequest in proto3 JSON, answered 200 or 429 with the
//! RateLimitResponse, as the reference's) and `/healthcheck` on `--http-listen`; the Prometheus
//! `/metrics` on `--metrics-listen`.

use crate::service::Shared;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{Map, Value, json};
use std::sync::Arc;

pub fn api(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/json", post(json_endpoint))
        .route("/healthcheck", get(healthcheck))
        .with_state(shared)
}

pub fn metrics(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .with_state(shared)
}

async fn render_metrics(State(shared): State<Arc<Shared>>) -> Response {
    let mut text = shared.metrics.render();
    crate::metrics::render_leases(&mut text, &shared.lease_stats());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn healthcheck(State(shared): State<Arc<Shared>>) -> Response {
    if shared.serving() {
        (StatusCode::OK, "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}

async fn json_endpoint(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let bad =
        |why: String| (StatusCode::BAD_REQUEST, format!("Bad Request: {why}\n")).into_response();
    let req = match serde_json::from_slice::<Value>(&body)
        .map_err(|e| e.to_string())
        .and_then(|v| request(&v))
    {
        Ok(r) => r,
        Err(why) => return bad(why),
    };
    match shared.decide(req).await {
        Ok(resp) => {
            let status = match Code::try_from(resp.overall_code) {
                Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
                Ok(Code::Ok) => StatusCode::OK,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                response(&resp).to_string(),
            )
                .into_response()
        }
        Err(status) => bad(status.message().to_owned()),
    }
}

/// A field under its JSON name or its proto name, as proto3 JSON accepts both.
fn field<'v>(m: &'v Map<String, Value>, json: &str, proto: &str) -> Option<&'v Value> {
    m.get(json)
        .or_else(|| m.get(proto))
        .filter(|v| !v.is_null())
}

fn object<'v>(v: &'v Value, what: &str, known: &[&str]) -> Result<&'v Map<String, Value>, String> {
    let m = v
        .as_object()
        .ok_or_else(|| format!("{what}: expected an object"))?;
    if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("{what}: unknown field {k:?}"));
    }
    Ok(m)
}

fn string(v: Option<&Value>, what: &str) -> Result<String, String> {
    match v {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{what}: expected a string")),
    }
}

/// An integer as proto3 JSON writes one: a number or a decimal string.
fn integer(v: Option<&Value>, what: &str) -> Result<Option<u64>, String> {
    match v {
        None => Some(None),
        Some(Value::Number(n)) => n.as_u64().map(Some),
        Some(Value::String(s)) => s.parse().ok().map(Some),
        Some(_) => None,
    }
    .ok_or_else(|| format!("{what}: expected a non-negative integer"))
}

fn request(v: &Value) -> Result<RateLimitRequest, String> {
    let m = object(
        v,
        "request",
        &["domain", "descriptors", "hitsAddend", "hits_addend"],
    )?;
    let mut req = RateLimitRequest {
        domain: string(field(m, "domain", "domain"), "domain")?,
        ..Default::default()
    };
    if let Some(h) = integer(field(m, "hitsAddend", "hits_addend"), "hitsAddend")? {
        req.hits_addend = u32::try_from(h).map_err(|_| "hitsAddend: above 2^32-1".to_string())?;
    }
    let descriptors = match field(m, "descriptors", "descriptors") {
        None => &Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => return Err("descriptors: expected a list".into()),
    };
    for (i, d) in descriptors.iter().enumerate() {
        let what = format!("descriptors[{i}]");
        let dm = object(
            d,
            &what,
            &[
                "entries",
                "limit",
                "hitsAddend",
                "hits_addend",
                "isNegativeHits",
                "is_negative_hits",
            ],
        )?;
        let mut desc = RateLimitDescriptor::default();
        if let Some(entries) = field(dm, "entries", "entries") {
            let entries = entries
                .as_array()
                .ok_or_else(|| format!("{what}.entries: expected a list"))?;
            for (j, e) in entries.iter().enumerate() {
                let ew = format!("{what}.entries[{j}]");
                let em = object(e, &ew, &["key", "value"])?;
                desc.entries.push(Entry {
                    key: string(field(em, "key", "key"), &ew)?,
                    value: string(field(em, "value", "value"), &ew)?,
                });
            }
        }
        if let Some(l) = field(dm, "limit", "limit") {
            let lw = format!("{what}.limit");
            let lm = object(l, &lw, &["requestsPerUnit", "requests_per_unit", "unit"])?;
            let rpu = integer(field(lm, "requestsPerUnit", "requests_per_unit"), &lw)?.unwrap_or(0);
            let unit = match field(lm, "unit", "unit") {
                None => 0,
                Some(Value::String(s)) => PbUnit::from_str_name(s)
                    .ok_or_else(|| format!("{lw}.unit: unknown unit {s:?}"))?
                    as i32,
                Some(Value::Number(n)) => n
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(|| format!("{lw}.unit: expected a unit"))?,
                Some(_) => return Err(format!("{lw}.unit: expected a unit")),
            };
            desc.limit = Some(RateLimitOverride {
                requests_per_unit: u32::try_from(rpu)
                    .map_err(|_| format!("{lw}.requestsPerUnit: above 2^32-1"))?,
                unit,
            });
        }
        if let Some(h) = integer(field(dm, "hitsAddend", "hits_addend"), &what)? {
            desc.hits_addend = Some(UInt64Value { value: h });
        }
        desc.is_negative_hits = match field(dm, "isNegativeHits", "is_negative_hits") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(format!("{what}.isNegativeHits: expected true or false")),
        };
        req.descriptors.push(desc);
    }
    Ok(req)
}

fn code_name(code: i32) -> &'static str {
    Code::try_from(code).map_or("UNKNOWN", |c| c.as_str_name())
}

/// The response in proto3 JSON: default values left out, enums by name, durations as "1.500s".
fn response(resp: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if resp.overall_code != 0 {
        out.insert("overallCode".into(), json!(code_name(resp.overall_code)));
    }
    let statuses: Vec<Value> = resp
        .statuses
        .iter()
        .map(|s| {
            let mut st = Map::new();
            if s.code != 0 {
                st.insert("code".into(), json!(code_name(s.code)));
            }
            if let Some(l) = &s.current_limit {
                let mut lim = Map::new();
                if !l.name.is_empty() {
                    lim.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    lim.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                if l.unit != 0 {
                    let unit = PbUnit::try_from(l.unit).map_or("UNKNOWN", |u| u.as_str_name());
                    lim.insert("unit".into(), json!(unit));
                }
                st.insert("currentLimit".into(), Value::Object(lim));
            }
            if s.limit_remaining != 0 {
                st.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                let text = match d.nanos {
                    0 => format!("{}s", d.seconds),
                    n if n % 1_000_000 == 0 => format!("{}.{:03}s", d.seconds, n / 1_000_000),
                    n => format!("{}.{:09}s", d.seconds, n),
                };
                st.insert("durationUntilReset".into(), json!(text));
            }
            Value::Object(st)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !resp.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = resp
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
        DescriptorStatus, RateLimit,
    };
    use envoy_types::pb::google::protobuf::Duration;

    #[test]
    fn requests_in_both_spellings() {
        let v: Value = serde_json::from_str(
            r#"{"domain":"d","hits_addend":"2","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":0,"limit":{"requestsPerUnit":5,"unit":"HOUR"},"isNegativeHits":true}]}"#,
        )
        .unwrap();
        let r = request(&v).unwrap();
        assert_eq!((r.domain.as_str(), r.hits_addend), ("d", 2));
        let d = &r.descriptors[0];
        assert_eq!(d.entries[0].value, "v");
        assert_eq!(d.hits_addend.as_ref().map(|h| h.value), Some(0));
        assert_eq!(d.limit.as_ref().map(|l| l.unit), Some(PbUnit::Hour as i32));
        assert!(d.is_negative_hits);
        for bad in [
            r#"{"domain":"d","nope":1}"#,
            r#"{"descriptors":[{"entries":[{"key":1}]}]}"#,
            r#"[]"#,
        ] {
            assert!(
                request(&serde_json::from_str(bad).unwrap()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn responses_as_protojson() {
        let resp = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::OverLimit as i32,
                    current_limit: Some(RateLimit {
                        name: String::new(),
                        requests_per_unit: 1,
                        unit: PbUnit::Minute as i32,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(Duration {
                        seconds: 1,
                        nanos: 500_000_000,
                    }),
                    quota: None,
                },
                DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            response(&resp).to_string(),
            r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":1,"unit":"MINUTE"},"durationUntilReset":"1.500s"},{"code":"OK"}]}"#
        );
    }
}
