#!/usr/bin/env bash
# make test-under-load: the integration suites (make server-tests) ROUNDS times in a row while
# stress-ng keeps every core busy, as a CI machine's neighbours would. The suites wait for events,
# not for the clock, so a slower machine must make them slower, never red. Prints each round's
# time, pytest's summary and the load average, and stops at the first failed round; each round's
# whole output is kept in OUT_DIR/round-N.log.
#
#   [STRESS_WORKERS=N] under-load.sh ROUNDS OUT_DIR
set -euo pipefail
rounds=${1:?usage: under-load.sh ROUNDS OUT_DIR}
out=${2:?usage: under-load.sh ROUNDS OUT_DIR}
mkdir -p "$out"

# Four CPU hogs a core by default (8 on the project's 2-core machine): a neighbour that keeps the
# run queue long, as the load average of 16 was that made a strength check fail (issue 36).
workers=${STRESS_WORKERS:-$((4 * $(nproc)))}
stress-ng --cpu "$workers" --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null || true' EXIT
echo "stress-ng --cpu $workers (pid $hog) beside $rounds rounds of make server-tests"

for round in $(seq 1 "$rounds"); do
    log="$out/round-$round.log"
    started=$(date +%s)
    status=0
    make --no-print-directory server-tests > "$log" 2>&1 || status=$?
    seconds=$(( $(date +%s) - started ))
    summary=$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$log" | tail -n 1 | tr -d '=' | xargs || true)
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "round $round: ${summary:-no pytest summary}; ${seconds} s; load average $load"
    if [ "$status" -ne 0 ]; then
        echo "round $round failed (exit $status): $log"
        exit "$status"
    fi
done
