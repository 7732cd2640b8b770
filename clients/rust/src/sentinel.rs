//! A Sentinel service's master behind one multiplexed connection: found by asking the sentinels,
//! and found again once the link fails or the node answers that it is no longer a master.

use crate::connect::{Auth, Options};
use crate::error::Error;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, IntoConnectionInfo, TlsMode};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub(crate) struct SentinelLink {
    /// Asks the sentinels; one lookup at a time (callers that find no connection wait for it).
    resolver: tokio::sync::Mutex<SentinelClient>,
    /// The master's connection and its generation (bumped at each lookup).
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    generations: AtomicU64,
    config: AsyncConnectionConfig,
    /// A lookup (sentinels, then the master's ROLE) gives up after this.
    lookup_timeout: Duration,
}

impl SentinelLink {
    pub(crate) fn new(
        service: &str,
        sentinels: &[String],
        auth: Option<&Auth>,
        options: &Options,
    ) -> Result<SentinelLink, Error> {
        let infos = sentinels
            .iter()
            .map(|u| u.as_str().into_connection_info())
            .collect::<Result<Vec<_>, _>>()?;
        let tls = infos
            .iter()
            .any(|i| matches!(i.addr(), redis::ConnectionAddr::TcpTls { .. }));
        let mut builder = SentinelClientBuilder::new(
            infos.iter().map(|i| i.addr().clone()),
            service,
            SentinelServerType::Master,
        )?;
        // The sentinels' own credentials come from their URLs (the first one's, as all share one).
        let first = infos[0].redis_settings();
        if let Some(user) = first.username() {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = first.password() {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if let Some(a) = auth {
            if let Some(user) = &a.username {
                builder = builder.set_client_to_redis_username(user);
            }
            builder = builder.set_client_to_redis_password(&a.password);
        }
        if tls {
            builder = builder
                .set_client_to_sentinel_tls_mode(TlsMode::Secure)
                .set_client_to_redis_tls_mode(TlsMode::Secure);
        }
        #[cfg(feature = "tls")]
        if let Some(certs) = crate::connect::certificates(options)? {
            builder = builder
                .set_client_to_sentinel_certificates(certs.clone())
                .set_client_to_redis_certificates(certs);
        }
        #[cfg(not(feature = "tls"))]
        crate::connect::certificates(options)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.response_timeout));
        Ok(SentinelLink {
            resolver: tokio::sync::Mutex::new(builder.build()?),
            current: Mutex::new(None),
            generations: AtomicU64::new(0),
            config,
            lookup_timeout: options.connect_timeout * 2,
        })
    }

    /// The master's connection, looked up first if there is none.
    pub(crate) async fn connection(&self) -> Result<(u64, MultiplexedConnection), Error> {
        if let Some(c) = self.snapshot() {
            return Ok(c);
        }
        let mut resolver = self.resolver.lock().await;
        // Another caller may have looked it up while this one waited.
        if let Some(c) = self.snapshot() {
            return Ok(c);
        }
        let lookup = async {
            let client = resolver.async_get_client().await?;
            client
                .get_multiplexed_async_connection_with_config(&self.config)
                .await
        };
        let con = tokio::time::timeout(self.lookup_timeout, lookup)
            .await
            .map_err(|_| {
                Error::Redis(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "Sentinel lookup timed out",
                )))
            })??;
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some((generation, con.clone()));
        Ok((generation, con))
    }

    fn snapshot(&self) -> Option<(u64, MultiplexedConnection)> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// After a call on generation `g`: a failed link, or a node that is no longer the master,
    /// makes the next call look the master up again.
    pub(crate) fn after<T>(&self, g: u64, result: &Result<T, Error>) {
        let stale = match result {
            Ok(_) => false,
            Err(e) => e.may_have_run() || e.link_was_down() || not_master(e),
        };
        if stale {
            let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            if current.as_ref().is_some_and(|(cg, _)| *cg == g) {
                *current = None;
            }
        }
    }
}

/// The node refused the call because it is a replica now (a transaction holding a write is then
/// discarded whole): nothing ran, so it may be sent to the new master.
pub(crate) fn not_master(e: &Error) -> bool {
    match e {
        Error::Server(text) => text.starts_with("READONLY") || text.starts_with("EXECABORT"),
        _ => false,
    }
}
