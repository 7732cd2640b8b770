#!/usr/bin/env bash
# `make images`: slidingwindow/redis:<version> and slidingwindow/valkey:<version> from
# docker/Dockerfile, with the module from dist/'s tarball, and slidingwindow/envoy-ratelimit and
# slidingwindow/gateway (FROM scratch: docker/<part>/Dockerfile) with the static binaries from
# theirs (all checked against SHA256SUMS), built with --network none. The bases: REDIS_BASE and VALKEY_BASE (default the
# official redis:7.4 and valkey/valkey:9), or STANDIN=1 for the stand-ins made here
# from Debian (scripts/standin-base.sh). Starts dockerd when none answers (and leaves it running).
# Prints each image with its size.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/dockerd.sh

target=${CARGO_TARGET_DIR:-$PWD/target}
version=$(python3 scripts/version.py)
tarball=slidingwindow-$version-x86_64-linux-gnu.tar.gz
[[ -f dist/$tarball ]] || { echo "images: dist/$tarball is missing (make dist)" >&2; exit 1; }
(cd dist && sha256sum --quiet -c SHA256SUMS)

ensure_dockerd "$target/images/dockerd.log"

if [[ ${STANDIN:-} == 1 ]]; then
    { read -r REDIS_BASE; read -r VALKEY_BASE; } < <(bash scripts/standin-base.sh)
fi

# The build context: the released module and the entrypoint, nothing else.
context=$target/images/context
rm -rf "$context"
mkdir -p "$context"
tar -xzf "dist/$tarball" -C "$context" --strip-components=1 "${tarball%.tar.gz}/libslidingwindow.so"
install -m 0755 docker/slidingwindow-entrypoint.sh "$context/"

build() {
    local flavour=$1 base=$2 image=slidingwindow/$1:$version
    docker build --quiet --network none --build-arg "VERSION=$version" --build-arg "BASE=$base" \
        --build-arg "SERVER=$flavour-server" -t "$image" -f docker/Dockerfile "$context" >/dev/null || {
        echo "images: $image on $base failed; where no image registry is reachable, STANDIN=1 builds on bases made from Debian" >&2
        exit 1
    }
    size "$image"
}
size() { echo "$1 $(docker image inspect -f '{{.Size}}' "$1") bytes"; }
build redis "${REDIS_BASE:-redis:7.4}"
build valkey "${VALKEY_BASE:-valkey/valkey:9}"

# The services: PART (the tarball's and the image's name) and BINARY; the context is the binary.
service() {
    local part=$1 binary=$2 image=slidingwindow/$1:$version
    local name=slidingwindow-$part-$version-x86_64-linux-gnu dir=$target/images/$part
    [[ -f dist/$name.tar.gz ]] || { echo "images: dist/$name.tar.gz is missing (make dist)" >&2; exit 1; }
    rm -rf "$dir"
    mkdir -p "$dir"
    tar -xzf "dist/$name.tar.gz" -C "$dir" --strip-components=1 "$name/$binary"
    docker build --quiet --network none --build-arg "VERSION=$version" -t "$image" \
        -f "docker/$part/Dockerfile" "$dir" >/dev/null
    size "$image"
}
service envoy-ratelimit envoy-ratelimit
service gateway http-gateway
