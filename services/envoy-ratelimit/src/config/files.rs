//! The files a `--config` path names, and their texts.

use super::model::{Config, ConfigError};
use std::path::{Path, PathBuf};

impl Config {
    /// One YAML file, or every `*.yaml`/`*.yml` file of a directory (not recursive, dot files
    /// skipped). A domain is defined in one file only, unless `merge` (MERGE_DOMAIN_CONFIG): then
    /// each file's descriptors join the domain's top level.
    pub fn load(path: &Path, merge: bool) -> Result<Config, ConfigError> {
        Config::from_texts(&Config::read_texts(path)?, merge)
    }

    /// The files a `--config` path names, with their texts.
    pub fn read_texts(path: &Path) -> Result<Vec<(PathBuf, String)>, ConfigError> {
        let mut texts = Vec::new();
        for file in files(path)? {
            let text = std::fs::read_to_string(&file).map_err(|e| ConfigError {
                file: file.clone(),
                path: String::new(),
                message: e.to_string(),
            })?;
            texts.push((file, text));
        }
        Ok(texts)
    }
}

/// The files a `--config` path names.
fn files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let err = |message: String| ConfigError {
        file: path.to_path_buf(),
        path: String::new(),
        message,
    };
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| err(e.to_string()))? {
        let p = entry.map_err(|e| err(e.to_string()))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        if yaml && !name.starts_with('.') && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(err("no *.yaml or *.yml file in this directory".into()));
    }
    Ok(files)
}
