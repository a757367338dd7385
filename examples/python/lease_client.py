#!/usr/bin/env python3
"""Make Randflake IDs in an application, on a node leased from randflake_pg.

    RANDFLAKE_SECRET_FILE=/path/to/randflake.key python lease_client.py \\
        --dsn "host=db.example.com dbname=postgres user=orders_service" --holder orders-7 \\
        [--seconds 600] [--rate 100] [--duration 60]

The database hands out the node (randflake_lease_acquire), and this process makes the IDs itself
with the Python reference port, with no round trip per ID. They go into the same bigint columns
as randflake_next()'s and never collide with them, nor with other applications' IDs, because:

* the node comes from the servers' own lease table, from the application pool the DBA set
  aside (randflake.app_node_id_min..max), and no one else holds it in those seconds;
* the IDs are made only inside the leased window of seconds: the reference Generator refuses
  any second outside it;
* the lease is extended in the background when a third of it is left; if the database cannot be
  reached, IDs are still made until the lease ends, and then no more (exit status 3). If the
  database says the lease has ended or was taken back, IDs stop at once;
* the same secret as the servers (RANDFLAKE_SECRET_FILE, a copy of the servers' key file).

What the DBA grants the application's role (leases are kept under the role's name, and called in
randflake.database, in autocommit mode):

    GRANT EXECUTE ON PROCEDURE randflake_lease_acquire(text, integer),
        randflake_lease_extend(text, integer, integer), randflake_lease_release(text, integer) TO orders_service;

Prints one ID per line on stdout (--rate per second, for --duration seconds or until stopped
with SIGINT or SIGTERM), and what happens to the lease on stderr; releases the lease at the end.
Exit status: 0 done, 1 no lease could be had, 2 bad arguments or secret, 3 the lease was lost.

Needs `pip install psycopg randflake==2.1.0`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

import psycopg
from randflake.v2 import Config, ErrInvalidLease, Generator, Lease

from decode_ids import InputError, load_secret

# libpq settings that bound how long a call to an unreachable server can take.
CONNECT_OPTIONS = {"autocommit": True, "connect_timeout": 5, "tcp_user_timeout": 5000}


def log(message: str) -> None:
    print(f"{time.time():.3f} {message}", file=sys.stderr, flush=True)


class LeaseLost(Exception):
    """The lease ended without being extended, or the database took it back: make no more IDs."""


class LeasedIds:
    """IDs on a node leased from randflake_pg. next_id() never waits for the database: a thread
    extends the lease when a third of it is left, and retries every second until it ends."""

    def __init__(self, dsn: str, holder: str, seconds: int, secret: bytes):
        self.dsn, self.holder, self.seconds = dsn, holder, seconds
        self.conn: psycopg.Connection | None = psycopg.connect(dsn, **CONNECT_OPTIONS)
        node, start, end = self.acquire()
        self.generator = Generator(Config(lease=Lease(node_id=node, start=start, end_exclusive=end), secret=secret))
        log(f"leased node {node}: seconds [{start}, {end})")
        self.taken_back = threading.Event()
        self.stopping = threading.Event()
        self.keeper = threading.Thread(target=self.keep, name="lease keeper", daemon=True)
        self.keeper.start()

    def acquire(self) -> tuple[int, int, int]:
        for attempt in range(5):
            try:
                return self.conn.execute(
                    "CALL randflake_lease_acquire(%s, %s, NULL, NULL, NULL)", (self.holder, self.seconds)
                ).fetchone()
            except (psycopg.errors.SerializationFailure, psycopg.errors.StatementCompletionUnknown):
                # Another call leased the same node at that moment (40001), or the lease's commit
                # was not confirmed durable (40003: the node named is not ours): ask again.
                time.sleep(0.1 * (attempt + 1))
        raise LeaseLost("no node after five tries")

    def next_id(self) -> int:
        if self.taken_back.is_set():
            raise LeaseLost("the database says the lease is no longer ours")
        try:
            return self.generator.generate()
        except ErrInvalidLease:
            lease = self.generator.lease()
            raise LeaseLost(
                f"the lease of node {lease.node_id} ended at {lease.end_exclusive} without an extension"
            ) from None

    def keep(self) -> None:
        while not self.stopping.is_set():
            lease = self.generator.lease()
            wait = lease.end_exclusive - self.seconds / 3 - time.time()
            if wait > 0:
                self.stopping.wait(wait)
                continue
            if time.time() >= lease.end_exclusive:
                return  # over: next_id() says so
            try:
                if self.conn is None:
                    self.conn = psycopg.connect(self.dsn, **CONNECT_OPTIONS)
                _, start, end = self.conn.execute(
                    "CALL randflake_lease_extend(%s, %s, %s, NULL, NULL, NULL)", (self.holder, lease.node_id, self.seconds)
                ).fetchone()
            except psycopg.Error as error:
                if error.sqlstate == "55000":  # ended, or taken back: no longer ours
                    self.taken_back.set()
                    log(f"the database refused to extend: {error.diag.message_primary}")
                    return
                log(f"cannot extend ({type(error).__name__}); IDs stop at {lease.end_exclusive} unless a retry works")
                self.disconnect()
                self.stopping.wait(1)
                continue
            self.generator.extend_lease(Lease(node_id=lease.node_id, start=start, end_exclusive=end))
            log(f"extended node {lease.node_id}: seconds [{start}, {end})")

    def disconnect(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def close(self) -> None:
        """Stops extending and gives the node back; the database keeps it out of use for the
        seconds this process may have used."""
        self.stopping.set()
        self.keeper.join()
        lease = self.generator.lease()
        try:
            if self.conn is None:
                self.conn = psycopg.connect(self.dsn, **CONNECT_OPTIONS)
            self.conn.execute("CALL randflake_lease_release(%s, %s, NULL)", (self.holder, lease.node_id))
            log(f"released node {lease.node_id}")
        except psycopg.Error as error:
            log(f"could not release node {lease.node_id} ({type(error).__name__}); it ends at {lease.end_exclusive}")
        finally:
            self.disconnect()


def positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError("must be positive")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lease_client.py", description="Make IDs on a node leased from randflake_pg.")
    parser.add_argument("--dsn", required=True, help="libpq connection string to a server, in randflake.database")
    parser.add_argument("--holder", required=True, help="this process's name, unique within its role")
    parser.add_argument("--seconds", type=positive(int), default=600, help="lease length (default 600)")
    parser.add_argument("--rate", type=positive(float), default=100, help="IDs per second to print (default 100)")
    parser.add_argument("--duration", type=positive(float), help="stop after this many seconds (default: never)")
    arguments = parser.parse_args(argv)
    try:
        secret = load_secret()
    except InputError as error:
        print(f"lease_client: {error}", file=sys.stderr)
        return 2

    stop = threading.Event()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signal_number, lambda *_: stop.set())
    try:
        ids = LeasedIds(arguments.dsn, arguments.holder, arguments.seconds, secret)
    except (psycopg.Error, LeaseLost) as error:
        print(f"lease_client: no lease: {error}", file=sys.stderr)
        return 1
    deadline = time.monotonic() + arguments.duration if arguments.duration else None
    try:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            print(ids.next_id(), flush=True)
            stop.wait(1 / arguments.rate)
    except LeaseLost as lost:
        log(f"stopped issuing: {lost}")
        return 3
    finally:
        ids.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
