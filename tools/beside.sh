#!/usr/bin/env bash
# Runs two commands at once: the first in the background with its output kept in LOG, the second
# in the foreground. Prints the first's output when both are done, and fails if either failed.
# `make test` runs the suites that need no server of their own beside the integration suites, so
# that either lane's stretches on a single core leave no core idle (docs/development.md#how-long-make-test-takes).
# Usage: tools/beside.sh LOG 'background command' 'foreground command'
set -uo pipefail
log=$1
background=$2
foreground=$3
mkdir -p "$(dirname "$log")"
echo "beside: '$background' runs in the background, its output in $log"
# Each in a session of its own, so that an interrupt can stop all of either; waiting with `wait`,
# which a signal interrupts, so that the trap runs at once.
setsid --wait bash -c "$background" >"$log" 2>&1 &
beside=$!
setsid --wait bash -c "$foreground" &
front=$!
trap 'kill -TERM -- -"$beside" -"$front" 2>/dev/null; exit 130' INT TERM
wait "$front"
foreground_status=$?
wait "$beside"
background_status=$?
echo "beside: the output of '$background' (exit $background_status):"
cat "$log"
[ "$foreground_status" = 0 ] && [ "$background_status" = 0 ]
