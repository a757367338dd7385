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

import threading
import time

import psycopg
import pytest

from conftest import Cluster, server_major, wait_for, write_server_file

pytestmark = pytest.mark.skipif(server_major() < 16, reason="CREATE SUBSCRIPTION ... WITH (origin = none) needs PostgreSQL 16")

RANGES = {"a": (1000, 1999), "b": (2000, 2999)}
TABLE = """CREATE TABLE orders (
    id       bigint PRIMARY KEY DEFAULT randflake_next(),
    origin   text NOT NULL,
    session  int NOT NULL,
    amount   int NOT NULL)"""
SESSIONS_PER_SIDE = 3
LOAD_SECONDS = 12


def conninfo(cluster: Cluster) -> str:
    return f"host={cluster.dir} port={cluster.port} user=postgres dbname=postgres"


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


def table_digest(conn: psycopg.Connection) -> tuple[int, str]:
    return conn.execute(
        "SELECT count(*), md5(string_agg(format('%s|%s|%s|%s', id, origin, session, amount), ',' ORDER BY id)) FROM orders"
    ).fetchone()


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

    inserted = {side: 0 for side in RANGES}
    lock = threading.Lock()
    failures: list[BaseException] = []
    stop = time.monotonic() + LOAD_SECONDS

    def insert(side: str, session: int) -> None:
        try:
            with servers[side].connect() as conn:
                batch = 1
                while time.monotonic() < stop:
                    # Single rows and batches, as applications insert.
                    conn.execute(
                        "INSERT INTO orders (origin, session, amount) SELECT %s, %s, g FROM generate_series(1, %s) g",
                        (side, session, batch),
                    )
                    with lock:
                        inserted[side] += batch
                    batch = 1 if batch >= 200 else batch * 3
        except BaseException as error:  # reported below, with the server logs
            failures.append(error)

    workers = [threading.Thread(target=insert, args=(side, s)) for side in RANGES for s in range(SESSIONS_PER_SIDE)]
    for worker in workers:
        worker.start()
    # Half-way, b stops applying a's changes for a while, as a subscription that fell behind.
    time.sleep(LOAD_SECONDS / 3)
    with servers["b"].connect() as conn:
        conn.execute("ALTER SUBSCRIPTION orders_from_a DISABLE")
        time.sleep(LOAD_SECONDS / 3)
        conn.execute("ALTER SUBSCRIPTION orders_from_a ENABLE")
    for worker in workers:
        worker.join()
    assert not failures, failures

    total = sum(inserted.values())
    assert min(inserted.values()) > 1000, inserted

    def row_counts() -> list[int]:
        counts = []
        for server in servers.values():
            with server.connect() as conn:
                counts.append(conn.execute("SELECT count(*) FROM orders").fetchone()[0])
        return counts

    wait_for(lambda: row_counts() == [total, total], 120, f"both copies to hold all {total} rows", interval=0.5)
    digests = []
    for server in servers.values():
        with server.connect() as conn:
            digests.append(table_digest(conn))
    assert digests[0] == digests[1]

    for side, server in servers.items():
        with server.connect() as conn:
            assert subscription_conflicts(conn) == {}
            by_origin = dict(
                conn.execute(
                    """SELECT o.origin, array[min(d.node_id), max(d.node_id), count(*)]
                         FROM orders o, randflake_decode(o.id) d GROUP BY o.origin"""
                ).fetchall()
            )
            for origin, (low, high) in RANGES.items():
                first, last, count = by_origin[origin]
                assert low <= first <= last <= high, (side, origin, first, last)
                assert count == inserted[origin]
        log = server.log()
        for symptom in ("conflict", "duplicate key", "terminated by signal"):
            assert symptom not in log, f"{side}'s log reports {symptom!r}"
