#!/usr/bin/env bash
# `make dist`: dist/slidingwindow-<version>-x86_64-linux-gnu.tar.gz (the module, redis.conf.example,
# README.md, LICENSE), the services' slidingwindow-<part>-<version>-x86_64-linux-gnu.tar.gz (the
# binary, its README.md, an example config, LICENSE), and dist/SHA256SUMS over all of them. The
# module is linked against glibc 2.17, so it loads on every glibc Linux from RHEL 7 on; the
# services are static (musl) executables, which run on any x86_64 Linux and in a `FROM scratch`
# image (scripts/images.sh takes them from these tarballs). cargo-zigbuild links both with Zig
# (PyPI's `ziglang` wheel, in a virtualenv under target/); objdump checks that the module needs no
# newer glibc, readelf that the services need no loader or library.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

# Pinned: a new Zig may change what the build needs (zig 0.15 with libclang 14 is tested here).
ZIGBUILD_VERSION=0.24.1
ZIGLANG_VERSION=0.15.2
GLIBC_FLOOR=2.17
TRIPLE=x86_64-unknown-linux-gnu
STATIC=x86_64-unknown-linux-musl
# The services by cargo package, each with its tarball's <part> and its example config (relative
# to the package's directory, which cargo metadata gives; "-" for none: the tarball then holds
# the binary's --help as usage.txt). The one place naming the services' files.
SERVICES=("envoy-ratelimit envoy-ratelimit config/example.yaml" "http-gateway gateway -")

bash scripts/setup.sh python3-venv objdump
rustup target list --installed | grep -qx "$STATIC" || rustup target add "$STATIC"

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
    # Apart, so that the services' dependencies' features never change the module's build.
    CARGO_ZIGBUILD_PYTHON_PATH=$venv/bin/python3 CARGO_TARGET_DIR=$build \
        cargo zigbuild --manifest-path "$root/Cargo.toml" --release --bins \
        $(for s in "${SERVICES[@]}"; do echo "-p ${s%% *}"; done) --target "$STATIC"
)
so=$build/$TRIPLE/release/libslidingwindow.so

# The newest glibc symbol version a binary needs must be at most the floor.
glibc_floor() {
    local needed
    needed=$(objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
    if [[ -z $needed || $(printf '%s\n%s\n' "$needed" "$GLIBC_FLOOR" | sort -V | tail -n 1) != "$GLIBC_FLOOR" ]]; then
        echo "dist: $1 needs glibc ${needed:-?}, above the floor $GLIBC_FLOOR" >&2
        exit 1
    fi
    echo "dist: $(basename "$1") needs glibc $needed at most (floor $GLIBC_FLOOR)"
}
glibc_floor "$so"

# A static executable: no program interpreter (ld.so) and no shared library to load.
static() {
    if readelf -l "$1" | grep -q INTERP || readelf -d "$1" | grep -q NEEDED; then
        echo "dist: $1 is not static" >&2
        exit 1
    fi
    echo "dist: $(basename "$1") is static"
}

stage=$target/dist-stage/$name
rm -rf "$target/dist-stage"
mkdir -p "$stage" dist
install -m 0755 "$so" "$stage/libslidingwindow.so"
install -m 0644 redis.conf.example README.md LICENSE "$stage/"
names=("$name")

# Each service: its binary (printing the release with --version), README, example config.
manifests=$(cargo metadata --no-deps --format-version 1 --offline)
for service in "${SERVICES[@]}"; do
    read -r package part config <<<"$service"
    bin=$build/$STATIC/release/$package
    static "$bin"
    [[ $("$bin" --version) == "$package $version" ]] ||
        { echo "dist: $bin --version says '$("$bin" --version)', not '$package $version'" >&2; exit 1; }
    dir=$(python3 -c 'import json, os, sys; print(next(os.path.dirname(p["manifest_path"]) for p in json.load(sys.stdin)["packages"] if p["name"] == sys.argv[1]))' "$package" <<<"$manifests")
    names+=("slidingwindow-$part-$version-x86_64-linux-gnu")
    stage=$target/dist-stage/${names[-1]}
    mkdir -p "$stage"
    install -m 0755 "$bin" "$stage/$package"
    install -m 0644 "$dir/README.md" LICENSE "$stage/"
    if [[ $config == - ]]; then
        "$bin" --help >"$stage/usage.txt"
    else
        install -m 0644 "$dir/$config" "$stage/"
    fi
done

rm -f dist/slidingwindow-*.tar.gz dist/SHA256SUMS
# The same sources give the same bytes: fixed order, owners and times, no gzip timestamp.
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
for n in "${names[@]}"; do
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
        -C "$target/dist-stage" -cf - "$n" | gzip -9n >"dist/$n.tar.gz"
    echo "dist: dist/$n.tar.gz"
done
(cd dist && sha256sum "${names[@]/%/.tar.gz}" >SHA256SUMS)
cat dist/SHA256SUMS
