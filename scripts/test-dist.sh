#!/usr/bin/env bash
# `make test-dist`: checks dist/ as a user would (sha256sum -c), unpacks the tarballs, runs the
# contract and replication suites against the module on each of $SERVERS, then each service's
# end-to-end tests against its released binary, on the released module: the Envoy service's
# (pytest in $ENVOY_TESTS with $ENVOY_VENV, ENVOY_RATELIMIT naming the binary) and the gateway's
# (its cargo integration tests, GATEWAY naming the binary: they build only the test harness).
# Takes from make: SERVERS, TEST_THREADS, ENVOY_VENV, ENVOY_TESTS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

(cd dist && sha256sum -c SHA256SUMS)
version=$(python3 scripts/version.py)
tarball=slidingwindow-$version-x86_64-linux-gnu.tar.gz
unpacked=target/dist-test
rm -rf "$unpacked"
mkdir -p "$unpacked"
for t in dist/slidingwindow-*"$version"-x86_64-linux-gnu.tar.gz; do tar -xzf "$t" -C "$unpacked"; done
so=$PWD/$unpacked/${tarball%.tar.gz}/libslidingwindow.so
envoy=$PWD/$unpacked/slidingwindow-envoy-ratelimit-$version-x86_64-linux-gnu/envoy-ratelimit
gateway=$PWD/$unpacked/slidingwindow-gateway-$version-x86_64-linux-gnu/http-gateway
files=("$so" "$envoy" "$gateway" "$(dirname "$envoy")"/{README.md,LICENSE,example.yaml}
    "$(dirname "$gateway")"/{README.md,LICENSE,usage.txt})
for f in "${files[@]}"; do
    [[ -f $f ]] || { echo "test-dist: dist/'s tarballs have no $f" >&2; exit 1; }
done
for f in redis.conf.example README.md LICENSE; do
    [[ -f $(dirname "$so")/$f ]] || { echo "test-dist: $tarball lacks $f" >&2; exit 1; }
done
echo "test-dist: $so"

SLIDINGWINDOW_MODULE=$so SUITES="contract replication" UNIT=no EXAMPLES=no \
    LOGS=$unpacked/logs bash scripts/test.sh

for bin in "$envoy" "$gateway"; do
    [[ $("$bin" --version) == "$(basename "$bin") $version" ]] ||
        { echo "test-dist: $bin --version says '$("$bin" --version)'" >&2; exit 1; }
done
echo "test-dist: $envoy"
(cd "$ENVOY_TESTS" && SLIDINGWINDOW_MODULE=$so ENVOY_RATELIMIT=$envoy "$ENVOY_VENV/bin/pytest" -p no:cacheprovider -q)
echo "test-dist: $gateway"
SLIDINGWINDOW_MODULE=$so GATEWAY=$gateway cargo test -p http-gateway --no-fail-fast --tests -- \
    --test-threads="${TEST_THREADS:-2}"
