#!/usr/bin/env bash
# Load check, measured by the crate's `load` example (tonic client), on two redis-servers with the
# module (one on each storage: the default sorted set and `slidingwindow.storage compact`), each with
# its own service, on free loopback ports. Each of ROUNDS rounds runs every variant in turn for
# SECONDS: two unlimited descriptors (no Redis call), then on each storage two counted descriptors
# with every request admitted (10,000 users and one route), the same with every request refused
# (one user over its limit), and one and 20 counted descriptors at LATENCY_CONCURRENCY calls in
# flight for the median latency; then two leased descriptors (our `lease` extension, sorted set).
# With FLOOR (a service built with the `bench-floor` feature), each round also runs the admitted
# variant on it: one PING in place of each request's calls, the floor of one Redis call a request.
# Each line adds the module's calls in that variant. The summary gives each round's ratios and
# their medians against the issue's targets, per storage.
# Usage: bench.sh [SECONDS]   (env: SLIDINGWINDOW_MODULE, ENVOY_RATELIMIT, LOAD, CONCURRENCY,
#                              ROUNDS, LATENCY_CONCURRENCY, FLOOR)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${1:-10}
module=${SLIDINGWINDOW_MODULE:-$root/target/release/libslidingwindow.so}
service=${ENVOY_RATELIMIT:-$root/target/release/envoy-ratelimit}
load=${LOAD:-$root/target/release/examples/load}
floor=${FLOOR:-}
concurrency=${CONCURRENCY:-32}
rounds=${ROUNDS:-3}
latency_concurrency=${LATENCY_CONCURRENCY:-4}

source "$root/services/common/bench.sh"
start_redis zset
start_redis compact --slidingwindow.storage compact

cat >"$dir/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000}
  - key: user
    value: hot
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: route
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: free_user
    rate_limit: {unlimited: true}
  - key: free_route
    rate_limit: {unlimited: true}
  - key: leased_user
    rate_limit: {unit: second, requests_per_unit: 1000000, lease: {size: 500, duration_ms: 100}}
  - key: leased_route
    rate_limit: {unit: second, requests_per_unit: 1000000, lease: {size: 500, duration_ms: 100}}
YAML

# start_service NAME [REDIS [BINARY]]: the service on redis REDIS (default NAME); sets NAME_addr
# and NAME_service_pid.
start_service() {
    local port_var=${2:-$1}_port
    start_envoy "$1" "${!port_var}" "${3:-$service}"
}
start_service zset
start_service compact
[[ -n $floor ]] && start_service floor compact "$floor"

# user=hot has 1 request an hour: use it up, then every request of the refused variant is refused
# (and, the descriptors being charged together, the route is not charged either).
for port in "$zset_port" "$compact_port"; do
    redis-cli -p "$port" SLIDINGWINDOW.ALLOW 'ratelimit:{bench}:user=hot' 3600 1 '*' >/dev/null
done

# The module's calls on redis port $1 since its last CONFIG RESETSTAT (INFO commandstats).
module_calls() {
    redis-cli -p "$1" INFO commandstats |
        awk -F'[:=,]' '/^cmdstat_slidingwindow\./ { n += $3 } END { print n + 0 }'
}

# A process's CPU time so far (user + system), in clock ticks.
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}
ticks_per_s=$(getconf CLK_TCK)

# run NAME STORAGE LOAD-ARGS...: one variant on the service and Redis of STORAGE (SERVICE, when
# set, names another service on that Redis).
run() {
    local name=$1 storage=$2
    shift 2
    local port_var=${storage}_port redis_var=${storage}_pid svc_var=${SERVICE:-$storage}_service_pid
    local addr_var=${SERVICE:-$storage}_addr
    local line s0 r0 s1 r1
    redis-cli -p "${!port_var}" CONFIG RESETSTAT >/dev/null
    s0=$(cpu_ticks "${!svc_var}")
    r0=$(cpu_ticks "${!redis_var}")
    line=$("$load" "${!addr_var}" --seconds "$seconds" "$@")
    s1=$(cpu_ticks "${!svc_var}")
    r1=$(cpu_ticks "${!redis_var}")
    # CPU µs per answered request (OK + OVER_LIMIT), the service's and Redis's.
    line="$line, $(module_calls "${!port_var}") module calls, $(echo "$line" | awk -v s=$((s1 - s0)) -v r=$((r1 - r0)) -v hz="$ticks_per_s" '
        { for (i = 1; i <= NF; i++) { if ($i == "OK,") { ok = $(i - 1); sub(/^\(/, "", ok) } if ($i == "OVER_LIMIT,") over = $(i - 1) } }
        END { n = ok + over; if (n < 1) n = 1; printf "service %.1f µs, redis %.1f µs CPU per request", s * 1e6 / hz / n, r * 1e6 / hz / n }')"
    echo "  $name: $line"
    echo "$name $line" >>"$dir/results"
}

for round in $(seq "$rounds"); do
    echo "round $round:"
    run unlimited zset --concurrency "$concurrency" --unlimited
    if [[ -n $floor ]]; then
        SERVICE=floor run floor compact --concurrency "$concurrency" --identities 10000
    fi
    for storage in zset compact; do
        run "admitted-$storage" "$storage" --concurrency "$concurrency" --identities 10000
        run "refused-$storage" "$storage" --concurrency "$concurrency" --user hot
        run "one-$storage" "$storage" --concurrency "$latency_concurrency" --descriptors 1
        run "twenty-$storage" "$storage" --concurrency "$latency_concurrency" --descriptors 20
    done
    # Two leased descriptors, one value each (a global limit and one route's): from memory once
    # each key sees 500 requests within 100 ms (5,000/s), one lease call per 500 requests a key.
    run leased zset --concurrency "$concurrency" --leased --user all
done

# Per round: admitted / unlimited and refused / unlimited in requests/s, twenty / one in median
# latency; then the median of each over the rounds.
awk -v rounds="$rounds" '
    {
        rate[$1, ++n[$1]] = $2
        for (i = 1; i <= NF; i++) {
            if ($i == "p50") p50[$1, n[$1]] = $(i + 1)
            if ($i == "OK,") { v = $(i - 1); sub(/^\(/, "", v); ok[$1, n[$1]] = v }
            if ($i == "module") calls[$1, n[$1]] = $(i - 1)
            if ($i == "service") svc[$1, n[$1]] = $(i + 1)
            if ($i == "redis") red[$1, n[$1]] = $(i + 1)
        }
    }
    function median(a, k,    i, j, t, v) {
        for (i = 1; i <= k; i++) v[i] = a[i]
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
    }
    END {
        for (r = 1; r <= rounds; r++) {
            line = sprintf("round %d:", r)
            for (k = 1; k <= 2; k++) {
                st = k == 1 ? "zset" : "compact"
                a[st, r] = rate["admitted-" st, r] / rate["unlimited", r]
                f[st, r] = rate["refused-" st, r] / rate["unlimited", r]
                l[st, r] = p50["twenty-" st, r] / p50["one-" st, r]
                line = line sprintf(" %s admitted/unlimited %.2f, refused/unlimited %.2f, p50 twenty/one %.2f;", st, a[st, r], f[st, r], l[st, r])
            }
            s[r] = rate["leased", r] / rate["unlimited", r]
            c[r] = calls["leased", r] / (ok["leased", r] > 0 ? ok["leased", r] : 1)
            line = sprintf("%s leased/unlimited %.2f with %.4f module calls per request", line, s[r], c[r])
            if (("floor", r) in rate) {
                fl[r] = rate["floor", r] / rate["unlimited", r]
                line = line sprintf("; floor/unlimited %.2f", fl[r])
            }
            print line
        }
        for (k = 1; k <= 2; k++) {
            st = k == 1 ? "zset" : "compact"
            for (r = 1; r <= rounds; r++) { x[r] = a[st, r]; y[r] = f[st, r]; z[r] = l[st, r] }
            printf "median, %s: admitted/unlimited %.2f (target >= 0.7), refused/unlimited %.2f (target >= 0.7), p50 twenty/one %.2f (target <= 2)\n", st, median(x, rounds), median(y, rounds), median(z, rounds)
        }
        printf "median: leased/unlimited %.2f, %.4f module calls per leased request\n", median(s, rounds), median(c, rounds)
        if (("floor", 1) in rate)
            printf "median: floor/unlimited %.2f (one PING a request in place of its calls)\n", median(fl, rounds)
        printf "median CPU µs per request, service + redis:"
        nn = split("unlimited admitted-zset refused-zset one-zset twenty-zset admitted-compact refused-compact one-compact twenty-compact leased", names, " ")
        if (("floor", 1) in rate) names[++nn] = "floor"
        for (k = 1; k <= nn; k++) {
            for (r = 1; r <= rounds; r++) { sv[r] = svc[names[k], r]; rv[r] = red[names[k], r] }
            printf "%s %s %.1f + %.1f", (k > 1 ? "," : ""), names[k], median(sv, rounds), median(rv, rounds)
        }
        printf "\n"
    }' "$dir/results"
