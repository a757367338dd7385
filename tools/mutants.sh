#!/usr/bin/env bash
# make mutants: cargo-mutants over the decision files of the pure crate, one file at a time, and
# each file's figure (caught of viable mutants). Usage: tools/mutants.sh [NAME...], NAME the path
# of a file under randflake/src/ without .rs, e.g. decisions/keeper (default: every decision
# file). Outcomes in target/mutants/NAME/ (MUTANTS_OUT for another directory); MUTANTS_RE=regex
# tests only the mutants it matches (to try survivors again after a change).
#
# Each mutant is built in a copy of the tree (target/ is not copied, so the copy builds the
# crate once, then each mutant's change alone), optimised (opt-level 1, with the debug build's
# overflow checks), and tested by the tests that judge decisions: the crate's unit tests,
# tests/decision_rules.rs and both simulations. The codec and cipher tests (properties,
# reference vectors) and the doctests check no decision and are left out.
set -euo pipefail

DECISION_FILES=(decisions/keeper decisions/refill shared/server_position decisions/app_lease decisions/lease generator decisions/table_rules
    decisions/durability)
files=("$@")
[ ${#files[@]} -gt 0 ] || files=("${DECISION_FILES[@]}")
# A mutant whose tests run this long (MUTANTS_TIMEOUT) is stopped and counted as caught (a test
# that loops for ever catches it); the unmutated tests take a fraction of it (the fleet
# simulation, the longest, took 14 s here, two cores under load).
TIMEOUT=${MUTANTS_TIMEOUT:-180}
OUT=${MUTANTS_OUT:-target/mutants}
only=()
[ -z "${MUTANTS_RE:-}" ] || only=(--re "$MUTANTS_RE")

# The same targets and features for the build and the tests, so that each mutant is built once.
targets=(--features serde --cargo-arg=--lib)
for test in decision_rules fleet_simulation app_lease_simulation; do
    targets+=("--cargo-arg=--test=$test")
done

export CARGO_PROFILE_DEV_OPT_LEVEL=1 CARGO_PROFILE_DEV_DEBUG=false
baseline=run
for name in "${files[@]}"; do
    # The generator's shared-pool test (400,000 calls) judges the generator alone; it is the
    # slowest unit test, so the other files' mutants skip it.
    skip=()
    [ "$name" = generator ] || skip=(--cargo-test-arg=-- --cargo-test-arg=--skip --cargo-test-arg=shared_pool_with_erratic_clock)
    # The server position's races (the word moved between a load and the advance) happen only
    # between threads: its mutants are judged by the loom model too.
    model=()
    [ "$name" != shared/server_position ] || model=(--features loom --cargo-arg=--test=shared_memory_model)
    mkdir -p "$OUT/$name"
    # cargo-mutants' exit status says that mutants survived; the figure below says how many.
    nice -n 10 cargo mutants --package randflake --file "randflake/src/$name.rs" --jobs 1 \
        --timeout "$TIMEOUT" --build-timeout 1200 --baseline "$baseline" --output "$OUT/$name" --no-shuffle \
        "${only[@]}" "${targets[@]}" "${model[@]}" "${skip[@]}" || true
    baseline=skip
done

python3 - "$OUT" "${files[@]}" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
for name in names:
    outcomes = json.load(open(f"{out}/{name}/mutants.out/outcomes.json"))["outcomes"]
    summary = {}
    for outcome in outcomes:
        if outcome["scenario"] == "Baseline":
            continue
        summary[outcome["summary"]] = summary.get(outcome["summary"], 0) + 1
    caught = summary.get("CaughtMutant", 0) + summary.get("Timeout", 0)
    viable = caught + summary.get("MissedMutant", 0)
    share = f"{100 * caught / viable:.0f}%" if viable else "-"
    print(f"{name}.rs: {caught} caught of {viable} viable ({share}); {summary.get('Timeout', 0)} of them by timeout, "
          f"{summary.get('Unviable', 0)} unviable")
    for missed in open(f"{out}/{name}/mutants.out/missed.txt").read().splitlines():
        print(f"  missed: {missed}")
PY
