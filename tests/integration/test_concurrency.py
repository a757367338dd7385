"""Many sessions at once: no error, no duplicate, and no node shared by two sessions in a second."""

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


def assert_nodes_never_shared(conn: psycopg.Connection, owner_column: str) -> None:
    """Within one second, each node's IDs all come from one backend."""
    shared = conn.execute(
        f"""SELECT d.timestamp, d.node_id, count(DISTINCT i.{owner_column})
              FROM items i, randflake_decode(i.id) d
             GROUP BY 1, 2 HAVING count(DISTINCT i.{owner_column}) > 1"""
    ).fetchall()
    assert shared == []


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
        assert_nodes_never_shared(conn, "session")


def test_short_connections_never_reuse_a_node_within_a_second(make_cluster):
    """Backend churn on a 40-node range: 240 connections each take a node, use it and free it,
    so nodes are recycled many times, and a node freed in a second must wait for the next."""
    cluster = make_cluster("randflake.node_id_min = 1000", "randflake.node_id_max = 1039")
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
        reused = conn.execute(
            "SELECT count(*) FROM (SELECT d.node_id FROM items i, randflake_decode(i.id) d"
            " GROUP BY 1 HAVING count(DISTINCT i.backend) > 1) r"
        ).fetchone()[0]
        assert reused > 0, "the range is small enough that nodes must be recycled"
        assert_nodes_never_shared(conn, "backend")
