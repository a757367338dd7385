"""Upgrades: a database on the previous release, updated with ALTER EXTENSION, ends up with the
same objects, comments and privileges as a fresh install, and its rows and IDs are untouched."""

from __future__ import annotations

import pytest

from lib.cluster import sql_error, status, wait_for
from lib.extension_catalog import extension_objects
from lib.releases import BEFORE_LEASES, CURRENT, RELEASES, release_scripts  # noqa: F401 (an autouse fixture)


def ids_and_parts(conn) -> list[tuple]:
    return conn.execute(
        """SELECT o.id, o.note, randflake_to_string(o.id), extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
             FROM orders o, randflake_decode(o.id) d ORDER BY o.id"""
    ).fetchall()


@pytest.mark.parametrize("previous", RELEASES)
def test_update_from_an_earlier_release_equals_a_fresh_install(make_cluster, previous):
    cluster = make_cluster()
    cluster.start()
    with cluster.connect() as admin:
        # The lease keeper's database runs the current release, so IDs flow in the others.
        admin.execute("CREATE EXTENSION randflake_pg")
        admin.execute("CREATE ROLE reporting")
        admin.execute("CREATE DATABASE updated")
        admin.execute("CREATE DATABASE fresh")

    with cluster.connect("updated") as conn:
        conn.execute(f"CREATE EXTENSION randflake_pg VERSION '{previous}'")
        old = extension_objects(conn)
        assert old["extension"]["version"] == previous
        if previous == BEFORE_LEASES:
            assert "function randflake_status()" not in old and "table randflake.node_leases" not in old
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT randflake_next(), note text)")
        conn.execute("INSERT INTO orders (note) SELECT 'before ' || n FROM generate_series(1, 2000) n")
        conn.execute("GRANT EXECUTE ON FUNCTION randflake_decode(bigint) TO reporting")
        before = ids_and_parts(conn)

        conn.execute("ALTER EXTENSION randflake_pg UPDATE")
        updated = extension_objects(conn)
        assert ids_and_parts(conn) == before
        conn.execute("INSERT INTO orders (note) SELECT 'after ' || n FROM generate_series(1, 2000) n")
        assert conn.execute("SELECT count(*), count(DISTINCT id) FROM orders").fetchone() == (4000, 4000)
        assert conn.execute("SELECT has_function_privilege('reporting', 'randflake_decode(bigint)', 'EXECUTE')").fetchone()[0]

    with cluster.connect("fresh") as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("GRANT EXECUTE ON FUNCTION randflake_decode(bigint) TO reporting")
        fresh = extension_objects(conn)

    assert fresh["extension"]["version"] == CURRENT
    assert updated == fresh


def test_the_keepers_database_on_the_previous_release_waits_for_the_update(make_cluster):
    """The upgrade order the DBA guide gives: after the restart onto the new library, IDs wait
    until the lease keeper's database is updated, and then flow without a restart."""
    cluster = make_cluster()
    cluster.start()
    with cluster.connect() as conn:
        conn.execute(f"CREATE EXTENSION randflake_pg VERSION '{BEFORE_LEASES}'")
        error = sql_error(conn, "SELECT randflake_next()")
        assert error.sqlstate == "55000"
        assert "ALTER EXTENSION randflake_pg UPDATE" in error.diag.message_hint
        conn.execute("ALTER EXTENSION randflake_pg UPDATE")
        assert wait_for(
            lambda: status(conn)["state"] == "active",
            timeout=15,
            what="the keeper to lease once the lease table exists",
        )
        assert conn.execute("SELECT count(DISTINCT randflake_next()) FROM generate_series(1, 1000)").fetchone()[0] == 1000


DECODERS = ["randflake_decode(bigint)", "randflake_timestamp(bigint)", "randflake_node_id(bigint)", "randflake_sequence(bigint)"]


def grants_of(conn, role: str) -> dict[str, bool]:
    """What `role` may do with the extension's restricted objects."""
    checks = {decoder: f"has_function_privilege('{role}', '{decoder}', 'EXECUTE')" for decoder in DECODERS}
    checks["randflake_status()"] = f"has_function_privilege('{role}', 'randflake_status()', 'EXECUTE')"
    for privilege in ["SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"]:
        checks[f"{privilege} on the lease table"] = f"has_table_privilege('{role}', 'randflake.node_leases', '{privilege}')"
    checks["CREATE in schema randflake"] = f"has_schema_privilege('{role}', 'randflake', 'CREATE')"
    row = conn.execute("SELECT " + ", ".join(checks.values())).fetchone()
    return dict(zip(checks, row))


def test_default_privileges_give_no_role_anything_of_the_extension(make_cluster):
    """ALTER DEFAULT PRIVILEGES naming a role, in force when CREATE EXTENSION or an update from
    0.4.0 runs, give that role nothing of randflake_pg: decoding stays granted to nobody and the
    lease table writable by superusers only, each revocation named in a NOTICE. A grant by name
    made before the update survives it, and one made afterwards works."""
    cluster = make_cluster()
    cluster.start()
    defaults = [
        "ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO reporting",
        "ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO reporting",
        "ALTER DEFAULT PRIVILEGES GRANT ALL ON SCHEMAS TO reporting",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO reporting",
    ]
    with cluster.connect() as admin:
        admin.execute("CREATE ROLE reporting LOGIN")
        admin.execute("CREATE ROLE auditor LOGIN")
        admin.execute("CREATE DATABASE updated")
        for statement in defaults:
            admin.execute(statement)
        notices: list[str] = []
        admin.add_notice_handler(lambda notice: notices.append(notice.message_primary))
        admin.execute("CREATE EXTENSION randflake_pg")
        assert any("revoked EXECUTE on FUNCTION public.randflake_decode(bigint) from reporting" in n for n in notices), notices
        assert not any(grants_of(admin, "reporting").values()), grants_of(admin, "reporting")
        public_functions = ["randflake_next()", "randflake_to_string(bigint)", "randflake_from_string(text)"]
        for function in public_functions:
            assert admin.execute(f"SELECT has_function_privilege('auditor', '{function}', 'EXECUTE')").fetchone()[0]
        assert grants_of(admin, "pg_monitor")["randflake_status()"] and not grants_of(admin, "pg_monitor")["SELECT on the lease table"]
        admin.execute("GRANT EXECUTE ON FUNCTION randflake_decode(bigint) TO reporting")
        assert grants_of(admin, "reporting")["randflake_decode(bigint)"]

    with cluster.connect("updated") as conn:
        for statement in defaults:
            conn.execute(statement)
        conn.execute("CREATE EXTENSION randflake_pg VERSION '0.4.0'")
        before = grants_of(conn, "reporting")
        assert before["randflake_decode(bigint)"] and before["INSERT on the lease table"], "0.4.0 let default privileges through"
        conn.execute("GRANT EXECUTE ON FUNCTION randflake_timestamp(bigint) TO auditor")
        conn.execute("ALTER EXTENSION randflake_pg UPDATE")
        assert not any(grants_of(conn, "reporting").values()), grants_of(conn, "reporting")
        assert grants_of(conn, "auditor") == {**{name: False for name in grants_of(conn, "auditor")}, "randflake_timestamp(bigint)": True}
        with cluster.connect("updated", user="reporting") as reporting:
            assert sql_error(reporting, "SELECT randflake_node_id(1)").sqlstate == "42501"
            assert sql_error(reporting, "DELETE FROM randflake.node_leases").sqlstate == "42501"
