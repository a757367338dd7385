"""The secret cannot be read, nor its length learnt, by a role that is neither superuser nor a
member of pg_read_all_settings, by any route PostgreSQL offers; and it is in no log line and no
dump. The server here keeps its secret in postgresql.conf (randflake.secret), the setup with the
most routes to leak it, and logs everything at DEBUG5."""

from __future__ import annotations

import re
import subprocess

import psycopg
import pytest

from lib.cluster import wait_for

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
        # pg_settings and SHOW ALL leave the row out for such a role.
        assert conn.execute("SELECT count(*) FROM pg_settings WHERE name = 'randflake.secret'").fetchone() == (0,)
        assert "randflake.secret" not in [row[0] for row in conn.execute("SHOW ALL").fetchall()]

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


# A secret a DBA might type that is not the one configured: only the statement's parse tree can
# tell that it is one. It starts with digits, as the unquoted-value case needs.
TYPED = "0123456789abcdef0123456789abcdef"
PIECES = re.compile(r"[0-9a-f]{8,}", re.IGNORECASE)


def assert_no_piece(text: str, where: str, secrets: tuple[str, ...] = (SECRET, TYPED)) -> None:
    """No run of eight or more consecutive hex digits of either secret, in either case."""
    for run in PIECES.finditer(text):
        for secret in secrets:
            for start in range(len(run[0]) - 7):
                line = text[text.rfind("\n", 0, run.start()) + 1 : text.find("\n", run.end())]
                assert run[0][start : start + 8].lower() not in secret, f"{where}: a piece of a secret in {line!r}"


# Each route a superuser might take to put a secret into SQL, and whether refusing it ends the
# session (anything not straight from the client, where an exception handler could swallow an
# ERROR). `SECRET` (the configured one) is typed only where no parse tree can show the setting.
SQL_ROUTES = [
    (f"ALTER SYSTEM SET randflake.secret = '{TYPED}'", False),
    (f"ALTER SYSTEM SET U&\"randfl\\0061ke.secret\" = '{TYPED}'", False),
    (f"ALTER SYSTEM SET \"RANDFLAKE\".\"Secret\" TO '{TYPED}'", False),
    (f"SET randflake.secret = '{TYPED}'", False),
    (f"BEGIN; SET LOCAL randflake.secret = '{TYPED}'; COMMIT", False),
    (f"ALTER ROLE monitor SET randflake.secret = '{TYPED}'", False),
    (f"ALTER DATABASE postgres SET randflake.secret = '{TYPED}'", False),
    (f"CREATE FUNCTION keyed() RETURNS int LANGUAGE sql SET randflake.secret = '{TYPED}' AS 'SELECT 1'", False),
    (f"SELECT set_config('randflake.secret', '{TYPED}', false)", True),
    (f"SELECT set_config(E'randfl\\x61ke.s' || 'ecret', '{TYPED}', false)", True),
    (f"PREPARE keyed(text, text) AS SELECT set_config($1, $2, false); EXECUTE keyed('randflake.secret', '{TYPED}')", True),
    (f"DO $$BEGIN EXECUTE 'ALTER SYSTEM SET randflake.secret = ''{TYPED}'''; END$$", True),
    (
        f"DO $$BEGIN EXECUTE 'ALTER SYSTEM SET U&\"randfl\\0061ke.secret\" = ''{TYPED}''';"
        " EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'caught'; END$$",
        True,
    ),
    (f"SELECT set_key('{SECRET}')", True),
    # The configured secret under a computed name: refused when it runs, and out of every view
    # and log line by value, whatever the spelling.
    (f"SELECT set_config('randflake.s' || 'ecret', '{SECRET}', false)", True),
    (f"DO $$BEGIN PERFORM set_config('randflake.s' || 'ecret', '{SECRET}', false); END$$", True),
    (f"PREPARE configured(text, text) AS SELECT set_config($1, $2, false); EXECUTE configured('randflake.secret', '{SECRET}')", True),
    (f"SELECT set_config(format('%s.%s', 'randflake', 'secret'), '{SECRET}', false)", True),
]


@pytest.mark.parametrize("preload", ["randflake_pg, pg_stat_statements, auto_explain", "pg_stat_statements, auto_explain, randflake_pg"])
def test_a_secret_typed_into_sql_reaches_no_view_and_no_log_line(make_cluster, preload):
    """Every SQL route is refused; a pg_monitor member finds no piece of the typed secret in
    pg_stat_activity (the superuser's session idle after its refused statement) or in
    pg_stat_statements (tracking nested and utility statements), before or after a restart; the
    log, with every statement, duration, plan and error statement logged, has none either."""
    cluster = make_cluster(
        "randflake.secret_file = ''",
        f"randflake.secret = '{SECRET}'",
        f"shared_preload_libraries = '{preload}'",
        "pg_stat_statements.track = all",
        "pg_stat_statements.track_utility = on",
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_nested_statements = on",
        "log_statement = 'all'",
        "log_min_duration_statement = 0",
        "log_min_error_statement = debug5",
        "log_parameter_max_length = -1",
        "log_parameter_max_length_on_error = -1",
        "log_error_verbosity = verbose",
    )
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("CREATE EXTENSION pg_stat_statements")
        conn.execute("CREATE ROLE monitor LOGIN IN ROLE pg_monitor")
        conn.execute(
            """CREATE FUNCTION set_key(key text) RETURNS text LANGUAGE plpgsql AS $$
               BEGIN RETURN set_config('randflake.secret', key, false);
               EXCEPTION WHEN OTHERS THEN RETURN 'caught'; END $$"""
        )
        assert conn.execute("SELECT randflake_next() IS NOT NULL").fetchone()[0]

    def visible_to_monitor() -> str:
        with cluster.connect(user="monitor") as monitor:
            activity = monitor.execute("SELECT coalesce(string_agg(query, ' '), '') FROM pg_stat_activity").fetchone()[0]
            statements = monitor.execute("SELECT coalesce(string_agg(query, ' '), '') FROM pg_stat_statements").fetchone()[0]
        return activity + " " + statements

    for statement, ends_session in SQL_ROUTES:
        superuser = cluster.connect()
        with pytest.raises(psycopg.Error) as refused:
            superuser.execute(statement)
        error = refused.value
        assert error.sqlstate == "55P02" or ends_session, f"{statement}: {error}"
        assert "randflake.secret cannot be given a value through SQL" in str(error), f"{statement}: {error}"
        assert ("the session ends" in str(error)) == ends_session, f"{statement}: {error}"
        assert superuser.broken == ends_session, f"{statement}: the session {'stayed' if ends_session else 'ended'}"
        assert_no_piece(visible_to_monitor(), f"pg_stat_activity/pg_stat_statements after {statement!r}")
        superuser.close()
    # The extended protocol: the name and the value as bound parameters, which log_statement
    # lists in a DETAIL line before the statement runs.
    with cluster.connect() as superuser, pytest.raises(psycopg.Error) as refused:
        superuser.execute("SELECT set_config(%s, %s, false)", ("randflake.secret", TYPED))
    assert "the session ends" in str(refused.value)
    with cluster.connect() as superuser, pytest.raises(psycopg.Error) as refused:
        superuser.execute("SELECT set_config(%s || %s, %s, false)", ("randflake.s", "ecret", SECRET))
    assert "the session ends" in str(refused.value)
    # A session left idle right after its refused statement shows only the hidden text.
    idle = cluster.connect()
    with pytest.raises(psycopg.Error):
        idle.execute(SQL_ROUTES[1][0])
    with cluster.connect(user="monitor") as monitor:
        shown = monitor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (idle.info.backend_pid,)).fetchone()[0]
    assert shown == "<statement hidden by randflake_pg: it gave randflake.secret a value>"
    idle.close()
    # The routes changed nothing: no value in postgresql.auto.conf, nothing planted in the
    # catalogs, the configured secret still keying IDs.
    assert TYPED not in (cluster.dir / "postgresql.auto.conf").read_text()
    with cluster.connect() as conn:
        assert conn.execute("SELECT count(*) FROM pg_db_role_setting WHERE array_to_string(setconfig, ',') ILIKE '%secret%'").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pg_proc WHERE proname = 'keyed'").fetchone() == (0,)
        parts = conn.execute("SELECT node_id FROM randflake_decode(randflake_next())").fetchone()
        assert parts is not None

    cluster.stop()
    cluster.start()
    assert_no_piece(visible_to_monitor(), "pg_stat_statements after a restart")
    log = cluster.log()
    assert "statement: <statement hidden by randflake_pg" in log and "duration:" in log
    assert_no_piece(log, "the server log")


def test_a_secret_written_into_postgresql_conf_is_not_logged(make_cluster):
    """The configuration file's own parser stops at an unquoted value's second token and quotes
    it in the reload's syntax error; randflake_pg hides the token of the secret's line, and only
    of that line. Once written right, the reload's change message hides the value."""
    cluster = make_cluster()
    cluster.start()
    cluster.configure("randflake.app_leases_per_role = 64 deadbeef", f"randflake.secret = {TYPED}")
    cluster.reload()
    wait_for(lambda: cluster.log().count("near token") >= 2, 10, "the reload's two syntax errors")
    log = cluster.log()
    assert 'near token "deadbeef"' in log, "another setting's token is shown as PostgreSQL wrote it"
    assert 'near token "(value hidden by randflake_pg)"' in log
    # Written right, the new secret is taken on reload, and the reload's message hides it too.
    lines = (cluster.dir / "postgresql.conf").read_text().splitlines()[:-2]
    lines += ["randflake.secret_file = ''", f"randflake.secret = '{TYPED}'"]
    (cluster.dir / "postgresql.conf").write_text("\n".join(lines) + "\n")
    cluster.reload()
    wait_for(lambda: "randflake.secret\" changed" in cluster.log(), 10, "the reload's change message")
    log = cluster.log()
    assert 'parameter "randflake.secret" changed (value hidden by randflake_pg)' in log
    assert_no_piece(log, "the server log", (TYPED,))


# Parsed with standard_conforming_strings on, then logged (duration) after the SET turned it off:
# read again under off, `'\'` never ends.
SETTINGS_CHANGED_MID_QUERY = "SET standard_conforming_strings = off; INSERT INTO t SELECT current_user; SET application_name = '\\';"


def settings_changed_in_one_query(app: psycopg.Connection) -> None:
    app.execute(SETTINGS_CHANGED_MID_QUERY)
    assert app.execute("SELECT count(*) FROM t WHERE who = 'app'").fetchone() == (1,)
    assert app.execute("SHOW application_name").fetchone() == ("\\",)


def prepared_before_settings_changed(app: psycopg.Connection) -> None:
    prepared = "INSERT INTO t SELECT 'prepared' WHERE '\\' <> ''"
    app.execute(prepared, prepare=True)
    app.execute("SET standard_conforming_strings = off")
    app.execute(prepared, prepare=True)
    assert app.execute("SELECT count(*) FROM t WHERE who = 'prepared'").fetchone() == (2,)


def escape_warned_about(app: psycopg.Connection) -> None:
    warnings: list[str] = []
    app.add_notice_handler(lambda notice: warnings.append(notice.message_primary))
    app.execute("SET standard_conforming_strings = off")
    app.execute("SET escape_string_warning = on")
    app.execute("INSERT INTO t SELECT 'escaped\\n'")
    assert warnings == ["nonstandard use of escape in a string literal"], warnings
    assert app.execute("SELECT count(*) FROM t WHERE who LIKE 'escaped%'").fetchone() == (1,)


@pytest.mark.parametrize("logging", ["log_min_duration_statement = 0", "log_statement = 'all'"])
@pytest.mark.parametrize("route", [settings_changed_in_one_query, prepared_before_settings_changed, escape_warned_about])
def test_the_log_filter_never_raises_whatever_settings_changed_since_the_parse(make_cluster, logging, route):
    """An emit_log_hook that raises turns a committed statement into an error for the client (who
    retries it and writes twice). By an ordinary role: a statement that changes how its own text
    parses, in one simple-protocol query; a prepared statement executed after the setting
    changed; a backslash that PostgreSQL warns about once (escape_string_warning). Each reaches
    the client as PostgreSQL made it, its row committed once, and the log says so once, with the
    statement as it was."""
    cluster = make_cluster(logging)
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("CREATE ROLE app LOGIN")
        conn.execute("CREATE TABLE t (who text)")
        conn.execute("GRANT ALL ON t TO app")
    with cluster.connect(user="app") as app:
        route(app)
    log = cluster.log()
    assert "unterminated quoted string" not in log and "syntax error" not in log
    assert log.count("nonstandard use of escape in a string literal") == (route is escape_warned_about)
    assert "INSERT INTO t SELECT" in log, "a statement that carries no secret is logged as it was"


def test_a_syntax_error_on_the_secrets_line_at_start_up_is_logged_in_clear(make_cluster):
    """What the-secret.md states: at start-up postgresql.conf is read before any library is
    loaded, so no filter stands between the configuration parser's syntax error and the log. An
    unquoted value that is a run of digits and letters followed by more digits is two tokens,
    and the second is quoted: up to 30 of the 32 digits. The server then does not start."""
    secret = "1a" + "".join(str(digit % 10) for digit in range(7, 37))
    cluster = make_cluster("randflake.secret_file = ''", f"randflake.secret = {secret}")
    assert cluster.start(check=False).returncode != 0
    assert f'near token "{secret[2:]}"' in cluster.log() and len(secret[2:]) == 30
