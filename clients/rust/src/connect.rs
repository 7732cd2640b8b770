//! Where Redis is and how long to wait for it: one node, a cluster's seed nodes, or a master found
//! through Redis Sentinel; the connect and reply timeouts, the cluster client's retries, and the
//! CA file that TLS (`rediss://`) trusts.

use crate::error::Error;
use crate::script::Backend;
use std::path::PathBuf;
use std::time::Duration;

/// One node, a Redis Cluster found from seed nodes, or the master of a Sentinel service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// `redis://[user:password@]host:port[/db]` (`rediss://` for TLS).
    Single(String),
    /// Seed nodes' URLs; the client learns the rest of the cluster from them.
    Cluster(Vec<String>),
    /// The master of `service`, asked of the sentinels at these URLs (each with its own
    /// credentials), and asked again whenever the link to it fails or it answers `READONLY`
    /// (a failover made it a replica). The master is reached with `auth` and the sentinels'
    /// scheme: `rediss://` sentinels mean a TLS master.
    Sentinel {
        service: String,
        sentinels: Vec<String>,
        auth: Option<Auth>,
    },
}

/// Credentials for the nodes a Sentinel names: `password`, or `username:password`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auth {
    pub username: Option<String>,
    pub password: String,
}

impl Auth {
    /// `password` or `username:password`, as envoyproxy/ratelimit's `REDIS_AUTH` reads it.
    pub fn parse(text: &str) -> Auth {
        match text.split_once(':') {
            Some((user, password)) => Auth {
                username: Some(user.to_owned()),
                password: password.to_owned(),
            },
            None => Auth {
                username: None,
                password: text.to_owned(),
            },
        }
    }
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
    /// PEM certificates that `rediss://` links trust instead of the system's roots (needs the
    /// crate's `tls` feature).
    pub ca_file: Option<PathBuf>,
    /// The module's commands, the script, or whichever the server has (the default).
    pub backend: Backend,
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
            ca_file: None,
            backend: Backend::Auto,
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

    /// The master of `service` through the sentinels at `urls`.
    pub fn sentinel(service: &str, urls: &[String], auth: Option<Auth>) -> Result<Options, Error> {
        if urls.is_empty() {
            return Err(Error::Invalid("no Sentinel URL".into()));
        }
        if service.is_empty() {
            return Err(Error::Invalid("no Sentinel service (master) name".into()));
        }
        Ok(Options::new(Topology::Sentinel {
            service: service.to_owned(),
            sentinels: urls.to_vec(),
            auth,
        }))
    }
}

setters!(Options {
    connect_timeout: Duration,
    response_timeout: Duration,
    ca_file: Option<PathBuf>,
    backend: Backend,
});

/// The CA file's certificates for the redis crate (None: the system's roots).
#[cfg(feature = "tls")]
pub(crate) fn certificates(options: &Options) -> Result<Option<redis::TlsCertificates>, Error> {
    let Some(path) = &options.ca_file else {
        return Ok(None);
    };
    let pem = std::fs::read(path)
        .map_err(|e| Error::Invalid(format!("CA file {}: {e}", path.display())))?;
    Ok(Some(redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    }))
}

/// Without the `tls` feature a CA file cannot be used (nor can `rediss://`: the redis crate says
/// so when connecting).
#[cfg(not(feature = "tls"))]
pub(crate) fn certificates(options: &Options) -> Result<Option<()>, Error> {
    match &options.ca_file {
        None => Ok(None),
        Some(_) => Err(Error::Invalid(
            "a CA file needs slidingwindow-client's `tls` feature".into(),
        )),
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

    #[test]
    fn sentinel_and_auth() {
        let urls = vec!["redis://s1".to_string(), "redis://s2".to_string()];
        let o = Options::sentinel("mymaster", &urls, Some(Auth::parse("u:p:q"))).unwrap();
        assert_eq!(
            o.topology,
            Topology::Sentinel {
                service: "mymaster".into(),
                sentinels: urls.clone(),
                auth: Some(Auth {
                    username: Some("u".into()),
                    password: "p:q".into()
                }),
            }
        );
        assert_eq!(Auth::parse("secret").username, None);
        assert!(Options::sentinel("", &urls, None).is_err());
        assert!(Options::sentinel("m", &[], None).is_err());
    }
}
