//! The shared spec (`spec/cases.json`, made from the contract's model): every call through the
//! crate's raw `command`, each reply and error exactly, on both storages and on the script path
//! (a server without the module).

use testkit::harness;
mod support;

use redis::Value;
use serde_json::Value as Json;
use slidingwindow_client::{Backend, Error};
use support::{client, command_calls, paths};

const SPEC: &str = include_str!("../../../spec/cases.json");

fn as_json(v: &Value) -> Json {
    match v {
        Value::Int(n) => Json::from(*n),
        Value::Array(items) => Json::Array(items.iter().map(as_json).collect()),
        other => panic!("not an integer reply: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_on_both_storages_and_the_script() {
    let spec: Json = serde_json::from_str(SPEC).unwrap();
    for (storage, s) in paths(&["zset", "compact"]) {
        let c = client(&s);
        let mut calls = 0;
        for (i, case) in spec["cases"].as_array().unwrap().iter().enumerate() {
            let name = case["name"].as_str().unwrap();
            let tag = format!("{{{storage}-{i}}}");
            for call in case["calls"].as_array().unwrap() {
                let argv: Vec<String> = call["argv"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|w| w.as_str().unwrap().replace("{t}", &tag))
                    .collect();
                let mut cmd = redis::cmd(&format!("SLIDINGWINDOW.{}", argv[0]));
                for w in &argv[1..] {
                    cmd.arg(w);
                }
                // Routed by a key of the case's tag, whichever the command.
                let got = c.command(&cmd, tag.as_bytes()).await;
                match call.get("error") {
                    Some(e) => match got {
                        Err(Error::Server(line)) => {
                            assert_eq!(line, e.as_str().unwrap(), "{name}: {argv:?}")
                        }
                        other => panic!("{name}: {argv:?}: {other:?}"),
                    },
                    None => assert_eq!(as_json(&got.unwrap()), call["reply"], "{name}: {argv:?}"),
                }
                calls += 1;
            }
        }
        assert!(calls > 400, "{storage}: {calls}");
        let script = storage == "script";
        assert_eq!(c.backend().await.unwrap() == Backend::Script, script);
        let evals = command_calls(&s).get("evalsha").copied().unwrap_or(0);
        assert_eq!(evals >= calls, script, "{storage}: {evals} EVALSHA");
    }
}
