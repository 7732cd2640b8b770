# Sourced by scripts/images.sh and scripts/test-images.sh. ensure_dockerd: returns 0 when a
# Docker daemon answers, starting one when none does: Debian's docker.io (installed by
# scripts/setup.sh docker), as root, with no bridge network or iptables rules (builds run with
# --network none, containers with --network host), logging to $1. Sets DOCKERD_PID to the daemon
# it started (empty if one was running). Returns 1, saying why on stderr, when none can start.
DOCKERD_PID=

ensure_dockerd() {
    local log=$1
    docker info >/dev/null 2>&1 && return 0
    if ((EUID != 0)); then
        echo "dockerd: no Docker daemon answers, and starting one needs root" >&2
        return 1
    fi
    bash scripts/setup.sh docker >&2 || return 1
    mkdir -p "$(dirname "$log")"
    setsid dockerd --bridge=none --iptables=false --ip6tables=false >"$log" 2>&1 &
    DOCKERD_PID=$!
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && return 0
        kill -0 "$DOCKERD_PID" 2>/dev/null || break
        sleep 0.5
    done
    echo "dockerd: did not start (its log, $log, ends with:)" >&2
    tail -n 5 "$log" >&2
    kill "$DOCKERD_PID" 2>/dev/null || true
    DOCKERD_PID=
    return 1
}

# Stops the daemon ensure_dockerd started, if any.
stop_dockerd() {
    [[ -n $DOCKERD_PID ]] || return 0
    kill "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 60); do
        kill -0 "$DOCKERD_PID" 2>/dev/null || break
        sleep 0.5
    done
    DOCKERD_PID=
}
