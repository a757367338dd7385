"""Sessions inserting rows keyed by randflake_next() while a test does something to the server,
and the check that no ID came twice."""

from __future__ import annotations

import threading
import time

import psycopg

from lib.cluster import Cluster


class Inserter:
    """Sessions inserting rows keyed by randflake_next() until stopped, counting refusals."""

    def __init__(self, cluster: Cluster, sessions: int = 2, dbname: str = "postgres"):
        self.cluster, self.dbname = cluster, dbname
        self.stop_event = threading.Event()
        self.refusals: list[str] = []
        self.failures: list[str] = []
        self.inserted = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run) for _ in range(sessions)]

    def __enter__(self) -> Inserter:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join()

    def run(self) -> None:
        try:
            conn = self.cluster.connect(self.dbname)
        except psycopg.Error as error:
            self.failures.append(str(error))
            return
        with conn:
            while not self.stop_event.is_set():
                try:
                    conn.execute("INSERT INTO made SELECT FROM generate_series(1, 200)")
                    with self.lock:
                        self.inserted += 200
                except psycopg.Error as error:
                    # Refusing to issue is the right answer while no lease can be renewed.
                    (self.refusals if error.sqlstate == "55000" else self.failures).append(str(error))
                    time.sleep(0.1)  # pacing: a refused session does not spin

    def count(self) -> int:
        with self.lock:
            return self.inserted


def made_table(cluster: Cluster, dbname: str = "postgres") -> None:
    with cluster.connect(dbname) as conn:
        conn.execute("CREATE TABLE made (id bigint PRIMARY KEY DEFAULT randflake_next())")


def assert_unique(cluster: Cluster, dbname: str = "postgres") -> int:
    with cluster.connect(dbname) as conn:
        rows, distinct = conn.execute("SELECT count(*), count(DISTINCT id) FROM made").fetchone()
    assert rows == distinct
    return rows
