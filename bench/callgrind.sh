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
# each call on a compact key of its own that it creates (not run unless KINDS names it); wide,
# `make bench-vs-cell`'s `wide` (not run unless KINDS names it): 100,000 compact keys holding what
# a full window of its stream (one request every 0.03 ms on a key drawn by its seeded generator,
# 60 s and 10 at most) leaves in them, loaded in three passes of APPLY (see `calls`) with an expiry
# an hour ahead, then the stream's next 20,000 requests (about half admitted, each on a key few
# others touch), so that each call reads a key and its log that no call before it read; big,
# `make bench-vs-cell`'s `big` (not run unless KINDS names it): one key given the stream's first
# 60,000 requests (one a ms, ALLOW key 60 100000: a full window, all admitted), then its next
# 20,000 (each trims the oldest request and appends one).
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

# calls MODE KIND: the calls that fill the keys of KIND (MODE fill), or the 20,000 measured ones
# (MODE stream), in RESP.
calls() {
    python3 - "$1" "$2" "$calls" "$t0" <<'PY'
import sys, time
mode, kind, calls, t0 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def resp(*words):
    return f"*{len(words)}\r\n" + "".join(f"${len(str(w))}\r\n{w}\r\n" for w in words)

def wide():
    """bench/src/workload.rs's `wide` stream: (key, now) for ever, keys from SplitMix64."""
    state, mask, start, i = 0x5EED, (1 << 64) - 1, 1_700_000_000_000, 0
    while True:
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        yield f"sw:cmp:wide:{(z ^ (z >> 31)) % 100_000}", start + i * 3000 // 100_000
        i += 1

if kind == "wide":
    # A full window of the stream (2,000,000 requests) through the model of ALLOW key 60 10:
    # each key's log; then the stream goes on.
    stream, logs = wide(), {}
    for _ in range(2_000_000):
        key, now = next(stream)
        log = logs.setdefault(key, [])
        while log and log[0] <= now - 60_000:
            log.pop(0)
        if len(log) < 10:
            log.append(now)
    if mode == "fill":
        # As the stream left them, allocation by allocation: each key created by its oldest
        # request (a word), its log boxed by the next ones, its buffer last written by its newest
        # one, each pass in the order of those requests, so that no key's log sits beside its
        # entry or its other allocations as one call making the whole key would leave it.
        at, passes = int(time.time() * 1000) + 3_600_000, [[], [], []]
        for key, log in logs.items():
            passes[0].append((log[0], key, log[:1]))
            if len(log) > 2:
                passes[1].append((log[-2], key, log[1:-1]))
            if len(log) > 1:
                passes[2].append((log[-1], key, log[-1:]))
        out = []
        for calls_of in passes:
            for _, key, part in sorted(calls_of):
                pairs = [f"{ts} {part.count(ts)}" for ts in sorted(set(part))]
                out.append(resp("SLIDINGWINDOW.APPLY", key, " ".join(["-1", str(at)] + pairs)))
    else:
        out = [resp("SLIDINGWINDOW.ALLOW", key, 60, 10, now)
               for key, now in (next(stream) for _ in range(calls))]
    sys.stdout.write("".join(out))
    sys.exit(0)

if kind == "big":
    # bench/src/workload.rs's `big` stream: one request a ms on one key.
    first, count = (0, 60_000) if mode == "fill" else (60_000, calls)
    sys.stdout.write("".join(resp("SLIDINGWINDOW.ALLOW", "sw:cmp:big:0", 60, 100_000, t0 + i)
                             for i in range(first, first + count)))
    sys.exit(0)

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
