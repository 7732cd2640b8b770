#!/usr/bin/env bash
# `make dist`: dist/slidingwindow-<version>-x86_64-linux-gnu.tar.gz (the module, redis.conf.example,
# README.md, LICENSE) and dist/SHA256SUMS. The module is linked against glibc 2.17, so it loads on
# every glibc Linux from RHEL 7 on: cargo-zigbuild links with Zig (PyPI's `ziglang` wheel, in a
# virtualenv under target/), and objdump checks that no symbol needs a newer glibc.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

# Pinned: a new Zig may change what the build needs (zig 0.15 with libclang 14 is tested here).
ZIGBUILD_VERSION=0.24.1
ZIGLANG_VERSION=0.15.2
GLIBC_FLOOR=2.17
TRIPLE=x86_64-unknown-linux-gnu

bash scripts/setup.sh python3-venv objdump

# cargo-zigbuild, from crates.io into cargo's bin directory (once per machine: it compiles for
# several minutes).
if [[ $(cargo-zigbuild --version 2>/dev/null) != "cargo-zigbuild $ZIGBUILD_VERSION" ]]; then
    cargo install cargo-zigbuild --locked --version "$ZIGBUILD_VERSION"
fi

target=${CARGO_TARGET_DIR:-$root/target}
venv=$target/dist-tools/ziglang-$ZIGLANG_VERSION
if [[ ! -x $venv/bin/python3 ]] || ! "$venv/bin/python3" -m ziglang version >/dev/null 2>&1; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "ziglang==$ZIGLANG_VERSION"
fi

version=$(cargo pkgid -p slidingwindow | sed 's/.*[#@]//')
name=slidingwindow-$version-x86_64-linux-gnu
# Its own target dir: the glibc-2.17 build never mixes with the everyday one.
build=$target/dist-build
# From outside the repository: Zig prints its include paths relative to the working directory
# when they lie below it (target/ does), and bindgen, which runs elsewhere, would not find them.
(
    cd /
    CARGO_ZIGBUILD_PYTHON_PATH=$venv/bin/python3 CARGO_TARGET_DIR=$build \
        cargo zigbuild --manifest-path "$root/Cargo.toml" --release -p slidingwindow \
        --target "$TRIPLE.$GLIBC_FLOOR"
)
so=$build/$TRIPLE/release/libslidingwindow.so

# The newest glibc symbol version the module needs must be at most the floor.
needed=$(objdump -T "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
if [[ -z $needed || $(printf '%s\n%s\n' "$needed" "$GLIBC_FLOOR" | sort -V | tail -n 1) != "$GLIBC_FLOOR" ]]; then
    echo "dist: $so needs glibc ${needed:-?}, above the floor $GLIBC_FLOOR" >&2
    exit 1
fi
echo "dist: the module needs glibc $needed at most (floor $GLIBC_FLOOR)"

stage=$target/dist-stage/$name
rm -rf "$target/dist-stage"
mkdir -p "$stage" dist
install -m 0755 "$so" "$stage/libslidingwindow.so"
install -m 0644 redis.conf.example README.md LICENSE "$stage/"
rm -f dist/slidingwindow-*.tar.gz dist/SHA256SUMS
# The same sources give the same bytes: fixed order, owners and times, no gzip timestamp.
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$target/dist-stage" -cf - "$name" | gzip -9n >"dist/$name.tar.gz"
(cd dist && sha256sum "$name.tar.gz" >SHA256SUMS)
echo "dist: dist/$name.tar.gz"
cat dist/SHA256SUMS
