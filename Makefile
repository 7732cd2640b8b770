# Everyday tasks; README.md ("Development") explains each target.
PORT ?= 6379
FUZZ_SECONDS ?= 60
# Follows CARGO_TARGET_DIR if set; `make run` (redis.conf.example) always loads ./target.
MODULE := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)/release/libslidingwindow.so
# Integration tests each start a redis-server; two at a time suits a small machine.
TEST_THREADS ?= 2
# Servers `make test` runs the integration suites on (scripts/servers.sh); e.g. SERVERS=redis7.
SERVERS ?= redis7 redis8 valkey8

.PHONY: all setup build panic-module servers run test lint bench fuzz soak clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	cargo build --release

# redis.conf.example loads ./target/release/libslidingwindow.so relative to the repo root.
run: build
	exec redis-server redis.conf.example --port $(PORT)

# A debug build with the `panic-test` feature adds SLIDINGWINDOW.DEBUGPANIC, to prove panics are
# contained. It shares target/debug with the tests (one dev build of the dependencies) and is
# copied aside, since the tests' own build of the crate replaces target/debug's library.
DEBUG_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
PANIC_MODULE := $(DEBUG_DIR)/panic-test/libslidingwindow.so

panic-module: setup
	cargo build --features panic-test
	mkdir -p '$(DEBUG_DIR)/panic-test'
	cp '$(DEBUG_DIR)/debug/libslidingwindow.so' '$(PANIC_MODULE)'

# Fetches (first time only) and lists the test servers: name, server, cli, version.
servers: setup
	@bash scripts/servers.sh $(SERVERS)

# Unit tests once, then every integration suite on each of $(SERVERS), then a summary table.
test: build panic-module
	SLIDINGWINDOW_MODULE='$(MODULE)' SLIDINGWINDOW_PANIC_MODULE='$(PANIC_MODULE)' \
		SERVERS='$(SERVERS)' TEST_THREADS='$(TEST_THREADS)' bash scripts/test.sh

lint: setup
	@cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt || true
	@cargo clippy --version >/dev/null 2>&1 || rustup component add clippy || true
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

bench: build
	SLIDINGWINDOW_MODULE='$(MODULE)' cargo run --release -p slidingwindow-bench

# cargo-fuzz (installed on first use) with libFuzzer and ASan; runs on stable via RUSTC_BOOTSTRAP.
fuzz:
	FUZZ_SECONDS='$(FUZZ_SECONDS)' bash fuzz/run.sh

soak: build
	@bash scripts/setup.sh valgrind
	SLIDINGWINDOW_MODULE='$(MODULE)' cargo test --release -p slidingwindow --test soak -- --ignored

clean:
	cargo clean
