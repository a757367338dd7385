"""An application lease reaches its client only once its commit is durable: a failover cannot
take back a window a client was given.

Proven on real servers with real streaming replication: a server (range mode, an application
pool of one node, so that every acquire picks the same node) with a synchronous standby that
stops confirming; a client's acquire waits in its commit; the wait is cancelled, as poolers and
drivers' time-outs do (pg_cancel_backend). PostgreSQL then commits locally, with a WARNING; the
client must get an ERROR, never the lease. The standby, which never received that commit, is
promoted while the old primary still runs, and clients acquire there: no window returned to any client overlaps another.

The standby stops confirming because the primary's WAL sender is stopped (SIGSTOP): then the
commit never reaches the standby. Stopping the standby's WAL receiver instead would leave the
commit in its socket's receive buffer, which it reads once it runs again, and whether the
promoted standby has the commit would be a race.
"""

from __future__ import annotations

import os
import signal
import threading

import psycopg

from conftest import Cluster, wait_for
from test_replica import make_standby

STANDBY_NAME = "randflake_standby"
NODE = 1000
SETTINGS = (
    "randflake.node_id_min = 0",
    "randflake.node_id_max = 99",
    f"randflake.app_node_id_min = {NODE}",
    f"randflake.app_node_id_max = {NODE}",
    f"synchronous_standby_names = '{STANDBY_NAME}'",
)
ACQUIRE = "CALL randflake_lease_acquire(%s, %s, NULL, NULL, NULL)"


class Acquirer(threading.Thread):
    """A client's acquire, in a session of its own: what it returned, or the error it got."""

    def __init__(self, conn: psycopg.Connection, holder: str):
        super().__init__(daemon=True)
        self.conn, self.holder = conn, holder
        self.window: tuple[int, int, int] | None = None
        self.error: psycopg.Error | None = None

    def run(self) -> None:
        try:
            self.window = self.conn.execute(ACQUIRE, (self.holder, 600)).fetchone()
        except psycopg.Error as error:
            self.error = error


def admin(cluster: Cluster) -> psycopg.Connection:
    """A superuser session whose own commits do not wait for the standby."""
    return cluster.connect(options="-c synchronous_commit=local")


def wal_senders(primary: Cluster) -> list[int]:
    with admin(primary) as conn:
        return [pid for (pid,) in conn.execute("SELECT pid FROM pg_stat_replication").fetchall()]


def overlapping(windows: list[tuple[int, int, int]]) -> list[tuple]:
    """Pairs of windows of one node whose seconds overlap."""
    ordered = sorted(windows, key=lambda window: (window[0], window[1]))
    return [(a, b) for a, b in zip(ordered, ordered[1:]) if a[0] == b[0] and b[1] < a[2]]


def test_an_acquire_whose_wait_for_the_standby_is_cancelled_returns_nothing_a_failover_could_undo(make_cluster):
    primary = make_cluster(*SETTINGS)
    primary.start()
    with admin(primary) as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    standby = make_standby(make_cluster, primary, f"cluster_name = '{STANDBY_NAME}'")
    standby.start()
    with admin(primary) as conn:
        wait_for(
            lambda: conn.execute(
                "SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = %s", (STANDBY_NAME,)
            ).fetchone(),
            30,
            "the standby to replicate synchronously",
        )
    returned: list[tuple[int, int, int]] = []
    with primary.connect() as conn:
        first = conn.execute(ACQUIRE, ("before", 2)).fetchone()
        returned.append(first)
    # The first lease, confirmed by the standby, has ended: the node is free again.
    wait_for(lambda: server_second(primary) > first[2], 10, "the first lease to end")
    senders = wal_senders(primary)
    assert senders, "no WAL sender"
    for pid in senders:
        os.kill(pid, signal.SIGSTOP)
    try:
        with primary.connect() as client, admin(primary) as watcher:
            acquirer = Acquirer(client, "cancelled")
            acquirer.start()
            pid = client.info.backend_pid
            waiting = "SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = %s"
            wait_for(lambda: watcher.execute(waiting, (pid,)).fetchone()[0], 10, "the acquire to wait for the standby")
            watcher.execute("SELECT pg_cancel_backend(%s)", (pid,))
            acquirer.join(10)
            assert not acquirer.is_alive()
            if acquirer.window is not None:
                returned.append(acquirer.window)
            # The commit was made locally: its row is here, keeping the node from others.
            assert watcher.execute(
                "SELECT count(*) FROM randflake.node_leases WHERE holder = 'app/postgres/cancelled'"
            ).fetchone() == (1,)
        assert acquirer.window is None, f"the client was returned a lease no standby confirmed: {acquirer.window}"
        assert acquirer.error is not None and acquirer.error.sqlstate == "40003", acquirer.error
        assert "not returned" in acquirer.error.diag.message_primary
        assert "Do not issue IDs with this node" in acquirer.error.diag.message_hint
        # The failover, while the old primary still runs: the standby, which never got the
        # cancelled commit, becomes the primary, with no synchronous standby of its own.
        standby.configure("synchronous_standby_names = ''")
        with standby.connect() as conn:
            conn.execute("SELECT pg_reload_conf()")
            assert conn.execute("SELECT pg_promote(wait => true, wait_seconds => 60)").fetchone() == (True,)
            assert conn.execute(
                "SELECT count(*) FROM randflake.node_leases WHERE holder = 'app/postgres/cancelled'"
            ).fetchone() == (0,), "the promoted standby has the commit after all: the test proves nothing"
    finally:
        # A stopped process ends only by SIGKILL; the old primary is then stopped for good.
        for pid in senders:
            os.kill(pid, signal.SIGKILL)
        primary.stop("immediate")
    with standby.connect() as conn:
        after = wait_for(lambda: try_acquire(conn, "after-failover"), 30, "a lease on the promoted standby")
        returned.append(after)
    assert all(node == NODE for node, _, _ in returned), returned
    assert overlapping(returned) == [], f"windows returned to clients overlap: {returned}"


def server_second(cluster: Cluster) -> int:
    with admin(cluster) as conn:
        return conn.execute("SELECT extract(epoch FROM clock_timestamp())::bigint").fetchone()[0]


def try_acquire(conn: psycopg.Connection, holder: str) -> tuple[int, int, int] | None:
    """A lease, or None while the server has none to give yet (its keeper starting, the node
    still leased)."""
    try:
        return conn.execute(ACQUIRE, (holder, 600)).fetchone()
    except psycopg.Error as error:
        assert error.sqlstate in ("53400", "55000"), error
        return None
