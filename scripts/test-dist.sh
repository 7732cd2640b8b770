#!/usr/bin/env bash
# `make test-dist`: checks dist/ as a user would (sha256sum -c), unpacks the tarballs, runs the
# contract and replication suites against the module on each of $SERVERS, then each service's
# tests against its released binary, on the released module: the Envoy service's (its end-to-end
# pytest, ENVOY_RATELIMIT naming the binary) and the gateway's (its cargo tests, GATEWAY naming
# the binary: they build only the test harness), all as jobs of scripts/test.sh.
# Takes from make: SERVERS, TEST_THREADS, JOBS.
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

for bin in "$envoy" "$gateway"; do
    [[ $("$bin" --version) == "$(basename "$bin") $version" ]] ||
        { echo "test-dist: $bin --version says '$("$bin" --version)'" >&2; exit 1; }
done
echo "test-dist: $envoy, $gateway"
# The contract and replication suites on each server, and each service's tests against its
# released binary, as jobs of scripts/test.sh.
SLIDINGWINDOW_MODULE=$so ENVOY_RATELIMIT=$envoy GATEWAY=$gateway SUITES="contract replication" \
    UNIT=no EXAMPLES="gateway envoy" LOGS=$unpacked/logs bash scripts/test.sh
