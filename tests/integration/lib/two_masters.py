"""What the two multi-master tests share (test_multimaster.py, native replication on 16 and later;
test_multimaster_pglogical.py, pglogical on 15): two servers with disjoint node ranges insert into
one replicated table at the same time, one side stops applying the other's changes for a while,
and afterwards both copies must be equal and every ID must decode to its origin's range."""

from __future__ import annotations

import threading
import time
from typing import Callable

import psycopg

from lib.cluster import Cluster, wait_for

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


def insert_under_load(servers: dict[str, Cluster], fall_behind: Callable[[], None], largest_batch: int = 200,
                      pause: float = 0.0) -> dict[str, int]:
    """Sessions on both servers insert single rows and batches (up to `largest_batch`, `pause`
    seconds apart) for LOAD_SECONDS; a third of the way in, `fall_behind` runs (it stops one
    side applying the other's changes for a while, and resumes it). Returns the rows each side
    inserted."""
    inserted = {side: 0 for side in RANGES}
    lock = threading.Lock()
    failures: list[BaseException] = []
    stop = time.monotonic() + LOAD_SECONDS

    def insert(side: str, session: int) -> None:
        try:
            with servers[side].connect() as conn:
                batch = 1
                while time.monotonic() < stop:
                    conn.execute(
                        "INSERT INTO orders (origin, session, amount) SELECT %s, %s, g FROM generate_series(1, %s) g",
                        (side, session, batch),
                    )
                    with lock:
                        inserted[side] += batch
                    batch = 1 if batch >= largest_batch else batch * 3
                    time.sleep(pause)  # pacing: as the caller asks, so that the other side's apply keeps up
        except BaseException as error:  # reported by the caller, with the server logs
            failures.append(error)

    workers = [threading.Thread(target=insert, args=(side, s)) for side in RANGES for s in range(SESSIONS_PER_SIDE)]
    for worker in workers:
        worker.start()
    time.sleep(LOAD_SECONDS / 3)  # a load period: both sides insert before one falls behind
    fall_behind()
    for worker in workers:
        worker.join()
    assert not failures, failures
    assert min(inserted.values()) > 1000, inserted
    return inserted


def table_digest(conn: psycopg.Connection) -> tuple[int, str]:
    return conn.execute(
        """SELECT count(*), md5(string_agg(format('%s|%s|%s|%s', id, origin, session, amount), ',' ORDER BY id))
             FROM orders"""
    ).fetchone()


def check_converged(servers: dict[str, Cluster], inserted: dict[str, int], log_symptoms: tuple[str, ...]) -> None:
    """Both copies hold every row either side inserted, the same rows; every ID decodes, on
    either server, to a node of its origin's range; no server log shows `log_symptoms`."""
    total = sum(inserted.values())

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
        for symptom in log_symptoms:
            assert symptom not in log, f"{side}'s log reports {symptom!r}"
