#!/usr/bin/env bash
# `make test` (and `make check`, `make test-dist`): builds every test binary once, then runs the
# suites as jobs, $JOBS at a time, and ends with a table of jobs, their results and times.
#
# Jobs: `unit` (the unit tests of the module, its pure crate and testkit); each integration suite
# of the module (one test binary: `tests/<suite>.rs` or `tests/<suite>/`) on each server of $SERVERS
# (scripts/servers.sh provides them); each example of $EXAMPLES once, on the default server
# (redis-server from PATH), one after another in a lane of their own: `rust-client`, `gateway`
# (their cargo tests), `envoy` (its unit tests and its end-to-end pytest), `python`, `node`, `go`
# (their Makefile targets). Every cargo build happens before the first job starts: `cargo test` holds the build directory's lock while its
# tests run, so the jobs run the test binaries themselves, as cargo would (in the package's
# folder, with --test-threads=$TEST_THREADS), and a job that needs cargo never waits on another.
# A failing job, or a missing server, fails the run after every other job has had its turn; a
# failed job's log tail is printed.
#
# Takes from make: SLIDINGWINDOW_MODULE, SLIDINGWINDOW_PANIC_MODULE, SERVERS, TEST_THREADS, JOBS;
# UNIT=no leaves the unit tests out; SUITES names the integration suites (default all);
# EXAMPLES names the examples (default all; `no` none); LOGS where the logs go.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

read -r -a servers <<<"${SERVERS:-redis7 redis8 valkey8 valkey9}"
threads=${TEST_THREADS:-2}
jobs_at_once=${JOBS:-2}
logs=${LOGS:-target/servers/logs}
# `read -a` splits without expanding `*` against the working directory.
read -r -a suite_names <<<"${SUITES:-*}"
examples=${EXAMPLES:-rust-client gateway envoy python node go}
[[ $examples == no ]] && examples=""
read -r -a example_names <<<"$examples"
rm -rf "$logs"
mkdir -p "$logs/results"

has_example() {
    local e
    for e in "${example_names[@]}"; do [[ $e == "$1" ]] && return 0; done
    return 1
}

# --- every build, once -------------------------------------------------------------------------
# The test binaries of each package a job runs, listed from cargo's build messages as
# "package<TAB>kind<TAB>target<TAB>executable<TAB>package folder".
packages=(-p slidingwindow -p slidingwindow-core -p testkit)
has_example rust-client && packages+=(-p slidingwindow-client)
has_example gateway && packages+=(-p http-gateway)
has_example envoy && packages+=(-p envoy-ratelimit)
start=$SECONDS
echo "=== building the tests: ${packages[*]}"
if ! cargo test "${packages[@]}" --no-run --message-format=json-render-diagnostics >"$logs/build.json"; then
    echo "test: the build failed" >&2
    exit 1
fi
# The Envoy service's end-to-end tests run its debug binary, which its unit tests do not build.
if has_example envoy && [[ -z ${ENVOY_RATELIMIT:-} ]]; then
    cargo build -p envoy-ratelimit || exit 1
fi
python3 - "$logs/build.json" >"$logs/binaries.tsv" <<'EOF'
import json, sys
from urllib.parse import unquote, urlparse
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    # package_id: "path+file:///folder#name@version" (or "...#version" when the folder is the name).
    url, _, rest = m["package_id"].partition("#")
    folder = unquote(urlparse(url.removeprefix("path+")).path)
    name = rest.split("@")[0] if "@" in rest else folder.rstrip("/").split("/")[-1]
    t = m["target"]
    print("\t".join([name, t["kind"][0], t["name"], m["executable"], folder]))
EOF
build_seconds=$((SECONDS - start))

# Resolve (and on first use fetch) every server before any job starts.
declare -A server_of cli_of version_of
for name in "${servers[@]}"; do
    if line=$(bash scripts/servers.sh "$name"); then
        IFS=$'\t' read -r _ server_of[$name] cli_of[$name] version_of[$name] <<<"$line"
    fi
done

# --- the jobs ----------------------------------------------------------------------------------
# Runs the test binaries of package $1 whose kind matches $2 and target matches $3 (regexes), as
# cargo would, with the test binary's further arguments $4... (a filter); every binary runs even
# after one fails.
binaries() {
    local package=$1 kinds=$2 targets=$3 rc=0 p k t exe dir
    shift 3
    while IFS=$'\t' read -r p k t exe dir; do
        [[ $p == "$package" && $k =~ ^($kinds)$ && $t =~ ^($targets)$ ]] || continue
        echo "     Running $t ($exe)"
        (cd "$dir" && "$exe" --test-threads="$threads" "$@") || rc=1
    done <"$logs/binaries.tsv"
    return $rc
}

# The tests of the module's suite $1, one a line.
tests_of() {
    local exe
    exe=$(awk -F'\t' -v s="$1" '$1 == "slidingwindow" && $2 == "test" && $3 == s { print $4; exit }' "$logs/binaries.tsv")
    "$exe" --list --format terse 2>/dev/null | sed -n 's/: test$//p'
}

# The jobs: their ids in the order they start (the longest first), each one's group (a row of
# the table) and command; the examples' ids apart, for their lane.
declare -a job_ids example_ids
declare -A job_group job_cmd
add_job() {
    job_ids+=("$1")
    job_group[$1]=$2
    job_cmd[$1]=$3
}

# The examples: each runs on the default server (redis-server from PATH).
for e in "${example_names[@]}"; do
    case $e in
        rust-client) add_job "$e" "$e" "binaries slidingwindow-client 'lib|test' '.*'" ;;
        gateway) add_job "$e" "$e" "binaries http-gateway 'lib|bin|test' '.*'" ;;
        envoy) add_job "$e" "$e" "binaries envoy-ratelimit 'lib|bin|test' '.*' && make --no-print-directory test-envoy-e2e MODULE='$SLIDINGWINDOW_MODULE'" ;;
        python | node | go) add_job "$e" "$e" "make --no-print-directory test-$e MODULE='$SLIDINGWINDOW_MODULE'" ;;
        *) echo "test: unknown example '$e'" >&2; exit 2 ;;
    esac
    example_ids+=("$e")
done

# The module's suites: one job per suite and server, the slowest suites first.
mapfile -t all_suites < <(awk -F'\t' '$1 == "slidingwindow" && $2 == "test" { print $3 }' "$logs/binaries.tsv" | sort -u)
chosen=()
for suite in "${all_suites[@]}"; do
    for pattern in "${suite_names[@]}"; do
        # shellcheck disable=SC2053
        if [[ $suite == $pattern ]]; then
            chosen+=("$suite")
            break
        fi
    done
done
# The slowest suites first; those in $split run as one job per test (their tests take longest).
slow="cluster compact lua_diff limits contract faults"
split="cluster compact"
ordered=()
for suite in $slow; do
    [[ " ${chosen[*]} " == *" $suite "* ]] && ordered+=("$suite")
done
for suite in "${chosen[@]}"; do
    [[ " $slow " == *" $suite "* ]] || ordered+=("$suite")
done
missing=()
for suite in "${ordered[@]}"; do
    for name in "${servers[@]}"; do
        if [[ -z ${server_of[$name]:-} ]]; then
            continue
        fi
        env="REDIS_SERVER='${server_of[$name]}' REDIS_CLI='${cli_of[$name]}'"
        if [[ " $split " == *" $suite "* ]]; then
            while read -r t; do
                add_job "$name:$suite:$t" "$name" "$env binaries slidingwindow test '$suite' --exact '$t'"
            done < <(tests_of "$suite")
        else
            add_job "$name:$suite" "$name" "$env binaries slidingwindow test '$suite'"
        fi
    done
done
for name in "${servers[@]}"; do
    [[ -z ${server_of[$name]:-} ]] && missing+=("$name")
done

if [[ ${UNIT:-yes} != no ]]; then
    add_job unit unit "binaries slidingwindow 'lib|cdylib' '.*' && binaries slidingwindow-core lib '.*' && binaries testkit lib '.*'"
fi

# Runs job $1 with its output in its log; writes "rc start end" to its result file.
run_job() {
    local id=$1 file=${1//[:\/]/_} begin=$SECONDS rc
    (eval "${job_cmd[$id]}") >"$logs/$file.log" 2>&1
    rc=$?
    echo "$rc $begin $SECONDS" >"$logs/results/$file"
    if ((rc == 0)); then
        echo "    ok  $id ($((SECONDS - begin))s)"
    else
        echo "FAILED  $id ($((SECONDS - begin))s): the last lines of $logs/$file.log:"
        tail -n 60 "$logs/$file.log" | sed 's/^/    | /'
    fi
}

echo "=== ${#job_ids[@]} jobs, $jobs_at_once at a time, $threads tests at once in each (logs in $logs/)"
run_start=$SECONDS
# The examples one after another, in one lane: each drives load of its own (concurrent callers,
# fleets of services), so two never overlap; the module's suites fill the other lanes.
(for id in "${example_ids[@]}"; do run_job "$id"; done) &
for id in "${job_ids[@]}"; do
    [[ " ${example_ids[*]} " == *" $id "* ]] && continue
    while (($(jobs -rp | wc -l) >= jobs_at_once)); do
        wait -n
    done
    run_job "$id" &
done
wait

# --- the table ---------------------------------------------------------------------------------
# Sums the "test result:" lines of cargo's test binaries, or reads pytest's, node's and go's own
# closing lines, in log $1: "passed failed ignored".
counts() {
    awk '
        /^test result:/ {
            for (i = 1; i <= NF; i++) {
                if ($(i + 1) ~ /^passed/) p += $i
                if ($(i + 1) ~ /^failed/) f += $i
                if ($(i + 1) ~ /^ignored/) g += $i
            }
        }
        # pytest: "== 40 passed, 2 skipped in 3.1s =="
        /^=+ .*(passed|failed).* in [0-9.]+s/ {
            for (i = 1; i <= NF; i++) {
                if ($(i + 1) ~ /^passed/) p += $i
                if ($(i + 1) ~ /^failed/) f += $i
                if ($(i + 1) ~ /^skipped/) g += $i
            }
        }
        # node --test: "# pass 12", "# fail 0", "# skipped 0"
        /^# pass [0-9]+$/ { p += $3 }
        /^# fail [0-9]+$/ { f += $3 }
        /^# skipped [0-9]+$/ { g += $3 }
        # go test -v is not used: count "ok  " packages as passes and "FAIL\t" packages as failures.
        /^ok  \t/ { p += 1 }
        /^FAIL\t/ { f += 1 }
        END { printf "%d %d %d\n", p, f, g }' "$1"
}

declare -A g_rc g_passed g_failed g_ignored g_first g_last g_jobs
groups=()
total_passed=0
total_failed=0
status=0
for id in "${job_ids[@]}"; do
    file=${id//[:\/]/_}
    g=${job_group[$id]}
    if [[ -z ${g_jobs[$g]:-} ]]; then
        groups+=("$g")
        g_rc[$g]=0 g_passed[$g]=0 g_failed[$g]=0 g_ignored[$g]=0 g_first[$g]=999999 g_last[$g]=0 g_jobs[$g]=0
    fi
    g_jobs[$g]=$((g_jobs[$g] + 1))
    read -r rc begin end <"$logs/results/$file" 2>/dev/null || { rc=1 begin=0 end=0; }
    read -r p f i < <(counts "$logs/$file.log")
    ((rc != 0)) && g_rc[$g]=1 && status=1
    g_passed[$g]=$((g_passed[$g] + p))
    g_failed[$g]=$((g_failed[$g] + f))
    g_ignored[$g]=$((g_ignored[$g] + i))
    ((begin < g_first[$g])) && g_first[$g]=$begin
    ((end > g_last[$g])) && g_last[$g]=$end
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
done

echo
echo "=== test matrix (logs in $logs/; build ${build_seconds}s, jobs $((SECONDS - run_start))s)"
printf '%-12s %-8s %-7s %6s %6s %7s %5s %6s\n' run version result passed failed ignored jobs span
for g in "${groups[@]}"; do
    result=ok
    ((g_rc[$g] != 0)) && result=FAILED
    printf '%-12s %-8s %-7s %6s %6s %7s %5s %5ss\n' "$g" "${version_of[$g]:--}" "$result" \
        "${g_passed[$g]}" "${g_failed[$g]}" "${g_ignored[$g]}" "${g_jobs[$g]}" "$((g_last[$g] - g_first[$g]))"
done
for name in "${missing[@]}"; do
    printf '%-12s %-8s %-7s  see the servers: message above\n' "$name" - MISSING
    status=1
done
mapfile -t skipped < <(cat "$logs"/*.log 2>/dev/null | grep -h '^SKIPPED: ' | sort -u)
for line in "${skipped[@]}"; do
    echo "$line"
done
echo "matrix: $total_passed passed, $total_failed failed, ${#skipped[@]} skipped (did not run: not a pass)"
exit $status
