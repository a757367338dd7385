"""Soak under load and faults: many clients insert rows keyed by randflake_next() while faults
are injected on a schedule; at the end the table is checked and one summary is printed.

    python tests/integration/soak.py --duration 600 --clients 32     (make soak)

Clients insert batches into a PRIMARY KEY table and remember every ID the server confirmed as
committed; some reconnect every few transactions; one session runs parallel-query SELECTs that
call randflake_next() in parallel workers. Faults, in turn: kill -9 of a random backend (the
postmaster reinitialises), immediate shutdown and restart, and a clock step back under
libfaketime. The run fails if any ID repeats or any committed row is missing.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import random
import signal
import sys
import threading
import time

import psycopg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from lib.cluster import Cluster  # noqa: E402
from lib.fake_clock import FakeClock, build_preload, start_under_fake_clock  # noqa: E402

BATCH = 50
CLOCK_STEP = 5


class Tally:
    """What the clients and the fault injector saw, shared between threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.committed: list[int] = []
        self.errors: collections.Counter = collections.Counter()
        self.faults: collections.Counter = collections.Counter()
        self.parallel_ids = 0

    def add_ids(self, ids: list[int]) -> None:
        with self.lock:
            self.committed.extend(ids)

    def error(self, error: Exception) -> None:
        state = getattr(error, "sqlstate", None) or "connection lost"
        with self.lock:
            self.errors[state] += 1


def client(cluster: Cluster, number: int, churn: bool, stop: threading.Event, tally: Tally) -> None:
    conn = None
    transactions = 0
    while not stop.is_set():
        try:
            if conn is None or conn.closed or (churn and transactions % 3 == 0):
                if conn is not None:
                    conn.close()
                conn = cluster.connect(connect_timeout=2)
            rows = conn.execute(
                f"INSERT INTO soak (client) SELECT %s FROM generate_series(1, {BATCH}) RETURNING id", (number,)
            ).fetchall()
            tally.add_ids([row[0] for row in rows])
            transactions += 1
        except psycopg.Error as error:
            tally.error(error)
            if conn is not None and conn.closed:
                conn = None
            time.sleep(0.05)  # pacing: a failed client does not spin while the server restarts
    if conn is not None:
        conn.close()


def parallel_reader(cluster: Cluster, stop: threading.Event, tally: Tally) -> None:
    """randflake_next() in parallel workers: each worker holds its own node."""
    while not stop.is_set():
        try:
            with cluster.connect(connect_timeout=2) as conn:
                for setting in ("parallel_setup_cost = 0", "parallel_tuple_cost = 0",
                                "min_parallel_table_scan_size = 0", "max_parallel_workers_per_gather = 2"):
                    conn.execute(f"SET {setting}")
                while not stop.is_set():
                    made = conn.execute(
                        "SELECT count(DISTINCT x) FROM (SELECT randflake_next() AS x FROM soak LIMIT 20000) s"
                    ).fetchone()[0]
                    with tally.lock:
                        tally.parallel_ids += made
        except psycopg.Error as error:
            tally.error(error)
            time.sleep(0.1)  # pacing: a failed reader does not spin while the server restarts


def inject_faults(cluster: Cluster, clock: FakeClock | None, every: float, stop: threading.Event, tally: Tally) -> None:
    kinds = ["kill -9 backend", "immediate restart"] + (["clock step back"] if clock else [])
    turn = 0
    while not stop.wait(every):
        kind = kinds[turn % len(kinds)]
        turn += 1
        try:
            if kind == "kill -9 backend":
                with cluster.connect(connect_timeout=2) as conn:
                    pids = [row[0] for row in conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    )]
                if not pids:
                    continue
                os.kill(random.choice(pids), signal.SIGKILL)
            elif kind == "immediate restart":
                cluster.stop("immediate")
                if clock:
                    start_under_fake_clock(cluster, clock)
                else:
                    cluster.start()
            else:
                clock.set(-CLOCK_STEP)
                time.sleep(CLOCK_STEP / 2)  # a deliberate hold: the clock stays stepped back for a while
                clock.set(0)
            with tally.lock:
                tally.faults[kind] += 1
        except (psycopg.Error, OSError, AssertionError) as error:
            tally.error(error)


def soak(duration: float, clients: int, fault_every: float, name: str = "soak") -> dict:
    cluster = Cluster(name, ("max_connections = 200", "randflake.lease_seconds = 60"))
    shim = pathlib.Path(f"/tmp/randflake_pg-{name}-faketime-shim.so")
    preload = build_preload(shim)
    clock = FakeClock(cluster, preload) if preload else None
    try:
        if clock:
            start_under_fake_clock(cluster, clock)
        else:
            cluster.start()
        with cluster.connect() as conn:
            conn.execute("CREATE EXTENSION randflake_pg")
            conn.execute("CREATE TABLE soak (id bigint PRIMARY KEY DEFAULT randflake_next(), client int NOT NULL)")
            conn.execute("SELECT randflake_next()")
        tally = Tally()
        stop = threading.Event()
        threads = [
            threading.Thread(target=client, args=(cluster, number, number % 4 == 0, stop, tally))
            for number in range(clients)
        ]
        threads.append(threading.Thread(target=parallel_reader, args=(cluster, stop, tally)))
        faults = threading.Thread(target=inject_faults, args=(cluster, clock, fault_every, stop, tally))
        started = time.monotonic()
        for thread in [*threads, faults]:
            thread.start()
        time.sleep(duration)  # a load period: the soak's length
        stop.set()
        faults.join()
        for thread in threads:
            thread.join(timeout=60)
        elapsed = time.monotonic() - started

        with cluster.connect() as conn:
            rows, distinct = conn.execute("SELECT count(*), count(DISTINCT id) FROM soak").fetchone()
            conn.execute("CREATE TEMP TABLE confirmed (id bigint)")
            with conn.cursor().copy("COPY confirmed (id) FROM STDIN") as copy:
                for id_ in tally.committed:
                    copy.write_row((id_,))
            lost = conn.execute(
                "SELECT count(*) FROM confirmed c WHERE NOT EXISTS (SELECT 1 FROM soak s WHERE s.id = c.id)"
            ).fetchone()[0]
            triples = conn.execute(
                "SELECT count(*) - count(DISTINCT (d.timestamp, d.node_id, d.sequence)) FROM soak, randflake_decode(soak.id) d"
            ).fetchone()[0]
            state = conn.execute("SELECT state, clock_refusals, node_switches FROM randflake_status()").fetchone()
        summary = {
            "seconds": round(elapsed, 1),
            "clients": clients,
            "ids_in_table": rows,
            "ids_confirmed_to_clients": len(tally.committed),
            "ids_committed_unconfirmed": rows - (len(tally.committed) - lost),
            "ids_in_parallel_workers": tally.parallel_ids,
            "duplicate_ids": (rows - distinct) + (len(tally.committed) - len(set(tally.committed))),
            "duplicate_triples": triples,
            "lost_committed_rows": lost,
            "faults": dict(tally.faults),
            "errors_by_sqlstate": dict(tally.errors),
            "clock_faked": clock is not None,
            "final_state": state[0],
            "clock_refusals_since_last_start": state[1],
        }
        return summary
    finally:
        cluster.destroy()
        shim.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600, help="seconds of load (default 600)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent inserting clients (default 32)")
    parser.add_argument("--fault-every", type=float, default=10, help="seconds between faults (default 10)")
    args = parser.parse_args()
    summary = soak(args.duration, args.clients, args.fault_every)
    print(json.dumps(summary, indent=2))
    ok = summary["duplicate_ids"] == summary["duplicate_triples"] == summary["lost_committed_rows"] == 0
    print("soak: OK" if ok else "soak: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
