"""Node allocation: the configured range, running out of nodes, the per-second node budget, and
seconds that must not be reused after a crash or a restart."""

from __future__ import annotations

import os
import signal
import threading

import psycopg
import pytest

from lib.cluster import sql_error, wait_for


def decoded(conn: psycopg.Connection, sql: str) -> list[tuple]:
    """(timestamp as Unix seconds, node, sequence) of the IDs a query returns in column `id`."""
    return conn.execute(
        f"""SELECT extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
              FROM ({sql}) s, randflake_decode(s.id) d"""
    ).fetchall()


def test_ids_come_from_the_configured_range_and_running_out_is_a_clear_error(make_cluster):
    cluster = make_cluster("randflake.node_id_min = 7", "randflake.node_id_max = 8")
    cluster.start()
    first, second, third = (cluster.connect() for _ in range(3))
    with first, second, third:
        first.execute("CREATE EXTENSION randflake_pg")
        first.execute("CREATE TABLE kept (id bigint PRIMARY KEY DEFAULT randflake_next())")
        first.execute("INSERT INTO kept SELECT FROM generate_series(1, 10)")
        second.execute("INSERT INTO kept SELECT FROM generate_series(1, 10)")
        nodes = {row[1] for row in decoded(first, "SELECT id FROM kept")}
        assert nodes == {7, 8}

        error = sql_error(third, "SELECT randflake_next()")
        assert error.sqlstate == "53400"
        assert error.diag.message_primary == "no free randflake node: all 2 nodes of range 7..8 are in use"
        assert "randflake.node_id_min" in error.diag.message_hint

        # The server, the data and the ID space are intact, and a freed node is taken again.
        second_pid = second.info.backend_pid
        second.close()
        wait_for(
            lambda: not first.execute("SELECT FROM pg_stat_activity WHERE pid = %s", (second_pid,)).fetchall(),
            10,
            "the closed session's backend to exit",
        )
        third.execute("INSERT INTO kept SELECT FROM generate_series(1, 10)")
        rows, distinct = first.execute("SELECT count(*), count(DISTINCT id) FROM kept").fetchone()
        assert rows == distinct == 30


def test_node_budget_waits_for_the_next_second_instead_of_failing(make_cluster):
    """With one node per second per backend, 200000 IDs need two seconds, one node in each."""
    cluster = make_cluster("randflake.max_nodes_per_backend = 1")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        parts = decoded(conn, "SELECT randflake_next() AS id FROM generate_series(1, 200000)")
    assert len(set(parts)) == 200_000
    seconds = {}
    for second, node, _ in parts:
        seconds.setdefault(second, set()).add(node)
    assert len(seconds) >= 2, "131072 IDs per node per second force a second second"
    assert all(len(nodes) == 1 for nodes in seconds.values()), seconds


def leases(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute(
        "SELECT lease_start, lease_end, used_through FROM randflake.node_leases ORDER BY lease_start"
    ).fetchall()


def assert_resumed_after_high_water_mark(conn: psycopg.Connection, high_water_before: int) -> None:
    """The lease taken after the restart starts past a high-water mark read before it, and every
    ID made after the restart is in a later second than every ID made before it. (The mark may
    have moved on once more before the restart; the old lease row is pruned by then.)"""
    newest = leases(conn)[-1]
    assert newest[0] > high_water_before, (newest, high_water_before)
    before = max(part[0] for part in decoded(conn, "SELECT id FROM ids WHERE era = 1"))
    after = min(part[0] for part in decoded(conn, "SELECT id FROM ids WHERE era = 2"))
    assert before <= high_water_before < after, (before, high_water_before, after)
    assert conn.execute("SELECT count(*) = count(DISTINCT id) FROM ids").fetchone()[0]


def test_after_a_backend_crash_during_generation_no_second_is_reused(cluster):
    """kill -9 of a backend in the middle of generating makes the postmaster rebuild shared
    memory; the lease keeper's new lease starts after the durable high-water mark."""
    with cluster.connect() as conn:
        conn.execute("CREATE TABLE ids (id bigint PRIMARY KEY DEFAULT randflake_next(), era int)")
        conn.execute("INSERT INTO ids (era) SELECT 1 FROM generate_series(1, 5000)")
    victim = cluster.connect()
    victim_pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]
    generating = threading.Thread(
        target=lambda: pytest.raises(
            psycopg.OperationalError,
            victim.execute,
            "SELECT count(randflake_next()) FROM generate_series(1, 100000000)",
        )
    )
    generating.start()
    with cluster.connect() as conn:
        wait_for(
            lambda: conn.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (victim_pid,)).fetchone()[0]
            == "active",
            10,
            "the victim to be generating",
        )
        high_water_before = leases(conn)[-1][2]
    os.kill(victim_pid, signal.SIGKILL)
    generating.join()

    def inserted() -> bool:
        try:
            with cluster.connect() as conn:
                conn.execute("INSERT INTO ids (era) SELECT 2 FROM generate_series(1, 5000)")
            return True
        except psycopg.OperationalError:
            return False

    wait_for(inserted, 30, "the server to come back after the crash")
    assert "terminated by signal 9" in cluster.log()
    with cluster.connect() as conn:
        assert_resumed_after_high_water_mark(conn, high_water_before)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_after_a_quick_restart_no_second_is_reused(cluster, mode):
    with cluster.connect() as conn:
        conn.execute("CREATE TABLE ids (id bigint PRIMARY KEY DEFAULT randflake_next(), era int)")
        conn.execute("INSERT INTO ids (era) SELECT 1 FROM generate_series(1, 5000)")
        high_water_before = leases(conn)[-1][2]
    cluster.stop(mode)
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("INSERT INTO ids (era) SELECT 2 FROM generate_series(1, 5000)")
        assert_resumed_after_high_water_mark(conn, high_water_before)


def test_inverted_node_range_stops_the_server_from_starting(make_cluster):
    cluster = make_cluster("randflake.node_id_min = 500", "randflake.node_id_max = 100")
    result = cluster.start(check=False)
    assert result.returncode != 0
    log = cluster.log()
    assert "randflake.node_id_min (500) is greater than randflake.node_id_max (100)" in log
    assert "invalid randflake_pg settings in the server configuration" in log
