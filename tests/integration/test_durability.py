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
  keeper's reason, and IDs flow again by themselves once the standby answers;
* the same when another session cancels the keeper's wait (pg_cancel_backend), before its own
  deadline would;
* a fleet (issue 28, 8b): the coordinator's synchronous standby stops confirming, the members'
  role cancels every coordinator backend waiting for it, so each member's COMMIT returns with
  nothing but a WARNING; then the standby is promoted and the members pointed at it. Under load
  throughout, no ID is issued by both members, and each reported its commits unconfirmed. With
  the keeper's rule switched off (a build with randflake/fault-grant-uncertain-commits) the same
  test finds thousands of IDs issued by both;
* a member set up without the coordinator's commit evidence refuses the lease table, naming it;
* the evidence covers WAL that no commit flushed (an idle server's last records).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import psycopg

from lib.cluster import Cluster, needs_postgres_fdw, sql_error, status, wait_for, wait_ticks
from lib.fleet import coordinator_with_member, ids_with_parts, join_fleet, member_settings
from lib.replicas import make_standby, promote

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
    """Every call, one after each of a few keeper ticks, is refused with the keeper's reason, and
    no lease row exists."""
    for _ in range(attempts):
        error = sql_error(conn, "SELECT randflake_next()")
        assert error.sqlstate == "55000", error
        assert "holds no node lease yet" in error.diag.message_primary, error.diag.message_primary
        assert "synchronous standbys" in error.diag.message_primary, error.diag.message_primary
        wait_ticks(conn, 1)  # the keeper tries again before the next call
    state = status(conn)["state"]
    assert state.startswith("failing:") and "synchronous standbys" in state, state


def test_the_commit_evidence_covers_wal_that_no_commit_flushed(make_cluster):
    """WAL inserted after the last commit of an idle server (the running transactions the
    background writer logs for standbys; here a non-transactional logical message, which
    flushes nothing) lies on a page the WAL writer leaves unflushed. The evidence a keeper reads
    after its commit flushes through it, so that durable_lsn reaches insert_lsn: read without
    that flush, durable_lsn stayed behind until some later commit, and the keeper, finding its
    commit not known durable, refused the tick. No keeper runs here (node_source off), so no
    commit of its flushes the WAL in between."""
    cluster = make_cluster("randflake.node_source = 'off'")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        for attempt in range(10):
            message = conn.execute("SELECT pg_logical_emit_message(false, 'randflake-test', 'unflushed')::text").fetchone()[0]
            covers, durable = conn.execute(
                "SELECT insert_lsn >= %s::pg_lsn, durable_lsn >= insert_lsn FROM randflake.commit_evidence", (message,)
            ).fetchone()
            assert covers, f"attempt {attempt}: the insert position is before the message at {message}"
            assert durable, f"attempt {attempt}: the evidence shows the WAL up to the message at {message} not flushed"


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


def issuing_synchronous_pair(make_cluster):
    """A range-mode primary with the extension, whose commits wait for one streaming standby, once
    it issues."""
    primary = make_cluster(*SYNCHRONOUS)
    primary.start()
    with admin(primary) as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    standby = attach_standby(make_cluster, primary)
    wait_for(lambda: next_id(primary), 30, "IDs with the synchronous standby attached")
    return primary, standby


def test_a_renewal_whose_wait_for_the_standby_is_cut_short_is_not_used(make_cluster):
    primary, standby = issuing_synchronous_pair(make_cluster)
    stopped = standby.processes()
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        with primary.connect() as conn:
            # A renewal confirmed before the stop may still be landing: read once the tick under
            # way has ended.
            wait_ticks(conn, 1)
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


# --- A wait for the standby cancelled by someone else -----------------------------------------
#
# PostgreSQL answers a cancelled wait for synchronous replication with a WARNING and a commit that
# stands locally only. Whoever cancels it (a DBA clearing "stuck" sessions, a pooler, a driver's
# time-out), the keeper must not take the commit as durable: only what the server holding the
# lease table shows afterwards counts.

MEMBERS_ROLE = "randflake_fleet"
# Two blocks of one node for two members: a member whose lease is cut short can only move to the
# other's node, where a renewal the failover lost would make it issue the other's IDs again.
TWO_BLOCKS = ("randflake.node_id_min = 0", "randflake.node_id_max = 1", "randflake.fleet_block_size = 1")


def freeze_walreceiver(standby: Cluster) -> int:
    """Stops the standby's walreceiver with SIGSTOP: it neither receives, flushes nor confirms
    any more WAL, while its primary still counts it as a connected synchronous standby."""
    with standby.connect() as conn:
        pid = wait_for(lambda: conn.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone(), 30, "the walreceiver")[0]
    os.kill(pid, signal.SIGSTOP)
    return pid


class SyncRepCanceller:
    """A thread that, as `user`, cancels every backend of `cluster` waiting in SyncRep, the moment
    it sees one (each look is a query; it polls every 20 ms, well inside a keeper's deadline)."""

    def __init__(self, cluster: Cluster, user: str):
        self.cluster, self.user = cluster, user
        self.cancelled = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SyncRepCanceller:
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        self.thread.join(timeout=30)

    def _run(self) -> None:
        with self.cluster.connect(user=self.user) as conn:
            while not self.stop.wait(0.02):
                self.cancelled += conn.execute(
                    "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                ).fetchone()[0]


def test_a_keepers_commit_whose_wait_another_session_cancels_is_not_used(make_cluster):
    primary, standby = issuing_synchronous_pair(make_cluster)
    walreceiver = freeze_walreceiver(standby)
    try:
        with SyncRepCanceller(primary, "postgres") as canceller, primary.connect() as conn:
            # A renewal confirmed before the freeze may still be landing: read once the tick
            # under way has ended.
            wait_ticks(conn, 1)
            confirmed = status(conn)["issuable_through"]
            wait_for(lambda: next_id(primary) is None, 30, "the lease to run out without the standby")
            assert canceller.cancelled > 0, "no commit of the keeper waited for the standby"
            assert status(conn)["issuable_through"] == confirmed, "a renewal whose wait was cancelled was used"
            state = status(conn)["state"]
            assert "known durable" in state, state
    finally:
        os.kill(walreceiver, signal.SIGCONT)
    wait_for(lambda: next_id(primary), 30, "IDs once the standby answers again")


def make_coordinator_with_standby(make_cluster) -> tuple[Cluster, Cluster]:
    """A coordinator whose lease commits wait for a synchronous standby, and the standby, which
    once promoted waits for none (as pg_auto_failover leaves a primary whose peer is gone). The
    members reach it as an ordinary role with the rights docs/fleets-and-replicas.md lists."""
    coordinator = make_cluster("randflake.node_source = 'off'", f"synchronous_standby_names = '{STANDBY_NAME}'", *TWO_BLOCKS)
    coordinator.start()
    with admin(coordinator) as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute(f"CREATE ROLE {MEMBERS_ROLE} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA randflake TO {MEMBERS_ROLE}")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON randflake.node_leases TO {MEMBERS_ROLE}")
        conn.execute(f"GRANT SELECT ON randflake.commit_evidence TO {MEMBERS_ROLE}")
        conn.execute(f"GRANT EXECUTE ON FUNCTION randflake.wal_durability() TO {MEMBERS_ROLE}")
    standby = make_standby(make_cluster, coordinator, f"cluster_name = '{STANDBY_NAME}'", "synchronous_standby_names = ''")
    standby.start()
    return coordinator, standby


class Load:
    """Inserts IDs into a member's table from a thread until stopped; a call refused for want of
    a lease (55000) is retried after a short pause, anything else is kept for the test."""

    def __init__(self, member: Cluster):
        self.member = member
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with self.member.connect() as conn:
            while not self.stop.is_set():
                try:
                    conn.execute("INSERT INTO made SELECT FROM generate_series(1, 200)")
                except psycopg.Error as error:
                    if error.sqlstate != "55000":
                        self.errors.append(str(error))
                        return
                    # No lease now: the keeper is waiting for its commit to be confirmed.
                    self.stop.wait(0.05)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


@needs_postgres_fdw
def test_fleet_members_use_no_renewal_a_cancel_on_the_coordinator_left_local_through_a_failover(make_cluster):
    """Issue 28, 8b: the coordinator's standby stops confirming, the members' role cancels the
    coordinator's backends waiting for it, the standby is promoted: no ID is issued by both."""
    coordinator, standby = make_coordinator_with_standby(make_cluster)
    members = [make_cluster(*member_settings(), *TWO_BLOCKS) for _ in range(2)]
    (members[1].dir / "randflake.key").write_text(members[0].key_hex)
    for member in members:
        member.start()
        join_fleet(member, coordinator, remote_user=MEMBERS_ROLE)
    for member in members:
        wait_for(lambda: next_id(member), 30, "the member's first ID")
    loads = [Load(member) for member in members]
    walreceiver = freeze_walreceiver(standby)
    unconfirmed_reported = set()
    with SyncRepCanceller(coordinator, MEMBERS_ROLE) as canceller:
        # Renewals confirmed before the freeze may still be landing: read each once its tick
        # under way has ended.
        confirmed = []
        for member in members:
            with member.connect() as conn:
                wait_ticks(conn, 1)
                confirmed.append(status(conn)["issuable_through"])

        # Whatever the members do, the leases the standby has end meanwhile; seconds after them
        # are the ones a failover could hand out twice.
        wait_for(lambda: time.time() > max(confirmed) + 2, 60, "the leases the standby has to end")
        for index, member in enumerate(members):
            with member.connect() as conn:
                if "known durable" in status(conn)["state"]:
                    unconfirmed_reported.add(index)
        assert canceller.cancelled > 0, "no member's commit waited for the standby"
    # The failover: the primary dies, the standby is promoted with only what it flushed before
    # the freeze (killing the frozen walreceiver discards what reached its socket since; its
    # postmaster restarts it in recovery), and the members are pointed at it.
    coordinator.stop("immediate")
    os.kill(walreceiver, signal.SIGKILL)
    wait_for(lambda: "all server processes terminated; reinitializing" in standby.log(), 30, "the standby to restart")
    wait_for(lambda: accepts_connections(standby), 60, "the standby back in recovery")
    promote(standby)
    for member in members:
        with member.connect() as conn:
            conn.execute(f"ALTER SERVER randflake_coordinator OPTIONS (SET port '{standby.port}')")
    failover_done = time.time()
    for member in members:
        with member.connect() as conn:
            wait_for(lambda: status(conn)["state"] == "active", 60, "the member leasing from the promoted standby")
            wait_for(lambda: conn.execute("SELECT count(*) FROM made WHERE at > to_timestamp(%s + 2)",
                                          (failover_done,)).fetchone()[0] > 0,
                     30, "IDs under the lease from the promoted standby")
    for load in loads:
        load.finish()
        assert not load.errors, load.errors
    made = [set(ids_with_parts(member)) for member in members]
    ids = [{row[0] for row in rows} for rows in made]
    pairs = [{row[1:] for row in rows} for rows in made]
    assert not ids[0] & ids[1], f"{len(ids[0] & ids[1])} IDs issued by both members"
    assert not pairs[0] & pairs[1], f"{len(pairs[0] & pairs[1])} (second, node) pairs used by both members"
    assert "canceling wait for synchronous replication" in coordinator.log()
    assert unconfirmed_reported == {0, 1}, "a member did not report its commits unconfirmed"


def accepts_connections(cluster: Cluster) -> bool:
    """Whether the server accepts connections."""
    try:
        with cluster.connect() as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


@needs_postgres_fdw
def test_a_member_without_the_commit_evidence_writes_no_lease(make_cluster):
    """A member set up as before 0.6.0 (only node_leases imported) could confirm no commit: its
    keeper refuses the lease table, says what to import, and writes nothing there."""
    coordinator, member = coordinator_with_member(make_cluster)
    with member.connect() as conn:
        wait_for(lambda: status(conn)["state"] == "active", 30, "the member's first lease")
        conn.execute("DROP FOREIGN TABLE randflake_fleet.commit_evidence")

        def refusal() -> str | None:
            state = status(conn)["state"]
            return state if "commit_evidence is missing" in state else None

        state = wait_for(refusal, 30, "the keeper to refuse the lease table without its evidence")
        assert "refusing the lease table: randflake_fleet.commit_evidence is missing" in state, state
        assert "import it from the coordinator beside the lease table" in state, state
    with coordinator.connect() as conn:
        leases = conn.execute("SELECT count(*), max(lease_end) FROM randflake.node_leases").fetchone()
    with member.connect() as conn:
        # Nothing is renewed any more: the row stays as it was once the keeper refused.
        wait_for(lambda: status(conn)["issuable_through"] <= time.time(), 30, "the member's lease to run out")
    with coordinator.connect() as conn:
        assert conn.execute("SELECT count(*), max(lease_end) FROM randflake.node_leases").fetchone() == leases
