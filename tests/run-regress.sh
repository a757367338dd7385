#!/usr/bin/env bash
# Runs the pg_regress suite in tests/regress against the server at PGHOST/PGPORT (as user
# PGUSER, default postgres). The server must preload randflake_pg and have a secret.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pg_config=${PG_CONFIG:-pg_config}
pgxs=$("$pg_config" --pgxs)
pg_regress=$(dirname "$pgxs")/../test/regress/pg_regress
outputdir=${REGRESS_OUTPUT:-$(mktemp -d /tmp/randflake_regress.XXXXXX)}
cd "$here/regress"
# psql's backtick commands in the suite read files relative to this directory.
if "$pg_regress" --inputdir=. --outputdir="$outputdir" --bindir="$("$pg_config" --bindir)" \
        --host="${PGHOST:?PGHOST required}" --port="${PGPORT:?PGPORT required}" --user="${PGUSER:-postgres}" \
        --dbname=randflake_regress --schedule=schedule; then
    rm -rf "$outputdir"
else
    echo "regression differences: $outputdir/regression.diffs" >&2
    cat "$outputdir/regression.diffs" >&2 || true
    exit 1
fi
