"""Fleet mode: servers lease disjoint node blocks from one lease table on a coordination server,
reached through postgres_fdw. Four real clusters on loopback: one coordinator, three members."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from lib.cluster import needs_postgres_fdw, wait_for
from lib.fleet import LEASE_SECONDS, POOL, ids_with_parts, insert_for, join_fleet, lease_of, member_settings

pytestmark = needs_postgres_fdw


@pytest.fixture
def fleet(make_cluster):
    coordinator = make_cluster("randflake.node_source = 'off'", *POOL)
    coordinator.start()
    with coordinator.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    members = [make_cluster(*member_settings()) for _ in range(3)]
    # One secret for the whole fleet.
    for member in members[1:]:
        (member.dir / "randflake.key").write_text(members[0].key_hex)
    for member in members:
        member.start()
        join_fleet(member, coordinator)
    return coordinator, members, make_cluster


def test_three_members_lease_disjoint_blocks_and_never_collide(fleet):
    coordinator, members, _ = fleet
    leases = [lease_of(coordinator, member) for member in members]
    blocks = sorted((first, last) for first, last, _, _ in leases)
    assert blocks == [(0, 9), (10, 19), (20, 29)], leases

    errors: list = []
    threads = [
        threading.Thread(target=insert_for, args=(member, 4, errors)) for member in members for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []

    # Every ID of every member goes into one table with a PRIMARY KEY on the coordinator.
    with coordinator.connect() as conn:
        conn.execute("CREATE TABLE fleet_ids (id bigint PRIMARY KEY, member int, node int)")
        total = 0
        for index, (member, (first, last, _, _)) in enumerate(zip(members, leases)):
            rows = ids_with_parts(member)
            assert rows, f"member {index} made no IDs"
            assert {node for _, _, node in rows} <= set(range(first, last + 1))
            with conn.cursor() as cursor, cursor.copy("COPY fleet_ids FROM STDIN") as copy:
                for id_, _, node in rows:
                    copy.write_row((id_, index, node))
            total += len(rows)
        assert conn.execute("SELECT count(*) FROM fleet_ids").fetchone()[0] == total
    assert total > 10_000

    # Renewals keep each member's lease ahead of the clock.
    with members[0].connect() as conn:
        state, lease_end = conn.execute(
            "SELECT state, extract(epoch FROM lease_end)::bigint FROM randflake_status()"
        ).fetchone()
    assert state == "active"
    assert lease_end >= time.time()


def test_a_stopped_members_block_is_leased_again_only_after_its_lease_ended(fleet):
    coordinator, members, make_cluster = fleet
    leases = [lease_of(coordinator, member) for member in members]
    stopped = members[2]
    errors: list = []
    insert_for(stopped, 1, errors)
    assert errors == []
    before = ids_with_parts(stopped)
    stopped_first, stopped_last, _, _ = leases[2]
    stopped.stop()
    with coordinator.connect() as conn:
        # Its last renewal may have landed just before the stop.
        old_end = conn.execute(
            "SELECT max(lease_end) FROM randflake.node_leases WHERE first_node = %s", (stopped_first,)
        ).fetchone()[0]
        # The running members renew past that end before the newcomer looks: a block whose lease
        # ends no later than the stopped one's may be leased for after it, as that one is (a
        # loaded machine once let the newcomer find a running member's block on a tie).
        wait_for(
            lambda: conn.execute(
                "SELECT min(last_end) FROM (SELECT max(lease_end) AS last_end FROM randflake.node_leases "
                "WHERE first_node <> %s GROUP BY first_node) running",
                (stopped_first,),
            ).fetchone()[0] > old_end,
            2 * LEASE_SECONDS,
            "the running members to renew past the stopped member's lease",
        )

    newcomer = make_cluster(*member_settings())
    (newcomer.dir / "randflake.key").write_text(members[0].key_hex)
    newcomer.start()
    join_fleet(newcomer, coordinator)
    first, last, start, end = lease_of(coordinator, newcomer)
    # The only block not held by a running member is the stopped one's, and only after its end.
    assert (first, last) == (stopped_first, stopped_last)
    assert start > old_end

    insert_for(newcomer, 2, errors)
    assert errors == []
    after = ids_with_parts(newcomer)
    assert after
    assert min(second for _, second, _ in after) > old_end
    assert {node for _, _, node in after} <= set(range(first, last + 1))
    assert not {id_ for id_, _, _ in before} & {id_ for id_, _, _ in after}
    # The survivors were never disturbed.
    for member in members[:2]:
        with member.connect() as conn:
            assert conn.execute("SELECT state FROM randflake_status()").fetchone()[0] == "active"


def next_id_refusal(conn: psycopg.Connection) -> psycopg.Error | None:
    """The error randflake_next() raises on `conn`, or None if it issues an ID."""
    try:
        conn.execute("SELECT randflake_next()")
    except psycopg.Error as error:
        return error
    return None


def test_a_member_whose_lease_lapsed_stops_issuing(fleet):
    """With its coordinator unreachable a member keeps issuing until its lease ends, then refuses
    with a clear error, and resumes by itself once the coordinator is back."""
    coordinator, members, _ = fleet
    member = members[0]
    lease_of(coordinator, member)
    coordinator.stop()
    with member.connect() as conn:
        conn.execute("SELECT randflake_next()")
        error = wait_for(lambda: next_id_refusal(conn), 3 * LEASE_SECONDS, "the member to stop issuing past its lease")
        assert error.sqlstate == "55000"
        assert "node lease covers IDs only through second" in error.diag.message_primary
        assert "randflake_status()" in error.diag.message_hint
        status = conn.execute("SELECT state, lease_refusals FROM randflake_status()").fetchone()
        assert status[0].startswith("lease lapsed: keeper failing: ") and status[1] >= 1
        assert "retrying every second" in member.log()

        coordinator.start()
        wait_for(lambda: next_id_refusal(conn) is None, 30, "the member to issue again once the coordinator is back")


def test_application_leases_on_a_member_hold_no_coordinator_connection(make_cluster):
    """A member's lease procedures write through the coordinator's table, return a lease once the
    coordinator shows its commit durable, and close their connection to the coordinator: eight
    idle application sessions that each leased (and extended, or released) through a member hold
    no coordinator connection, so with max_connections = 12 on the coordinator (0.5.0's functions
    filled it) a new member still gets its lease. randflake_app_leases() reports no pool on a
    member (its state is the coordinator's)."""
    coordinator = make_cluster("randflake.node_source = 'off'", *POOL, "max_connections = 12")
    coordinator.start()
    with coordinator.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    members = [make_cluster(*member_settings(), "randflake.app_node_id_min = 5000",
                            "randflake.app_node_id_max = 5007") for _ in range(2)]
    (members[1].dir / "randflake.key").write_text(members[0].key_hex)
    members[0].start()
    join_fleet(members[0], coordinator)
    lease_of(coordinator, members[0])
    sessions = [members[0].connect() for _ in range(8)]
    try:
        nodes = set()
        for number, session in enumerate(sessions):
            holder = f"app-{number}"
            node, start, end = session.execute(
                "CALL randflake_lease_acquire(%s, 600, NULL, NULL, NULL)", (holder,)).fetchone()
            assert 5000 <= node <= 5007 and end > start, (node, start, end)
            nodes.add(node)
            _, extended_start, extended_end = session.execute(
                "CALL randflake_lease_extend(%s, %s, 900, NULL, NULL, NULL)", (holder, node)).fetchone()
            assert extended_start == start and extended_end > end
            if number % 2:
                (released,) = session.execute("CALL randflake_lease_release(%s, %s, NULL)", (holder, node)).fetchone()
                assert released is True
            assert session.execute("SELECT * FROM randflake_app_leases()").fetchall() == []
        assert len(nodes) == 8, nodes
        # One session for both questions: a session closed just before could still be counted
        # while its backend exits.
        with coordinator.connect() as conn:
            stored = conn.execute(
                "SELECT count(*) FROM randflake.node_leases WHERE first_node BETWEEN 5000 AND 5007").fetchone()[0]
            assert stored == 8, stored
            (connections,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchone()
        assert connections <= 1, f"{connections} coordinator connections (the member's keeper holds at most one)"
        members[1].start()
        join_fleet(members[1], coordinator)
        lease_of(coordinator, members[1])
    finally:
        for session in sessions:
            session.close()
