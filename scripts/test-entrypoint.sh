#!/usr/bin/env bash
# docker/slidingwindow-entrypoint.sh without Docker: a stand-in docker-entrypoint.sh first in
# PATH prints the arguments it is handed, one a line, and each case checks them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
printf '#!/bin/sh\nprintf "%%s\\n" "$@"\n' >"$bin/docker-entrypoint.sh"
chmod +x "$bin/docker-entrypoint.sh"
module=/usr/local/lib/slidingwindow/libslidingwindow.so
passed=0

# case SERVER WANT ARGS...: the entrypoint with SLIDINGWINDOW_SERVER=SERVER hands on WANT (words).
case_() {
    local server=$1 want=$2 got
    shift 2
    got=$(PATH=$bin:$PATH SLIDINGWINDOW_SERVER=$server sh docker/slidingwindow-entrypoint.sh "$@" | paste -sd' ')
    if [[ $got != "$want" ]]; then
        echo "test-entrypoint: ($*) handed on '$got', expected '$want'" >&2
        exit 1
    fi
    passed=$((passed + 1))
}

case_ redis-server "redis-server --loadmodule $module"
case_ valkey-server "valkey-server --loadmodule $module"
case_ redis-server "redis-server --loadmodule $module --port 7000" --port 7000
case_ redis-server "redis-server --loadmodule $module --port 7000" redis-server --port 7000
case_ valkey-server "valkey-server --loadmodule $module --save" valkey-server --save
case_ redis-server "redis-server /etc/r.conf --loadmodule $module --port 7000" redis-server /etc/r.conf --port 7000
case_ redis-server "redis-server /etc/r.conf --loadmodule $module" /etc/r.conf
case_ redis-server "redis-server --loadmodule $module storage compact --port 1" redis-server --loadmodule "$module" storage compact --port 1
case_ redis-server "sh -c true" sh -c true
case_ redis-server "redis-cli -p 7000 PING" redis-cli -p 7000 PING
echo "test-entrypoint: $passed passed, 0 failed"
