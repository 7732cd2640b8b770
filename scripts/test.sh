#!/usr/bin/env bash
# `make test`: compiles the tests once, runs the unit tests once, then every integration suite
# against each server named in $SERVERS (scripts/servers.sh provides them), and ends with a
# table of servers, versions and results. A failing or missing server fails the run, but only
# after every other server has had its turn.
# Takes from make: SLIDINGWINDOW_MODULE, SLIDINGWINDOW_PANIC_MODULE, SERVERS, TEST_THREADS
# (and EXAMPLES=no to leave the examples out of a quick run; UNIT=no the unit tests; SUITES
# names the integration suites, default all; LOGS where the logs go).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

read -r -a servers <<<"${SERVERS:-redis7 redis8 valkey8 valkey9}"
threads=${TEST_THREADS:-2}
logs=${LOGS:-target/servers/logs}
# `read -a` splits without expanding `*` against the working directory.
read -r -a suite_names <<<"${SUITES:-*}"
suites=()
for suite in "${suite_names[@]}"; do
    suites+=(--test "$suite")
done
mkdir -p "$logs"
# The dev profile: the module under test is the release build from `make build`; the tests are
# clients, and compiling them without LTO takes a fraction of the time (overflow checks on, too).
cargo_test=(cargo test -p slidingwindow --no-fail-fast)
# The HTTP gateway's leases and fleet (several gateways on one Redis) on every server too.
gateway_test=(cargo test -p http-gateway --no-fail-fast --test leases --test fleet)

# Rows of the closing table: name, version, result, passed, failed, ignored, seconds, binaries.
rows=()
total_passed=0
total_failed=0
status=0
# The logs this run wrote: their `SKIPPED: ` lines (a test that could not run here, e.g. the
# gateway's regions without network namespaces) are listed after the table.
written=()

# Sums cargo's "test result: ... N passed; M failed; K ignored" lines of log $1.
counts() {
    awk '/^test result:/ {
            for (i = 1; i <= NF; i++) {
                if ($(i + 1) ~ /^passed/) p += $i
                if ($(i + 1) ~ /^failed/) f += $i
                if ($(i + 1) ~ /^ignored/) g += $i
            }
        } END { printf "%d %d %d\n", p, f, g }' "$1"
}

# Runs `cargo test ARGS...` (`runner`, default the module's tests) with its output also in log
# $2, then adds row $1 (version $3, binaries $4).
run() {
    local name=$1 log=$2 version=$3 binaries=$4
    shift 4
    local start=$SECONDS rc passed failed ignored result
    local -a cmd=("${cargo_test[@]}")
    [[ -n ${runner:-} ]] && cmd=("${gateway_test[@]}")
    "${cmd[@]}" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    read -r passed failed ignored < <(counts "$log")
    result=ok
    if ((rc != 0)); then
        result=FAILED
        status=1
    fi
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    rows+=("$name|$version|$result|$passed|$failed|$ignored|$((SECONDS - start))s|$binaries")
    written+=("$log")
}

# One build for every run below; a compile error ends here.
"${cargo_test[@]}" --no-run || exit 1

# The unit tests (the module's and its pure crate's) do not touch a server: once is enough.
if [[ ${UNIT:-yes} != no ]]; then
    run unit "$logs/unit.log" - - -p slidingwindow-core --lib -- --test-threads="$threads"
fi

# Resolve (and on first use fetch) every server before running any suite.
declare -A server_of cli_of version_of
for name in "${servers[@]}"; do
    if line=$(bash scripts/servers.sh "$name"); then
        IFS=$'\t' read -r _ server_of[$name] cli_of[$name] version_of[$name] <<<"$line"
    fi
done

for name in "${servers[@]}"; do
    if [[ -z ${server_of[$name]:-} ]]; then
        rows+=("$name|-|MISSING|0|0|0|0s|see the servers: message above")
        status=1
        continue
    fi
    echo "=== integration suites on $name: ${server_of[$name]} (v${version_of[$name]}), cli ${cli_of[$name]}"
    export REDIS_SERVER=${server_of[$name]} REDIS_CLI=${cli_of[$name]}
    run "$name" "$logs/$name.log" "${version_of[$name]}" \
        "${server_of[$name]#"$PWD"/} + ${cli_of[$name]#"$PWD"/}" \
        "${suites[@]}" -- --test-threads="$threads"
    # The examples below run on the default server (redis7): the gateway's lease tests here on
    # the others.
    if [[ ${EXAMPLES:-yes} != no && $name != redis7 ]]; then
        runner=gateway run "$name-gw" "$logs/$name-gateway.log" "${version_of[$name]}" \
            "http-gateway leases + fleet" -- --test-threads="$threads"
    fi
done

# The examples (the Rust client crate, the HTTP gateway, the Envoy rate limit service, the Python, Node.js and Go helpers) once, on the default server;
# their own test runners report in their logs.
if [[ ${EXAMPLES:-yes} != no ]]; then
    echo "=== examples: the Rust client crate, the HTTP gateway, the Envoy rate limit service, the Python, Node.js and Go helpers"
    start=$SECONDS
    # The last suite's server stays exported otherwise, and the examples' harnesses honour it.
    unset REDIS_SERVER REDIS_CLI
    make --no-print-directory test-examples TEST_THREADS="$threads" 2>&1 | tee "$logs/examples.log"
    if ((PIPESTATUS[0] == 0)); then
        result=ok
    else
        result=FAILED
        status=1
    fi
    rows+=("examples|-|$result|-|-|-|$((SECONDS - start))s|redis-server + redis-cli from PATH")
    written+=("$logs/examples.log")
fi

echo
echo "=== test matrix (logs in $logs/)"
for row in "run|version|result|passed|failed|ignored|time|server + cli" "${rows[@]}"; do
    IFS='|' read -r -a f <<<"$row"
    printf '%-8s %-8s %-7s %6s %6s %7s %6s  %s\n' "${f[@]}"
done
skipped=()
if ((${#written[@]} > 0)); then
    mapfile -t skipped < <(grep -h '^SKIPPED: ' "${written[@]}" | sort -u)
fi
for line in "${skipped[@]}"; do
    echo "$line"
done
echo "matrix: $total_passed passed, $total_failed failed, ${#skipped[@]} skipped (did not run: not a pass)"
exit $status
