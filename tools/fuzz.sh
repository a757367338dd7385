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
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in $(cargo fuzz list); do
    mkdir -p "fuzz/corpus/$target" "fuzz/regressions/$target"
    echo "fuzz: $target for $seconds s"
    status=0
    cargo fuzz run "$target" "fuzz/corpus/$target" "fuzz/regressions/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1 || status=$?
    grep -E "^(stat::number_of_executed_units|Done)|panicked|SUMMARY|Test unit written" "$log" || true
    if [ "$status" != 0 ]; then
        tail -n 40 "$log" >&2
        echo "fuzz: $target FAILED (exit $status)" >&2
        exit 1
    fi
done
