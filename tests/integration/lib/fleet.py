"""Fleet mode's set-up as a DBA makes it: members leasing blocks of nodes from a coordinator's
lease table through postgres_fdw (docs/fleets-and-replicas.md), and reading what they made."""

from __future__ import annotations

import time

import psycopg

from lib.cluster import Cluster, wait_for

BLOCK = 10
LEASE_SECONDS = 8
# Three blocks: exactly one per member, so a fourth server must wait for a stopped one's block.
POOL = ("randflake.node_id_min = 0", f"randflake.node_id_max = {3 * BLOCK - 1}")


# The bounds docs/fleets-and-replicas.md gives for the coordinator connection: a dead peer is noticed in
# seconds, not after the kernel's TCP retries.
COORDINATOR_TIMEOUTS = (
    "connect_timeout '2', keepalives '1', keepalives_idle '2', keepalives_interval '1', "
    "keepalives_count '2', tcp_user_timeout '4000'"
)


def member_settings() -> tuple[str, ...]:
    return (
        "randflake.node_source = 'fleet'",
        "randflake.fleet_lease_table = 'randflake_fleet.node_leases'",
        f"randflake.fleet_block_size = {BLOCK}",
        f"randflake.lease_seconds = {LEASE_SECONDS}",
        *POOL,
    )


def join_fleet(member: Cluster, coordinator: Cluster, remote_user: str = "postgres") -> None:
    """The set-up a DBA runs on each member: foreign tables for the coordinator's lease table and
    its commit evidence, reached as `remote_user` there."""
    with member.connect() as conn:
        conn.execute("CREATE EXTENSION postgres_fdw")
        conn.execute(
            f"""CREATE SERVER randflake_coordinator FOREIGN DATA WRAPPER postgres_fdw
                OPTIONS (host '127.0.0.1', port '{coordinator.port}', dbname 'postgres', {COORDINATOR_TIMEOUTS})"""
        )
        conn.execute(f"CREATE USER MAPPING FOR postgres SERVER randflake_coordinator OPTIONS (user '{remote_user}')")
        conn.execute("CREATE SCHEMA randflake_fleet")
        conn.execute(
            "IMPORT FOREIGN SCHEMA randflake LIMIT TO (node_leases, commit_evidence) FROM SERVER randflake_coordinator INTO randflake_fleet"
        )
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("CREATE TABLE made (id bigint PRIMARY KEY DEFAULT randflake_next(), at timestamptz DEFAULT clock_timestamp())")


def coordinator_with_member(make_cluster, *coordinator_settings: str) -> tuple[Cluster, Cluster]:
    """A coordinator (issuing nothing itself, the extension created) with `coordinator_settings`,
    and one member joined to it, both running."""
    coordinator = make_cluster("randflake.node_source = 'off'", *coordinator_settings)
    coordinator.start()
    with coordinator.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    member = make_cluster(*member_settings())
    member.start()
    join_fleet(member, coordinator)
    return coordinator, member


def lease_of(coordinator: Cluster, member: Cluster, timeout: float = 20) -> tuple:
    """(first_node, last_node, lease_start, lease_end) of the member's latest lease, once it has one."""
    with member.connect() as conn:
        holder = conn.execute(
            "SELECT system_identifier::text FROM pg_control_system()"
        ).fetchone()[0]
    with coordinator.connect() as conn:
        return wait_for(
            lambda: conn.execute(
                """SELECT first_node, last_node, lease_start, lease_end FROM randflake.node_leases
                    WHERE holder LIKE %s || '/%%' ORDER BY lease_start DESC LIMIT 1""",
                (holder,),
            ).fetchone(),
            timeout,
            f"a lease for {member.dir} in the coordinator's table",
        )


def insert_for(member: Cluster, seconds: float, errors: list) -> None:
    try:
        with member.connect() as conn:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                conn.execute("INSERT INTO made SELECT FROM generate_series(1, 500)")
    except psycopg.Error as error:  # reported by the test, not swallowed
        errors.append((member.port, error.sqlstate, str(error)))


def ids_with_parts(member: Cluster) -> list[tuple]:
    with member.connect() as conn:
        return conn.execute(
            """SELECT m.id, extract(epoch FROM d.timestamp)::bigint, d.node_id
                 FROM made m, randflake_decode(m.id) d"""
        ).fetchall()
