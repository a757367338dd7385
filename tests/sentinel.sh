#!/usr/bin/env bash
# A server that runs on the installed library while the test suites run, as a DBA's server or
# `make demo`'s would: the suites and `make install` must leave it running, uncrashed, issuing IDs.
#   sentinel.sh start   DIR PORT   start it, create the extension, issue IDs
#   sentinel.sh check   DIR        same postmaster, no crash in its log, new sessions issue IDs; then remove it
#   sentinel.sh destroy DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command=${1:?usage: sentinel.sh start|check|destroy DIR [PORT]}
dir=${2:?data directory required}
fail() { echo "sentinel: $*" >&2; tail -n 30 "$dir/server.log" >&2; "$here/scratch-cluster.sh" destroy "$dir"; exit 1; }
port_of() { sed -n 's/^port = //p' "$dir/postgresql.conf" | tail -1; }
insert() {
    psql -h "$dir" -p "$(port_of)" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 \
        -c "INSERT INTO made SELECT FROM generate_series(1, 1000)" -c "SELECT count(*), count(DISTINCT id) FROM made"
}

case "$command" in
start)
    "$here/scratch-cluster.sh" destroy "$dir"
    "$here/scratch-cluster.sh" init "$dir" "${3:?port required}"
    "$here/scratch-cluster.sh" start "$dir"
    psql -h "$dir" -p "$(port_of)" -U postgres -d postgres -q -v ON_ERROR_STOP=1 \
        -c "CREATE EXTENSION randflake_pg" -c "CREATE TABLE made (id bigint PRIMARY KEY DEFAULT randflake_next())"
    [ "$(insert)" = "1000|1000" ] || fail "no IDs at start"
    head -1 "$dir/postmaster.pid" >"$dir/sentinel.pid"
    echo "sentinel: server on $dir (postmaster $(cat "$dir/sentinel.pid")) issues IDs"
    ;;
check)
    [ -f "$dir/postmaster.pid" ] || fail "the server is gone"
    [ "$(head -1 "$dir/postmaster.pid")" = "$(cat "$dir/sentinel.pid")" ] || fail "the postmaster changed"
    ! grep -E "terminated by signal|reinitializing|dynamic linker|could not load library" "$dir/server.log" >&2 ||
        fail "the server log shows a crash"
    [ "$(insert)" = "2000|2000" ] || fail "a new session no longer issues unique IDs"
    echo "sentinel: postmaster $(cat "$dir/sentinel.pid") ran through, no crash, new sessions still issue IDs"
    "$here/scratch-cluster.sh" destroy "$dir"
    ;;
destroy)
    "$here/scratch-cluster.sh" destroy "$dir"
    ;;
*)
    echo "unknown command: $command" >&2
    exit 2
    ;;
esac
