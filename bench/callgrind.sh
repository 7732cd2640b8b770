#!/usr/bin/env bash
# Instructions a call costs (issue 36's and 58's targets): redis-server under callgrind, a key of
# 1,000 requests 1 ms apart, then 20,000 pipelined calls of one kind (sent in RESP, as clients
# send them) with the counters zeroed before and dumped after; prints for each kind the
# instructions a call of the whole server (reading, parsing, the command, the reply, the event
# loop; the server's cron included, whose share follows the wall clock) and inside the command
# (RedisModuleCommandDispatcher's inclusive cost: the module's command and the Redis API it calls),
# and of those the module's own (the instructions of its library's functions, the API calls and
# libc's not counted).
# Kinds: append (no trim), trim (one trimmed, one appended), refusal (the window full), repeat
# (appended on the newest timestamp), on a compact key; zappend, an append on a sorted set; new,
# each call on a compact key of its own that it creates (not run unless KINDS names it).
#   bash bench/callgrind.sh [module.so ...]   (default: target/release/libslidingwindow.so)
#   TOP_KEYS=0 bash bench/callgrind.sh ...    the summary of refused keys at that size (default:
#                                             the server's default, 1024; 0 turns it off)
#   CACHE_SIM=1 bash bench/callgrind.sh ...   also the simulated misses a call, whole server:
#                                             first-level instruction and data, last-level
#   KINDS="append refusal" bash bench/callgrind.sh ...   only those kinds
#   KEEP=dir bash bench/callgrind.sh ...      keeps each dump as dir/<n>-<kind>.out
# Needs valgrind (callgrind_control, callgrind_annotate) and redis-server/redis-cli on PATH
# (REDIS_SERVER/REDIS_CLI).
set -euo pipefail
cd "$(dirname "$0")/.."
server=${REDIS_SERVER:-redis-server}
cli=${REDIS_CLI:-redis-cli}
calls=20000
t0=1700000000000
kinds=${KINDS:-append trim refusal repeat zappend}
modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=("$PWD/target/release/libslidingwindow.so")
work=$(mktemp -d)
vg=
trap '[ -z "$vg" ] || kill "$vg" 2>/dev/null; rm -rf "$work"' EXIT
cache=()
[ -z "${CACHE_SIM:-}" ] || cache=(--cache-sim=yes)

# shellcheck source=bench/server.sh
. bench/server.sh

# calls MODE KIND: the 1,000 calls that fill key KIND (MODE fill), or the 20,000 measured ones
# (MODE stream), in RESP.
calls() {
    python3 - "$1" "$2" "$calls" "$t0" <<'PY'
import sys
mode, kind, calls, t0 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def resp(*words):
    return f"*{len(words)}\r\n" + "".join(f"${len(str(w))}\r\n{w}\r\n" for w in words)

out = []
if mode == "fill":
    out = [resp("SLIDINGWINDOW.ALLOW", kind, 3600, 1000000000, t0 + i) for i in range(1000)]
for i in range(calls if mode == "stream" else 0):
    now = t0 + 1000 + i
    if kind in ("append", "zappend"):  # no trim, admitted
        out.append(resp("SLIDINGWINDOW.ALLOW", kind, 3600, 1000000000, now))
    elif kind == "trim":  # one trimmed, one appended: the key stays at 1,000
        out.append(resp("SLIDINGWINDOW.ALLOW", kind, 1, 1000000000, now))
    elif kind == "refusal":  # the window holds its max: refused, nothing trimmed
        out.append(resp("SLIDINGWINDOW.ALLOW", kind, 3600, 1000, now))
    elif kind == "repeat":  # appended on the newest timestamp again and again
        out.append(resp("SLIDINGWINDOW.ALLOW", kind, 3600, 1000000000, t0 + 999))
    elif kind == "new":  # the first call on a key: each on a key of its own, created
        out.append(resp("SLIDINGWINDOW.ALLOW", f"new:{i}", 3600, 1000000000, now))
sys.stdout.write("".join(out))
PY
}

# per_call DUMP MODULE: "whole in-command module" instructions a call, then the misses if simulated.
per_call() {
    local own
    own=$(callgrind_annotate --threshold=100 "$1" 2>/dev/null | awk -v so="[$2]" '
        index($0, so) { v = $1; gsub(",", "", v); sum += v }
        END { printf "%.0f", sum }')
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null | awk -v calls="$calls" -v own="$own" '
        # With the cache simulated: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw, each with its share.
        /PROGRAM TOTALS/ {
            gsub(",", "", $0); whole = $1
            if (NF > 6) { i1 = $7; d1 = $9 + $11; ll = $13 + $15 + $17 }
        }
        /ModuleCommandDispatcher / && !cmd { v = $1; gsub(",", "", v); cmd = v }
        END {
            printf "%9.0f %11.0f %7.0f", whole / calls, cmd / calls, own / calls
            if (d1 != "") printf " %9.1f %9.1f %9.2f", i1 / calls, d1 / calls, ll / calls
            printf "\n"
        }'
}

n=0
for module in "${modules[@]}"; do
    n=$((n + 1))
    start_server "$work" "$module" valgrind --tool=callgrind "${cache[@]}" \
        --callgrind-out-file="$work/cg.out" --log-file="$work/vg.log"
    vg=$pid
    if [ -n "${TOP_KEYS:-}" ]; then
        reply=$("$cli" -p "$port" config set slidingwindow.top-keys "$TOP_KEYS" 2>&1)
        [ "$reply" = OK ] || { echo "callgrind: top-keys $TOP_KEYS: $reply" >&2; exit 1; }
    fi
    printf '%s\n' "$module"
    if [ -n "${CACHE_SIM:-}" ]; then
        printf '  %-8s %9s %11s %7s %9s %9s %9s\n' kind whole in-command module 'I1 miss' 'D1 miss' \
            'LL miss'
    else
        printf '  %-8s %9s %11s %7s\n' kind whole in-command module
    fi
    for kind in $kinds; do
        storage=compact
        [ "$kind" != zappend ] || storage=zset
        "$cli" -p "$port" config set slidingwindow.storage "$storage" >/dev/null
        calls fill "$kind" | "$cli" -p "$port" --pipe >/dev/null
        calls stream "$kind" >"$work/$kind.txt"
        callgrind_control -z "$vg" >/dev/null 2>&1
        "$cli" -p "$port" --pipe <"$work/$kind.txt" >/dev/null
        rm -f "$work"/cg.out.*
        callgrind_control -d "$vg" >/dev/null 2>&1
        dump=$(ls "$work"/cg.out.* | tail -1)
        [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP" && cp "$dump" "$KEEP/$n-$kind.out"; }
        printf '  %-8s %s\n' "$kind" "$(per_call "$dump" "$module")"
    done
    "$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$vg" 2>/dev/null || true
    vg=
done
