"""The lease keeper in range mode: what it writes, and what happens when its lease or its table
goes away, when it has no table to write to, and when it is configured not to run."""

from __future__ import annotations

import time

import psycopg

from lib.cluster import sql_error, wait_for, wait_ticks




def current_lease(conn: psycopg.Connection) -> tuple:
    return conn.execute(
        "SELECT lease_start, lease_end, used_through FROM randflake.node_leases ORDER BY lease_start DESC LIMIT 1"
    ).fetchone()


def published_lease_start(conn: psycopg.Connection) -> int | None:
    """The start of the newest lease row once the keeper has published it: the row is visible as
    soon as its commit is, but backends issue under it only after the keeper has seen that commit
    shown durable."""
    row = current_lease(conn)
    published = conn.execute("SELECT extract(epoch FROM lease_start)::bigint FROM randflake_status()").fetchone()[0]
    return published if row is not None and published == row[0] else None


def test_the_keeper_leases_the_range_and_keeps_the_high_water_mark_ahead(make_cluster):
    cluster = make_cluster("randflake.node_id_min = 100", "randflake.node_id_max = 199", "randflake.lease_seconds = 30")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("SELECT randflake_next()")
        first, last, holder, start, end, used = conn.execute(
            "SELECT first_node, last_node, holder, lease_start, lease_end, used_through FROM randflake.node_leases"
        ).fetchone()
        system, timeline = conn.execute(
            "SELECT system_identifier, timeline_id FROM pg_control_system(), pg_control_checkpoint()"
        ).fetchone()
        assert (first, last, holder) == (100, 199, f"{system}/{timeline}")
        assert end - start == 29
        now = time.time()
        assert start <= now + 1 and used > now, (start, used, now)

        # The mark moves with the clock, and never more than the lead ahead of it.
        wait_for(lambda: current_lease(conn)[2] >= used + 4, timeout=10, what="the high-water mark to advance")
        assert current_lease(conn)[2] <= time.time() + 11
        # Renewed once a third of the lease has passed.
        wait_for(lambda: current_lease(conn)[1] > end, timeout=15, what="the lease to be renewed")
        status = conn.execute(
            "SELECT state, first_node, last_node, extract(epoch FROM issuable_through)::bigint FROM randflake_status()"
        ).fetchone()
        assert status[:3] == ("active", 100, 199)
        assert status[3] == current_lease(conn)[2]


def test_a_deleted_lease_is_replaced_by_one_after_its_high_water_mark(cluster):
    with cluster.connect() as conn:
        conn.execute("CREATE TABLE ids (id bigint PRIMARY KEY DEFAULT randflake_next())")
        conn.execute("INSERT INTO ids SELECT FROM generate_series(1, 1000)")
        _, _, used = current_lease(conn)
        conn.execute("DELETE FROM randflake.node_leases")
        # Two ticks hold one that began after the DELETE: that one has taken a new lease.
        wait_ticks(conn, 2)
        row = current_lease(conn)
        assert row is not None and row[0] > used
        assert "is gone from" in cluster.log()
        conn.execute("INSERT INTO ids SELECT FROM generate_series(1, 1000)")
        assert conn.execute("SELECT count(DISTINCT id) FROM ids").fetchone()[0] == 2000


def test_drop_and_create_extension_never_reuses_a_second(cluster):
    with cluster.connect() as conn:
        conn.execute("CREATE TABLE ids (id bigint PRIMARY KEY, second bigint)")
        for _ in range(2):
            conn.execute("INSERT INTO ids SELECT randflake_next() FROM generate_series(1, 1000)")
            used = current_lease(conn)[2]
            conn.execute("DROP EXTENSION randflake_pg")
            conn.execute("CREATE EXTENSION randflake_pg")
            start = wait_for(lambda: published_lease_start(conn), 15, "a lease published after CREATE EXTENSION")
            assert start > used
        conn.execute("INSERT INTO ids SELECT randflake_next() FROM generate_series(1, 1000)")
        assert conn.execute("SELECT count(DISTINCT id) FROM ids").fetchone()[0] == 3000


def test_without_the_extension_in_the_keepers_database_calls_say_where_to_create_it(make_cluster):
    cluster = make_cluster("randflake.database = 'ids'")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE DATABASE ids")
        conn.execute("CREATE EXTENSION randflake_pg")  # in postgres, not in ids
        error = sql_error(conn, "SELECT randflake_next()")
        assert error.sqlstate == "55000"
        assert error.diag.message_primary == (
            "randflake_pg holds no node lease yet: the lease keeper is waiting for the lease table"
        )
        assert 'CREATE EXTENSION randflake_pg in database "ids"' in error.diag.message_hint
        assert conn.execute("SELECT state, lease_refusals FROM randflake_status()").fetchone() == (
            "waiting for the lease table",
            1,
        )
    with cluster.connect(dbname="ids") as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    with cluster.connect() as conn:
        # The lease taken in "ids" serves every database of the server.
        assert conn.execute("SELECT randflake_next() IS NOT NULL").fetchone()[0]


def test_node_source_off_issues_nothing_and_leases_nothing(make_cluster):
    cluster = make_cluster("randflake.node_source = 'off'")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        error = sql_error(conn, "SELECT randflake_next()")
        assert error.sqlstate == "55000"
        assert "randflake.node_source is off" in error.diag.message_primary
        # No keeper runs, so there is no tick to wait for.
        time.sleep(1.5)  # a deliberate hold: a keeper would have leased by now, had one started
        assert conn.execute("SELECT count(*) FROM randflake.node_leases").fetchone()[0] == 0
        assert conn.execute(
            "SELECT node_source, state, keeper_pid, keeper_ticks FROM randflake_status()"
        ).fetchone() == ("off", "off", None, 0)
        assert conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'randflake_pg lease keeper'"
        ).fetchone()[0] == 0


def test_fleet_mode_without_a_lease_table_stops_the_server_from_starting(make_cluster):
    cluster = make_cluster("randflake.node_source = 'fleet'")
    result = cluster.start(check=False)
    assert result.returncode != 0
    assert "randflake.node_source is fleet but randflake.fleet_lease_table is not set" in cluster.log()


def test_a_malformed_fleet_lease_table_is_rejected(make_cluster):
    cluster = make_cluster("randflake.node_source = 'fleet'", "randflake.fleet_lease_table = 'leases; DROP TABLE x'")
    result = cluster.start(check=False)
    assert result.returncode != 0
    assert "is not a schema-qualified table name" in cluster.log()
