#!/usr/bin/env bash
# Runs every fuzz target for FUZZ_SECONDS (default 60) each; exits non-zero if any found a crash.
# Called by `make fuzz`, never by CI. Works on a stable toolchain: RUSTC_BOOTSTRAP=1 lets stable
# accept the nightly-only flags cargo-fuzz passes (-Zsanitizer=address, sanitizer coverage).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1

seconds="${FUZZ_SECONDS:-60}"
targets="${FUZZ_TARGETS:-args multi window compact}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked || exit 1
fi

# Release build with overflow checks and debug assertions, so arithmetic overflow in the
# module's pure crate (core/) is a crash.
flags=(-O -a)
if ! cargo fuzz build "${flags[@]}"; then
    # Some toolchains ship without the ASan runtime; coverage-guided fuzzing still works without it.
    echo "fuzz: build with AddressSanitizer failed, retrying with --sanitizer none" >&2
    flags+=(--sanitizer none)
    cargo fuzz build "${flags[@]}" || exit 1
fi

failed=()
for target in $targets; do
    # New inputs go to the first (ignored) corpus dir; the checked-in seeds are read only.
    corpus=(fuzz/corpus/"$target")
    mkdir -p "${corpus[0]}"
    [[ -d fuzz/seeds/$target ]] && corpus+=(fuzz/seeds/"$target")
    options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048)
    [[ -f fuzz/dicts/$target.dict ]] && options+=(-dict=fuzz/dicts/"$target".dict)
    echo "fuzz: $target for ${seconds}s" >&2
    if ! cargo fuzz run "${flags[@]}" "$target" "${corpus[@]}" -- "${options[@]}"; then
        failed+=("$target")
    fi
done

if ((${#failed[@]})); then
    echo "fuzz: crash in: ${failed[*]} (inputs in fuzz/artifacts/; reproduce with" \
        "RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <artifact>)" >&2
    exit 1
fi
echo "fuzz: no crash in: $targets" >&2
