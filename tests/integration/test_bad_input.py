"""The bad-input matrix: every kind of wrong input the extension can be handed, each with the
SQLSTATE and message it must get. After each one the server still answers, the rows made before
are intact, and IDs are still issued.

One running cluster serves the whole matrix; rejected settings go through ALTER SYSTEM, whose
validation is the same check that runs at start-up and on reload.
"""

from __future__ import annotations

import dataclasses

import psycopg
import pytest

from lib.cluster import wait_for, write_server_file

VALID = "00112233445566778899aabbccddeeff"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    statement: str
    sqlstate: str | None  # None: no error, and the statement returns NULL / no rows
    message: str = ""  # a fragment the primary message must contain
    as_role: str = "postgres"


def string_case(name: str, text: str, reason: str) -> Case:
    literal = "'" + text.replace("'", "''") + "'"
    return Case(f"string {name}", f"SELECT randflake_from_string({literal})", "22P02", reason)


def setting_case(name: str, setting: str, value: str, message: str) -> Case:
    return Case(f"setting {name}", f"ALTER SYSTEM SET {setting} = {value}", "22023", message)


SECRET_THROUGH_SQL = "randflake.secret cannot be given a value through SQL"

# Secrets of every wrong shape, and the reason the setting's check gives for each.
MALFORMED_SECRETS = {
    "secret too short": ("'abc'", "the secret has 3 characters"),
    "secret of 31 digits": (f"'{VALID[:31]}'", "the secret has 31 characters"),
    "secret of 33 digits": (f"'{VALID}0'", "the secret has 33 characters"),
    "secret of 64 digits": (f"'{VALID * 2}'", "the secret has 64 characters"),
    "secret not hex": (f"'{'z' * 32}'", "the secret has a non-hexadecimal character at position 0"),
    "secret with spaces": (f"'{VALID[:16]} {VALID[17:]}'", "the secret has a non-hexadecimal character at position 16"),
    "secret with 0x": (f"'0x{VALID}'", "the secret has 34 characters"),
}


def secret_through_sql(name: str, value: tuple[str, str]) -> Case:
    return Case(f"setting {name}", f"ALTER SYSTEM SET randflake.secret = {value[0]}", "55P02", SECRET_THROUGH_SQL)


CASES = [
    # Strings that are not the canonical form of an ID.
    string_case("empty", "", "the string is empty"),
    string_case("leading zero", "00", "leading zero"),
    string_case("upper case", "1V", "upper-case character 'V' at position 1"),
    string_case("all upper case", "ABC", "upper-case character 'A' at position 0"),
    string_case("padding", "abc=", "is not a base32hex digit"),
    string_case("fourteen digits", "10000000000000", "more than the 13 an ID can need"),
    string_case("a thousand digits", "1" * 1000, '"11111111111111111111111111111111…": the string has 1000 characters'),
    string_case("overflow", "vvvvvvvvvvvvv", "does not fit in 64 bits"),
    string_case("just past 64 bits", "g000000000000", "does not fit in 64 bits"),
    string_case("outside the alphabet", "w", "is not a base32hex digit"),
    string_case("non-ASCII", "é", "is not a base32hex digit"),
    string_case("full-width digit", "１", "is not a base32hex digit"),
    string_case("control character", "\x01", "character '\\u{1}' at position 0 is not a base32hex digit"),
    string_case("leading space", " 1", "is not a base32hex digit"),
    string_case("sign", "-1", "is not a base32hex digit"),
    # NULL in: STRICT functions answer NULL (or no row), never an error or an ID.
    Case("NULL to randflake_from_string", "SELECT randflake_from_string(NULL)", None),
    Case("NULL to randflake_to_string", "SELECT randflake_to_string(NULL)", None),
    Case("NULL to randflake_decode", "SELECT * FROM randflake_decode(NULL)", None),
    Case("NULL to randflake_timestamp", "SELECT randflake_timestamp(NULL)", None),
    Case("NULL to randflake_node_id", "SELECT randflake_node_id(NULL)", None),
    Case("NULL to randflake_sequence", "SELECT randflake_sequence(NULL)", None),
    # Secrets, as values: SQL refuses every one, valid or not, before looking at it (the check of
    # each value as postgresql.conf gives it is test_a_malformed_secret_is_rejected_on_reload).
    *(secret_through_sql(name, value) for name, value in MALFORMED_SECRETS.items()),
    # Secrets, as files (created by the fixture below).
    setting_case("missing key file", "randflake.secret_file", "'missing.key'", "invalid randflake.secret_file"),
    setting_case("key file readable by others", "randflake.secret_file", "'bad-0644.key'", "invalid randflake.secret_file"),
    setting_case("key file readable by the group", "randflake.secret_file", "'bad-0640.key'", "invalid randflake.secret_file"),
    setting_case("unreadable key file", "randflake.secret_file", "'bad-0000.key'", "invalid randflake.secret_file"),
    setting_case("empty key file", "randflake.secret_file", "'bad-empty.key'", "invalid randflake.secret_file"),
    setting_case("short key file", "randflake.secret_file", "'bad-short.key'", "invalid randflake.secret_file"),
    setting_case("non-hex key file", "randflake.secret_file", "'bad-nonhex.key'", "invalid randflake.secret_file"),
    setting_case("key file is a directory", "randflake.secret_file", "'pg_wal'", "invalid randflake.secret_file"),
    # Node ranges and the other settings.
    setting_case("node_id_min negative", "randflake.node_id_min", "-1", "outside the valid range"),
    setting_case("node_id_max past the last node", "randflake.node_id_max", "131072", "outside the valid range"),
    setting_case("node_id_min above node_id_max", "randflake.node_id_min", "2000", "is greater than randflake.node_id_max"),
    setting_case("node_id_max below node_id_min", "randflake.node_id_max", "5", "is greater than randflake.node_id_max"),
    setting_case("lease too short", "randflake.lease_seconds", "4", "outside the valid range"),
    setting_case("lease too long", "randflake.lease_seconds", "86401", "outside the valid range"),
    setting_case("empty fleet block", "randflake.fleet_block_size", "0", "outside the valid range"),
    setting_case("unknown node source", "randflake.node_source", "'sideways'", "invalid value for parameter"),
    setting_case("unqualified fleet table", "randflake.fleet_lease_table", "'node_leases'", "not a schema-qualified table name"),
    setting_case("upper-case fleet table", "randflake.fleet_lease_table", "'Fleet.Leases'", "not a schema-qualified table name"),
    setting_case("fleet table with SQL", "randflake.fleet_lease_table", "'a.b; DROP TABLE c'", "not a schema-qualified table name"),
    setting_case("negative leases per role", "randflake.app_leases_per_role", "-1", "outside the valid range"),
    setting_case("empty keeper database", "randflake.database", "''", "randflake.database must name a database"),
    # Settings that cannot change in a running server, even for a superuser.
    Case("SET a node range", "SET randflake.node_id_min = 5", "55P02", "cannot be changed without restarting"),
    Case("SET the secret", f"SET randflake.secret = '{VALID}'", "55P02", SECRET_THROUGH_SQL),
    Case("SET the key file", "SET randflake.secret_file = 'x'", "55P02", "cannot be changed now"),
    # An ordinary role.
    Case("decode without privilege", "SELECT * FROM randflake_decode(1)", "42501", "permission denied for function", "app"),
    Case("timestamp without privilege", "SELECT randflake_timestamp(1)", "42501", "permission denied for function", "app"),
    Case("node id without privilege", "SELECT randflake_node_id(1)", "42501", "permission denied for function", "app"),
    Case("sequence without privilege", "SELECT randflake_sequence(1)", "42501", "permission denied for function", "app"),
    Case("status without privilege", "SELECT * FROM randflake_status()", "42501", "permission denied for function", "app"),
    Case("SET without privilege", "SET randflake.app_leases_per_role = 5", "55P02", "cannot be changed now", "app"),
    Case("ALTER SYSTEM of the secret without privilege", f"ALTER SYSTEM SET randflake.secret = '{VALID}'", "55P02", SECRET_THROUGH_SQL, "app"),
    Case("ALTER SYSTEM without privilege", "ALTER SYSTEM SET randflake.app_leases_per_role = 64", "42501", "permission denied to set parameter", "app"),
    # 18 words the refusal "permission denied to examine", earlier majors "must be superuser or ...".
    Case("SHOW the secret without privilege", "SHOW randflake.secret", "42501", 'to examine "randflake.secret"', "app"),
    Case("read the lease table", "SELECT * FROM randflake.node_leases", "42501", "permission denied for schema", "app"),
    Case(
        "forge a lease",
        "INSERT INTO randflake.node_leases VALUES (0, 9, 'x', 'x', 1900000000, 1900000100, 1900000000, now())",
        "42501",
        "permission denied",
        "app",
    ),
    Case("end every lease", "DELETE FROM randflake.node_leases", "42501", "permission denied", "app"),
    Case("move a lease", "UPDATE randflake.node_leases SET lease_end = lease_end + 1", "42501", "permission denied", "monitor"),
    # Even a superuser cannot break the lease rules.
    Case("shrink the live lease below its mark", "UPDATE randflake.node_leases SET lease_end = used_through - 1", "23514", "used_through_within_lease"),
    Case("move the high-water mark back", "UPDATE randflake.node_leases SET used_through = used_through - 1", "23000", "cannot move back"),
    Case(
        "overlap the live lease",
        "INSERT INTO randflake.node_leases SELECT first_node, last_node, 'x', 'x', lease_start + 1, lease_end + 1, lease_start + 1, now() FROM randflake.node_leases",
        "23P01",
        "overlaps or precedes",
    ),
]


# The C functions written by hand read their arguments through one wrapper (src/pg/entry.rs) that
# checks the call's count and NULLs: declared by hand over the library's symbols with fewer
# arguments, or without STRICT, they refuse with an ERROR instead of reading past the call.
GLUE = (
    "CREATE SCHEMA glue",
    "CREATE FUNCTION glue.out_without_argument() RETURNS cstring LANGUAGE c"
    " AS 'randflake_pg', 'randflake_key_out_wrapper'",
    "CREATE FUNCTION glue.in_without_argument() RETURNS bigint LANGUAGE c"
    " AS 'randflake_pg', 'randflake_key_in_wrapper'",
    "CREATE FUNCTION glue.cast_taking_null(bigint) RETURNS bigint LANGUAGE c"
    " AS 'randflake_pg', 'randflake_key_from_id_wrapper'",
    "CREATE FUNCTION glue.send_taking_null(bigint) RETURNS bytea LANGUAGE c"
    " AS 'randflake_pg', 'randflake_key_send_wrapper'",
    "CREATE PROCEDURE glue.acquire_without_seconds(text) LANGUAGE c"
    " AS 'randflake_pg', 'randflake_lease_acquire_procedure'",
)
CASES += [
    Case("glue: output called without its argument", "SELECT glue.out_without_argument()", "XX000",
         "read argument 1 of a call that has 0"),
    Case("glue: input called without its argument", "SELECT glue.in_without_argument()", "XX000",
         "read argument 1 of a call that has 0"),
    Case("glue: cast given a NULL", "SELECT glue.cast_taking_null(NULL)", "22004",
         "argument 1 of a C function that takes no NULL is NULL"),
    Case("glue: send given a NULL", "SELECT glue.send_taking_null(NULL)", "22004",
         "argument 1 of a C function that takes no NULL is NULL"),
    Case("glue: procedure called without its seconds", "CALL glue.acquire_without_seconds('h')", "XX000",
         "read argument 2 of a call that has 1"),
]


POSTGRES_OWN = (
    "outside the valid range",
    "invalid value for parameter",
    "cannot be changed",
    "permission denied",
    "must be superuser",
    "to examine",
    "used_through_within_lease",
)


@pytest.fixture(scope="module")
def server(request):
    from lib.cluster import Cluster

    cluster = Cluster("bad-input-matrix", ("randflake.node_id_min = 10", "randflake.node_id_max = 1000"))
    keys = {
        "bad-0644.key": (VALID, 0o644),
        "bad-0640.key": (VALID, 0o640),
        "bad-0000.key": (VALID, 0o000),
        "bad-empty.key": ("", 0o600),
        "bad-short.key": (VALID[:31], 0o600),
        "bad-nonhex.key": ("q" * 32, 0o600),
    }
    for name, (content, mode) in keys.items():
        write_server_file(cluster.dir / name, content, mode)
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        for statement in GLUE:
            conn.execute(statement)
        conn.execute("CREATE ROLE app LOGIN")
        conn.execute("CREATE ROLE monitor LOGIN IN ROLE pg_monitor")
        conn.execute("CREATE TABLE kept (id bigint PRIMARY KEY DEFAULT randflake_next(), n int)")
        conn.execute("INSERT INTO kept (n) SELECT g FROM generate_series(1, 1000) g")
        conn.execute("GRANT SELECT, INSERT ON kept TO app")
        kept = conn.execute("SELECT count(*), sum(id::numeric), sum(n) FROM kept").fetchone()
    yield cluster, kept
    cluster.destroy()


def test_the_matrix_is_at_least_forty_cases():
    assert len(CASES) >= 40
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_bad_input(server, case: Case):
    cluster, kept = server
    with cluster.connect(user=case.as_role) as conn:
        if case.sqlstate is None:
            rows = conn.execute(case.statement).fetchall()
            assert rows in ([], [(None,)]), rows
        else:
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(case.statement)
            error = caught.value
            assert error.sqlstate == case.sqlstate, (error.sqlstate, str(error))
            assert case.message in error.diag.message_primary, error.diag.message_primary
            # PostgreSQL's own checks (ranges, privileges, contexts, CHECK constraints) come
            # without a HINT; every error the extension raises has one.
            if not any(text in case.message for text in POSTGRES_OWN):
                assert error.diag.message_hint, f"no HINT for {case.name}"
    # The server, the rows made before and the ID space are intact.
    with cluster.connect() as conn:
        assert conn.execute("SELECT count(*), sum(id::numeric), sum(n) FROM kept").fetchone() == kept
        assert conn.execute("SELECT count(*) FROM pg_file_settings WHERE error IS NOT NULL").fetchone()[0] == 0
        conn.execute("INSERT INTO kept (n) VALUES (0) RETURNING id").fetchone()
        conn.execute("DELETE FROM kept WHERE n = 0")
        assert conn.execute("SELECT state FROM randflake_status()").fetchone()[0] == "active"


@pytest.mark.parametrize("name", MALFORMED_SECRETS)
def test_a_malformed_secret_is_rejected_on_reload(server, name: str):
    """Where a secret belongs, postgresql.conf, each malformed value is rejected by the setting's
    check with its reason and without being quoted; the server keeps its secret."""
    cluster, kept = server
    value, reason = MALFORMED_SECRETS[name]
    conf = cluster.dir / "postgresql.conf"
    original = conf.read_text()
    logged = len(cluster.log())
    try:
        cluster.configure(f"randflake.secret = {value}")
        cluster.reload()
        wait_for(lambda: "invalid value for randflake.secret" in cluster.log()[logged:], 10, "the reload's rejection")
        rejection = cluster.log()[logged:]
        assert f"invalid value for randflake.secret: {reason}" in rejection, rejection
        assert value.strip("'") not in rejection
    finally:
        conf.write_text(original)
        cluster.reload()
    with cluster.connect() as conn:
        assert conn.execute("SELECT randflake_decode(randflake_next()) IS NOT NULL").fetchone() == (True,)
        assert conn.execute("SELECT count(*), sum(id::numeric), sum(n) FROM kept").fetchone() == kept
