#!/usr/bin/env bash
# Builds redis-cell (the GCRA limiter `CL.THROTTLE`, a Redis module) for the bench to compare
# against, and prints the path of its .so. Its source comes from crates.io through cargo and is
# built under the target directory (never in the repository); later runs reuse the build.
# REDIS_CELL_SRC=dir builds that source tree instead, e.g. a checkout of redis-cell's v0.5.0
# tag, which crates.io does not serve; its version is read from its Cargo.toml.
# Exits non-zero, saying why on stderr, when it cannot: the bench then reports it unavailable.
set -euo pipefail

# Keep in step with CELL_VERSION in bench/src/markdown.rs.
version="0.2.2"
src="${REDIS_CELL_SRC:-}"
if [[ -n $src ]]; then
    version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$src/Cargo.toml" | head -n 1)"
    [[ -n $version ]] || { echo "redis-cell: no version in $src/Cargo.toml" >&2; exit 1; }
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${CARGO_TARGET_DIR:-$root/target}/redis-cell-$version"
so="$dir/src/target/release/libredis_cell.so"

if [[ ! -f $so && -n $src ]]; then
    rm -rf "$dir/src"
    mkdir -p "$dir"
    cp -r "$src" "$dir/src"
    rm -rf "$dir/src/target"
    chmod -R u+w "$dir/src"
elif [[ ! -f $so ]]; then
    mkdir -p "$dir/fetch/src"
    # A throwaway crate that depends on redis-cell, so that `cargo fetch` brings its source.
    cat >"$dir/fetch/Cargo.toml" <<EOF
[package]
name = "fetch-redis-cell"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
redis-cell = "=$version"

[workspace]
EOF
    : >"$dir/fetch/src/lib.rs"
    (cd "$dir/fetch" && cargo fetch --quiet) >&2
    manifest="$(cd "$dir/fetch" && cargo metadata --format-version 1 |
        python3 -c 'import json, sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "redis-cell"))')"
    rm -rf "$dir/src"
    cp -r "$(dirname "$manifest")" "$dir/src"
    chmod -R u+w "$dir/src"
fi
if [[ ! -f $so ]]; then
    # Its own workspace, so the build never looks at this repository's.
    grep -q '^\[workspace\]' "$dir/src/Cargo.toml" || printf '\n[workspace]\n' >>"$dir/src/Cargo.toml"
    # Its own (old) code warns a lot: the log is shown only when the build fails.
    if ! (cd "$dir/src" && cargo build --release >"$dir/build.log" 2>&1); then
        tail -n 20 "$dir/build.log" >&2
        echo "redis-cell: build failed (log: $dir/build.log)" >&2
        exit 1
    fi
fi
[[ -f $so ]] || { echo "redis-cell: build produced no $so" >&2; exit 1; }
echo "$so"
