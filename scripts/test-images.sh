#!/usr/bin/env bash
# `make test-images`: scripts/test-entrypoint.sh, then the module images built from dist/
# (scripts/images.sh) on the stand-in bases (STANDIN=1), then for each of slidingwindow/redis and slidingwindow/valkey, run with
# --network host on a free loopback port and a fresh volume at /data: the module is loaded by
# `SERVER ARGS` alone, ALLOW admits and refuses, a compact key (--slidingwindow.storage compact
# on the command line) is saved to the volume, owned by the image's user, and is the same key in
# a new container on that volume. Then, against a slidingwindow/redis container, the services'
# images (FROM scratch), each run with --network host as user 65532 and polled until docker
# reports it healthy (its HEALTHCHECK: the binary's healthcheck subcommand):
# slidingwindow/envoy-ratelimit, configured as envoyproxy/ratelimit's image is (a config volume at
# /data/ratelimit/config, GRPC_PORT, PORT, REDIS_URL), answers ShouldRateLimit OK, OK, OVER_LIMIT
# (services/envoy-ratelimit/ask.py) and grpc.health.v1 SERVING (grpcio's health stub), both from
# $ENVOY_VENV; slidingwindow/gateway with --limit 2/60s answers 200, 200, then 429 with its headers
# (scripts/smoke_gateway.py). Skipped (exit 0, with the reason) where dockerd cannot start.
# Starts dockerd if none answers and stops it at the end. Takes from make: ENVOY_VENV.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/dockerd.sh
: "${ENVOY_VENV:?a virtualenv with grpcio and envoy-data-plane (make test-images sets it)}"

# The entrypoint's handling of arguments, which needs no Docker.
bash scripts/test-entrypoint.sh

target=${CARGO_TARGET_DIR:-$PWD/target}
if ! ensure_dockerd "$target/images/dockerd.log"; then
    echo "test-images: SKIPPED: no Docker daemon can run on this machine (see above)"
    exit 0
fi
version=$(python3 scripts/version.py)
containers=()
volumes=()
cleanup() {
    for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || true; done
    for v in "${volumes[@]}"; do docker volume rm "$v" >/dev/null 2>&1 || true; done
    stop_dockerd
}
trap cleanup EXIT

STANDIN=1 bash scripts/images.sh

fail() {
    echo "test-images: $*" >&2
    exit 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run NAME IMAGE VOLUME PORT SERVER: a container of IMAGE running `SERVER ARGS`; waits for PING.
run() {
    local name=$1 image=$2 volume=$3 port=$4 server=$5
    docker run -d --name "$name" --network host -v "$volume:/data" "$image" \
        "$server" --port "$port" --bind 127.0.0.1 --save '' --slidingwindow.storage compact >/dev/null
    containers+=("$name")
    for _ in $(seq 100); do
        [[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && return 0
        [[ $(docker inspect -f '{{.State.Running}}' "$name") == true ]] || break
        sleep 0.1
    done
    docker logs "$name" >&2
    fail "$name did not answer PING on 127.0.0.1:$port"
}

# expect WHAT WANT COMMAND...: the reply of redis-cli COMMAND (lines joined by spaces) is WANT,
# or starts with WANT and a space for an ALLOW (whose wait and reset times follow).
expect() {
    local what=$1 want=$2 got
    shift 2
    got=$(redis-cli -p "$port" "$@" | paste -sd' ')
    [[ $1 != SLIDINGWINDOW.ALLOW || $got != "$want "* ]] || got=$want
    [[ $got == "$want" ]] || fail "$image: $what: $* answered '$got', expected '$want'"
}

check() {
    local flavour=$1 server=$2 user=$3 image=slidingwindow/$1:$version
    local port volume=slidingwindow-test-$flavour-$$ first=sw-test-$flavour-1-$$ second=sw-test-$flavour-2-$$
    port=$(free_port)
    docker volume create "$volume" >/dev/null
    volumes+=("$volume")
    run "$first" "$image" "$volume" "$port" "$server"
    redis-cli -p "$port" MODULE LIST | grep -x slidingwindow >/dev/null || fail "$image: the module is not loaded"
    redis-cli -p "$port" INFO server | grep -x "server_name:${server%-server}"$'\r' >/dev/null ||
        [[ $server == redis-server ]] || fail "$image: the server is not $server"
    expect storage 'slidingwindow.storage compact' CONFIG GET slidingwindow.storage
    # ALLOW key window max now: admitted (1), count, remaining (then wait and reset); then refused.
    expect 'first ALLOW' '1 1 1' SLIDINGWINDOW.ALLOW rl:image 60 2 '*'
    expect 'second ALLOW' '1 2 0' SLIDINGWINDOW.ALLOW rl:image 60 2 '*'
    expect 'third ALLOW' '0 2 0' SLIDINGWINDOW.ALLOW rl:image 60 2 '*'
    local type
    type=$(redis-cli -p "$port" TYPE rl:image)
    [[ $type != zset && $type != none ]] || fail "$image: rl:image is a $type, not a compact key"
    expect SAVE OK SAVE
    local owner
    owner=$(docker exec "$first" stat -c %U /data/dump.rdb)
    [[ $owner == "$user" ]] || fail "$image: /data/dump.rdb belongs to $owner, not $user"
    docker rm -f "$first" >/dev/null
    # A new container on the same volume loads the saved key.
    run "$second" "$image" "$volume" "$port" "$server"
    expect 'type after restart' "$type" TYPE rl:image
    expect 'ALLOW after restart' '0 2 0' SLIDINGWINDOW.ALLOW rl:image 60 2 '*'
    echo "test-images: $image: ALLOW answers, a $type key survives a new container on its volume ($user owns /data)"
}

# healthy NAME: polls docker's health status of container NAME until it is healthy, and checks
# that its process runs as user 65532.
healthy() {
    local name=$1 status=
    # Docker runs the first check one --interval (5 s) after the start.
    for _ in $(seq 1200); do
        status=$(docker inspect -f '{{.State.Health.Status}}' "$name")
        [[ $status == healthy ]] && break
        [[ $(docker inspect -f '{{.State.Running}}' "$name") == true ]] || break
        sleep 0.1
    done
    [[ $status == healthy ]] || { docker logs "$name" >&2; fail "$name: health status '$status', not healthy"; }
    local uid
    uid=$(stat -c %u "/proc/$(docker inspect -f '{{.State.Pid}}' "$name")")
    [[ $uid == 65532 ]] || fail "$name runs as uid $uid, not 65532"
}

check_envoy() {
    local redis_port=$1 image=slidingwindow/envoy-ratelimit:$version name=sw-test-envoy-$$ grpc http
    grpc=$(free_port)
    http=$(free_port)
    local config=$target/images/envoy-data
    rm -rf "$config"
    mkdir -p "$config/ratelimit/config"
    printf '%s\n' 'domain: shop' 'descriptors:' '  - key: route' \
        '    rate_limit: {unit: minute, requests_per_unit: 2}' >"$config/ratelimit/config/shop.yaml"
    chmod -R a+rX "$config"
    docker run -d --name "$name" --network host -v "$config:/data:ro" -e GRPC_HOST=127.0.0.1 \
        -e GRPC_PORT="$grpc" -e HOST=127.0.0.1 -e PORT="$http" -e REDIS_URL="127.0.0.1:$redis_port" \
        "$image" >/dev/null
    containers+=("$name")
    healthy "$name"
    local codes=() health
    for _ in 1 2 3; do
        # The whole output, then its first line (the overall code): `head` would close the pipe
        # early and break ask.py's later prints under pipefail.
        local out
        out=$("$ENVOY_VENV/bin/python" services/envoy-ratelimit/ask.py "127.0.0.1:$grpc" shop route=checkout)
        codes+=("${out%%$'\n'*}")
    done
    [[ ${codes[*]} == "OK OK OVER_LIMIT" ]] || fail "$image: ShouldRateLimit answered ${codes[*]}, expected OK OK OVER_LIMIT"
    health=$("$ENVOY_VENV/bin/python" -c '
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
with grpc.insecure_channel(sys.argv[1]) as c:
    r = health_pb2_grpc.HealthStub(c).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
print(health_pb2.HealthCheckResponse.ServingStatus.Name(r.status))' "127.0.0.1:$grpc")
    [[ $health == SERVING ]] || fail "$image: grpc.health.v1 says $health"
    echo "test-images: $image: healthy, ShouldRateLimit OK OK OVER_LIMIT, grpc.health.v1 SERVING (config from a volume, settings from the reference's variables)"
}

check_gateway() {
    local redis_port=$1 image=slidingwindow/gateway:$version name=sw-test-gateway-$$ port
    port=$(free_port)
    docker run -d --name "$name" --network host -e GATEWAY_LISTEN="127.0.0.1:$port" "$image" \
        --redis "redis://127.0.0.1:$redis_port" --limit 2/60s >/dev/null
    containers+=("$name")
    healthy "$name"
    python3 scripts/smoke_gateway.py "http://127.0.0.1:$port" >/dev/null ||
        fail "$image: the smoke test failed (above)"
    echo "test-images: $image: healthy, 200, 200, then 429 with its headers"
}

start=$SECONDS
check redis redis-server redis
check valkey valkey-server valkey
port=$(free_port)
volumes+=("slidingwindow-test-services-$$")
docker volume create "${volumes[-1]}" >/dev/null
run "sw-test-services-redis-$$" "slidingwindow/redis:$version" "${volumes[-1]}" "$port" redis-server
check_envoy "$port"
check_gateway "$port"
echo "test-images: 4 passed, 0 failed ($((SECONDS - start)) s after the builds)"
