//! Where Redis is and how long to wait for it: one node or a cluster's seed nodes, the connect
//! and reply timeouts, the cluster client's retries.

use crate::error::Error;
use std::time::Duration;

/// One node, or a Redis Cluster found from seed nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// `redis://[user:password@]host:port[/db]`.
    Single(String),
    /// Seed nodes' URLs; the client learns the rest of the cluster from them.
    Cluster(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub topology: Topology,
    /// Connecting gives up after this.
    pub connect_timeout: Duration,
    /// A call whose reply takes longer fails (it may still run on the server).
    pub response_timeout: Duration,
    /// Cluster only: how often a failed call is retried (a moved slot is followed the same way).
    pub cluster_retries: u32,
    /// Cluster only: the longest wait before such a retry.
    pub cluster_max_retry_wait: Duration,
}

impl Options {
    /// Timeouts of 1 s, one cluster retry after at most 100 ms.
    pub fn new(topology: Topology) -> Options {
        Options {
            topology,
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            cluster_retries: 1,
            cluster_max_retry_wait: Duration::from_millis(100),
        }
    }

    /// As a command line gives them: one URL, or with `cluster` one or more seed nodes.
    pub fn from_urls(urls: &[String], cluster: bool) -> Result<Options, Error> {
        let topology = match urls {
            [] => return Err(Error::Invalid("no Redis URL".into())),
            _ if cluster => Topology::Cluster(urls.to_vec()),
            [url] => Topology::Single(url.clone()),
            _ => {
                return Err(Error::Invalid(
                    "several Redis URLs need cluster mode".into(),
                ));
            }
        };
        Ok(Options::new(topology))
    }

    pub fn connect_timeout(mut self, d: Duration) -> Options {
        self.connect_timeout = d;
        self
    }

    pub fn response_timeout(mut self, d: Duration) -> Options {
        self.response_timeout = d;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_urls() {
        let urls = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let one = Options::from_urls(&urls(&["redis://a"]), false).unwrap();
        assert_eq!(one.topology, Topology::Single("redis://a".into()));
        assert_eq!(one.connect_timeout, Duration::from_secs(1));
        let seeds = Options::from_urls(&urls(&["redis://a", "redis://b"]), true).unwrap();
        assert_eq!(
            seeds.topology,
            Topology::Cluster(urls(&["redis://a", "redis://b"]))
        );
        assert!(Options::from_urls(&urls(&["redis://a", "redis://b"]), false).is_err());
        assert!(Options::from_urls(&[], true).is_err());
        let o = one
            .response_timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_millis(5));
        assert_eq!(
            (o.response_timeout, o.connect_timeout),
            (Duration::from_secs(30), Duration::from_millis(5))
        );
    }
}
