#!/usr/bin/env bash
# Installs what building and running the module needs on Debian/Ubuntu:
# redis-server + redis-cli (>= 7.0), libclang (bindgen in redis-module's build script),
# a C toolchain (linker), any tool named as an argument, and checks that cargo exists.
# Does nothing if all is present.
set -euo pipefail

missing=()
need_go=0

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    missing+=(redis-server)
fi

# bindgen (clang-sys) loads libclang.so* or libclang-<N>.so*; libclang-cpp.so.N, which LLVM
# packages bring along, is another library and does not count.
have_libclang() {
    dpkg -s libclang-dev >/dev/null 2>&1 && return 0
    local dir lib
    for dir in ${LIBCLANG_PATH:-} /usr/lib/llvm-*/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib /usr/local/lib; do
        for lib in "$dir"/libclang.so* "$dir"/libclang-[0-9]*.so*; do
            [[ -f $lib ]] && return 0
        done
    done
    return 1
}
have_libclang || missing+=(libclang-dev)

# rustc links through the system C compiler; a fresh machine may not have one.
command -v cc >/dev/null 2>&1 || missing+=(build-essential)

# Extra tools a target asks for by name (e.g. `setup.sh valgrind` for `make soak`). A package
# that is not a command is checked by what it provides.
for tool in "$@"; do
    case $tool in
        # Python's module (scripts/servers.sh fetches test servers with it).
        pip) python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip) ;;
        # Debian's python3 makes virtualenvs only with python3-venv (ensurepip).
        python3-venv) python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv) ;;
        objdump) command -v objdump >/dev/null 2>&1 || missing+=(binutils) ;;
        # Go for clients/go: checked below, never from apt (Debian's golang-go is too old).
        go) need_go=1 ;;
        # Debian's Docker engine (dockerd and its runtime) for `make images` and its test.
        docker) command -v dockerd >/dev/null 2>&1 || missing+=(docker.io) ;;
        *) command -v "$tool" >/dev/null 2>&1 || missing+=("$tool") ;;
    esac
done

if ((${#missing[@]})); then
    if ((EUID == 0)); then
        echo "setup: installing ${missing[*]}"
        # A fresh machine's apt has no package lists yet, so update first.
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
    else
        echo "setup: missing ${missing[*]}; install with:" >&2
        echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi

# clients/go's go.mod says go 1.26: the Makefile's Go, /usr/local/go/bin's when it is there
# (ahead of an older go on PATH), else go on PATH, must be at least that.
if ((need_go)); then
    gobin=/usr/local/go/bin/go
    [[ -x $gobin ]] || gobin=$(command -v go || true)
    goversion=$([[ -n $gobin ]] && "$gobin" env GOVERSION 2>/dev/null || true)
    if ! [[ $goversion =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 26)); then
        echo "setup: clients/go needs Go >= 1.26; found ${goversion:-no go} (${gobin:-not on PATH})" >&2
        echo "setup: install it in /usr/local/go (https://go.dev/doc/install):" >&2
        echo "  curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | sudo tar -C /usr/local -xz" >&2
        exit 1
    fi
fi

# The module needs Redis >= 7.0 (Ubuntu 22.04 ships 6.0).
version=$(redis-server --version | sed -n 's/.* v=\([0-9][0-9]*\)\..*/\1/p')
if [[ -z $version || $version -lt 7 ]]; then
    echo "setup: $(redis-server --version)" >&2
    echo "setup: Redis >= 7.0 is required; see https://redis.io/docs/latest/operate/oss_and_stack/install/install-redis/install-redis-on-linux/" >&2
    exit 1
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found; install Rust with rustup:" >&2
    echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y && . \"\$HOME/.cargo/env\"" >&2
    exit 1
fi

echo "setup: ok ($(redis-server --version | cut -d' ' -f1-3), $(cargo --version))"
