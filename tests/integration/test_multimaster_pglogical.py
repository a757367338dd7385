"""Multi-master on PostgreSQL 15 with pglogical 2 (Debian's postgresql-15-pglogical).

PostgreSQL 15's own logical replication cannot tell a replicated change from a local one, so two
servers subscribed to each other would send every row back and forth (test_multimaster.py uses
WITH (origin = none) on 16 and later). pglogical can: a subscription with forward_origins = '{}'
applies only changes made on its provider itself. So, as in test_multimaster.py: two servers with
disjoint node ranges and one secret replicate one table to each other, both insert with DEFAULT
randflake_next() at the same time, under load, and one subscription is paused and resumed
half-way as if it had fallen behind. With pglogical.conflict_resolution = error, any conflict
(a key used on both sides, or a row sent back to where it came from) would stop an apply worker
with an ERROR instead of being resolved quietly. Then:
* neither server's log reports a conflict or an error, and both subscriptions replicate;
* both copies hold exactly the same rows, every row either server inserted;
* every ID decodes, on either server, to a node of the range of the server that made it.
"""

from __future__ import annotations

import pathlib
import time

import psycopg
import pytest

from lib.cluster import pg_config, wait_for, write_server_file
from lib.two_masters import LOAD_SECONDS, RANGES, TABLE, check_converged, conninfo, insert_under_load

pytestmark = pytest.mark.skipif(
    not (pathlib.Path(pg_config("--sharedir")) / "extension" / "pglogical.control").exists(),
    reason="this PostgreSQL installation has no pglogical (Debian packages it for 15: postgresql-15-pglogical)",
)

def subscription_states(conn: psycopg.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT subscription_name, status FROM pglogical.show_subscription_status()").fetchall())


def test_two_masters_replicate_through_pglogical_without_a_conflict(make_cluster):
    servers = {}
    for side, (low, high) in RANGES.items():
        servers[side] = make_cluster(
            "shared_preload_libraries = 'randflake_pg,pglogical'",
            "wal_level = logical",
            "max_worker_processes = 16",
            "max_replication_slots = 10",
            "max_wal_senders = 10",
            "track_commit_timestamp = on",
            "pglogical.conflict_resolution = 'error'",
            f"randflake.node_id_min = {low}",
            f"randflake.node_id_max = {high}",
        )
    # One secret for the pair, so that either server decodes the other's IDs.
    write_server_file(servers["b"].dir / "randflake.key", servers["a"].key_hex + "\n")
    for side, server in servers.items():
        server.start()
        with server.connect() as conn:
            # From 15.19 on, a logical slot may use only the output plugins this lists, and
            # pglogical's subscribers create slots with pglogical_output.
            if conn.execute("SELECT count(*) FROM pg_settings WHERE name = 'output_plugin_libraries'").fetchone()[0]:
                # Each name quoted on its own: one quoted list would be taken as one name.
                conn.execute(
                    "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'test_decoding', 'pglogical_output'"
                )
                conn.execute("SELECT pg_reload_conf()")
            conn.execute("CREATE EXTENSION randflake_pg")
            conn.execute("CREATE EXTENSION pglogical")
            conn.execute(TABLE)
            conn.execute("SELECT pglogical.create_node(node_name := %s, dsn := %s)", (side, conninfo(server)))
            # A set of its own, naming the application's table only: never randflake.node_leases.
            conn.execute("SELECT pglogical.create_replication_set('orders_set')")
            conn.execute("SELECT pglogical.replication_set_add_table('orders_set', 'orders')")
    for side, other in (("a", "b"), ("b", "a")):
        with servers[side].connect() as conn:
            conn.execute(
                """SELECT pglogical.create_subscription(
                       subscription_name := %s, provider_dsn := %s, replication_sets := ARRAY['orders_set'],
                       synchronize_structure := false, synchronize_data := false, forward_origins := '{}')""",
                (f"orders_from_{other}", conninfo(servers[other])),
            )
    for side, other in (("a", "b"), ("b", "a")):
        with servers[side].connect() as conn:
            wait_for(lambda: subscription_states(conn) == {f"orders_from_{other}": "replicating"}, 60,
                     f"{side}'s subscription to replicate")
            # No origin forwarded (pglogical shows the empty list as NULL; its default is {all}).
            assert not conn.execute("SELECT forward_origins FROM pglogical.show_subscription_status()").fetchone()[0]

    def fall_behind() -> None:
        # b stops applying a's changes for a while, as a subscription that fell behind.
        with servers["b"].connect() as conn:
            conn.execute("SELECT pglogical.alter_subscription_disable('orders_from_a', immediate := true)")
            wait_for(lambda: subscription_states(conn)["orders_from_a"] == "disabled", 10, "the subscription to stop")
            time.sleep(LOAD_SECONDS / 3)  # a deliberate hold: the time the subscription lags
            conn.execute("SELECT pglogical.alter_subscription_enable('orders_from_a', immediate := true)")

    # pglogical applies each side's rows in one worker: unthrottled writers on two cores would
    # only measure how long it takes to catch up.
    inserted = insert_under_load(servers, fall_behind, largest_batch=81, pause=0.002)
    for side, server in servers.items():
        with server.connect() as conn:
            assert set(subscription_states(conn).values()) == {"replicating"}
            # Only the application's table travels; each server's leases stay its own.
            sets = "SELECT array_agg(DISTINCT set_reloid::text) FROM pglogical.replication_set_table"
            assert conn.execute(sets).fetchone()[0] == ["orders"]
    check_converged(servers, inserted, ("CONFLICT", "conflict", "duplicate key", "ERROR", "terminated by signal"))
