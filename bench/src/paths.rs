//! Where the module and the output directory are.

use std::path::{Path, PathBuf};

use crate::Result;

/// The workspace root is the bench crate's parent directory.
fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the bench crate lives inside the workspace")
}

/// `$SLIDINGWINDOW_MODULE`, else `<workspace>/target/release/libslidingwindow.so`, made absolute
/// because redis-server resolves `--loadmodule` from its own working directory.
pub fn module_path() -> Result<PathBuf> {
    let path = match std::env::var_os("SLIDINGWINDOW_MODULE") {
        Some(p) => PathBuf::from(p),
        None => workspace_root().join("target/release/libslidingwindow.so"),
    };
    if !path.is_file() {
        return Err(format!(
            "module not found at {}: run `cargo build --release` first \
             (or set SLIDINGWINDOW_MODULE)",
            path.display()
        )
        .into());
    }
    Ok(std::fs::canonicalize(path)?)
}

/// `<workspace>/docs`, created if missing.
pub fn docs_dir() -> Result<PathBuf> {
    let dir = workspace_root().join("docs");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// `$REDIS_CELL_MODULE` (scripts/redis-cell.sh builds it; `make bench` sets it), if set and a
/// file: redis-cell, the module the compact storage is compared with.
pub fn cell_module_path() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("REDIS_CELL_MODULE")?);
    path.is_file().then_some(path)
}
