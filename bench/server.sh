# Sourced by bench/callgrind.sh and bench/perf.sh: a redis-server of their own on a free loopback
# port, started under a wrapper command or none.
#   start_server DIR MODULE [WRAPPER ...]   sets $port and $pid (the wrapper's or the server's),
#                                           the server's output in DIR/server.log; returns once it
#                                           answers PING, exits with that log if it ended first.
# Uses $server and $cli, set by the caller.
start_server() {
    local dir=$1 module=$2
    shift 2
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$@" "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$dir" --loadmodule "$module" >"$dir/server.log" 2>&1 &
    pid=$!
    until "$cli" -p "$port" ping >/dev/null 2>&1; do
        kill -0 "$pid" 2>/dev/null || { cat "$dir/server.log" >&2; exit 1; }
        sleep 0.2
    done
}
