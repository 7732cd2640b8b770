# What the services' bench scripts share, sourced after they set `module`: a temporary `dir`, the
# `pids` to kill on exit, free loopback ports, redis-servers with (or without) the module, and
# the Envoy service.

dir=$(mktemp -d)
pids=()
cleanup() {
    # Processes started inside $(...), a subshell, have their pids in $dir/*.pids.
    local file pid
    for file in "$dir"/*.pids; do
        [[ -f $file ]] || continue
        while read -r pid; do pids+=("$pid"); done <"$file"
    done
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

# start_redis NAME [ARGS...]: a redis-server with the module (without it when WITHOUT_MODULE is
# set), its files in $dir/NAME; sets NAME_port and NAME_pid. The port may be taken between the
# probe and redis binding it: then redis exits, and another port is tried.
start_redis() {
    local name=$1 port pid load=(--loadmodule "$module")
    [[ -n ${WITHOUT_MODULE:-} ]] && load=()
    shift
    mkdir -p "$dir/$name"
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        redis-server --port "$port" --bind 127.0.0.1 --dir "$dir/$name" --save '' --appendonly no \
            "${load[@]}" --logfile "$dir/$name/redis.log" "$@" &
        pid=$!
        for _ in $(seq 100); do
            redis-cli -p "$port" ping >/dev/null 2>&1 && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        if redis-cli -p "$port" ping >/dev/null 2>&1; then
            pids+=("$pid")
            printf -v "${name}_pid" %s "$pid"
            printf -v "${name}_port" %s "$port"
            return
        fi
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    echo "redis-server $name did not start: $(tail -n 5 "$dir/$name/redis.log")" >&2
    exit 1
}

# start_envoy NAME PORT BINARY [ARGS...]: the Envoy service BINARY with $dir/bench.yaml on the
# redis at PORT, ARGS last, its output in $dir/NAME; sets NAME_addr and NAME_service_pid.
start_envoy() {
    local name=$1 port=$2 binary=$3 addr
    shift 3
    mkdir -p "$dir/$name"
    "$binary" --config "$dir/bench.yaml" --redis "redis://127.0.0.1:$port" --listen 127.0.0.1:0 "$@" \
        >"$dir/$name/service.out" 2>"$dir/$name/service.log" &
    pids+=($!)
    printf -v "${name}_service_pid" %s $!
    for _ in $(seq 200); do
        grep -q '^listening on ' "$dir/$name/service.out" 2>/dev/null && break
        sleep 0.05
    done
    addr=$(sed -n 's/^listening on //p' "$dir/$name/service.out")
    if [[ -z $addr ]]; then
        echo "the service $name did not start: $(tail -n 5 "$dir/$name/service.log")" >&2
        exit 1
    fi
    printf -v "${name}_addr" %s "$addr"
}
