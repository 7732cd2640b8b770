//! End to end, who a request is: the identity header or the address, IPv4 clients of an IPv6
//! socket, IPv6 prefixes, long identities keyed by their hash.

use testkit::harness;
mod support;

use harness::Server;
use support::*;

fn an_ipv4_client_of_an_ipv6_socket_has_one_quota(redis: Server) {
    let url = redis.url();
    // An IPv6 socket on the IPv4 loopback: its peers are ::ffff:127.0.0.1.
    let gw = Gateway::start_with(&[
        "--redis",
        &url,
        "--listen",
        "[::ffff:127.0.0.1]:0",
        "--limit",
        "5/60s",
    ]);
    assert!(gw.url.contains("[::ffff:127.0.0.1]"), "{}", gw.url);
    let r = gw.get(None);
    assert_eq!(r.ratelimit(), ("l0".to_string(), 4, 60));
    assert_eq!(zcard(&redis, "rl:{127.0.0.1}"), 1);
    assert_eq!(zcard(&redis, "rl:{::ffff:127.0.0.1}"), 0);
}

/// The key an identity is counted on when it is longer than 128 bytes (or starts `sha256:`).
fn hashed(identity: &str) -> String {
    use sha2::{Digest, Sha256};
    let hex: String = Sha256::digest(identity.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("rl:{{sha256:{hex}}}")
}

fn long_identities_are_keyed_by_their_hash(redis: Server) {
    let gw = Gateway::start(&redis, &["--limit", "2/60s"]);
    let edge = "e".repeat(128);
    let long = "x".repeat(20_000);
    assert_eq!(gw.get(Some(&edge)).status, 200);
    assert_eq!(
        zcard(&redis, &format!("rl:{{{edge}}}")),
        1,
        "128 bytes: the name itself"
    );
    for _ in 0..2 {
        assert_eq!(gw.get(Some(&long)).status, 200);
    }
    let r = gw.get(Some(&long));
    assert_eq!(r.status, 429, "one quota for the long identity: {r:?}");
    assert_eq!(zcard(&redis, &hashed(&long)), 2);
    // A name that looks like a hash is hashed too: it cannot be spelled as another's key.
    let spelled = hashed(&long)["rl:{".len()..hashed(&long).len() - 1].to_string();
    assert_eq!(gw.get(Some(&spelled)).status, 200);
    assert_eq!(zcard(&redis, &hashed(&spelled)), 1);
    assert_eq!(zcard(&redis, &hashed(&long)), 2);
    // Every key the gateway made is short, whatever the client sent.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut redis.client())
        .unwrap();
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(keys.iter().all(|k| k.len() <= 4 + 128 + 1), "{keys:?}");
}

fn the_identity_header_is_chosen_and_an_empty_one_is_the_address(redis: Server) {
    let gw = Gateway::start(&redis, &["--limit", "5/60s", "--identity-header", "x-user"]);
    assert_eq!(
        gw.get_with("/", &[("x-user", "bob"), ("x-api-key", "k")])
            .status,
        200
    );
    assert_eq!(gw.get_with("/", &[("x-api-key", "k")]).status, 200);
    assert_eq!(gw.get_with("/", &[("x-user", "")]).status, 200);
    assert_eq!(zcard(&redis, "rl:{bob}"), 1);
    // x-api-key is not the identity here; no header, and an empty one, count as the address.
    let (k, address) = (zcard(&redis, "rl:{k}"), zcard(&redis, "rl:{127.0.0.1}"));
    assert_eq!((k, address), (0, 2));
}

fn ipv6_clients_share_a_prefix(redis: Server) {
    let url = redis.url();
    let by64 = Gateway::start_with(&["--redis", &url, "--listen", "[::1]:0", "--limit", "5/60s"]);
    assert_eq!(by64.get(None).status, 200);
    assert_eq!(zcard(&redis, "rl:{::/64}"), 1);
    let by128 = Gateway::start_with(&[
        "--redis",
        &url,
        "--listen",
        "[::1]:0",
        "--limit",
        "5/60s",
        "--ipv6-prefix",
        "128",
    ]);
    assert_eq!(by128.get(None).status, 200);
    assert_eq!(zcard(&redis, "rl:{::1}"), 1);
}

on_both_backends!(
    an_ipv4_client_of_an_ipv6_socket_has_one_quota,
    long_identities_are_keyed_by_their_hash,
    the_identity_header_is_chosen_and_an_empty_one_is_the_address,
    ipv6_clients_share_a_prefix,
);
