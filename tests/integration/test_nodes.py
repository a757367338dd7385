"""Nodes: sessions share the server's range, a second uses its nodes up in turn, and seconds
must not be reused after a crash or a restart."""

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


def nodes_by_second(parts: list[tuple]) -> dict[int, set[int]]:
    """The nodes used in each second, from decoded (second, node, sequence) triples."""
    seconds: dict[int, set[int]] = {}
    for second, node, _ in parts:
        seconds.setdefault(second, set()).add(node)
    return seconds


def test_sessions_share_the_servers_nodes_from_the_first_of_its_range(make_cluster):
    """A server's sessions take their IDs from one position over its range: more sessions than
    nodes all make IDs, and below 131072 IDs a second every second uses the range's first node
    only. (With a node per session, the third session was refused: 53400, no free node.)"""
    cluster = make_cluster("randflake.node_id_min = 7", "randflake.node_id_max = 8")
    cluster.start()
    sessions = [cluster.connect() for _ in range(5)]
    try:
        sessions[0].execute("CREATE EXTENSION randflake_pg")
        sessions[0].execute("CREATE TABLE kept (id bigint PRIMARY KEY DEFAULT randflake_next())")
        for _ in range(3):
            for session in sessions:
                session.execute("INSERT INTO kept SELECT FROM generate_series(1, 100)")
        parts = decoded(sessions[0], "SELECT id FROM kept")
    finally:
        for session in sessions:
            session.close()
    assert len(set(parts)) == len(parts) == 1500
    assert all(nodes == {7} for nodes in nodes_by_second(parts).values()), nodes_by_second(parts)


def test_a_second_uses_its_nodes_up_in_turn_then_waits_for_the_next(make_cluster):
    """300000 IDs on a range of two nodes: each second begins at the first node, uses its 131072
    sequences up, goes on to the second node, and once both are used up waits for the next
    second instead of failing."""
    cluster = make_cluster("randflake.node_id_min = 7", "randflake.node_id_max = 8")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        parts = decoded(conn, "SELECT randflake_next() AS id FROM generate_series(1, 300000)")
        waits = conn.execute("SELECT waits_for_next_second FROM randflake_status()").fetchone()[0]
    assert len(set(parts)) == 300_000
    seconds = nodes_by_second(parts)
    assert len(seconds) >= 2, "two nodes make at most 262144 IDs a second"
    for second, nodes in seconds.items():
        made = sorted(part for part in parts if part[0] == second)
        # The first node is used first and, if the second is busy enough, up before the next.
        assert made[0][1] == 7, (second, made[0])
        if 8 in nodes:
            assert sum(1 for part in made if part[1] == 7) == 131_072, second
        if len(made) == 262_144:
            assert waits >= 1, "the statement went on in a later second, after waiting for it"


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


def test_a_line_left_from_the_per_backend_node_budget_only_warns(make_cluster):
    """0.5.0's randflake.max_nodes_per_backend is gone with the nodes backends held: a
    configuration upgraded from it still starts, warns about the line, and makes IDs."""
    cluster = make_cluster("randflake.max_nodes_per_backend = 64")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        assert conn.execute("SELECT randflake_next() IS NOT NULL").fetchone()[0]
    assert 'invalid configuration parameter name "randflake.max_nodes_per_backend"' in cluster.log()
