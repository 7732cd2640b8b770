//! A Redis Cluster started by the test: six module-loaded nodes made into 3 masters and
//! 3 replicas as `redis-cli --cluster create` makes them, and its topology as the nodes themselves
//! report it (`CLUSTER NODES`).
#![allow(dead_code)]

use crate::client::{ok, q};
use crate::harness::{Server, wait_in_sync, wait_until};
use redis::cluster::{ClusterClient, ClusterConnection};
use std::time::Duration;

/// Cluster changes (a failover, gossip after `SETSLOT`) on a loaded 2-core machine can take a
/// few seconds; polls give them this long.
pub const CONVERGE_DEADLINE: Duration = Duration::from_secs(30);

/// Each node's own arguments; the default 5 s delay before a diskless full sync would make every
/// replica (and every old master resyncing after a failover) wait for nothing.
const NODE_ARGS: [&str; 2] = ["--repl-diskless-sync-delay", "0"];

/// One node as a node of the cluster describes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeView {
    pub id: String,
    pub port: u16,
    /// `None` for a master, else its master's id.
    pub master: Option<String>,
    /// Slot ranges served, inclusive (masters only).
    pub slots: Vec<(u16, u16)>,
    /// False while the node is in handshake, failing or disconnected.
    pub healthy: bool,
}

pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    /// Six nodes with the module loaded and `extra` arguments each, made into a cluster of
    /// 3 masters and 3 replicas; returns once every node agrees on a healthy topology.
    pub fn start(storage: &str) -> Cluster {
        Cluster::of(|| {
            Server::builder()
                .cluster()
                .args(NODE_ARGS)
                .storage(storage)
                .start()
        })
    }

    /// The same cluster of servers without the module (to compare against plain Redis).
    pub fn start_without_module() -> Cluster {
        Cluster::of(|| {
            Server::builder()
                .cluster()
                .args(NODE_ARGS)
                .without_module()
                .start()
        })
    }

    fn of(node: impl Fn() -> Server + Sync) -> Cluster {
        let nodes: Vec<Server> = std::thread::scope(|s| {
            let started: Vec<_> = (0..6).map(|_| s.spawn(&node)).collect();
            started.into_iter().map(|t| t.join().unwrap()).collect()
        });
        // What `redis-cli --cluster create ... --cluster-replicas 1` does, without its waits of a
        // second: a config epoch each, the masters' thirds of the slots (the same ranges), a MEET
        // of each node to the first (gossip introduces the rest), then each replica told its
        // master once it knows it.
        for (i, n) in nodes.iter().enumerate() {
            ok(
                &mut n.client(),
                &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()],
            );
        }
        for (n, (a, b)) in nodes.iter().zip([(0, 5460), (5461, 10922), (10923, 16383)]) {
            let (a, b) = (a.to_string(), b.to_string());
            ok(&mut n.client(), &["CLUSTER", "ADDSLOTSRANGE", &a, &b]);
        }
        let first = nodes[0].port().to_string();
        for n in &nodes[1..] {
            ok(&mut n.client(), &["CLUSTER", "MEET", "127.0.0.1", &first]);
        }
        for (m, r) in (0..3).zip(3..6) {
            let id: String = q(&mut nodes[m].client(), &["CLUSTER", "MYID"]);
            let mut con = nodes[r].client();
            wait_until(CONVERGE_DEADLINE, "a replica to know its master", || {
                redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&id)
                    .query::<String>(&mut con)
                    .is_ok()
            });
        }
        let cluster = Cluster { nodes };
        cluster.wait_stable();
        cluster
    }

    /// A cluster-aware client seeded with every node. Redirect retries wait milliseconds, not the
    /// crate's default seconds; replies time out so a hung node fails the test.
    pub fn client(&self) -> ClusterConnection {
        self.client_retrying(16)
    }

    /// `client` giving up after `retries` retries of a call (the crate's default is 16, which
    /// takes seconds of backoff on an answer that stays `TRYAGAIN`, as keys split by a slot
    /// migration do).
    pub fn client_retrying(&self, retries: u32) -> ClusterConnection {
        let urls: Vec<String> = self.nodes.iter().map(Server::url).collect();
        ClusterClient::builder(urls)
            .retries(retries)
            .min_retry_wait(10)
            .max_retry_wait(500)
            .connection_timeout(Duration::from_secs(10))
            .response_timeout(Duration::from_secs(30))
            .build()
            .expect("cluster client")
            .get_connection()
            .expect("connect to the cluster")
    }

    /// The cluster as node `i` sees it, sorted by node id.
    pub fn view(&self, i: usize) -> Vec<NodeView> {
        let text: String = q(&mut self.nodes[i].client(), &["CLUSTER", "NODES"]);
        let mut view: Vec<NodeView> = text.lines().map(parse_node_line).collect();
        view.sort();
        view
    }

    /// Waits until every node sees the same healthy cluster of 3 masters, each with one replica,
    /// covering all slots, and every replica's link to its master is up.
    pub fn wait_stable(&self) {
        wait_until(
            CONVERGE_DEADLINE,
            "every node to agree on a healthy cluster",
            || {
                let first = self.view(0);
                let masters = first.iter().filter(|n| n.master.is_none()).count();
                let served: u32 = first
                    .iter()
                    .flat_map(|n| &n.slots)
                    .map(|&(a, b)| u32::from(b - a) + 1)
                    .sum();
                first.len() == 6
                    && masters == 3
                    && served == 16384
                    && first.iter().all(|n| n.healthy)
                    && (1..6).all(|i| self.view(i) == first)
                    && self.nodes.iter().all(|s| {
                        cluster_info(s, "cluster_state").as_deref() == Some("ok")
                            && (s.info_field("replication", "role").as_deref() == Some("master")
                                || s.info_field("replication", "master_link_status").as_deref()
                                    == Some("up"))
                    })
            },
        );
    }

    pub fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    pub fn id(&self, i: usize) -> String {
        q(&mut self.nodes[i].client(), &["CLUSTER", "MYID"])
    }

    /// `CLUSTER KEYSLOT key`, as the server computes it.
    pub fn keyslot(&self, key: &str) -> u16 {
        q(&mut self.nodes[0].client(), &["CLUSTER", "KEYSLOT", key])
    }

    /// The node serving `slot`, as node 0 sees it.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        let view = self.view(0);
        let owner = view
            .iter()
            .find(|n| n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .unwrap_or_else(|| panic!("no node serves slot {slot}: {view:?}"));
        self.index_of_port(owner.port)
    }

    /// Indices of the masters, as node 0 sees them.
    pub fn masters(&self) -> Vec<usize> {
        self.view(0)
            .iter()
            .filter(|n| n.master.is_none())
            .map(|n| self.index_of_port(n.port))
            .collect()
    }

    /// The replica of master `m`, as node 0 sees it.
    pub fn replica_of(&self, m: usize) -> usize {
        let id = self.id(m);
        let view = self.view(0);
        let replica = view
            .iter()
            .find(|n| n.master.as_deref() == Some(id.as_str()))
            .unwrap_or_else(|| panic!("node {m} has no replica: {view:?}"));
        self.index_of_port(replica.port)
    }

    /// Waits for every replica to catch up with its master, then checks they hold the same data.
    pub fn assert_replicas_match(&self) {
        for m in self.masters() {
            let r = self.replica_of(m);
            let (master, replica) = (&self.nodes[m], &self.nodes[r]);
            wait_in_sync(master, replica);
            assert_eq!(
                replica.digest(),
                master.digest(),
                "replica on port {} differs from its master on port {}",
                replica.port(),
                master.port()
            );
        }
    }
}

/// One field of `CLUSTER INFO` on `node`.
pub fn cluster_info(node: &Server, name: &str) -> Option<String> {
    let text: String = q(&mut node.client(), &["CLUSTER", "INFO"]);
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == name).then(|| v.trim().to_string())
    })
}

/// How many times `node` ran `command` (`INFO commandstats`); calls refused with a redirection
/// are not counted.
pub fn calls_of(node: &Server, command: &str) -> u64 {
    crate::probe::command_calls(node)
        .get(command)
        .copied()
        .unwrap_or(0)
}

/// One line of `CLUSTER NODES`: `id ip:port@bus[,hostname] flags master ping pong epoch link slot...`.
fn parse_node_line(line: &str) -> NodeView {
    let f: Vec<&str> = line.split(' ').collect();
    assert!(f.len() >= 8, "unexpected CLUSTER NODES line: {line}");
    let port = f[1]
        .split_once(':')
        .and_then(|(_, rest)| rest.split('@').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in CLUSTER NODES line: {line}"));
    let flags: Vec<&str> = f[2].split(',').collect();
    let healthy = f[7] == "connected"
        && !flags
            .iter()
            .any(|fl| matches!(*fl, "fail" | "fail?" | "handshake" | "noaddr"));
    // Entries in brackets are slots being migrated or imported, not served.
    let slots = f[8..]
        .iter()
        .filter(|s| !s.starts_with('['))
        .map(|s| {
            let (a, b) = s.split_once('-').unwrap_or((s, s));
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    NodeView {
        id: f[0].to_string(),
        port,
        master: (f[3] != "-").then(|| f[3].to_string()),
        slots,
        healthy,
    }
}
