//! Where the config comes from, behind the interface reload watches (as envoyproxy/ratelimit's
//! `provider`): what the source holds now, and the config it makes.

use super::{Config, ConfigError};
use std::path::PathBuf;

/// A config source: reload reads its snapshot every interval, and reads a config from it when
/// the snapshot changed (or on SIGHUP).
pub trait Source: Send + 'static {
    /// What the source holds; two equal snapshots make the same config.
    type Snapshot: PartialEq + Send;

    fn snapshot(&self) -> Self::Snapshot;

    /// The config of a snapshot, or why there is none.
    fn config(&self, snapshot: &Self::Snapshot) -> Result<Config, String>;
}

/// A `--config` path: one YAML file or a directory of them (`merge`: MERGE_DOMAIN_CONFIG).
#[derive(Debug)]
pub struct Files {
    pub path: PathBuf,
    pub merge: bool,
}

/// What the config path held when it was last read: its files' texts, or why it could not be
/// read.
#[derive(Debug, PartialEq, Eq)]
pub enum Snapshot {
    Texts(Vec<(PathBuf, String)>),
    Unreadable(String),
}

impl Files {
    /// The config the path holds now.
    pub fn load(&self) -> Result<Config, ConfigError> {
        Config::load(&self.path, self.merge)
    }
}

impl Source for Files {
    type Snapshot = Snapshot;

    fn snapshot(&self) -> Snapshot {
        match Config::read_texts(&self.path) {
            Ok(texts) => Snapshot::Texts(texts),
            Err(e) => Snapshot::Unreadable(e.to_string()),
        }
    }

    fn config(&self, snapshot: &Snapshot) -> Result<Config, String> {
        match snapshot {
            Snapshot::Texts(texts) => {
                Config::from_texts(texts, self.merge).map_err(|e| e.to_string())
            }
            Snapshot::Unreadable(e) => Err(e.clone()),
        }
    }
}
