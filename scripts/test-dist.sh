#!/usr/bin/env bash
# `make test-dist`: checks dist/ as a user would (sha256sum -c), unpacks the tarballs, runs the
# contract and replication suites against the module on each of $SERVERS, then, where dist/ has
# the services' tarballs (make dist DIST_SERVICES=1), the Envoy service's end-to-end tests (pytest
# in $ENVOY_TESTS with $ENVOY_VENV) and a smoke test of the gateway (scripts/smoke_gateway.py:
# 200, 200, then 429 with its headers) against the released binaries, on the released module.
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
services=no
[[ -e $envoy || -e $gateway ]] && services=yes
files=("$so")
[[ $services == no ]] || files+=("$envoy" "$gateway" "$(dirname "$envoy")"/{README.md,LICENSE,example.yaml}
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

if [[ $services == no ]]; then
    echo "test-dist: no service tarballs in dist/ (make dist DIST_SERVICES=1 builds them)"
    exit 0
fi
echo "test-dist: $envoy"
(cd "$ENVOY_TESTS" && SLIDINGWINDOW_MODULE=$so ENVOY_RATELIMIT=$envoy "$ENVOY_VENV/bin/pytest" -p no:cacheprovider -q)
echo "test-dist: $gateway"
SLIDINGWINDOW_MODULE=$so GATEWAY=$gateway python3 scripts/smoke_gateway.py
