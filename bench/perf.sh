#!/usr/bin/env bash
# Where a workload's server time goes (issue 58): redis-server with a module, a window of the
# workload's calls sent first, then 400,000 more pipelined in RESP (redis-cli --pipe) under
# `perf record -e cpu-clock` (a software event: it needs no hardware counters); prints the shares
# by object (server, module, allocator, libc, kernel, clock) and the largest symbols, self time.
# Workloads as bench/src/workload.rs's: hot (one key, 10 s / 1,000, a request every 5 ms), big
# (one key, 60 s / 100,000, one every ms), wide (100k keys drawn at random, 60 s / 10, one every
# 0.03 ms); SLIDINGWINDOW.ALLOW on a compact key, or with CELL=1 redis-cell's CL.THROTTLE at the
# same rate (the module given is then redis-cell's).
#   bash bench/perf.sh module.so [hot|big|wide ...]   (default: hot big wide)
#   KEEP=dir bash bench/perf.sh ...                     keeps each recording as dir/<workload>.data
# Needs perf, and redis-server/redis-cli on PATH (REDIS_SERVER/REDIS_CLI).
set -euo pipefail
server=${REDIS_SERVER:-redis-server}
cli=${REDIS_CLI:-redis-cli}
module=$(realpath "${1:?usage: bench/perf.sh module.so [workload ...]}")
shift
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(hot big wide)
work=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

# calls MODE WORKLOAD: the window of calls that fills it (MODE fill) or the measured ones (stream).
calls() {
    python3 - "$1" "$2" "${CELL:-}" <<'PY'
import random, sys
mode, workload, cell = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
keys, window, most, num, den = {
    "hot": (1, 10, 1000, 5, 1),
    "big": (1, 60, 100000, 1, 1),
    "wide": (100000, 60, 10, 3000, 100000),
}[workload]
fill = window * 1000 * den // num
first, n = (0, fill) if mode == "fill" else (fill, 400000)
rng = random.Random(mode)
out = []
for i in range(first, first + n):
    key = f"k:{0 if keys == 1 else rng.randrange(keys)}"
    if cell:
        words = ("CL.THROTTLE", key, most - 1, most, window, 1)
    else:
        words = ("SLIDINGWINDOW.ALLOW", key, window, most, 1700000000000 + i * num // den)
    out.append(f"*{len(words)}\r\n" + "".join(f"${len(str(w))}\r\n{w}\r\n" for w in words))
sys.stdout.write("".join(out))
PY
}

# shellcheck source=bench/server.sh
. "$(dirname "$0")/server.sh"
start_server "$work" "$module"
if [ -z "${CELL:-}" ]; then
    reply=$("$cli" -p "$port" config set slidingwindow.storage compact)
    [ "$reply" = OK ] || { echo "perf: slidingwindow.storage compact: $reply" >&2; exit 1; }
fi
for workload in "${workloads[@]}"; do
    "$cli" -p "$port" flushall >/dev/null
    calls fill "$workload" | "$cli" -p "$port" --pipe >/dev/null
    calls stream "$workload" >"$work/stream.txt"
    data="$work/$workload.data"
    # perf records the server for as long as the calls take (its command's run).
    summary=$(perf record -e cpu-clock -F 4999 -p "$pid" -o "$data" -- \
        "$cli" -p "$port" --pipe <"$work/stream.txt" 2>/dev/null | tail -1)
    echo "== $workload ($summary)"
    perf report -i "$data" --no-children --sort dso --stdio 2>/dev/null | grep '%' | head -8
    perf report -i "$data" --no-children --sort sym --stdio 2>/dev/null | grep '%' | head -20
    [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP" && cp "$data" "$KEEP/"; }
done
"$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
wait "$pid" 2>/dev/null || true
pid=
