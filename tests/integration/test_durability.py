"""Nothing is used before it is durable: a lease, a renewal or a high-water mark reaches the
backends only once its commit is known durable by the standard its server is configured for.

Proven on real servers with real streaming replication:
* a server (range mode) whose synchronous_standby_names names a standby that is not there issues
  not a single ID, refuses with 55000, says why in randflake_status(), writes no lease, and
  starts issuing by itself once a real synchronous standby attaches;
* the same for a fleet member whose coordinator is in that state;
* with a synchronous standby that is connected but stops answering, the commit of a renewal
  waits until the keeper's deadline cuts the wait short (PostgreSQL then commits locally with a
  WARNING): that renewal is not used, the published lease runs out, calls are refused with the
  keeper's reason, and IDs flow again by themselves once the standby answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from conftest import Cluster, needs_postgres_fdw, sql_error, status, wait_for
from test_fleet import join_fleet, member_settings
from test_replica import make_standby

STANDBY_NAME = "randflake_standby"
# Lease writes wait for this standby. A short lease keeps the keeper's deadline (a sixth of it)
# at 2 s and the high-water mark's margin at 10 s.
SYNCHRONOUS = (f"synchronous_standby_names = '{STANDBY_NAME}'", "randflake.lease_seconds = 12")


def admin(cluster: Cluster):
    """A superuser session whose own commits do not wait for the missing standby."""
    return cluster.connect(options="-c synchronous_commit=local")


def attach_standby(make_cluster, primary: Cluster) -> Cluster:
    """A streaming standby under the name synchronous_standby_names gives (cluster_name is the
    application_name a walreceiver reports)."""
    standby = make_standby(make_cluster, primary, f"cluster_name = '{STANDBY_NAME}'")
    standby.start()
    return standby


def next_id(cluster: Cluster) -> int | None:
    """An ID, or None when the server refuses with 55000."""
    with cluster.connect() as conn:
        try:
            return conn.execute("SELECT randflake_next()").fetchone()[0]
        except Exception as error:  # noqa: BLE001 - the refusal is checked by the callers
            assert getattr(error, "sqlstate", None) == "55000", error
            return None


def assert_refused_for_want_of_a_standby(conn, attempts: int = 4) -> None:
    """Every call in a few seconds is refused, with the keeper's reason, and no lease row
    exists."""
    for _ in range(attempts):
        error = sql_error(conn, "SELECT randflake_next()")
        assert error.sqlstate == "55000", error
        assert "holds no node lease yet" in error.diag.message_primary, error.diag.message_primary
        assert "synchronous standbys" in error.diag.message_primary, error.diag.message_primary
        time.sleep(0.5)
    state = status(conn)["state"]
    assert state.startswith("failing:") and "synchronous standbys" in state, state


def test_a_server_waiting_for_an_absent_synchronous_standby_issues_nothing_until_one_attaches(make_cluster):
    primary = make_cluster(*SYNCHRONOUS)
    primary.start()
    with admin(primary) as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        assert_refused_for_want_of_a_standby(conn)
        assert conn.execute("SELECT count(*) FROM randflake.node_leases").fetchone() == (0,)
    attach_standby(make_cluster, primary)
    first = wait_for(lambda: next_id(primary), 30, "IDs once the synchronous standby attached")
    with primary.connect() as conn:
        assert status(conn)["state"] == "active"
        assert conn.execute("SELECT count(DISTINCT randflake_next()) FROM generate_series(1, 1000)").fetchone() == (1000,)
    assert first is not None


@needs_postgres_fdw
def test_a_fleet_member_of_a_coordinator_waiting_for_an_absent_standby_issues_nothing(make_cluster):
    coordinator = make_cluster("randflake.node_source = 'off'", f"synchronous_standby_names = '{STANDBY_NAME}'")
    coordinator.start()
    with admin(coordinator) as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    member = make_cluster(*member_settings())
    member.start()
    join_fleet(member, coordinator)
    with member.connect() as conn:
        assert_refused_for_want_of_a_standby(conn)
    with admin(coordinator) as conn:
        assert conn.execute("SELECT count(*) FROM randflake.node_leases").fetchone() == (0,)
    attach_standby(make_cluster, coordinator)
    wait_for(lambda: next_id(member), 30, "the member's IDs once the coordinator's standby attached")
    with member.connect() as conn:
        assert status(conn)["state"] == "active"


def processes_of(cluster: Cluster) -> list[int]:
    """The postmaster of a cluster and every process it started."""
    postmaster = int((cluster.dir / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(postmaster)], capture_output=True, text=True).stdout
    return [postmaster, *(int(pid) for pid in children.split())]


def test_a_renewal_whose_wait_for_the_standby_is_cut_short_is_not_used(make_cluster):
    primary = make_cluster(*SYNCHRONOUS)
    primary.start()
    with admin(primary) as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    standby = attach_standby(make_cluster, primary)
    wait_for(lambda: next_id(primary), 30, "IDs with the synchronous standby attached")
    stopped = processes_of(standby)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        with primary.connect() as conn:
            # A renewal confirmed before the stop may still be landing: read after a moment.
            time.sleep(0.3)
            confirmed = status(conn)["issuable_through"]
            # The keeper tries to renew every few seconds; its commits wait for the standby
            # until its deadline cuts the wait short. None of them may move the lease on.
            refused = wait_for(lambda: next_id(primary) is None, 30, "the lease to run out without the standby")
            assert refused
            assert status(conn)["issuable_through"] == confirmed, "a renewal the standby never confirmed was used"
            state = status(conn)["state"]
            assert state.startswith("lease lapsed: keeper failing:") and "known durable" in state, state
            error = sql_error(conn, "SELECT randflake_next()")
            assert error.sqlstate == "55000" and "covers IDs only through second" in error.diag.message_primary
        assert "canceling wait for synchronous replication" in primary.log(), "the keeper's deadline never cut a wait short"
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    wait_for(lambda: next_id(primary), 30, "IDs once the standby answers again")
    with primary.connect() as conn:
        assert status(conn)["issuable_through"] > confirmed
