#!/usr/bin/env bash
# Runs every cargo-fuzz target of the randflake crate for SECONDS each (default 60): the string
# parser, ID decoding under arbitrary keys, the generator under arbitrary clock sequences, and
# the batch kernels against the single-block cipher.
# Inputs under randflake/fuzz/regressions/<target>/ (crashes found earlier, kept in git) are
# replayed first by every run; a new crash stops the run and is left in
# randflake/fuzz/artifacts/<target>/, to be added to regressions/ once fixed.
set -euo pipefail
seconds=${1:-60}
cd "$(dirname "$0")/../randflake"
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo-fuzz >/dev/null; then
    echo "fuzz: installing cargo-fuzz 0.13.2 (takes a few minutes)"
    cargo install cargo-fuzz --version 0.13.2 --locked --quiet
fi
# cargo-fuzz passes nightly-only flags (sanitizers, coverage); this lets the one stable
# toolchain here accept them.
export RUSTC_BOOTSTRAP=1
# The targets are built once, then run side by side, one per core: each still gets its SECONDS.
# They build into the workspace's target/, where `make clean` and a look at its size find them.
target_dir=$PWD/../target/fuzz
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
cargo fuzz build --target-dir "$target_dir" >"$logs/build" 2>&1 || { tail -n 40 "$logs/build" >&2; echo "fuzz: build FAILED" >&2; exit 1; }
run_target() {
    mkdir -p "fuzz/corpus/$1" "fuzz/regressions/$1"
    status=0
    cargo fuzz run --target-dir "$target_dir" "$1" "fuzz/corpus/$1" "fuzz/regressions/$1" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$logs/$1" 2>&1 || status=$?
    echo "$status" >"$logs/$1.status"
}
export -f run_target
export seconds logs target_dir
targets=$(cargo fuzz list)
echo "fuzz: $(echo $targets | tr ' ' ','), $seconds s each, $(nproc) at a time"
echo "$targets" | xargs -P "$(nproc)" -I{} bash -c 'run_target "$1"' _ {}
for target in $targets; do
    echo "fuzz: $target"
    grep -E "^(stat::number_of_executed_units|Done)|panicked|SUMMARY|Test unit written" "$logs/$target" || true
    status=$(cat "$logs/$target.status" 2>/dev/null || echo missing)
    if [ "$status" != 0 ]; then
        tail -n 40 "$logs/$target" >&2
        echo "fuzz: $target FAILED (exit $status)" >&2
        exit 1
    fi
done
