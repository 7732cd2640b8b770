#!/usr/bin/env bash
# Load check: requests per second through the gateway without the limiter, with it (every request
# admitted, 10,000 identities), and with it refusing (one identity over its limit) with and
# without the deny cache, measured with wrk. Starts its own redis-server (module loaded) and
# gateways on free loopback ports.
# Usage: bench.sh [DURATION]   (env: SLIDINGWINDOW_MODULE, GATEWAY, CONNECTIONS, THREADS)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
duration=${1:-10s}
module=${SLIDINGWINDOW_MODULE:-$root/target/release/libslidingwindow.so}
gateway=${GATEWAY:-$root/target/release/http-gateway}
connections=${CONNECTIONS:-32}
threads=${THREADS:-2}

dir=$(mktemp -d)
pids=()
cleanup() {
    # Gateways start inside $(...), a subshell: their pids come back through a file.
    if [[ -f $dir/gateway.pids ]]; then
        while read -r pid; do pids+=("$pid"); done <"$dir/gateway.pids"
    fi
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
redis_pid=$!
pids+=("$redis_pid")
for _ in $(seq 100); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.05
done

# Starts a gateway with the given arguments; prints its base URL.
start_gateway() {
    local out="$dir/gateway-$#-$RANDOM.out"
    "$gateway" --listen 127.0.0.1:0 --redis "redis://127.0.0.1:$redis_port" "$@" >"$out" 2>>"$dir/gateway.log" &
    # Called as $(start_gateway ...), a subshell: `pids` here would be lost, so the file.
    echo $! >>"$dir/gateway.pids"
    for _ in $(seq 200); do
        if grep -q '^listening on ' "$out" 2>/dev/null; then
            sed -n 's/^listening on //p' "$out"
            return
        fi
        sleep 0.05
    done
    echo "gateway did not start: $(cat "$dir/gateway.log")" >&2
    exit 1
}

# One identity per request out of 10,000 (x-api-key), as a service with many clients sees.
cat >"$dir/many.lua" <<'LUA'
request = function()
  return wrk.format(nil, nil, { ["x-api-key"] = "k" .. math.random(1, 10000) })
end
LUA
cat >"$dir/one.lua" <<'LUA'
wrk.headers["x-api-key"] = "hot"
LUA

# CPU time (clock ticks) the gateway at line $1 of gateway.pids and redis-server have used.
cpu_ticks() {
    local gw_pid
    gw_pid=$(sed -n "${1}p" "$dir/gateway.pids")
    # Fields 14 and 15 of /proc/PID/stat: user and system time; the name (field 2) has no spaces here.
    awk '{ t += $14 + $15 } END { print t }' "/proc/$gw_pid/stat" "/proc/$redis_pid/stat"
}

# Prints requests/s, mean latency, the share of non-2xx answers, and the gateway's and Redis's
# CPU time per request (less sensitive than req/s to other work on the machine).
measure() {
    local url=$1 script=$2 nth=$3 out t0 t1
    t0=$(cpu_ticks "$nth")
    out=$(wrk -t"$threads" -c"$connections" -d"$duration" -s "$script" "$url/")
    t1=$(cpu_ticks "$nth")
    local rps latency total bad
    rps=$(sed -n 's/^Requests\/sec: *//p' <<<"$out")
    latency=$(awk '/Latency/ {print $2; exit}' <<<"$out")
    total=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' <<<"$out")
    bad=$(sed -n 's/^ *Non-2xx or 3xx responses: *//p' <<<"$out")
    echo "$rps $latency $(awk -v b="${bad:-0}" -v t="$total" 'BEGIN { printf "%.1f%%", 100 * b / t }') \
$(awk -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v t="$total" 'BEGIN { printf "%.1f", 1e6 * d / hz / t }')"
}

# In this order: their lines in gateway.pids are 1 to 4.
plain=$(start_gateway)
limited=$(start_gateway --limit 100/1s --limit 1000/60s)
refusing=$(start_gateway --limit 10/60s --deny-cache off)
cached=$(start_gateway --limit 10/60s)

echo "wrk -t$threads -c$connections -d$duration on $(nproc) CPUs ($(redis-server --version | cut -d' ' -f3)); gateway, redis-server and wrk share them"
row() { printf '%-44s %12s %10s %8s %14s\n' "$@"; }
row variant 'req/s' latency non-2xx 'CPU us/req'
read -r r0 l0 b0 c0 < <(measure "$plain" "$dir/many.lua" 1)
row 'no limiter' "$r0" "$l0" "$b0" "$c0"
read -r r1 l1 b1 c1 < <(measure "$limited" "$dir/many.lua" 2)
row 'limiter, admitted (10,000 identities)' "$r1" "$l1" "$b1" "$c1"
read -r r2 l2 b2 c2 < <(measure "$refusing" "$dir/one.lua" 3)
row 'limiter, refused by Redis (--deny-cache off)' "$r2" "$l2" "$b2" "$c2"
read -r r3 l3 b3 c3 < <(measure "$cached" "$dir/one.lua" 4)
row 'limiter, refused from the deny cache' "$r3" "$l3" "$b3" "$c3"
echo "CPU us/req: the gateway's and redis-server's CPU time over the run, per request"
awk -v a="$r0" -v b="$r1" 'BEGIN { printf "the limiter adds %.1f us of machine time per admitted request (1/req_s difference)\n", 1e6 / b - 1e6 / a }'
awk -v a="$r0" -v c="$r3" -v r="$r2" 'BEGIN { printf "refused from the deny cache: %.2fx the no-limiter rate (%.2fx without the cache)\n", c / a, r / a }'
