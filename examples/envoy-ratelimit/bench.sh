#!/usr/bin/env bash
# Load check: ShouldRateLimit requests per second with two descriptors each, measured by the
# crate's `load` example (tonic client). Two runs: every request admitted (10,000 users), and every
# request refused (one user over its limit). Starts its own redis-server (module loaded) and
# service on free loopback ports.
# Usage: bench.sh [SECONDS]   (env: SLIDINGWINDOW_MODULE, ENVOY_RATELIMIT, LOAD, CONCURRENCY)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${1:-10}
module=${SLIDINGWINDOW_MODULE:-$root/target/release/libslidingwindow.so}
service=${ENVOY_RATELIMIT:-$root/target/release/envoy-ratelimit}
load=${LOAD:-$root/target/release/examples/load}
concurrency=${CONCURRENCY:-32}

dir=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

free_port() {
    local port
    while :; do
        port=$((20000 + RANDOM % 40000))
        # A refused connection means nobody listens there.
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
}

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --loadmodule "$module" --logfile "$dir/redis.log" &
pids+=($!)
for _ in $(seq 100); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.05
done

cat >"$dir/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000}
  - key: user
    value: hot
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: route
    value: api
    rate_limit: {unit: second, requests_per_unit: 1000000}
YAML

"$service" --config "$dir/bench.yaml" --redis "redis://127.0.0.1:$redis_port" --listen 127.0.0.1:0 \
    >"$dir/service.out" 2>"$dir/service.log" &
pids+=($!)
for _ in $(seq 200); do
    grep -q '^listening on ' "$dir/service.out" 2>/dev/null && break
    sleep 0.05
done
addr=$(sed -n 's/^listening on //p' "$dir/service.out")

echo "admitted (10,000 users, one route):"
"$load" "$addr" --seconds "$seconds" --concurrency "$concurrency" --identities 10000
echo "refused (one user over its limit, one route):"
# user=hot has 1 request an hour: use it up, then every request of the run is refused (and, the
# descriptors being charged together, the route is not charged either).
redis-cli -p "$redis_port" SLIDINGWINDOW.ALLOW 'ratelimit:{bench}:user=hot' 3600 1 '*' >/dev/null
"$load" "$addr" --seconds "$seconds" --concurrency "$concurrency" --user hot
