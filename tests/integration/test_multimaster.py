"""Multi-master with PostgreSQL's own logical replication (16 and later).

Two servers with disjoint node ranges and one secret publish the same table to each other and
subscribe to each other WITH (origin = none), so that a row replicated in is not sent back.
Both insert with DEFAULT randflake_next() at the same time, under load, one subscription is
paused and resumed half-way as if it had fallen behind, and then:
* no apply worker ever met a conflict (no errors, and on 18 no conflict of any kind counted),
  and no server log reports one;
* both copies hold exactly the same rows, every row either server inserted;
* every ID decodes, on either server, to a node of the range of the server that made it.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from lib.cluster import server_major, write_server_file
from lib.two_masters import LOAD_SECONDS, RANGES, TABLE, check_converged, conninfo, insert_under_load

pytestmark = pytest.mark.skipif(server_major() < 16, reason="CREATE SUBSCRIPTION ... WITH (origin = none) needs PostgreSQL 16")

def subscription_conflicts(conn: psycopg.Connection) -> dict[str, int]:
    """Every error and conflict counter of the server's subscriptions that is not zero."""
    cursor = conn.execute("SELECT * FROM pg_stat_subscription_stats")
    counters = [i for i, column in enumerate(cursor.description) if column.name.endswith("error_count")
                or column.name.startswith("confl_")]
    found: dict[str, int] = {}
    for row in cursor.fetchall():
        for i in counters:
            if row[i]:
                found[f"{row[1]}.{cursor.description[i].name}"] = row[i]
    return found


def test_two_masters_insert_under_load_without_a_conflict(make_cluster):
    servers = {}
    for side, (low, high) in RANGES.items():
        servers[side] = make_cluster(
            "wal_level = logical",
            f"randflake.node_id_min = {low}",
            f"randflake.node_id_max = {high}",
        )
    # One secret for the pair, so that either server decodes the other's IDs.
    write_server_file(servers["b"].dir / "randflake.key", servers["a"].key_hex + "\n")
    for server in servers.values():
        server.start()
        with server.connect() as conn:
            conn.execute("CREATE EXTENSION randflake_pg")
            conn.execute(TABLE)
            conn.execute("CREATE PUBLICATION orders_pub FOR TABLE orders")
    for side, other in (("a", "b"), ("b", "a")):
        with servers[side].connect() as conn:
            conn.execute(
                f"CREATE SUBSCRIPTION orders_from_{other} CONNECTION '{conninfo(servers[other])}' "
                "PUBLICATION orders_pub WITH (origin = none, copy_data = false)"
            )

    def fall_behind() -> None:
        # b stops applying a's changes for a while, as a subscription that fell behind.
        with servers["b"].connect() as conn:
            conn.execute("ALTER SUBSCRIPTION orders_from_a DISABLE")
            time.sleep(LOAD_SECONDS / 3)  # a deliberate hold: the time the subscription lags
            conn.execute("ALTER SUBSCRIPTION orders_from_a ENABLE")

    inserted = insert_under_load(servers, fall_behind)
    for server in servers.values():
        with server.connect() as conn:
            assert subscription_conflicts(conn) == {}
    check_converged(servers, inserted, ("conflict", "duplicate key", "terminated by signal"))
