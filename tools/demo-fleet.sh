#!/usr/bin/env bash
# `make demo-fleet`: a fleet whose coordinator survives the loss of its primary. On loopback:
# a pg_auto_failover formation (monitor + two data nodes, synchronous replication) holds the
# lease table, and two member clusters reach it through a postgres_fdw server naming both data
# nodes with target_session_attrs 'read-write'. Both members insert rows keyed by
# randflake_next() all along; the demo kills the primary with SIGKILL, shows the promotion, and
# shows both members still issuing, then brings the old primary back as a standby.
#
# Usage: tools/demo-fleet.sh DIR FIRST_PORT   (ports FIRST_PORT..FIRST_PORT+4; KEEP=1 leaves it
# all running, and `tools/demo-fleet.sh stop DIR` removes it). Needs pg_auto_failover
# (tools/deps.sh installs it for PostgreSQL 15) and the installed extension.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../tests/scratch-cluster.sh"
bindir=$("${PG_CONFIG:-pg_config}" --bindir)

as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# pg_autoctl keeps its configuration and state under the XDG directories: inside DIR.
autoctl() {
    (cd "$dir" && as_owner env HOME="$dir" XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/share" \
        XDG_RUNTIME_DIR="$dir/run" PATH="$bindir:$PATH" pg_autoctl "$@")
}

# The pg_autoctl process of a node, which leads a process group with the node's postmaster.
autoctl_pid() {
    local pidfile
    pidfile=$(find "$dir/run" -path "*$1/pg_autoctl.pid" 2>/dev/null | head -n 1)
    [ -n "$pidfile" ] && head -n 1 "$pidfile"
}

stop_all() {
    for node in node1 node2 monitor; do
        local pid
        pid=$(autoctl_pid "$dir/$node" || true)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -INT "$pid" 2>/dev/null || true; fi
    done
    for member in member-a member-b; do "$cluster" destroy "$dir/$member" 2>/dev/null || true; done
    sleep 2
    for node in node1 node2 monitor; do
        local pid
        pid=$(autoctl_pid "$dir/$node" || true)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL -- "-$pid" 2>/dev/null || true; fi
        if [ -f "$dir/$node/postmaster.pid" ]; then
            as_owner "$bindir/pg_ctl" -D "$dir/$node" -m immediate stop >/dev/null 2>&1 || true
        fi
    done
}

if [ "${1:-}" = stop ]; then
    dir=${2:?directory}
    stop_all
    rm -rf "$dir"
    echo "fleet demo removed"
    exit 0
fi

dir=${1:?directory}
port=${2:?first port}
monitor_port=$port
node_ports=($((port + 1)) $((port + 2)))
member_ports=($((port + 3)) $((port + 4)))

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
monitor_sql() {
    psql -X -qAt -h 127.0.0.1 -p "$monitor_port" -U autoctl_node -d pg_auto_failover -c "$1"
}
member_sql() {
    local member=$1
    shift
    psql -X -q -v ON_ERROR_STOP=1 -h "$dir/$member" -p "$(member_port "$member")" -U postgres "$@"
}
member_port() { [ "$1" = member-a ] && echo "${member_ports[0]}" || echo "${member_ports[1]}"; }
states() {
    monitor_sql "SELECT string_agg(nodename || ' ' || current_group_state || coalesce(nullif(' -> ' || assigned_group_state, ' -> ' || current_group_state), ''), ',  ' ORDER BY nodename)
                   FROM pgautofailover.current_state('default')"
}
# `pg_autoctl run` in a session of its own: its process group holds the node's postmaster too.
run_node() {
    (cd "$dir" && as_owner env HOME="$dir" XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/share" \
        XDG_RUNTIME_DIR="$dir/run" PATH="$bindir:$PATH" setsid pg_autoctl run --pgdata "$dir/$1" \
        >>"$dir/$1.autoctl.log" 2>&1 </dev/null &)
}
wait_until() {
    local what=$1 condition=$2 deadline=$((SECONDS + 120))
    until eval "$condition" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { echo "timed out waiting for $what" >&2; exit 1; }
        sleep 0.2
    done
}

stop_all
rm -rf "$dir"
mkdir -p "$dir"/{config,share,run}
chmod 700 "$dir"/{config,share,run}
[ "$(id -u)" = 0 ] && chown -R postgres: "$dir"
as_owner sh -c "umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > '$dir/randflake.key'"
trap '[ "${KEEP:-}" = 1 ] || { stop_all; rm -rf "$dir"; }' EXIT

say "1. The coordinator: a pg_auto_failover monitor and two data nodes, all on 127.0.0.1."
common=(--hostname 127.0.0.1 --auth trust --no-ssl --pgctl "$bindir/pg_ctl")
echo "pg_autoctl create monitor --pgdata $dir/monitor --pgport $monitor_port ${common[*]}"
autoctl create monitor --pgdata "$dir/monitor" --pgport "$monitor_port" "${common[@]}" >"$dir/commands.log" 2>&1
as_owner tee -a "$dir/monitor/postgresql.conf" >/dev/null <<EOF
shared_buffers = '32MB'
# Fail over in seconds: a primary is unhealthy once silent for 3 s and unreachable; a promoted
# standby takes writes 4 s later (the old primary's keeper gives up after 3 s on its own).
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 1000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 3000
pgautofailover.primary_demote_timeout = 4000
EOF
# pg_autoctl starts the monitor with `-h <listen_addresses>`, `*` unless told otherwise.
autoctl config set --pgdata "$dir/monitor" postgresql.listen_addresses 127.0.0.1 >>"$dir/commands.log" 2>&1
run_node monitor
wait_until "the monitor" "monitor_sql 'SELECT 1'"

for index in 0 1; do
    node=node$((index + 1))
    echo "pg_autoctl create postgres --pgdata $dir/$node --pgport ${node_ports[$index]} --name $node --monitor postgres://autoctl_node@127.0.0.1:$monitor_port/pg_auto_failover ..."
    autoctl create postgres --pgdata "$dir/$node" --pgport "${node_ports[$index]}" --listen 127.0.0.1 --name "$node" \
        --dbname postgres --monitor "postgres://autoctl_node@127.0.0.1:$monitor_port/pg_auto_failover?sslmode=disable" \
        "${common[@]}" >>"$dir/commands.log" 2>&1
    autoctl config set --pgdata "$dir/$node" timeout.network_partition_timeout 3 >>"$dir/commands.log" 2>&1
    if [ "$node" = node1 ]; then
        # node2 is a base backup of node1, postgresql.conf included.
        as_owner tee -a "$dir/node1/postgresql.conf" >/dev/null <<EOF
shared_preload_libraries = 'pg_stat_statements, randflake_pg'
randflake.secret_file = '$dir/randflake.key'
randflake.node_source = 'off'
shared_buffers = '32MB'
checkpoint_completion_target = 0
EOF
        run_node node1
        wait_until "node1" "psql -X -h 127.0.0.1 -p ${node_ports[0]} -U postgres -c 'SELECT 1'"
        psql -X -q -h 127.0.0.1 -p "${node_ports[0]}" -U postgres -c "CREATE EXTENSION randflake_pg"
    else
        run_node node2
    fi
done
wait_until "a primary and a secondary" \
    "[ \"\$(monitor_sql \"SELECT string_agg(current_group_state::text, ',' ORDER BY current_group_state) FROM pgautofailover.current_state('default') WHERE current_group_state = assigned_group_state\")\" = 'primary,secondary' ]"
echo "formation: $(states)"
echo "synchronous_standby_names on the primary: $(psql -X -qAt -h 127.0.0.1 -p "${node_ports[0]}" -U postgres -c 'SHOW synchronous_standby_names')"

say "2. Two members lease blocks through one foreign server that names both data nodes:"
hosts="127.0.0.1,127.0.0.1"
ports="${node_ports[0]},${node_ports[1]}"
cat <<EOF
  CREATE SERVER randflake_coordinator FOREIGN DATA WRAPPER postgres_fdw
      OPTIONS (host '$hosts', port '$ports', dbname 'postgres',
               target_session_attrs 'read-write', connect_timeout '2');
EOF
for member in member-a member-b; do
    "$cluster" init "$dir/$member" "$(member_port "$member")" \
        "randflake.node_source = 'fleet'" "randflake.fleet_lease_table = 'randflake_fleet.node_leases'" \
        "randflake.fleet_block_size = 64" "randflake.lease_seconds = 30" \
        "randflake.node_id_min = 0" "randflake.node_id_max = 255"
    as_owner cp "$dir/randflake.key" "$dir/$member/randflake.key"
    "$cluster" start "$dir/$member"
    member_sql "$member" <<EOF
CREATE EXTENSION postgres_fdw;
CREATE SERVER randflake_coordinator FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host '$hosts', port '$ports', dbname 'postgres', target_session_attrs 'read-write',
             connect_timeout '2', keepalives '1', keepalives_idle '5', keepalives_interval '2',
             keepalives_count '3', tcp_user_timeout '10000');
CREATE USER MAPPING FOR postgres SERVER randflake_coordinator OPTIONS (user 'postgres');
CREATE SCHEMA randflake_fleet;
IMPORT FOREIGN SCHEMA randflake LIMIT TO (node_leases, commit_evidence) FROM SERVER randflake_coordinator INTO randflake_fleet;
CREATE EXTENSION randflake_pg;
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT randflake_next(), made timestamptz DEFAULT clock_timestamp());
EOF
done
wait_until "the members' leases" \
    "[ \"\$(member_sql member-a -Atc \"SELECT state FROM randflake_status()\")\$(member_sql member-b -Atc \"SELECT state FROM randflake_status()\")\" = activeactive ]"
psql -X -h 127.0.0.1 -p "${node_ports[0]}" -U postgres \
    -c "SELECT server_name, first_node, last_node, to_timestamp(lease_end) AS lease_end FROM randflake.node_leases ORDER BY first_node"

say "3. Both members insert a row every 0.2 s; every 2 s each prints its latest ID and its node:"
rm -f "$dir"/*.errors
inserters=()
for member in member-a member-b; do
    (
        count=0
        while [ ! -f "$dir/stop-inserting" ]; do
            if row=$(member_sql "$member" -Atc "INSERT INTO orders DEFAULT VALUES
                         RETURNING id, (SELECT node_id FROM randflake_decode(id))" 2>>"$dir/$member.errors"); then
                count=$((count + 1))
                if [ $((count % 10)) = 0 ]; then
                    printf '  %s  %s  id %-20s node %-4s (%d rows)\n' "$(date +%T.%3N)" "$member" "${row%|*}" "${row#*|}" "$count"
                fi
            else
                printf '  %s  %s  REFUSED: %s\n' "$(date +%T.%3N)" "$member" "$(tail -n 1 "$dir/$member.errors")"
            fi
            sleep 0.2
        done
    ) &
    inserters+=($!)
done
sleep 5

primary=$(monitor_sql "SELECT nodename FROM pgautofailover.current_state('default') WHERE assigned_group_state = 'primary'")
say "4. SIGKILL of the primary ($primary): its pg_autoctl and its postmaster, at $(date +%T.%3N)."
pid=$(autoctl_pid "$dir/$primary")
postmaster=$(head -n 1 "$dir/$primary/postmaster.pid")
kill -KILL -- "-$pid" "$postmaster" 2>/dev/null || true
killed=$SECONDS
last=""
until [ "$(psql -X -qAt -d "host=$hosts port=$ports user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=2" \
             -c 'SELECT 1' 2>/dev/null)" = 1 ]; do
    now=$(states)
    [ "$now" = "$last" ] || printf '  %s  monitor: %s\n' "$(date +%T.%3N)" "$now"
    last=$now
    sleep 0.2
done
printf '  %s  monitor: %s\n' "$(date +%T.%3N)" "$(states)"
say "   The standby takes writes $((SECONDS - killed)) s after the kill; the members never stopped issuing:"
sleep 6

say "5. The old primary restarts and rejoins as a standby (pg_rewind):"
run_node "$primary"
wait_until "the old primary to rejoin" \
    "[ \"\$(monitor_sql \"SELECT current_group_state FROM pgautofailover.current_state('default') WHERE nodename = '$primary'\")\" = secondary ]"
printf '  %s  monitor: %s\n' "$(date +%T.%3N)" "$(states)"
sleep 3
touch "$dir/stop-inserting"
wait "${inserters[@]}"

say "6. What the members issued:"
for member in member-a member-b; do
    member_sql "$member" -Atc "SELECT '$member: ' || count(*) || ' rows, nodes ' || min(d.node_id) || '..' || max(d.node_id)
                                 FROM orders, randflake_decode(orders.id) d"
done
refused=$(cat "$dir"/*.errors 2>/dev/null | grep -c ERROR || true)
duplicates=$(for member in member-a member-b; do member_sql "$member" -Atc "SELECT id FROM orders"; done | sort | uniq -d | wc -l)
echo "statements refused: $refused; IDs issued by both members: $duplicates"
if [ "${KEEP:-}" = 1 ]; then
    echo "Everything keeps running; remove it with: tools/demo-fleet.sh stop $dir"
fi
