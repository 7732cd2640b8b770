#!/usr/bin/env bash
# Load check, measured with wrk: requests per second through the gateway without the limiter,
# with it admitting everything (10,000 identities, one exact call each), with one global limit far
# from its max leased 100 at a time for 100 ms (every request admitted), and refusing (one identity
# over its limit) with and without the deny cache. The variants take turns in each of ROUNDS
# rounds (CPU timings on a shared machine swing between runs: compare within a round). Starts its
# own redis-server (module loaded) and gateways on free loopback ports.
# Usage: bench.sh [DURATION]   (env: SLIDINGWINDOW_MODULE, GATEWAY, CONNECTIONS, THREADS, ROUNDS)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
duration=${1:-10s}
module=${SLIDINGWINDOW_MODULE:-$root/target/release/libslidingwindow.so}
gateway=${GATEWAY:-$root/target/release/http-gateway}
connections=${CONNECTIONS:-32}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}

source "$root/services/common/bench.sh"
start_redis redis

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

# CPU time (clock ticks) the gateway at line $1 of gateway.pids and redis-server have used. A
# process that has died is an error naming it, with the logs.
cpu_ticks() {
    local gw_pid pid
    gw_pid=$(sed -n "${1}p" "$dir/gateway.pids")
    for pid in "$gw_pid" "$redis_pid"; do
        if [[ ! -r /proc/$pid/stat ]]; then
            echo "process $pid (gateway $1 or redis-server) has exited:" >&2
            tail -n 5 "$dir/gateway.log" "$dir/redis/redis.log" >&2
            return 1
        fi
    done
    # Fields 14 and 15 of /proc/PID/stat: user and system time; the name (field 2) has no spaces here.
    awk '{ t += $14 + $15 } END { print t }' "/proc/$gw_pid/stat" "/proc/$redis_pid/stat"
}

# Calls of the module's commands Redis has run since it started (INFO commandstats).
redis_calls() {
    redis-cli -p "$redis_port" info commandstats |
        awk -F'[:,=]' '/^cmdstat_slidingwindow/ { n += $3 } END { print n + 0 }'
}

# Prints requests/s, the share of non-2xx answers, the gateway's and Redis's CPU time per request
# (less sensitive than req/s to other work on the machine) and Redis calls per admitted request.
measure() {
    local url=$1 script=$2 nth=$3 out t0 t1 c0 c1
    t0=$(cpu_ticks "$nth")
    c0=$(redis_calls)
    out=$(wrk -t"$threads" -c"$connections" -d"$duration" -s "$script" "$url/")
    t1=$(cpu_ticks "$nth")
    c1=$(redis_calls)
    local rps total bad
    rps=$(sed -n 's/^Requests\/sec: *//p' <<<"$out")
    total=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' <<<"$out")
    bad=$(sed -n 's/^ *Non-2xx or 3xx responses: *//p' <<<"$out")
    awk -v r="$rps" -v b="${bad:-0}" -v t="$total" -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" \
        -v calls=$((c1 - c0)) 'BEGIN {
            ok = t - b
            printf "%.0f %.1f%% %.1f %s\n", r, 100 * b / t, 1e6 * d / hz / t,
                (ok > 0 ? sprintf("%.4f", calls / ok) : "-")
        }'
}

# In this order: their lines in gateway.pids are 1 to 5.
plain=$(start_gateway)
limited=$(start_gateway --limit 100/1s --limit 1000/60s)
leased=$(start_gateway --global-limit 1000000000/1s --lease 100/100ms)
refusing=$(start_gateway --limit 10/60s --deny-cache off)
cached=$(start_gateway --limit 10/60s)
urls=("$plain" "$limited" "$leased" "$refusing" "$cached")
scripts=(many many many one one)
names=('no limiter' 'exact, admitted (10,000 identities)' 'global limit leased 100/100ms, admitted'
    'refused by Redis (--deny-cache off)' 'refused from the deny cache')

echo "wrk -t$threads -c$connections -d$duration, $rounds rounds, on $(nproc) CPUs ($(redis-server --version | cut -d' ' -f3)); gateway, redis-server and wrk share them"
row() { printf '%-5s %-42s %10s %8s %11s %14s\n' "$@"; }
row round variant 'req/s' non-2xx 'CPU us/req' 'Redis calls/ok'
: >"$dir/results"
for round in $(seq "$rounds"); do
    for i in "${!urls[@]}"; do
        # The leased global key is created in the compact storage (a hot key's log, docs/storage.md):
        # a lease of 100 adds 100 equal timestamps there, 100 ULID members to a sorted set.
        storage=zset
        [[ $i == 2 ]] && storage=compact
        redis-cli -p "$redis_port" config set slidingwindow.storage "$storage" >/dev/null
        # An assignment, so that a failed measure (a process gone) stops the script.
        result=$(measure "${urls[$i]}" "$dir/${scripts[$i]}.lua" $((i + 1)))
        read -r rps bad cpu calls <<<"$result"
        row "$round" "${names[$i]}" "$rps" "$bad" "$cpu" "$calls"
        echo "$round $i $rps $cpu $calls" >>"$dir/results"
    done
done
echo "CPU us/req: the gateway's and redis-server's CPU time over the run, per request"
# The lease's targets, per round against the no-limiter run of the same round, then the median.
awk -v rounds="$rounds" '
    { rps[$1, $2] = $3; cpu[$1, $2] = $4; calls[$1, $2] = $5 }
    function median(a, n,   i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
        for (r = 1; r <= rounds; r++) {
            rate[r] = rps[r, 2] / rps[r, 0]; cost[r] = cpu[r, 2] / cpu[r, 0]; per[r] = calls[r, 2]
            exact_rate[r] = rps[r, 1] / rps[r, 0]; cache_rate[r] = rps[r, 4] / rps[r, 0]
            list_rate = list_rate sprintf(" %.2f", rate[r]); list_cost = list_cost sprintf(" %.2f", cost[r])
        }
        mr = median(rate, rounds); mc = median(cost, rounds); mp = median(per, rounds)
        printf "leased / no limiter, req/s:%s (median %.2f, target >= 0.90: %s)\n", list_rate, mr, (mr >= 0.9 ? "met" : "NOT met")
        printf "leased / no limiter, CPU per request:%s (median %.2f, target <= 1.20: %s)\n", list_cost, mc, (mc <= 1.2 ? "met" : "NOT met")
        printf "leased, Redis calls per admitted request: median %.4f (1/%.0f; target <= 1/50: %s)\n", mp, (mp > 0 ? 1 / mp : 0), (mp <= 0.02 ? "met" : "NOT met")
        printf "exact / no limiter, req/s: median %.2f; refused from the deny cache / no limiter: median %.2f\n", median(exact_rate, rounds), median(cache_rate, rounds)
    }' "$dir/results"
