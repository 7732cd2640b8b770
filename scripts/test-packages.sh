#!/usr/bin/env bash
# `make test-packages`: the client packages as users install them. The Python helper's wheel and
# sdist (`python -m build`), each installed into a clean virtualenv (redis-py from PyPI), the wheel
# with its asyncio extra too (with FastAPI and httpx, for the README's FastAPI app), and the
# Node package (`npm pack`), installed from its tarball into two clean folders, one with ioredis 5
# and one with node-redis 5 (`redis`) from npm,
# each passing scripts/packages/smoke.* outside the source tree against two servers on free
# loopback ports: one with the module, one without (the packaged Lua script); and the Rust crates a
# user depends on, slidingwindow-core and slidingwindow-client, through `cargo package` (each
# .crate built and compiled from its own contents, offline from cargo's cache). The artifacts stay
# in target/packages/. Takes from make: SLIDINGWINDOW_MODULE.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
: "${SLIDINGWINDOW_MODULE:?the module to load (make test-packages sets it)}"

bash scripts/setup.sh python3-venv npm
version=$(python3 scripts/version.py)
out=${CARGO_TARGET_DIR:-$root/target}/packages
rm -rf "$out"
mkdir -p "$out/python" "$out/node"

# Two servers, with and without the module, on free loopback ports.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
start_server() {
    local port=$1
    shift
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no "$@" >"$out/redis-$port.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do
        [[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && return 0
        sleep 0.1
    done
    echo "test-packages: redis-server on $port did not start:" >&2
    cat "$out/redis-$port.log" >&2
    exit 1
}
module_port=$(free_port)
start_server "$module_port" --loadmodule "$SLIDINGWINDOW_MODULE"
plain_port=$(free_port)
start_server "$plain_port"

# Python: `build` in its own virtualenv (kept across runs), the artifacts into $out/python.
tools=${CARGO_TARGET_DIR:-$root/target}/package-tools
if [[ ! -x $tools/bin/python ]] || ! "$tools/bin/python" -c 'import build' 2>/dev/null; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check build
fi
"$tools/bin/python" -m build --outdir "$out/python" clients/python >"$out/python/build.log" 2>&1 ||
    { tail -n 30 "$out/python/build.log" >&2; exit 1; }
wheel=$out/python/slidingwindow-$version-py3-none-any.whl
sdist=$out/python/slidingwindow-$version.tar.gz
[[ -f $wheel && -f $sdist ]] || { ls "$out/python" >&2; echo "test-packages: expected $wheel and $sdist" >&2; exit 1; }
# Both carry the Lua script itself (the source tree has a link to clients/go/).
python3 -m zipfile -l "$wheel" | grep 'slidingwindow/slidingwindow.lua' >/dev/null ||
    { echo "test-packages: $wheel has no slidingwindow.lua" >&2; exit 1; }
tar -tvzf "$sdist" | grep "^-.*slidingwindow-$version/slidingwindow/slidingwindow.lua$" >/dev/null ||
    { echo "test-packages: $sdist has no slidingwindow.lua file" >&2; exit 1; }
for artifact in "$wheel" "$sdist"; do
    venv=$out/python/venv-${artifact##*.}
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$artifact"
    (cd "$out" && "$venv/bin/python" "$root/scripts/packages/smoke.py" "$version" "$module_port" "$plain_port")
    echo "test-packages: $(basename "$artifact") installs and passes"
done
# The asyncio extra, with what the README's FastAPI example adds (and httpx to drive it).
venv=$out/python/venv-asyncio
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "$wheel[asyncio]" fastapi httpx
(cd "$out" && "$venv/bin/python" "$root/scripts/packages/smoke_asyncio.py" "$module_port" "$plain_port")
echo "test-packages: $(basename "$wheel")[asyncio] installs and passes"

# Node: pack (prepack copies the script over the link, postpack puts the link back), then a clean
# folder for each client that installs the tarball and that client only.
(cd clients/node && npm pack --silent --pack-destination "$out/node" >/dev/null)
tgz=$out/node/slidingwindow-$version.tgz
[[ -f $tgz ]] || { ls "$out/node" >&2; echo "test-packages: expected $tgz" >&2; exit 1; }
[[ -L clients/node/slidingwindow.lua ]] || { echo "test-packages: clients/node/slidingwindow.lua is no longer a link" >&2; exit 1; }
tar -tvzf "$tgz" | grep '^-.* package/slidingwindow.lua$' >/dev/null ||
    { echo "test-packages: $tgz has no slidingwindow.lua file" >&2; exit 1; }
for lib in ioredis redis; do
    app=$out/node/app-$lib
    mkdir -p "$app"
    cp scripts/packages/smoke.js "$app/"
    (cd "$app" && npm init --yes >/dev/null && npm install --silent --no-audit --no-fund "$tgz" "$lib@5" &&
        node smoke.js "$version" "$module_port" "$plain_port" "$lib")
    echo "test-packages: $(basename "$tgz") installs and passes with $lib"
done
# Rust: both crates in one `cargo package`, so that the client's dependency on the unpublished
# core resolves to the core's own package. --allow-dirty: a checkout being worked on packages too.
mkdir -p "$out/rust"
cargo package --offline --allow-dirty --quiet -p slidingwindow-core -p slidingwindow-client
for crate in slidingwindow-core slidingwindow-client; do
    built=${CARGO_TARGET_DIR:-$root/target}/package/$crate-$version.crate
    [[ -f $built ]] || { echo "test-packages: expected $built" >&2; exit 1; }
    f=$out/rust/$crate-$version.crate
    cp "$built" "$f"
    # The whole listing first: `grep -q` would close the pipe early, failing tar under pipefail.
    listing=$(tar -tzf "$f")
    grep -qx "$crate-$version/README.md" <<<"$listing" || { echo "test-packages: $f has no README.md" >&2; exit 1; }
    echo "test-packages: $(basename "$f") packages and builds from its own contents"
done

echo "test-packages: artifacts in $out:"
(cd "$out" && ls -l python/*.whl python/*.tar.gz node/*.tgz rust/*.crate)
