"""An application lease reaches its client only once its commit is durable: a failover cannot
take back a window a client was given.

Proven on real servers with real streaming replication: a server (range mode, an application
pool of one node, so that every acquire picks the same node) with a synchronous standby that
stops confirming; a client's acquire waits in its commit; the wait is cancelled, as poolers and
drivers' time-outs do (pg_cancel_backend). PostgreSQL then commits locally, with a WARNING; the
client must get an ERROR, never the lease. The standby, which never received that commit, is
promoted while the old primary still runs, and clients acquire there: no window returned to any
client overlaps another. Extend and release are cancelled the same way.

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

from lib.cluster import Cluster, wait_for
from lib.replicas import make_standby

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


def replicated_pair(make_cluster) -> tuple[Cluster, Cluster]:
    """A primary with the extension and a synchronous standby replicating it."""
    primary = make_cluster(*SETTINGS)
    primary.start()
    with admin(primary) as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    standby = make_standby(make_cluster, primary, f"cluster_name = '{STANDBY_NAME}'")
    standby.start()
    with admin(primary) as conn:
        # Synchronous, and with a flush position: until its first reply, PostgreSQL does not count
        # a connected standby as one that can confirm a commit.
        wait_for(
            lambda: conn.execute(
                """SELECT count(*) > 0 FROM pg_stat_replication
                    WHERE application_name = %s AND sync_state = 'sync' AND flush_lsn IS NOT NULL""",
                (STANDBY_NAME,),
            ).fetchone()[0],
            30,
            "the standby to replicate synchronously",
        )
    return primary, standby


def cancelled_in_commit(primary: Cluster, statement: str, params: tuple) -> psycopg.Error:
    """Runs `statement` in a client session while the standby confirms nothing, cancels it once
    it waits for the standby in its commit (as poolers and drivers' time-outs do), and returns
    the error the client got: the client must never get the row."""
    outcome: dict = {}

    def run(conn: psycopg.Connection) -> None:
        try:
            outcome["row"] = conn.execute(statement, params).fetchone()
        except psycopg.Error as error:
            outcome["error"] = error

    with primary.connect() as client, admin(primary) as watcher:
        caller = threading.Thread(target=run, args=(client,), daemon=True)
        caller.start()
        waiting = "SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = %s"
        pid = client.info.backend_pid
        wait_for(lambda: watcher.execute(waiting, (pid,)).fetchone()[0], 10, "the call to wait for the standby")
        watcher.execute("SELECT pg_cancel_backend(%s)", (pid,))
        caller.join(10)
        assert not caller.is_alive()
    assert "row" not in outcome, f"the client was returned what no standby confirmed: {outcome['row']}"
    return outcome["error"]


def test_an_acquire_whose_wait_for_the_standby_is_cancelled_returns_nothing_a_failover_could_undo(make_cluster):
    primary, standby = replicated_pair(make_cluster)
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
        error = cancelled_in_commit(primary, ACQUIRE, ("cancelled", 600))
        assert error.sqlstate == "40003", error
        assert "not returned" in error.diag.message_primary
        assert "Do not issue IDs with this node" in error.diag.message_hint
        # The commit was made locally: its row is here, keeping the node from others.
        with admin(primary) as conn:
            assert conn.execute(
                "SELECT count(*) FROM randflake.node_leases WHERE holder = 'app/postgres/cancelled'"
            ).fetchone() == (1,)
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


def test_an_extend_or_release_whose_wait_for_the_standby_is_cancelled_returns_nothing(make_cluster):
    """Extend and release return their result only once durable too: cancelled in their commit's
    wait for the standby, each fails with 40003 and a HINT saying what the application does."""
    primary, _ = replicated_pair(make_cluster)
    with primary.connect() as conn:
        node, start, end = conn.execute(ACQUIRE, ("held", 600)).fetchone()
    senders = wal_senders(primary)
    for pid in senders:
        os.kill(pid, signal.SIGSTOP)
    try:
        extend = cancelled_in_commit(
            primary, "CALL randflake_lease_extend(%s, %s, 1200, NULL, NULL, NULL)", ("held", node)
        )
        assert extend.sqlstate == "40003", extend
        assert extend.diag.message_primary.startswith(f"randflake_lease_extend() committed its write of node {node}")
        assert "Keep to the window the lease had before this call" in extend.diag.message_hint
        release = cancelled_in_commit(primary, "CALL randflake_lease_release(%s, %s, NULL)", ("held", node))
        assert release.sqlstate == "40003", release
        assert "stop issuing IDs with this node anyway" in release.diag.message_hint
    finally:
        for pid in senders:
            os.kill(pid, signal.SIGCONT)
    assert end == start + 600
