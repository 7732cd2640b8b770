#!/usr/bin/env bash
# `make test-dist`: checks dist/ as a user would (sha256sum -c), unpacks the tarball, and runs the
# contract and replication suites against the module it holds on each of $SERVERS.
# Takes from make: SERVERS, TEST_THREADS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

(cd dist && sha256sum -c SHA256SUMS)
tarball=$(cd dist && ls slidingwindow-*-x86_64-linux-gnu.tar.gz)
unpacked=target/dist-test
rm -rf "$unpacked"
mkdir -p "$unpacked"
tar -xzf "dist/$tarball" -C "$unpacked"
so=$(ls "$PWD/$unpacked"/slidingwindow-*/libslidingwindow.so)
for f in redis.conf.example README.md LICENSE; do
    [[ -f $(dirname "$so")/$f ]] || { echo "test-dist: $tarball lacks $f" >&2; exit 1; }
done
echo "test-dist: $so"

SLIDINGWINDOW_MODULE=$so SUITES="contract replication" UNIT=no EXAMPLES=no \
    LOGS=$unpacked/logs bash scripts/test.sh
