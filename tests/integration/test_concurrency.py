"""Many sessions at once: no error, no duplicate, and the server's sessions share its nodes: each
second uses the nodes its IDs need, from the first of the range on."""

from __future__ import annotations

import threading

import psycopg

SESSIONS = 8
ROWS_PER_SESSION = 25_000
BATCH = 1_000


def run_in_threads(count: int, work) -> list[BaseException]:
    errors: list[BaseException] = []
    lock = threading.Lock()

    def guarded(index: int) -> None:
        try:
            work(index)
        except BaseException as error:  # collected and reported by the test
            with lock:
                errors.append(error)

    threads = [threading.Thread(target=guarded, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def create_table(conn: psycopg.Connection) -> None:
    conn.execute(
        """CREATE TABLE items (
               id bigint PRIMARY KEY DEFAULT randflake_next(),
               session int NOT NULL,
               backend int NOT NULL DEFAULT pg_backend_pid())"""
    )


def assert_nodes_follow_the_rate(conn: psycopg.Connection, first_node: int, backends: int) -> None:
    """Each second's IDs come from consecutive nodes starting at `first_node`, and no more of
    them than its IDs need: one for each 131072, counting the rest of a run of 64 that each
    backend may drop when the second turns."""
    rows = conn.execute(
        """SELECT d.timestamp, count(*), count(DISTINCT d.node_id), min(d.node_id), max(d.node_id)
             FROM items i, randflake_decode(i.id) d GROUP BY 1"""
    ).fetchall()
    for second, ids, nodes, lowest, highest in rows:
        needed = -(-(ids + 63 * backends) // 131_072)
        assert lowest == first_node and highest - lowest + 1 == nodes <= needed, (second, ids, nodes, lowest)


def test_eight_sessions_insert_200k_rows(cluster):
    with cluster.connect() as conn:
        create_table(conn)

    def insert(session: int) -> None:
        with cluster.connect() as conn:
            for _ in range(ROWS_PER_SESSION // BATCH):
                conn.execute(
                    "INSERT INTO items (session) SELECT %s FROM generate_series(1, %s)", (session, BATCH)
                )

    errors = run_in_threads(SESSIONS, insert)
    assert errors == []
    with cluster.connect() as conn:
        rows, distinct = conn.execute("SELECT count(*), count(DISTINCT id) FROM items").fetchone()
        assert rows == distinct == SESSIONS * ROWS_PER_SESSION
        sessions = conn.execute("SELECT count(DISTINCT session) FROM items").fetchone()[0]
        assert sessions == SESSIONS
        assert_nodes_follow_the_rate(conn, 0, SESSIONS)


def test_short_connections_share_the_first_node_of_the_range(make_cluster):
    """Backend churn on a 4-node range: 240 connections, more than 50 times its nodes, all make
    IDs, and backends of one second share its first node. (With a node per backend, a node was
    never shared within a second.)"""
    cluster = make_cluster("randflake.node_id_min = 1000", "randflake.node_id_max = 1003")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        create_table(conn)
    connections_per_thread = 30

    def churn(session: int) -> None:
        for _ in range(connections_per_thread):
            with cluster.connect() as conn:
                conn.execute("INSERT INTO items (session) SELECT %s FROM generate_series(1, 50)", (session,))

    errors = run_in_threads(SESSIONS, churn)
    assert errors == []
    with cluster.connect() as conn:
        rows, distinct, backends = conn.execute(
            "SELECT count(*), count(DISTINCT id), count(DISTINCT backend) FROM items"
        ).fetchone()
        assert rows == distinct == SESSIONS * connections_per_thread * 50
        assert backends == SESSIONS * connections_per_thread
        shared = conn.execute(
            "SELECT count(*) FROM (SELECT d.timestamp, d.node_id FROM items i, randflake_decode(i.id) d"
            " GROUP BY 1, 2 HAVING count(DISTINCT i.backend) > 1) r"
        ).fetchone()[0]
        assert shared > 0, "backends of one second share its node"
        assert_nodes_follow_the_rate(conn, 1000, SESSIONS)
