#!/usr/bin/env bash
# The Envoy service's backends beside each other on one redis-server version (redis-server on
# PATH): the service on a server with the module (`--backend module`), the service on a server
# without it started with `--enable-module-command no` (`--backend script`: the Lua script), and
# envoyproxy/ratelimit's fixed window (INCRBY+EXPIRE in one pipeline a request) sent by the
# crate's `load` example straight to that second server. Every variant runs the same requests:
# two descriptors (a user among 10,000 and one route), CONCURRENCY calls in flight, SECONDS each,
# every request admitted. Each of ROUNDS rounds runs the three in turn, each on an emptied
# server with its statistics reset; a line per variant gives requests/s, Redis's CPU a request
# (INFO cpu: used_cpu_sys + used_cpu_user, delta over requests answered), Redis commands a
# request (INFO commandstats: the calls a script makes count too), the service's CPU a request,
# and bytes a request held at the end: every key's MEMORY USAGE (SAMPLES 0) summed, over the
# requests the keys hold (a log's members, a counter's counts). The table gives the medians over
# the rounds.
# Usage: backends.sh [SECONDS]   (env: SLIDINGWINDOW_MODULE, ENVOY_RATELIMIT, LOAD, CONCURRENCY,
#                                 ROUNDS)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-5}
module=${SLIDINGWINDOW_MODULE:-$root/target/release/libslidingwindow.so}
service=${ENVOY_RATELIMIT:-$root/target/release/envoy-ratelimit}
load=${LOAD:-$root/target/release/examples/load}
concurrency=${CONCURRENCY:-32}
rounds=${ROUNDS:-3}

source "$root/services/common/bench.sh"
start_redis module
WITHOUT_MODULE=1 start_redis script --enable-module-command no

cat >"$dir/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000}
  - key: route
    rate_limit: {unit: second, requests_per_unit: 1000000}
YAML

start_envoy module "$module_port" "$service" --backend module
start_envoy script "$script_port" "$service" --backend script

redis_cpu() {
    redis-cli -p "$1" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f", s }'
}
redis_calls() {
    redis-cli -p "$1" INFO commandstats | awk -F'[:=,]' '/^cmdstat_/ { n += $3 } END { print n + 0 }'
}
# key_totals PORT COUNT: every key's MEMORY USAGE (SAMPLES 0: every element) summed, then the
# requests the keys hold, COUNT (ZCARD for a log, GET for a counter) summed.
key_totals() {
    local keys
    keys=$(redis-cli -p "$1" --scan)
    for cmd in "MEMORY USAGE %s SAMPLES 0" "$2 %s"; do
        # shellcheck disable=SC2059
        [[ -n $keys ]] && printf "$cmd\n" $keys | redis-cli -p "$1" | awk '{ n += $1 } END { printf "%d ", n }'
    done
}
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}
ticks_per_s=$(getconf CLK_TCK)

# run NAME REDIS COUNT LOAD-ARGS...: one variant against redis REDIS (FLUSHALL and CONFIG
# RESETSTAT first), its keys' requests read with COUNT; SERVICE_PID, when set, is the service's
# process.
run() {
    local name=$1 port_var=$2_port count=$3
    shift 3
    local port=${!port_var} line c0 c1 s0=0 s1=0 n calls totals
    redis-cli -p "$port" FLUSHALL >/dev/null
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
    c0=$(redis_cpu "$port")
    [[ -n ${SERVICE_PID:-} ]] && s0=$(cpu_ticks "$SERVICE_PID")
    line=$("$load" "$@" --seconds "$seconds" --concurrency "$concurrency" --identities 10000)
    [[ -n ${SERVICE_PID:-} ]] && s1=$(cpu_ticks "$SERVICE_PID")
    c1=$(redis_cpu "$port")
    calls=$(redis_calls "$port")
    totals=$(key_totals "$port" "$count")
    if ! grep -q ' 0 errors ' <<<"$line"; then
        echo "$name: requests failed: $line" >&2
        exit 1
    fi
    n=$(echo "$line" | awk '{ for (i = 1; i <= NF; i++) { if ($i == "OK,") { ok = $(i - 1); sub(/^\(/, "", ok) } if ($i == "OVER_LIMIT,") over = $(i - 1) } } END { print ok + over }')
    line=$(awk -v rate="${line%% *}" -v n="$n" -v c0="$c0" -v c1="$c1" -v calls="$calls" \
        -v s=$((s1 - s0)) -v hz="$ticks_per_s" -v totals="$totals" 'BEGIN {
        if (n < 1) n = 1
        split(totals, t, " ")
        printf "%s requests/s, redis %.1f µs CPU a request, %.2f commands a request, service %.1f µs CPU a request, %.1f bytes a request held (%d requests, %d bytes holding %d)", rate, (c1 - c0) * 1e6 / n, calls / n, s * 1e6 / hz / n, t[1] / (t[2] < 1 ? 1 : t[2]), n, t[1], t[2] }')
    echo "  $name: $line"
    echo "$name $line" >>"$dir/results"
}

for round in $(seq "$rounds"); do
    echo "round $round ($(cut -d' ' -f1-3 /proc/loadavg) load average):"
    SERVICE_PID=$module_service_pid run module module ZCARD "$module_addr"
    SERVICE_PID=$script_service_pid run script script ZCARD "$script_addr"
    run fixed-window script GET - --fixed-window "redis://127.0.0.1:$script_port"
done

echo
echo "$(redis-server --version | cut -d' ' -f1-3), medians of $rounds rounds, $seconds s each, $concurrency calls in flight, two descriptors a request:"
echo "| backend | requests/s | Redis CPU a request | Redis commands a request (a script's calls too) | service CPU a request | bytes a request held |"
echo "|---|---|---|---|---|---|"
awk '
    { k = $1; i = ++n[k]; rate[k, i] = $2; cpu[k, i] = $5; cmds[k, i] = $10; svc[k, i] = $15; bytes[k, i] = $20 }
    function median(a, k,    i, j, t, v, m) {
        m = n[k]
        for (i = 1; i <= m; i++) v[i] = a[k, i]
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
    }
    END {
        split("module script fixed-window", order, " ")
        name["module"] = "module (SLIDINGWINDOW.ALLOWALL)"
        name["script"] = "script (EVALSHA, the Lua script)"
        name["fixed-window"] = "fixed window (INCRBY+EXPIRE pipeline, envoyproxy/ratelimit)"
        for (o = 1; o <= 3; o++) {
            k = order[o]
            svc_cell = k == "fixed-window" ? "-" : sprintf("%.1f µs", median(svc, k))
            printf "| %s | %.0f | %.1f µs | %.2f | %s | %.1f |\n", name[k], median(rate, k), median(cpu, k), median(cmds, k), svc_cell, median(bytes, k)
        }
    }' "$dir/results"
