"""The lease keeper under hostile conditions: planted lease tables, termination, a dropped
database, a locked lease table, a stopped coordinator, a coordinator that loses commits."""

from __future__ import annotations

import os
import signal
import time

import psycopg

from lib.cluster import Cluster, needs_postgres_fdw, status, wait_for, wait_ticks
from lib.fleet import LEASE_SECONDS, POOL, coordinator_with_member, join_fleet, lease_of, member_settings
from lib.inserts import Inserter, assert_unique, made_table

LEASE_COLUMNS = """first_node int, last_node int, holder text, server_name text, lease_start bigint,
                   lease_end bigint, used_through bigint, renewed_at timestamptz"""


def plant_escalation_trigger(conn: psycopg.Connection, table: str) -> None:
    """What an attacker owning `table` adds: a trigger that makes its role a superuser when a
    superuser writes or reads through it, and records that it ran."""
    conn.execute("CREATE TABLE IF NOT EXISTS fired (at timestamptz DEFAULT now())")
    conn.execute(
        """CREATE FUNCTION escalate() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
               INSERT INTO public.fired DEFAULT VALUES;
               ALTER ROLE mallory SUPERUSER;
               RETURN NULL;
           END $$"""
    )
    conn.execute(f"CREATE TRIGGER escalate AFTER INSERT OR UPDATE OR DELETE ON {table} FOR EACH STATEMENT EXECUTE FUNCTION escalate()")


def is_superuser(conn: psycopg.Connection, role: str) -> bool:
    return conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]


# --- 1. A lease table an ordinary role could have made is never used -------------------------


def server_with_app_database(make_cluster, owner: str) -> Cluster:
    """A server whose keeper works in database `app`, owned by `owner`, with role mallory; the
    extension is in `postgres`, for randflake_status()."""
    cluster = make_cluster("randflake.database = 'app'")
    cluster.start()
    with cluster.connect() as admin:
        admin.execute("CREATE EXTENSION randflake_pg")
        admin.execute("CREATE ROLE mallory LOGIN")
        admin.execute(f"CREATE DATABASE app OWNER {owner}")
    return cluster


def test_a_planted_lease_table_never_runs_as_superuser(make_cluster):
    cluster = server_with_app_database(make_cluster, owner="mallory")
    with cluster.connect("app", user="mallory") as conn:
        conn.execute("CREATE SCHEMA randflake")
        conn.execute(f"CREATE TABLE randflake.node_leases ({LEASE_COLUMNS})")
        plant_escalation_trigger(conn, "randflake.node_leases")

    with cluster.connect() as admin:
        refused = wait_for(
            lambda: "refusing" in status(admin)["state"] and status(admin),
            timeout=15,
            what="the keeper to refuse the planted table",
        )
        assert 'owned by role "mallory"' in refused["state"] or "not a member" in refused["state"]
        wait_ticks(admin, 10)  # several more ticks: the keeper must keep its hands off
        assert not is_superuser(admin, "mallory")
        error = admin.execute("SELECT 1").fetchone()  # the server is fine
        assert error == (1,)
    log = cluster.log()
    assert "refusing the lease table: randflake.node_leases is not the lease table created by CREATE EXTENSION" in log
    assert log.count("refusing the lease table") == 1, "the refusal is logged once, not every second"
    with cluster.connect("app", user="mallory") as conn:
        assert conn.execute("SELECT count(*) FROM fired").fetchone()[0] == 0, "the planted trigger ran"

    # The normal path: the planted objects gone, the extension created by a superuser.
    with cluster.connect("app", user="mallory") as conn:
        conn.execute("DROP SCHEMA randflake CASCADE")
    with cluster.connect("app") as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        wait_for(lambda: status(conn)["state"] == "active", 15, "a lease in the real table")
        assert conn.execute("SELECT count(DISTINCT randflake_next()) FROM generate_series(1, 1000)").fetchone()[0] == 1000


def test_a_table_an_ordinary_role_made_in_a_superusers_schema_is_refused(make_cluster):
    """Even a superuser-owned schema does not make a relation trustworthy: only the extension's
    own member table is."""
    cluster = server_with_app_database(make_cluster, owner="postgres")
    with cluster.connect("app") as admin:
        admin.execute("CREATE SCHEMA randflake")
        admin.execute("GRANT USAGE, CREATE ON SCHEMA randflake, public TO mallory")
    with cluster.connect("app", user="mallory") as conn:
        conn.execute(f"CREATE TABLE randflake.node_leases ({LEASE_COLUMNS})")
        plant_escalation_trigger(conn, "randflake.node_leases")
    with cluster.connect() as admin:
        state = wait_for(lambda: "refusing" in status(admin)["state"] and status(admin)["state"], 15, "a refusal")
        assert "not the lease table created by CREATE EXTENSION randflake_pg" in state
        wait_ticks(admin, 10)  # more ticks that refuse the table, and keep their hands off it
        assert not is_superuser(admin, "mallory")


def test_a_fleet_lease_table_an_ordinary_role_controls_is_refused(make_cluster):
    cluster = make_cluster(
        "randflake.node_source = 'fleet'",
        "randflake.fleet_lease_table = 'fleet.node_leases'",
        "randflake.fleet_block_size = 10",
    )
    cluster.start()
    with cluster.connect() as admin:
        admin.execute("CREATE ROLE mallory LOGIN")
        admin.execute("GRANT CREATE ON DATABASE postgres TO mallory")
        admin.execute("GRANT CREATE ON SCHEMA public TO mallory")
        admin.execute("CREATE EXTENSION randflake_pg")
    with cluster.connect(user="mallory") as conn:
        conn.execute("CREATE SCHEMA fleet")
        conn.execute(f"CREATE TABLE fleet.node_leases ({LEASE_COLUMNS})")
        plant_escalation_trigger(conn, "fleet.node_leases")
    with cluster.connect() as admin:
        state = wait_for(lambda: "refusing" in status(admin)["state"] and status(admin)["state"], 15, "a refusal")
        assert "neither randflake_pg's own lease table nor a foreign table" in state
        error = None
        try:
            admin.execute("SELECT randflake_next()")
        except psycopg.Error as caught:
            error = caught
        assert error is not None and error.sqlstate == "55000"
        assert "refusing the lease table" in error.diag.message_primary
        assert "no ordinary role" in error.diag.message_hint
        wait_ticks(admin, 10)  # more ticks that refuse the table, and keep their hands off it
        assert not is_superuser(admin, "mallory")
        assert admin.execute("SELECT count(*) FROM fleet.node_leases").fetchone()[0] == 0
    assert "refusing the lease table: fleet.node_leases is neither" in cluster.log()


def test_database_settings_of_an_ordinary_owner_do_not_steer_the_keeper(make_cluster):
    """The owner of the keeper's database may set search_path and timeouts for it; the keeper
    pins its own and keeps leasing."""
    cluster = server_with_app_database(make_cluster, owner="mallory")
    with cluster.connect("app", user="mallory") as conn:
        conn.execute("ALTER DATABASE app SET search_path = mallory, pg_catalog")
        conn.execute("ALTER DATABASE app SET default_transaction_read_only = on")
        conn.execute("ALTER DATABASE app SET lock_timeout = '1h'")
    with cluster.connect("app") as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.execute("CREATE EXTENSION randflake_pg")
        wait_for(lambda: status(conn)["state"] == "active", 15, "a lease despite the database's settings")


def test_the_keeper_can_run_as_a_role_with_only_the_rights_it_needs(make_cluster):
    cluster = make_cluster()
    cluster.start()
    with cluster.connect() as admin:
        admin.execute("CREATE ROLE randflake_keeper LOGIN")
        admin.execute("CREATE EXTENSION randflake_pg")
        admin.execute("GRANT USAGE ON SCHEMA randflake TO randflake_keeper")
        admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON randflake.node_leases TO randflake_keeper")
        admin.execute("GRANT SELECT ON randflake.commit_evidence TO randflake_keeper")
        admin.execute("GRANT EXECUTE ON FUNCTION randflake.wal_durability() TO randflake_keeper")
    cluster.configure("randflake.keeper_role = 'randflake_keeper'")
    cluster.stop()
    cluster.start()
    with cluster.connect() as admin:
        wait_for(lambda: status(admin)["state"] == "active", 15, "a lease taken by the keeper role")
        keeper_user = admin.execute(
            "SELECT a.usename, r.rolsuper FROM pg_stat_activity a JOIN pg_roles r ON r.oid = a.usesysid WHERE a.pid = %s",
            (status(admin)["keeper_pid"],),
        ).fetchone()
        assert keeper_user == ("randflake_keeper", False)
        assert admin.execute("SELECT count(DISTINCT randflake_next()) FROM generate_series(1, 1000)").fetchone()[0] == 1000
    assert 'randflake_pg: node source range, nodes 0..131071, leased in database "postgres" by role "randflake_keeper"' in cluster.log()


# --- 2. A terminated keeper comes back -------------------------------------------------------


def test_a_terminated_keeper_is_back_within_its_restart_interval(cluster):
    made_table(cluster)
    with cluster.connect() as admin, Inserter(cluster) as inserter:
        old_pid = wait_for(lambda: status(admin)["keeper_pid"], 10, "a keeper")
        wait_ticks(admin, 2)  # the first keeper past its start-up, holding and checking its lease
        for _ in range(3):
            assert admin.execute("SELECT pg_terminate_backend(%s)", (old_pid,)).fetchone()[0]
            new_pid = wait_for(
                lambda: (pid := status(admin)["keeper_pid"]) not in (None, old_pid) and pid,
                timeout=5,
                what="the keeper to be back",
            )
            wait_for(lambda: status(admin)["state"] == "active", 5, "the keeper holding the lease again")
            old_pid = new_pid
        before = inserter.count()
        wait_for(lambda: inserter.count() > before + 1000, 10, "inserts after the restarts")
    assert inserter.failures == [] and inserter.refusals == []
    assert assert_unique(cluster) > 1000
    assert "exited with exit code 1" in cluster.log(), "a terminated keeper must exit as failed, to be restarted"


def test_the_keepers_database_dropped_and_created_again(make_cluster):
    cluster = make_cluster("randflake.database = 'app'")
    cluster.start()
    with cluster.connect() as admin:
        admin.execute("CREATE DATABASE app")
    with cluster.connect("app") as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        wait_for(lambda: status(conn)["state"] == "active", 15, "a lease")
    with cluster.connect() as admin:
        admin.execute("CREATE EXTENSION randflake_pg")
        admin.execute("CREATE TABLE made (id bigint PRIMARY KEY DEFAULT randflake_next())")
        admin.execute("INSERT INTO made SELECT FROM generate_series(1, 1000)")
        logged_before = len(cluster.log())
        admin.execute("DROP DATABASE app WITH (FORCE)")
        state = wait_for(
            lambda: 'database "app" (randflake.database) does not exist' in status(admin)["state"]
            and status(admin)["state"],
            timeout=10,
            what="status to name the missing database",
        )
        assert status(admin)["keeper_pid"] is None
        # Not a wait for an event: with no keeper running nothing counts ticks, and the launcher,
        # which looks for the database every keeper tick, counts none.
        time.sleep(3)  # a deliberate hold: many of the launcher's looks for the missing database
        warnings = cluster.log()[logged_before:].count('database "app" (randflake.database) does not exist')
        assert warnings == 1, f"{warnings} warnings while the database was gone: {state}"

        admin.execute("CREATE DATABASE app")
        with cluster.connect("app") as conn:
            conn.execute("CREATE EXTENSION randflake_pg")
        wait_for(lambda: status(admin)["state"] == "active" and status(admin)["keeper_pid"], 15, "the keeper back")
        admin.execute("INSERT INTO made SELECT FROM generate_series(1, 1000)")
    assert assert_unique(cluster) == 2000


# --- 3. Bounded statements: a locked lease table, a stopped coordinator ----------------------


def test_a_locked_lease_table_is_reported_and_survived(cluster):
    made_table(cluster)
    with cluster.connect() as admin:
        wait_for(lambda: status(admin)["state"] == "active", 10, "a lease")
    with Inserter(cluster) as inserter, cluster.connect() as locker, cluster.connect() as admin:
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE randflake.node_leases IN ACCESS EXCLUSIVE MODE")
        locked_at = time.monotonic()
        state = wait_for(
            lambda: status(admin)["state"].startswith("renewal failing") and status(admin)["state"],
            timeout=5,
            what="status to report the failing renewal",
        )
        assert "not granted within 1000 ms" in state
        assert (f"could not check or renew the lease in randflake.node_leases: its lock was not granted within 1000 ms; "
                f"held up by pid {locker.info.backend_pid} (role postgres, application '', idle in transaction) "
                "holds AccessExclusiveLock") in cluster.log()
        assert time.monotonic() - locked_at < 5
        # Held for longer than the high-water mark's lead: generation must stop, not run ahead.
        wait_for(lambda: inserter.refusals, 20, "generation to stop once the high-water mark is reached")
        wait_ticks(admin, 2)  # more ticks that fail on the lock, while generation stays stopped
        locker.execute("ROLLBACK")
        released = inserter.count()
        wait_for(lambda: status(admin)["state"] == "active", 5, "recovery after the lock")
        wait_for(lambda: inserter.count() > released + 1000, 10, "inserts after the lock")
    assert inserter.failures == []
    assert assert_unique(cluster) > 1000


def signal_all(pids: list[int], signal_number: int) -> None:
    """Signals every process still there (a backend may have exited since it was listed)."""
    for pid in pids:
        try:
            os.kill(pid, signal_number)
        except ProcessLookupError:
            pass


@needs_postgres_fdw
def test_a_stopped_coordinator_is_reported_and_never_holds_up_a_fast_shutdown(make_cluster):
    coordinator, member = coordinator_with_member(make_cluster, *POOL)
    lease_of(coordinator, member)
    stopped = coordinator.processes()
    try:
        with Inserter(member) as inserter:
            signal_all(stopped, signal.SIGSTOP)
            with member.connect() as admin:
                state = wait_for(
                    lambda: "failing" in status(admin)["state"] and status(admin)["state"],
                    timeout=LEASE_SECONDS,
                    what="status to report the unreachable coordinator",
                )
            assert "statement timeout" in state or "server closed the connection" in state or "could not" in state, state
        assert "randflake_pg lease keeper: could not check or renew the lease in randflake_fleet.node_leases" in member.log()
        assert inserter.failures == []
        started = time.monotonic()
        member.stop("fast")
        assert time.monotonic() - started < 10, "a fast shutdown waited for the stopped coordinator"
        member.start()
    finally:
        signal_all(stopped, signal.SIGCONT)
    with member.connect() as admin:
        wait_for(lambda: status(admin)["state"] == "active", 30, "recovery once the coordinator runs again")
    with Inserter(member) as inserter:
        wait_for(lambda: inserter.count() > 1000, 10, "inserts after recovery")
    assert inserter.failures == [] and inserter.refusals == []
    assert assert_unique(member) > 1000


@needs_postgres_fdw
def test_a_cancel_sent_to_a_stopped_coordinator_never_outlasts_the_tick(make_cluster):
    """The keeper's query waits on the coordinator for a lock, and the coordinator's postmaster
    stops, so the cancel request postgres_fdw sends on abort is never answered. From PostgreSQL
    17 it sends another after a second, on a connection of its own that may be opened just after
    the keeper's hard deadline dropped the others: that one must not hold the tick for the
    cancel's 30 s either (on 18 it did, in the first round of every run, before the deadline
    repeated). Each round ends one such tick; the bound is the lease's length, the tick's own
    limits are 1.3 s and 2.3 s."""
    coordinator, member = coordinator_with_member(make_cluster, *POOL)
    lease_of(coordinator, member)
    postmaster = coordinator.postmaster_pid()
    with coordinator.connect() as locker, member.connect() as admin:
        for _ in range(3):
            wait_for(lambda: status(admin)["state"] == "active", 2 * LEASE_SECONDS, "a renewed lease")
            locker.execute("BEGIN")
            locker.execute("LOCK TABLE randflake.node_leases IN ACCESS EXCLUSIVE MODE")
            wait_for(
                lambda: locker.execute(
                    """SELECT count(*) FROM pg_locks
                        WHERE relation = 'randflake.node_leases'::regclass AND NOT granted"""
                ).fetchone()[0],
                LEASE_SECONDS,
                "the keeper's query to wait for the lock on the coordinator",
            )
            ticks = status(admin)["keeper_ticks"]
            os.kill(postmaster, signal.SIGSTOP)
            try:
                stopped_at = time.monotonic()
                wait_for(lambda: status(admin)["keeper_ticks"] > ticks, 3 * LEASE_SECONDS, "the waiting tick to end")
                took = time.monotonic() - stopped_at
                state = status(admin)["state"]
            finally:
                os.kill(postmaster, signal.SIGCONT)
            locker.execute("ROLLBACK")
            assert "failing" in state, state
            assert took < LEASE_SECONDS, f"a tick waited {took:.1f} s for a cancel request to a stopped coordinator"
    assert "could not check or renew the lease in randflake_fleet.node_leases" in member.log()


# --- 4. A coordinator that loses recent commits ---------------------------------------------


def triples(member: Cluster) -> set[tuple[int, int, int]]:
    with member.connect() as conn:
        return set(
            conn.execute(
                """SELECT extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
                     FROM made m, randflake_decode(m.id) d"""
            ).fetchall()
        )


@needs_postgres_fdw
def test_a_lease_survives_a_coordinator_that_commits_asynchronously(make_cluster):
    coordinator = make_cluster(
        "randflake.node_source = 'off'",
        "randflake.node_id_min = 0",
        "randflake.node_id_max = 19",
        # Commits reach the WAL only when the WAL writer wakes: an immediate stop loses them.
        "synchronous_commit = off",
        "wal_writer_delay = '10s'",
        "wal_writer_flush_after = 0",
    )
    coordinator.start()
    with coordinator.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("ALTER ROLE postgres SET synchronous_commit = off")
        conn.execute("CHECKPOINT")  # the set-up itself is durable; only what follows is at risk
    first, second = make_cluster(*member_settings()), make_cluster(*member_settings())
    (second.dir / "randflake.key").write_text(first.key_hex)
    first.start()
    join_fleet(first, coordinator)
    lease = lease_of(coordinator, first)
    # Right after the lease: an immediate stop, as a crash or a failover to a lagging standby.
    coordinator.stop("immediate")
    coordinator.start()
    with coordinator.connect() as conn:
        kept = conn.execute(
            "SELECT count(*) FROM randflake.node_leases WHERE first_node = %s AND lease_start = %s", (lease[0], lease[2])
        ).fetchone()[0]
    assert kept == 1, "the coordinator lost a lease its member issues IDs under"

    second.start()
    join_fleet(second, coordinator)
    other = lease_of(coordinator, second)
    assert other[:2] != lease[:2] or other[2] > lease[3], (lease, other)
    with Inserter(first, 3) as one, Inserter(second, 3) as two, first.connect() as a, second.connect() as b:
        for _ in range(2):  # a load period over two renewals of each member's lease
            renewed = [(conn, status(conn)["renewed_at"]) for conn in (a, b)]
            wait_for(
                lambda: all(status(conn)["renewed_at"] != before for conn, before in renewed),
                2 * LEASE_SECONDS,
                "a renewal of each member's lease under load",
            )
    assert one.failures == [] and two.failures == []
    shared = triples(first) & triples(second)
    assert shared == set(), f"{len(shared)} IDs issued by both members"
    assert one.count() > 1000 and two.count() > 1000


@needs_postgres_fdw
def test_a_members_lease_row_gone_from_the_coordinator_is_withdrawn_at_once(make_cluster):
    """The keeper re-reads its own row every tick: a row the coordinator lost (or anyone deleted)
    stops generation under it within a second or two, and the member takes another block at
    once instead of waiting out the old one."""
    coordinator = make_cluster("randflake.node_source = 'off'", "randflake.node_id_min = 0", "randflake.node_id_max = 19")
    coordinator.start()
    with coordinator.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    settings = [setting for setting in member_settings() if "lease_seconds" not in setting]
    member = make_cluster(*settings, "randflake.lease_seconds = 60")
    member.start()
    join_fleet(member, coordinator)
    first_node, _, start, end = lease_of(coordinator, member)
    with coordinator.connect() as conn:
        conn.execute("DELETE FROM randflake.node_leases")
    deleted_at = time.monotonic()
    with member.connect() as admin:
        new = wait_for(
            # The other block, not a later start: on a fast tick the new lease begins in the same second.
            lambda: (row := status(admin))["first_node"] != first_node and row["state"] == "active" and row,
            timeout=5,
            what="a new lease on the other block, active at once",
        )
    assert time.monotonic() - deleted_at < 5
    assert new["lease_start"] < end, "a new block waited out the old block's lease"
    assert "is gone from randflake_fleet.node_leases" in member.log()
