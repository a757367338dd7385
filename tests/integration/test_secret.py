"""The secret cannot be read, nor its length learnt, by a role that is neither superuser nor a
member of pg_read_all_settings, by any route PostgreSQL offers; and it is in no log line and no
dump. The server here keeps its secret in postgresql.conf (randflake.secret), the setup with the
most routes to leak it, and logs everything at DEBUG5."""

from __future__ import annotations

import re
import subprocess

import psycopg

SECRET = "c3a5e1d2b4f60718293a4b5c6d7e8f90"
# Sixteen or more hex digits with at least one letter: a piece of a key, not a decimal ID.
HEX_RUNS = re.compile(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{16,}\b", re.IGNORECASE)

ROUTES = [
    "SHOW randflake.secret",
    "SHOW randflake.secret_file",
    "SHOW ALL",
    "SELECT current_setting('randflake.secret')",
    "SELECT current_setting('randflake.secret', true)",
    "SELECT current_setting('randflake.secret', false)",
    "SELECT length(current_setting('randflake.secret', true))",
    "SELECT * FROM pg_settings WHERE name LIKE 'randflake%'",
    "SELECT * FROM pg_show_all_settings() WHERE name LIKE 'randflake%'",
    "SELECT * FROM pg_file_settings",
    "SELECT * FROM pg_db_role_setting",
    "SELECT pg_read_file('postgresql.conf')",
    "SELECT pg_read_file('postgresql.auto.conf')",
    "SELECT * FROM pg_ls_dir('.')",
    "SELECT set_config('randflake.secret', '00112233445566778899aabbccddeeff', true)",
    "RESET randflake.secret",
    "EXPLAIN (VERBOSE, COSTS OFF) SELECT randflake_next(), randflake_to_string(1), randflake_from_string('v')",
    "EXPLAIN (VERBOSE, ANALYZE, COSTS OFF, TIMING OFF) INSERT INTO t DEFAULT VALUES",
    "SELECT * FROM randflake_decode(1)",
    "SELECT randflake_timestamp(1), randflake_node_id(1), randflake_sequence(1)",
    "SELECT * FROM randflake_status()",
    "SELECT * FROM randflake.node_leases",
    "SELECT name, setting FROM pg_settings WHERE setting ~ '^[0-9a-f]{32}$'",
]


def text_of(conn: psycopg.Connection, statement: str) -> str:
    """Everything a client sees for a statement: rows, notices (at every level the connection
    asks for), and the error's message, detail and hint."""
    seen: list[str] = []
    handler = lambda notice: seen.append(f"{notice.severity} {notice.message_primary} {notice.message_detail}")  # noqa: E731
    conn.add_notice_handler(handler)
    try:
        cursor = conn.execute(statement)
        if cursor.description:
            seen.extend(repr(row) for row in cursor.fetchall())
    except psycopg.Error as error:
        seen.append(f"{error.sqlstate} {error.diag.message_primary} {error.diag.message_detail} {error.diag.message_hint}")
    finally:
        conn.remove_notice_handler(handler)
    return "\n".join(seen)


def assert_no_secret(text: str, where: str) -> None:
    lowered = text.lower()
    assert SECRET not in lowered and SECRET[:16] not in lowered and SECRET[16:] not in lowered, where
    # Nor any long hex run that could be a piece of it.
    assert not HEX_RUNS.search(text.replace("00112233445566778899aabbccddeeff", "")), where


def test_no_route_reveals_the_secret_to_an_ordinary_role(make_cluster):
    cluster = make_cluster(
        "randflake.secret_file = ''",
        f"randflake.secret = '{SECRET}'",
        "log_min_messages = debug5",
        "log_statement = 'all'",
        "log_min_error_statement = debug5",
    )
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("CREATE ROLE snoop LOGIN")
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT randflake_next())")
        conn.execute("GRANT ALL ON t TO snoop")
        # A superuser's mistakes, logged at every level, must not leak it either.
        for statement in [
            f"ALTER SYSTEM SET randflake.secret = '{SECRET[:31]}'",
            f"ALTER SYSTEM SET randflake.secret = '{SECRET}z'",
            f"ALTER ROLE snoop SET randflake.secret = '{SECRET}'",
            f"SET randflake.secret = '{SECRET}'",
        ]:
            text_of(conn, statement)
        conn.execute("SELECT pg_reload_conf()")

    with cluster.connect(user="snoop", options="-c client_min_messages=debug5") as conn:
        for statement in ROUTES:
            assert_no_secret(text_of(conn, statement), statement)
        # The routes are really closed, not merely empty.
        # (18 words the refusal "permission denied to examine", earlier majors "must be superuser
        # or have privileges of pg_read_all_settings to examine".)
        denied = text_of(conn, "SHOW randflake.secret").splitlines()[-1]
        assert denied.startswith("42501 ") and 'to examine "randflake.secret"' in denied, denied
        # missing_ok does not turn the refusal into a NULL (or a length) either.
        quiet = text_of(conn, "SELECT current_setting('randflake.secret', true)").splitlines()[-1]
        assert quiet.startswith("42501 ") and 'to examine "randflake.secret"' in quiet, quiet

    dump = subprocess.run(
        ["pg_dump", "-h", str(cluster.dir), "-p", str(cluster.port), "-U", "postgres", "postgres"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "randflake_next()" in dump
    assert_no_secret(dump, "pg_dump")
    log = cluster.log()
    assert "DEBUG" in log and "randflake.secret" in log
    assert SECRET not in log.lower() and SECRET[:16] not in log.lower() and SECRET[16:] not in log.lower()


def test_the_inline_secret_is_masked_for_monitoring_roles_and_superusers(make_cluster):
    """pg_monitor members may read superuser-only settings; the secret's show hook answers every
    route with whether it is set, never with its value, the superuser included."""
    cluster = make_cluster("randflake.secret_file = ''", f"randflake.secret = '{SECRET}'")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("CREATE ROLE monitor LOGIN IN ROLE pg_monitor")
        # The masked secret still keys IDs.
        conn.execute("SELECT randflake_decode(randflake_next())")
    routes = [
        "SHOW randflake.secret",
        "SELECT current_setting('randflake.secret')",
        "SELECT current_setting('randflake.secret', true)",
        "SELECT setting, reset_val, boot_val FROM pg_settings WHERE name = 'randflake.secret'",
        "SELECT name, setting FROM pg_show_all_settings() WHERE name = 'randflake.secret'",
        "SHOW ALL",
    ]
    for user in ["monitor", "postgres"]:
        with cluster.connect(user=user) as conn:
            for statement in routes:
                assert_no_secret(text_of(conn, statement), f"{statement} as {user}")
            assert conn.execute("SHOW randflake.secret").fetchone()[0] == "(set; hidden by randflake_pg)", user


def test_a_misspelt_setting_is_warned_about_and_the_effective_range_logged(make_cluster):
    cluster = make_cluster("randflake.node_id_mx = 100", "randflake.node_id_min = 7", "randflake.node_id_max = 99")
    cluster.start()
    log = cluster.log()
    assert 'invalid configuration parameter name "randflake.node_id_mx", removing it' in log
    assert 'randflake_pg: node source range, nodes 7..99, leased in database "postgres"; IDs encrypted 64 at a time with the ' in log
    with cluster.connect() as conn:
        assert conn.execute("SELECT count(*) FROM pg_settings WHERE name = 'randflake.node_id_mx'").fetchone()[0] == 0
        # Nor can a session make one up.
        error = text_of(conn, "SET randflake.no_such_setting = 1").splitlines()[-1]
        assert error.startswith("42602") and '"randflake" is a reserved prefix' in error, error
