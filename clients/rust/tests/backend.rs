//! The two backends (contract, "Without the module: the script path"): the script on a server
//! that cannot load the module, chosen by `Auto` and asked again after a reconnect; the script
//! loaded again on `NOSCRIPT` (one call, batches, a cluster's nodes); and what is a configuration
//! error, never an answer: a forced module the server does not have, a script the server
//! cannot run or keep. (A cluster without the module: tests/client.rs.)

use testkit::harness;
mod support;

use harness::Server;
use slidingwindow_client::{Backend, Batch, Call, Check, CheckAll, Error, Keyed, Now, Refund};
use support::{client, client_on, command_calls, limit};

const T: u64 = 1_700_000_000_000;

fn calls(s: &Server, name: &str) -> u64 {
    command_calls(s).get(name).copied().unwrap_or(0)
}

fn config_error<T: std::fmt::Debug>(r: Result<T, Error>, words: &str) {
    match r {
        Err(Error::Config(why)) => assert!(why.contains(words), "{why}"),
        other => panic!("expected a configuration error ({words}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_takes_the_script_where_the_module_is_not() {
    let s = Server::start_without_module();
    let c = client(&s);
    assert_eq!(c.chosen_backend(), Backend::Auto);
    let one = [limit(10, 2)];
    let at = |t| Check::new(b"k", &one).now(Now::Ms(t));
    assert!(c.allow(&at(T)).await.unwrap().allowed);
    assert!(c.allow(&at(T + 1)).await.unwrap().allowed);
    let refused = c.allow(&at(T + 2)).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.remaining, 0);
    assert_eq!(
        c.refund(&Refund::new(b"k", 1).at(Now::Ms(T + 1)))
            .await
            .unwrap(),
        1
    );
    assert_eq!(c.backend().await.unwrap(), Backend::Script);
    // The script's keys are sorted sets, one member per request.
    let members: u64 = redis::cmd("ZCARD").arg("k").query(&mut s.client()).unwrap();
    assert_eq!(members, 1);
    // The first EVALSHA found no script (NOSCRIPT), loaded it, and was sent again.
    assert_eq!(calls(&s, "evalsha"), 5);
    assert_eq!(calls(&s, "script|load"), 2);
    // What needs the module says so.
    match c.top(5).await {
        Err(Error::Invalid(why)) => assert!(why.contains("needs the module"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(c.precision_warning(b"k").await.unwrap().contains("script"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_is_loaded_again_when_flushed() {
    let s = Server::start_without_module();
    let c = client_on(&s, Backend::Script);
    let one = [limit(60, 100)];
    let check = Check::new(b"{t}a", &one);
    assert!(c.allow(&check).await.unwrap().allowed);
    let loads = calls(&s, "script|load");
    for transaction in [false, true] {
        s.cli(&["SCRIPT", "FLUSH"]);
        let mut batch = if transaction {
            Batch::transaction()
        } else {
            Batch::pipeline()
        };
        let keys = [Keyed::new(b"{t}a", &one), Keyed::new(b"{t}b", &one)];
        batch
            .call(Call::allow_all(&CheckAll::new(&keys)).unwrap())
            .call(Call::peek(&check).unwrap())
            .refund(&Refund::new(b"{t}b", 1))
            .unwrap();
        let answers = c.exec(&batch).await.unwrap();
        assert!(answers[0].clone().unwrap().reply().unwrap().allowed);
        // What ALLOW would answer: the logged requests and this one.
        let count = 3 + u64::from(transaction);
        assert_eq!(answers[1].clone().unwrap().reply().unwrap().count, count);
        assert_eq!(answers[2].clone().unwrap().removed().unwrap(), 1);
    }
    s.cli(&["SCRIPT", "FLUSH"]);
    assert_eq!(c.peek(&check).await.unwrap().count, 4);
    assert_eq!(calls(&s, "script|load"), loads + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_backend_is_kept() {
    let with = Server::start();
    let info = calls(&with, "command|info");
    let one = [limit(60, 100)];
    let check = Check::new(b"k", &one);
    // The script on a server that has the module too: the same keys.
    let script = client_on(&with, Backend::Script);
    assert!(script.allow(&check).await.unwrap().allowed);
    assert_eq!(script.backend().await.unwrap(), Backend::Script);
    let module = client_on(&with, Backend::Module);
    assert_eq!(module.allow(&check).await.unwrap().count, 2);
    assert_eq!(module.backend().await.unwrap(), Backend::Module);
    assert_eq!(calls(&with, "slidingwindow.allow"), 1);
    // NOSCRIPT, then the call again.
    assert_eq!(calls(&with, "evalsha"), 2);
    // Asked by each client's `backend`: the forced module's calls ask nothing.
    assert_eq!(calls(&with, "command|info"), info + 2);

    // The module forced where there is none: a configuration error, before and during calls.
    let without = Server::start_without_module();
    let module = client_on(&without, Backend::Module);
    config_error(module.backend().await, "no SLIDINGWINDOW.ALLOW");
    config_error(module.allow(&check).await, "unknown command");
    let keys = [Keyed::new(b"k", &one)];
    let mut batch = Batch::pipeline();
    batch.call(Call::allow_all(&CheckAll::new(&keys)).unwrap());
    config_error(module.exec(&batch).await, "unknown command");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_run_the_script_is_a_configuration_error() {
    let one = [limit(60, 100)];
    let check = Check::new(b"k", &one);
    // SCRIPT renamed away: NOSCRIPT that no load can fix; EVALSHA renamed away.
    let mut servers = Vec::new();
    for (renamed, says, asked) in [
        ("SCRIPT", "SCRIPT LOAD", "SCRIPT LOAD"),
        ("EVALSHA", "unknown command", "no EVALSHA"),
    ] {
        let s = Server::builder()
            .without_module()
            .args(["--rename-command", renamed, "\"\""])
            .start();
        let c = client(&s);
        config_error(c.allow(&check).await, says);
        config_error(c.backend().await, asked);
        for transaction in [false, true] {
            let mut batch = if transaction {
                Batch::transaction()
            } else {
                Batch::pipeline()
            };
            batch.call(Call::allow(&check).unwrap());
            config_error(c.exec(&batch).await, says);
        }
        servers.push(s);
    }
    // Nothing was logged on either.
    for s in &servers {
        let exists: u64 = redis::cmd("EXISTS")
            .arg("k")
            .query(&mut s.client())
            .unwrap();
        assert_eq!(exists, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_asks_again_on_another_server() {
    // A server without the module that may load one later.
    let s = Server::builder()
        .without_module()
        .args(["--enable-module-command", "yes"])
        .start();
    let c = client(&s);
    let one = [limit(60, 100)];
    let check = Check::new(b"k", &one);
    assert!(c.allow(&check).await.unwrap().allowed);
    assert_eq!(calls(&s, "evalsha"), 2);
    s.cli(&[
        "MODULE",
        "LOAD",
        &harness::module_path().display().to_string(),
    ]);
    // A server restarted (or failed over to) holds no scripts: the NOSCRIPT makes `Auto` ask
    // again, and the module answers.
    s.cli(&["SCRIPT", "FLUSH"]);
    assert_eq!(c.allow(&check).await.unwrap().count, 2);
    assert_eq!(calls(&s, "slidingwindow.allow"), 1);
    assert_eq!(calls(&s, "evalsha"), 3);
}
