//! Hot reload: the config path is read every `--reload-interval` (and at once on SIGHUP); when
//! its files' names or contents changed, the whole config is parsed again. A good one replaces the
//! config in force for the next requests; a bad one is logged and counted, and the last good
//! config stays.

use crate::config::source::Source;
use crate::config::warn_ignored;
use crate::service::Shared;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Reads `source` every `interval` and on SIGHUP; a changed snapshot (or SIGHUP) makes a config.
pub async fn watch<S: Source>(shared: Arc<Shared>, source: S, interval: Duration) {
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut last = source.snapshot();
    loop {
        let forced = tokio::select! {
            _ = sleep(interval) => false,
            Some(()) = async { match &mut hangup { Some(h) => h.recv().await, None => None } } => true,
        };
        let now = source.snapshot();
        if now == last && !forced {
            continue;
        }
        let loaded = source.config(&now);
        last = now;
        match loaded {
            Ok(config) => {
                eprintln!(
                    "envoy-ratelimit: config reloaded: {} domain(s) from {} file(s)",
                    config.domains(),
                    config.files.len()
                );
                warn_ignored(&config);
                match shared.set_config(config) {
                    Ok(()) => {
                        shared
                            .metrics
                            .config_load_success
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!(
                            "envoy-ratelimit: config error, keeping the last good config: {e}"
                        );
                        shared
                            .metrics
                            .config_load_error
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Err(e) => {
                eprintln!("envoy-ratelimit: config error, keeping the last good config: {e}");
                shared
                    .metrics
                    .config_load_error
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// An interval of 0: only SIGHUP reloads.
async fn sleep(interval: Duration) {
    if interval.is_zero() {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(interval).await;
}
