#!/usr/bin/env bash
# Throwaway PostgreSQL clusters for tests and the demo: own data directory, own port, socket in
# the data directory, randflake_pg preloaded, a fresh secret in a 0600 key file.
#
#   scratch-cluster.sh init  DIR PORT [SETTING ...]   create (SETTING lines go to postgresql.conf)
#   scratch-cluster.sh start DIR                      start, wait until it accepts connections
#   scratch-cluster.sh stop  DIR [fast|immediate]     stop
#   scratch-cluster.sh destroy DIR                    stop if running, then delete
#
# INITDB_OPTIONS, if set at init, are passed to initdb (word-split).
#
# With RANDFLAKE_LIBDIR set at init, the server loads randflake_pg.so from that directory before
# the installed one: a fresh build can be tried without replacing the library that other
# running servers have loaded.
#
# PostgreSQL refuses to run as root, so as root the server runs as the "postgres" user.
set -euo pipefail

bindir=$("${PG_CONFIG:-pg_config}" --bindir)

as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

command=${1:?usage: scratch-cluster.sh init|start|stop|destroy DIR ...}
dir=${2:?data directory required}

case "$command" in
init)
    port=${3:?port required}
    shift 3
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    # shellcheck disable=SC2086
    as_owner "$bindir/initdb" -D "$dir" -U postgres -A trust --no-sync ${INITDB_OPTIONS:-} >"$dir.initdb.log" 2>&1 ||
        { cat "$dir.initdb.log"; exit 1; }
    as_owner sh -c "umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > '$dir/randflake.key'"
    {
        echo "port = $port"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$dir'"
        echo "shared_preload_libraries = 'randflake_pg'"
        echo "randflake.secret_file = 'randflake.key'"
        echo "fsync = off"
        echo "max_connections = 100"
        echo "logging_collector = off"
        if [ -n "${RANDFLAKE_LIBDIR:-}" ]; then echo "dynamic_library_path = '$RANDFLAKE_LIBDIR:\$libdir'"; fi
        for setting in "$@"; do echo "$setting"; done
    } | as_owner tee -a "$dir/postgresql.conf" >/dev/null
    ;;
start)
    as_owner "$bindir/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 start >/dev/null ||
        { tail -n 20 "$dir/server.log"; exit 1; }
    ;;
stop)
    as_owner "$bindir/pg_ctl" -D "$dir" -m "${3:-fast}" -w -t 60 stop >/dev/null
    ;;
destroy)
    if [ -f "$dir/postmaster.pid" ]; then
        as_owner "$bindir/pg_ctl" -D "$dir" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir" "$dir.initdb.log"
    ;;
*)
    echo "unknown command: $command" >&2
    exit 2
    ;;
esac
