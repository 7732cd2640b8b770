#!/usr/bin/env bash
# Instructions a compact call costs inside the command (issue 36's targets): redis-server under
# callgrind collecting only within RedisModuleCommandDispatcher (the module's command, the
# Redis API it calls included; not the protocol or the server's cron, whose share follows the
# wall clock), a key of 1,000 requests 1 ms apart, then 20,000 pipelined calls of one kind with
# the counters zeroed before and dumped after; prints instructions per call for each kind.
#   bash bench/callgrind.sh [module.so ...]   (default: target/release/libslidingwindow.so)
#   TOP_KEYS=1024 bash bench/callgrind.sh ...   the summary of refused keys on, at that size
# Needs valgrind (callgrind_control) and redis-server/redis-cli on PATH (REDIS_SERVER/REDIS_CLI).
set -euo pipefail
cd "$(dirname "$0")/.."
server=${REDIS_SERVER:-redis-server}
cli=${REDIS_CLI:-redis-cli}
calls=20000
t0=1700000000000
modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=("$PWD/target/release/libslidingwindow.so")
work=$(mktemp -d)
vg=
trap '[ -z "$vg" ] || kill "$vg" 2>/dev/null; rm -rf "$work"' EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# stream KIND: the 20,000 calls of one kind, on key KIND (filled first by `fill`).
stream() {
    local kind=$1
    python3 - "$kind" "$calls" "$t0" <<'PY'
import sys
kind, calls, t0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = []
for i in range(calls):
    now = t0 + 1000 + i
    if kind == "append":          # no trim, admitted
        out.append(f"SLIDINGWINDOW.ALLOW append 3600 1000000000 {now}\n")
    elif kind == "trim":          # one trimmed, one appended: the key stays at 1,000
        out.append(f"SLIDINGWINDOW.ALLOW trim 1 1000000000 {now}\n")
    elif kind == "refusal":       # the window holds its max: refused, nothing trimmed
        out.append(f"SLIDINGWINDOW.ALLOW refusal 3600 1000 {now}\n")
    elif kind == "repeat":        # appended on the newest timestamp again and again
        out.append(f"SLIDINGWINDOW.ALLOW repeat 3600 1000000000 {t0 + 999}\n")
sys.stdout.write("".join(out))
PY
}

fill() {
    python3 - "$1" "$t0" <<'PY'
import sys
key, t0 = sys.argv[1], int(sys.argv[2])
sys.stdout.write("".join(f"SLIDINGWINDOW.ALLOW {key} 3600 1000000000 {t0 + i}\n" for i in range(1000)))
PY
}

for module in "${modules[@]}"; do
    port=$(free_port)
    valgrind --tool=callgrind --toggle-collect=RedisModuleCommandDispatcher \
        --callgrind-out-file="$work/cg.out" --log-file="$work/vg.log" \
        "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$work" --loadmodule "$module" >"$work/server.log" 2>&1 &
    vg=$!
    until "$cli" -p "$port" ping >/dev/null 2>&1; do
        kill -0 "$vg" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
        sleep 0.5
    done
    "$cli" -p "$port" config set slidingwindow.storage compact >/dev/null
    if [ -n "${TOP_KEYS:-}" ]; then
        # The summary of refused keys on at that size: a refusal records its key.
        reply=$("$cli" -p "$port" config set slidingwindow.top-keys "$TOP_KEYS" 2>&1)
        [ "$reply" = OK ] || { echo "callgrind: top-keys $TOP_KEYS: $reply" >&2; exit 1; }
    else
        # The summary off where the build has it (a refusal would record one).
        "$cli" -p "$port" config set slidingwindow.top-keys 0 >/dev/null 2>&1 || true
    fi
    printf '%s\n' "$module"
    for kind in append trim refusal repeat; do
        fill "$kind" | "$cli" -p "$port" --pipe >/dev/null
        stream "$kind" >"$work/$kind.txt"
        callgrind_control -z "$vg" >/dev/null 2>&1
        "$cli" -p "$port" --pipe <"$work/$kind.txt" >/dev/null
        rm -f "$work"/cg.out.*
        callgrind_control -d "$vg" >/dev/null 2>&1
        dump=$(ls "$work"/cg.out.* | tail -1)
        ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$dump")
        printf '  %-8s %8.0f instructions a call\n' "$kind" "$(echo "$ir / $calls" | bc -l)"
    done
    "$cli" -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$vg" 2>/dev/null || true
    vg=
done
