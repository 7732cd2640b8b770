# Everyday tasks; README.md ("Development") explains each target.
PORT ?= 6379
FUZZ_SECONDS ?= 60
# Follows CARGO_TARGET_DIR if set; `make run` (redis.conf.example) always loads ./target.
MODULE := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/release/libslidingwindow.so
# Integration tests each start a redis-server; two at a time in each job suits a small machine.
TEST_THREADS ?= 2
# Test jobs `make test` runs at once (scripts/test.sh): a suite on a server, or the examples' lane.
JOBS ?= 2
# Servers `make test` runs the integration suites on (scripts/servers.sh); e.g. SERVERS=redis7.
SERVERS ?= redis7 redis8 valkey8 valkey9

.PHONY: all setup build panic-module servers run test check examples-setup test-envoy-e2e layout lint bench fuzz soak clean \
	test-examples test-rust-client test-gateway test-python test-node test-go test-envoy venv-envoy bench-gateway bench-regions bench-envoy \
	bench-go bench-memory bench-vs-cell bench-top bench-backends dist test-dist test-monitoring measure-asm \
	test-packages images test-images

all: build

setup:
	@bash scripts/setup.sh

build: setup
	cargo build --release

# redis.conf.example keeps its data in target/run/ and loads ../release/libslidingwindow.so
# from there.
run: build
	mkdir -p target/run
	exec redis-server redis.conf.example --port $(PORT)

# A debug build with the `panic-test` feature adds SLIDINGWINDOW.DEBUGPANIC, to prove panics are
# contained. It shares target/debug with the tests (one dev build of the dependencies) and is
# copied aside, since any later build of the crate without the feature would replace it there.
DEBUG_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
PANIC_MODULE := $(DEBUG_DIR)/panic-test/libslidingwindow.so

panic-module: setup
	cargo build --features panic-test
	mkdir -p '$(DEBUG_DIR)/panic-test'
	cp '$(DEBUG_DIR)/debug/libslidingwindow.so' '$(PANIC_MODULE)'

# Fetches (first time only) and lists the test servers: name, server, cli, version.
servers: setup
	@bash scripts/servers.sh $(SERVERS)

# Unit tests once, every integration suite on each of $(SERVERS), the examples once (on the
# default server), $(JOBS) jobs at a time, then a summary table (scripts/test.sh).
test: build panic-module examples-setup
	SLIDINGWINDOW_MODULE='$(MODULE)' SLIDINGWINDOW_PANIC_MODULE='$(PANIC_MODULE)' \
		SERVERS='$(SERVERS)' TEST_THREADS='$(TEST_THREADS)' JOBS='$(JOBS)' bash scripts/test.sh

# The inner loop: lint, the unit tests and the module's suites on one server (CHECK_SERVER),
# no examples.
CHECK_SERVER ?= redis7

# The release build's link-time optimization runs on one core: clippy takes the other meanwhile.
check: setup
	$(MAKE) --no-print-directory -j2 lint build
	$(MAKE) --no-print-directory panic-module
	SLIDINGWINDOW_MODULE='$(MODULE)' SLIDINGWINDOW_PANIC_MODULE='$(PANIC_MODULE)' \
		SERVERS='$(CHECK_SERVER)' TEST_THREADS='$(TEST_THREADS)' JOBS='$(JOBS)' EXAMPLES=no \
		bash scripts/test.sh

# The Rust client crate, the HTTP gateway and the Envoy rate limit service, and the Python, Node.js and Go
# helpers, each against a real redis-server (run once, with the default server): the crate's and
# the gateway's tests, and each helper on both paths (module loaded; plain Redis running the
# shared Lua script).
test-examples: test-rust-client test-gateway test-python test-node test-go test-envoy

# clients/rust: unit tests, then every command, batches, the lease object under concurrent tasks
# and a cluster, on both storages.
test-rust-client: build
	SLIDINGWINDOW_MODULE='$(MODULE)' cargo test -p slidingwindow-client --no-fail-fast -- --test-threads=$(TEST_THREADS)

test-gateway: build
	SLIDINGWINDOW_MODULE='$(MODULE)' cargo test -p http-gateway --no-fail-fast -- --test-threads=$(TEST_THREADS)

# A virtualenv under target/ with the helper and the Python test harness (testkit/python)
# installed editable, and pytest.
PY_VENV := $(CURDIR)/target/venv-python
PY_TESTKIT := testkit/python

$(PY_VENV)/.installed: clients/python/pyproject.toml $(PY_TESTKIT)/pyproject.toml
	@bash scripts/setup.sh python3-venv
	python3 -m venv '$(PY_VENV)'
	'$(PY_VENV)/bin/pip' install --quiet --disable-pip-version-check -e 'clients/python[test]' -e '$(PY_TESTKIT)'
	touch '$@'

test-python: build $(PY_VENV)/.installed
	cd clients/python && SLIDINGWINDOW_MODULE='$(MODULE)' '$(PY_VENV)/bin/pytest' -p no:cacheprovider

# The Envoy rate limit service: its unit tests, then end-to-end tests (pytest) with a gRPC client
# from Envoy's own protos (the envoy-data-plane package) in a virtualenv under target/.
ENVOY_VENV := $(CURDIR)/target/venv-envoy
ENVOY_TARGET := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)

$(ENVOY_VENV)/.installed: services/envoy-ratelimit/tests/requirements.txt $(PY_TESTKIT)/pyproject.toml
	@bash scripts/setup.sh python3-venv
	python3 -m venv '$(ENVOY_VENV)'
	'$(ENVOY_VENV)/bin/pip' install --quiet --disable-pip-version-check -r '$<' -e '$(PY_TESTKIT)'
	touch '$@'

# Only that virtualenv: services/envoy-ratelimit/ask.py runs as target/venv-envoy/bin/python ask.py.
venv-envoy: $(ENVOY_VENV)/.installed

# The service is a debug build here (it shares the unit tests' build of tonic; a release build
# with the workspace's LTO takes minutes).
test-envoy: build $(ENVOY_VENV)/.installed
	cargo test -p envoy-ratelimit
	cargo build -p envoy-ratelimit
	$(MAKE) --no-print-directory test-envoy-e2e

# The end-to-end pytest alone, against ENVOY_RATELIMIT (default this build's debug binary): no
# cargo (scripts/test.sh runs it beside other jobs).
ENVOY_RATELIMIT ?= $(ENVOY_TARGET)/debug/envoy-ratelimit

test-envoy-e2e: $(ENVOY_VENV)/.installed
	cd services/envoy-ratelimit/tests && SLIDINGWINDOW_MODULE='$(MODULE)' ENVOY_RATELIMIT='$(ENVOY_RATELIMIT)' \
		'$(ENVOY_VENV)/bin/pytest' -p no:cacheprovider

# ShouldRateLimit through the crate's `load` example, variants taking turns in each of
# BENCH_ROUNDS rounds of BENCH_SECONDS each: two unlimited descriptors (no Redis call); on each
# storage (sorted set, compact) two counted ones admitted, the same refused, one and 20 counted
# descriptors (median latency); two leased ones (with the module's calls per request); the
# admitted variant on a `bench-floor` build (one PING a request: the floor of one Redis call); the
# ratios the README's targets name, per storage. The floor build has its own target directory so
# that the service's release binary is never one that limits nothing.
BENCH_SECONDS ?= 5
BENCH_ROUNDS ?= 3

bench-envoy: build
	cargo build --release -p envoy-ratelimit --bin envoy-ratelimit --example load
	cargo build --release -p envoy-ratelimit --bin envoy-ratelimit --features bench-floor \
		--target-dir '$(ENVOY_TARGET)/bench-floor'
	SLIDINGWINDOW_MODULE='$(MODULE)' ENVOY_RATELIMIT='$(ENVOY_TARGET)/release/envoy-ratelimit' \
		FLOOR='$(ENVOY_TARGET)/bench-floor/release/envoy-ratelimit' \
		LOAD='$(ENVOY_TARGET)/release/examples/load' ROUNDS='$(BENCH_ROUNDS)' \
		bash services/envoy-ratelimit/bench.sh $(BENCH_SECONDS)

# The Envoy service's backends beside each other on one redis-server (bench/backends.sh): the
# module, the Lua script (a server with enable-module-command no) and envoyproxy/ratelimit's fixed
# window (INCRBY+EXPIRE) sent by the load example; requests/s, Redis CPU, commands and bytes a
# request, medians of BENCH_ROUNDS rounds of BENCH_SECONDS each.
bench-backends: build
	cargo build --release -p envoy-ratelimit --bin envoy-ratelimit --example load
	SLIDINGWINDOW_MODULE='$(MODULE)' ENVOY_RATELIMIT='$(ENVOY_TARGET)/release/envoy-ratelimit' \
		LOAD='$(ENVOY_TARGET)/release/examples/load' ROUNDS='$(BENCH_ROUNDS)' \
		bash bench/backends.sh $(BENCH_SECONDS)

# npm writes node_modules/.package-lock.json on every install.
clients/node/node_modules/.package-lock.json: clients/node/package-lock.json
	@bash scripts/setup.sh npm
	cd clients/node && npm ci --no-audit --no-fund

test-node: build clients/node/node_modules/.package-lock.json
	cd clients/node && SLIDINGWINDOW_MODULE='$(MODULE)' npm test

# What the examples' jobs need installed, made before any job starts (two jobs never run apt or
# npm at once): the Python and Envoy virtualenvs, node_modules, Go.
examples-setup: $(PY_VENV)/.installed $(ENVOY_VENV)/.installed clients/node/node_modules/.package-lock.json
	@bash scripts/setup.sh go

# The Go package (clients/go) and its adapters (redigo, goredis, valkeygo), its modules from the
# Go module proxy (go.mod, go.sum). Go >= 1.26 (go.mod): /usr/local/go/bin's when it is there,
# ahead of any older go on PATH (scripts/setup.sh go checks it); gofmt, go vet, then go test
# against real servers on free ports (with a program built as the README's "Install" says, in a
# temporary module). The package embeds clients/go/slidingwindow.lua, the script itself
# (go:embed does not follow links); clients/lua/slidingwindow.lua and the Python and Node
# packages' copies are links to it.
GO_DIR := $(if $(wildcard /usr/local/go/bin/go),/usr/local/go/bin/)
GO := $(GO_DIR)go

test-go: build
	@bash scripts/setup.sh go
	cd clients/go && unformatted=$$($(GO_DIR)gofmt -l .) && \
		if [ -n "$$unformatted" ]; then echo "gofmt: not formatted: $$unformatted"; exit 1; fi
	cd clients/go && $(GO) vet ./...
	cd clients/go && SLIDINGWINDOW_MODULE='$(MODULE)' $(GO) test -count=1 ./...

# Allow through redigo, the module against the script on `hot` and `wide`, then Allow through a
# Leaser against plain Allow (Redis calls and ns per Allow), then Allow beside go-redis/redis_rate
# through go-redis, the variants taking turns in each of GO_BENCH_ROUNDS rounds of GO_BENCH_CALLS
# calls.
GO_BENCH_ROUNDS ?= 3
GO_BENCH_CALLS ?= 20000

bench-go: build
	@bash scripts/setup.sh go
	cd clients/go && SLIDINGWINDOW_MODULE='$(MODULE)' BENCH_ROUNDS='$(GO_BENCH_ROUNDS)' \
		$(GO) test -run '^$$' -bench Allow -benchtime '$(GO_BENCH_CALLS)x' ./redigo ./goredis

# Requests/s through the gateway with and without the limiter (wrk; BENCH_DURATION per variant).
BENCH_DURATION ?= 10s

bench-gateway: build
	@bash scripts/setup.sh wrk
	cargo build --release -p http-gateway
	SLIDINGWINDOW_MODULE='$(MODULE)' GATEWAY='$(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/release/http-gateway' \
		bash services/gateway/bench.sh $(BENCH_DURATION)

# One global limit across three regions on a simulated network (network namespaces, 40 ms one
# way between regions; needs root): over-admission, the limit's use, each region's share and the
# median latency leased requests add (services/gateway/tests/regions.rs, its ignored bench).
bench-regions: build
	cargo build --release -p http-gateway
	SLIDINGWINDOW_MODULE='$(MODULE)' GATEWAY='$(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/release/http-gateway' \
		cargo test -p http-gateway --test regions -- --ignored --nocapture

# The release tarballs in dist/ with their SHA256SUMS: the module for x86_64 Linux with glibc
# >= 2.17, the Envoy service and the gateway as static (musl) executables (scripts/dist.sh
# installs cargo-zigbuild, Zig and the musl target on first use).
dist: setup
	bash scripts/dist.sh

# The contract and replication suites against the module unpacked from dist/, on each of
# $(SERVERS); the Envoy service's end-to-end tests (pytest) and the gateway's (cargo integration
# tests) against their released binaries.
test-dist: dist $(ENVOY_VENV)/.installed
	SERVERS='$(SERVERS)' TEST_THREADS='$(TEST_THREADS)' JOBS='$(JOBS)' bash scripts/test-dist.sh

# The Python helper's wheel and sdist and the Node package's tarball, built as for a release into
# target/packages/, each installed in a clean virtualenv or folder (redis-py from PyPI; ioredis, and
# node-redis in a folder of its own, from npm) and smoke-tested there on a server with the module and one without (25 s).
test-packages: build
	SLIDINGWINDOW_MODULE='$(MODULE)' bash scripts/test-packages.sh

# slidingwindow/redis:<version> and slidingwindow/valkey:<version> (docker/Dockerfile) with the
# module from dist/'s tarball, built with --network none on REDIS_BASE / VALKEY_BASE (default
# redis:7.4 / valkey/valkey:9), or with STANDIN=1 on bases made here from Debian
# (scripts/standin-base.sh, cached under target/images/); slidingwindow/envoy-ratelimit and
# slidingwindow/gateway (docker/<part>/Dockerfile, FROM scratch) with the static binaries from
# theirs. Starts dockerd if none answers.
images: dist
	@bash scripts/setup.sh docker
	bash scripts/images.sh

# The images (the module's on the stand-in bases), each run with --network host on a free
# loopback port: ALLOW, a compact key kept across containers on one volume; the Envoy service's
# ShouldRateLimit and grpc.health.v1, the gateway's 429; each service image healthy (skipped,
# saying why, where dockerd cannot start).
test-images: dist $(ENVOY_VENV)/.installed
	ENVOY_VENV='$(ENVOY_VENV)' bash scripts/test-images.sh

# monitoring/ end to end: redis-server with the module, Debian's redis_exporter running the Lua
# script and Prometheus (both installed if missing), on free loopback ports.
test-monitoring: build
	@bash scripts/setup.sh prometheus prometheus-redis-exporter
	SLIDINGWINDOW_MODULE='$(MODULE)' python3 scripts/test_monitoring.py

lint: setup
	@cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt || true
	@cargo clippy --version >/dev/null 2>&1 || rustup component add clippy || true
	cargo fmt --all --check
	# One version everywhere (Cargo.toml's workspace version; the helpers' copies; CHANGELOG.md).
	python3 scripts/version.py check
	# docs/development.md's file list is the tree's (scripts/layout.py).
	python3 scripts/layout.py check
	cargo clippy --workspace --all-targets -- -D warnings
	# bench-envoy's floor build, which nothing else compiles.
	cargo clippy -p envoy-ratelimit --all-targets --features bench-floor -- -D warnings

# redis-cell (the comparison for the compact storage) is built under target/ on first use; when
# it cannot be, the bench reports its rows and targets unavailable.
bench: build
	SLIDINGWINDOW_MODULE='$(MODULE)' REDIS_CELL_MODULE="$$(bash scripts/redis-cell.sh || true)" \
		cargo run --release -p slidingwindow-bench

# The compact storage against redis-cell alone (issue 58): `make bench`'s vs-cell table, about a
# minute; docs/bench.* are left as they are. redis-cell is crates.io's 0.2.2 unless
# REDIS_CELL_SRC names a source tree to build (e.g. a checkout of its v0.5.0 tag).
bench-vs-cell: build
	SLIDINGWINDOW_MODULE='$(MODULE)' REDIS_CELL_MODULE="$$(bash scripts/redis-cell.sh)" \
		BENCH_ONLY=vs-cell cargo run --release -p slidingwindow-bench

# Memory alone (issue 36): compact bytes per request on eight arrival patterns of 1M requests
# against the information bound, and bytes per key over 100,000 small keys for the compact log,
# the sorted set, redis-cell's GCRA and an INCRBY+EXPIRE counter (bench/src/memory.rs).
bench-memory: build
	SLIDINGWINDOW_MODULE='$(MODULE)' REDIS_CELL_MODULE="$$(bash scripts/redis-cell.sh || true)" \
		BENCH_MEMORY=1 cargo run --release -p slidingwindow-bench

# SLIDINGWINDOW.TOP's accuracy: 1M refusals over 100k keys from Zipf(1.1), top-keys 1024.
bench-top: build
	SLIDINGWINDOW_MODULE='$(MODULE)' BENCH_TOP=1 cargo run --release -p slidingwindow-bench

# cargo-fuzz (installed on first use) with libFuzzer and ASan; runs on stable via RUSTC_BOOTSTRAP.
fuzz:
	FUZZ_SECONDS='$(FUZZ_SECONDS)' bash fuzz/run.sh

soak: build
	@bash scripts/setup.sh valgrind
	SLIDINGWINDOW_MODULE='$(MODULE)' cargo test --release -p slidingwindow --test soak -- --ignored

# How long CLUSTER MIGRATESLOTS of 1,000 slots holding 1M requests takes on Valkey 9, with and
# without traffic, next to the same data without the module (tests/asm/measure.rs; figures on stderr).
measure-asm: build
	@line=$$(bash scripts/servers.sh valkey9) && \
		REDIS_SERVER="$$(echo "$$line" | cut -f2)" REDIS_CLI="$$(echo "$$line" | cut -f3)" \
		SLIDINGWINDOW_MODULE='$(MODULE)' \
		cargo test --release -p slidingwindow --test asm -- --ignored --nocapture measure_a_1000_slot_migration

# docs/development.md's list of every source file, from the files' header comments.
layout:
	python3 scripts/layout.py write

clean:
	cargo clean
