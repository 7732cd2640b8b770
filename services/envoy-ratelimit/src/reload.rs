//! Hot reload: the config path is read every `--reload-interval` (and at once on SIGHUP); when
//! its files' names or contents changed, the whole config is parsed again. A good one replaces the
//! config in force for the next requests; a bad one is logged and counted, and the last good
//! config stays.

use crate::config::Config;
use crate::service::Shared;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What the config path held when it was last read: its files' texts, or why it could not be
/// read.
#[derive(Debug, PartialEq, Eq)]
enum Snapshot {
    Texts(Vec<(PathBuf, String)>),
    Unreadable(String),
}

fn read(path: &Path) -> Snapshot {
    match Config::read_texts(path) {
        Ok(texts) => Snapshot::Texts(texts),
        Err(e) => Snapshot::Unreadable(e.to_string()),
    }
}

pub async fn watch(shared: Arc<Shared>, path: PathBuf, merge: bool, interval: Duration) {
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut last = read(&path);
    loop {
        let forced = tokio::select! {
            _ = sleep(interval) => false,
            Some(()) = async { match &mut hangup { Some(h) => h.recv().await, None => None } } => true,
        };
        let now = read(&path);
        if now == last && !forced {
            continue;
        }
        let loaded = match &now {
            Snapshot::Texts(texts) => Config::from_texts(texts, merge).map_err(|e| e.to_string()),
            Snapshot::Unreadable(e) => Err(e.clone()),
        };
        last = now;
        match loaded {
            Ok(config) => {
                eprintln!(
                    "envoy-ratelimit: config reloaded: {} domain(s) from {} file(s)",
                    config.domains(),
                    config.files.len()
                );
                crate::warn_ignored(&config);
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
