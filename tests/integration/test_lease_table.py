"""Who may write and lock randflake.node_leases: only randflake_pg's own code writes it, whatever
privileges a role holds (pg_write_all_data, explicit grants); on a fleet's coordinator the members'
role may do only what their keepers need, so no DELETE (nor DELETE then INSERT) frees a block a
member is using; a session holding the table's lock behind a queued VACUUM FULL holds the keeper
up for a second at most, and is named in its WARNING; pg_monitor can no longer lock the table."""

from __future__ import annotations

import re
import threading
import time

import psycopg
import pytest

from lib.cluster import Cluster, needs_postgres_fdw, status, wait_for
from lib.fleet import BLOCK, POOL, insert_for, join_fleet, lease_of, member_settings
from lib.inserts import Inserter, assert_unique, made_table

LEASES = "SELECT * FROM randflake.node_leases ORDER BY first_node, lease_start"
# What a writer of the table tries: a new lease of unused nodes, moving the live one, ending
# every lease, emptying the table.
WRITES = {
    "INSERT": "INSERT INTO randflake.node_leases VALUES (100000, 100009, 'forged', 'forged', 1900000000, 1900000100, 1900000100, now())",
    "UPDATE": "UPDATE randflake.node_leases SET lease_end = 2800000000, used_through = 2800000000",
    "DELETE": "DELETE FROM randflake.node_leases",
    "TRUNCATE": "TRUNCATE randflake.node_leases",
}


def refused(conn: psycopg.Connection, statement: str) -> psycopg.Error:
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
        conn.execute(statement)
    error = caught.value
    assert "randflake_pg refuses this write to its lease table" in error.diag.message_primary, error
    assert error.diag.message_hint, error
    return error


def test_no_role_but_the_extension_writes_the_table_in_range_mode(cluster):
    made_table(cluster)
    with cluster.connect() as admin:
        wait_for(lambda: status(admin)["state"] == "active", 10, "a lease")
        admin.execute("CREATE ROLE writer LOGIN IN ROLE pg_write_all_data")
        admin.execute("CREATE ROLE granted LOGIN")
        admin.execute("GRANT USAGE ON SCHEMA randflake TO granted")
        admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON randflake.node_leases TO granted")
        before = admin.execute(LEASES).fetchall()
        # pg_write_all_data grants no TRUNCATE.
        for role, operations in (("writer", ["INSERT", "UPDATE", "DELETE"]), ("granted", list(WRITES))):
            with cluster.connect(user=role) as conn:
                for operation in operations:
                    statement = WRITES[operation]
                    error = refused(conn, statement)
                    assert f"{operation} by role {role}" in error.diag.message_primary
                    assert admin.execute(LEASES).fetchall() == before, f"{operation} by {role} changed the table"
        assert status(admin)["state"] == "active"
        admin.execute("INSERT INTO made SELECT FROM generate_series(1, 1000)")
    assert assert_unique(cluster) == 1000


def coordinator_with_members_role(make_cluster) -> Cluster:
    """A coordinator issuing no IDs, with the members' role docs/fleets-and-replicas.md describes,
    and a pg_write_all_data member."""
    coordinator = make_cluster("randflake.node_source = 'off'", *POOL)
    coordinator.start()
    with coordinator.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("CREATE ROLE randflake_fleet LOGIN")
        conn.execute("GRANT USAGE ON SCHEMA randflake TO randflake_fleet")
        conn.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON randflake.node_leases TO randflake_fleet")
        conn.execute("GRANT SELECT ON randflake.commit_evidence TO randflake_fleet")
        conn.execute("GRANT EXECUTE ON FUNCTION randflake.wal_durability() TO randflake_fleet")
        conn.execute("ALTER ROLE randflake_fleet SET lock_timeout = '1s'")
        conn.execute("CREATE ROLE writer LOGIN IN ROLE pg_write_all_data")
    return coordinator


@needs_postgres_fdw
def test_no_write_through_the_members_role_frees_a_block_in_use(make_cluster):
    """8a: during load on two members, DELETE FROM the coordinator's table as the members' role
    and as a pg_write_all_data member, and a DELETE followed by an INSERT of a forged row, are
    refused; the members never issue the same ID."""
    coordinator = coordinator_with_members_role(make_cluster)
    members = [make_cluster(*member_settings()) for _ in range(2)]
    (members[1].dir / "randflake.key").write_text(members[0].key_hex)
    for member in members:
        member.start()
        join_fleet(member, coordinator, "randflake_fleet")
    leases = [lease_of(coordinator, member) for member in members]
    errors: list = []
    load = [threading.Thread(target=insert_for, args=(member, 6, errors)) for member in members]
    for thread in load:
        thread.start()
    with coordinator.connect() as admin:
        before = admin.execute(LEASES).fetchall()
        for role in ("randflake_fleet", "writer"):
            with coordinator.connect(user=role) as conn:
                first, last, start, _ = leases[0]
                # A DELETE of every lease, to be followed by a forged row in one transaction: the
                # DELETE is refused, and so is the forged row on its own (the block, from the
                # past, for another holder).
                conn.execute("BEGIN")
                error = refused(conn, "DELETE FROM randflake.node_leases")
                assert "whose seconds may be in use" in error.diag.message_primary
                conn.execute("ROLLBACK")
                refused(
                    conn,
                    f"""INSERT INTO randflake.node_leases
                        VALUES ({first}, {last}, 'forged', 'forged', {start - 3600}, {start - 3000}, {start - 3000}, now())""",
                )
                # Nor can a lease be handed to another holder, or cut short.
                refused(conn, "UPDATE randflake.node_leases SET holder = 'forged'")
                refused(conn, "UPDATE randflake.node_leases SET lease_end = 1730000000, used_through = 1730000000")
        assert admin.execute("SELECT first_node, lease_start, holder FROM randflake.node_leases ORDER BY 1, 2").fetchall() \
            == [(row[0], row[4], row[2]) for row in before]
    for thread in load:
        thread.join()
    assert errors == []
    sets = []
    for member in members:
        with member.connect() as conn:
            sets.append({row[0] for row in conn.execute("SELECT id FROM made")})
            assert status(conn)["state"] == "active"
    assert all(len(ids) > 1000 for ids in sets), [len(ids) for ids in sets]
    assert not sets[0] & sets[1], f"{len(sets[0] & sets[1])} IDs issued by both members"


def test_a_lock_held_behind_a_queued_vacuum_full_holds_the_keeper_up_a_second_and_is_named(cluster):
    made_table(cluster)
    with cluster.connect() as admin:
        wait_for(lambda: status(admin)["state"] == "active", 10, "a lease")
        admin.execute("CREATE ROLE watcher LOGIN IN ROLE pg_monitor")
    # pg_monitor reads the leases through the status functions, and cannot lock the table.
    with cluster.connect(user="watcher") as watcher:
        with watcher.transaction(), pytest.raises(psycopg.errors.InsufficientPrivilege):
            watcher.execute("SELECT count(*) FROM randflake.node_leases")
        assert watcher.execute("SELECT state FROM randflake_status()").fetchone()[0] == "active"
    # A session that can read it (a superuser's) holds its lock in an idle transaction, and a
    # VACUUM FULL queues behind it.
    with Inserter(cluster) as inserter, cluster.connect(application_name="idle-reader") as reader, \
            cluster.connect(application_name="vacuum") as vacuum, cluster.connect() as admin:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM randflake.node_leases")
        reader_pid = reader.info.backend_pid
        vacuuming = threading.Thread(target=vacuum.execute, args=("VACUUM FULL randflake.node_leases",))
        vacuuming.start()
        queued_at = time.monotonic()
        wait_for(
            lambda: admin.execute(
                "SELECT count(*) FROM pg_locks WHERE relation = 'randflake.node_leases'::regclass AND NOT granted"
            ).fetchone()[0],
            5,
            "the VACUUM FULL to queue",
        )
        state = wait_for(
            lambda: status(admin)["state"].startswith("renewal failing") and status(admin)["state"], 5,
            "the keeper to report the lock",
        )
        assert time.monotonic() - queued_at < 4, "the keeper waited longer than its bound"
        assert "not granted within 1000 ms" in state
        warning = wait_for(
            lambda: re.search(r"WARNING:  randflake_pg lease keeper: could not check or renew the lease .*held up by .*",
                              cluster.log()),
            5, "the keeper's WARNING",
        ).group(0)
        assert f"pid {reader_pid} (role postgres, application 'idle-reader', idle in transaction) holds AccessShareLock" \
            in warning, warning
        assert f"awaits AccessExclusiveLock behind pids {{{reader_pid}}}" in warning, warning
        reader.execute("ROLLBACK")
        vacuuming.join(10)
        wait_for(lambda: status(admin)["state"] == "active", 5, "the keeper to recover")
    assert inserter.failures == []


@needs_postgres_fdw
def test_a_release_keeps_its_node_by_the_coordinators_clock(make_cluster):
    """8d: a release written through the members' role (members lease no application nodes, so
    only a hand-made UPDATE sends one) keeps its node until the coordinator's clock plus 60 s,
    whatever end the writer asked for; nor can it move the end later."""
    coordinator = coordinator_with_members_role(make_cluster)
    member = make_cluster(*member_settings())
    member.start()
    join_fleet(member, coordinator, "randflake_fleet")
    node = 3 * BLOCK + 5
    with coordinator.connect() as admin:
        start = int(admin.execute("SELECT extract(epoch FROM now())::bigint").fetchone()[0])
        for node_id, end in ((node, start + 600), (node + 1, start + 10)):
            admin.execute(
                """INSERT INTO randflake.node_leases
                   VALUES (%s, %s, 'app/"svc"/p', 'application svc: p', %s, %s, %s, now())""",
                (node_id, node_id, start, end, end),
            )
    with member.connect() as conn:
        released_at = time.time()
        # The first asks to be cut to its start, as if no second had been used; the second asks
        # for an end past its own.
        for node_id, asked in ((node, start), (node + 1, start + 3600)):
            conn.execute(
                """UPDATE randflake_fleet.node_leases
                      SET holder = 'released/"svc"/p', lease_end = %s, used_through = %s
                    WHERE first_node = %s""",
                (asked, asked, node_id),
            )
    with coordinator.connect() as admin:
        rows = dict(
            (first, (holder, end, used_through))
            for first, holder, end, used_through in admin.execute(
                "SELECT first_node, holder, lease_end, used_through FROM randflake.node_leases WHERE first_node >= %s",
                (node,),
            )
        )
    holder, end, used_through = rows[node]
    assert holder == 'released/"svc"/p'
    assert end == used_through
    assert int(released_at) + 60 <= end <= time.time() + 60, f"released until {end - released_at:+.0f} s from the release"
    assert rows[node + 1][1] == start + 10, "a release never moves the end later"
