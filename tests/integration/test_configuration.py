"""Preloading and the secret: every misconfiguration fails clearly, and the secret never shows."""

from __future__ import annotations

import pytest

from lib.cluster import ROOT, sql_error, wait_for, write_server_file

OTHER_SECRET = "5ec2e75ec2e75ec2e75ec2e75ec2e75e"


def assert_secret_not_logged(cluster, *secrets: str) -> None:
    log = cluster.log().lower()
    for secret in (cluster.key_hex, *secrets):
        assert secret.lower() not in log
        # Not even a recognisable half of it.
        assert secret.lower()[:16] not in log and secret.lower()[16:] not in log


def test_without_preload_create_extension_and_every_function_refuse(make_cluster):
    cluster = make_cluster()
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    cluster.stop()
    cluster.configure("shared_preload_libraries = ''")
    cluster.start()
    with cluster.connect() as conn:
        for statement in [
            "SELECT randflake_next()",
            "SELECT randflake_to_string(1)",
            "SELECT randflake_from_string('1')",
            "SELECT * FROM randflake_decode(1)",
            "SELECT randflake_timestamp(1)",
            "LOAD 'randflake_pg'",
        ]:
            error = sql_error(conn, statement)
            assert error.sqlstate == "55000", statement
            assert error.diag.message_primary == "randflake_pg must be loaded via shared_preload_libraries"
            assert "shared_preload_libraries" in error.diag.message_hint
        conn.execute("DROP EXTENSION randflake_pg")
        error = sql_error(conn, "CREATE EXTENSION randflake_pg")
        assert error.sqlstate == "55000"
        assert error.diag.message_primary == "randflake_pg must be loaded via shared_preload_libraries"
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'randflake_pg'").fetchone() == (0,)


def test_without_a_secret_generation_and_decoding_refuse(make_cluster):
    cluster = make_cluster("randflake.secret_file = ''")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        for statement in [
            "SELECT randflake_next()",
            "SELECT * FROM randflake_decode(1)",
            "SELECT randflake_timestamp(1)",
            "SELECT randflake_node_id(1)",
            "SELECT randflake_sequence(1)",
        ]:
            error = sql_error(conn, statement)
            assert error.sqlstate == "55000"
            assert error.diag.message_primary == "randflake_pg has no secret configured"
            assert "randflake.secret_file" in error.diag.message_hint
        # Conversions need no secret.
        assert conn.execute("SELECT randflake_to_string(31)").fetchone() == ("v",)


def test_both_secret_settings_are_refused(make_cluster):
    cluster = make_cluster(f"randflake.secret = '{OTHER_SECRET}'")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        error = sql_error(conn, "SELECT randflake_next()")
        assert error.sqlstate == "F0000"
        assert error.diag.message_primary == "both randflake.secret and randflake.secret_file are set"
    assert_secret_not_logged(cluster, OTHER_SECRET)


def test_the_secret_setting_keys_ids_like_the_file(make_cluster):
    from randflake.v2 import Config, Generator, Lease

    cluster = make_cluster("randflake.secret_file = ''", f"randflake.secret = '{OTHER_SECRET.upper()}'")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        rows = conn.execute(
            """SELECT s.id, extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
                 FROM (SELECT randflake_next() AS id FROM generate_series(1, 100)) s,
                      randflake_decode(s.id) d"""
        ).fetchall()
    reference = Generator(Config(lease=Lease(0, 1730000000, 2803741824), secret=bytes.fromhex(OTHER_SECRET)))
    for id_, second, node, sequence in rows:
        parts = reference.inspect(id_)
        assert (parts.timestamp, parts.node_id, parts.sequence) == (second, node, sequence)
    assert_secret_not_logged(cluster, OTHER_SECRET)


@pytest.mark.parametrize(
    "settings, key_file, expected",
    [
        (
            ["randflake.secret_file = ''", "randflake.secret = 'c0ffee'"],
            None,
            "invalid value for randflake.secret: the secret has 6 characters; it must be exactly 32 hexadecimal digits",
        ),
        (
            ["randflake.secret_file = ''", f"randflake.secret = '{OTHER_SECRET[:-1]}z'"],
            None,
            "invalid value for randflake.secret: the secret has a non-hexadecimal character at position 31",
        ),
        (
            ["randflake.secret_file = '/nonexistent/randflake.key'"],
            None,
            'invalid randflake.secret_file "/nonexistent/randflake.key": the key file cannot be read: No such file or directory',
        ),
        (
            ["randflake.secret_file = 'open.key'"],
            ("open.key", OTHER_SECRET, 0o644),
            'invalid randflake.secret_file "open.key": the key file has permissions 0644; it must not be accessible to group or others',
        ),
        (
            ["randflake.secret_file = 'short.key'"],
            ("short.key", OTHER_SECRET[:20], 0o600),
            'invalid randflake.secret_file "short.key": the secret has 20 characters; it must be exactly 32 hexadecimal digits',
        ),
    ],
    ids=["short-secret", "non-hex-secret", "missing-file", "world-readable-file", "short-file"],
)
def test_a_bad_secret_stops_the_server_from_starting(make_cluster, settings, key_file, expected):
    cluster = make_cluster(*settings)
    if key_file:
        name, content, mode = key_file
        write_server_file(cluster.dir / name, content, mode)
    result = cluster.start(check=False)
    assert result.returncode != 0
    log = cluster.log()
    assert expected in log
    assert "invalid randflake_pg settings in the server configuration" in log
    assert_secret_not_logged(cluster, OTHER_SECRET)


def test_reload_with_a_bad_secret_keeps_the_working_one(cluster):
    from randflake.v2 import Config, Generator, Lease

    reference = Generator(Config(lease=Lease(0, 1730000000, 2803741824), secret=cluster.key_bytes))
    write_server_file(cluster.dir / "bad.key", OTHER_SECRET[:30] + "xy")
    cluster.configure("randflake.secret_file = 'bad.key'")
    cluster.reload()
    with cluster.connect() as conn:
        id_, second, node, sequence = conn.execute(
            """SELECT s.id, extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
                 FROM (SELECT randflake_next() AS id) s, randflake_decode(s.id) d"""
        ).fetchone()
    parts = reference.inspect(id_)
    assert (parts.timestamp, parts.node_id, parts.sequence) == (second, node, sequence)
    assert 'invalid randflake.secret_file "bad.key": the secret has a non-hexadecimal character at position 30' in cluster.log()
    assert_secret_not_logged(cluster, OTHER_SECRET)


def test_ids_encrypted_ahead_are_dropped_when_the_secret_changes(make_cluster):
    """A backend encrypts IDs in runs and serves them during the second; after a reload with a
    new secret, the very next ID, in the same second and session, is under the new secret."""
    from randflake.v2 import Config, Generator, Lease

    secrets = [OTHER_SECRET, "0123456789abcdef0123456789abcdef"]
    cluster = make_cluster("randflake.secret_file = ''", f"randflake.secret = '{secrets[0]}'")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        for attempt in range(10):
            new = secrets[(attempt + 1) % 2]
            before = conn.execute("SELECT randflake_next(), extract(epoch FROM clock_timestamp())::bigint").fetchone()
            # SHOW masks the secret; a setting changed in the same reload tells when it applied.
            marker = str(100 + attempt)
            cluster.configure(f"randflake.secret = '{new}'", f"randflake.app_leases_per_role = {marker}")
            conn.execute("SELECT pg_reload_conf()")
            wait_for(
                lambda: conn.execute("SHOW randflake.app_leases_per_role").fetchone()[0] == marker,
                10,
                "the reload to apply",
                interval=0.001,  # tight: the IDs before and after should fall in one second
            )
            after_id, after_second = conn.execute(
                "SELECT randflake_next(), extract(epoch FROM clock_timestamp())::bigint"
            ).fetchone()
            parts = Generator(Config(lease=Lease(0, 1730000000, 2803741824), secret=bytes.fromhex(new))).inspect(after_id)
            assert abs(parts.timestamp - after_second) <= 1, f"ID not made under the new secret: {parts}"
            if before[1] == after_second:
                break  # the case that matters: same second, same session
        else:
            pytest.fail("never managed two IDs in the same second around a reload")
    assert_secret_not_logged(cluster, *secrets)


def test_statements_about_the_secret_stay_out_of_the_log(cluster):
    """log_statement copies statements into the log, and an error logs its statement: neither
    may carry a secret, whatever the spelling of the setting's name."""
    cluster.configure("log_statement = 'all'", "log_min_duration_statement = 0")
    cluster.reload()
    attempts = [
        f"ALTER SYSTEM SET randflake.secret = '{OTHER_SECRET[:-1]}z'",  # rejected by the check
        f"ALTER SYSTEM SET RANDFLAKE.SECRET = '{OTHER_SECRET[:-2]}'",  # rejected: too short
        f"ALTER SYSTEM SET randflake.secret = {OTHER_SECRET}",  # a syntax error quoting the key
        f"SELECT set_config('randflake.secret', '{OTHER_SECRET}', false)",  # cannot be changed now
    ]
    with cluster.connect() as conn:
        for statement in attempts:
            with pytest.raises(Exception):
                conn.execute(statement)
    log = cluster.log()
    assert "statement hidden by randflake_pg" in log
    assert_secret_not_logged(cluster, OTHER_SECRET, OTHER_SECRET[:-1], OTHER_SECRET[:-2])


def documented_settings(page: str, after: str) -> list[str]:
    """The randflake.* lines of the first code block after `after` on a docs page, as written
    (comments and all), leaving out the secret file's path, which is the test server's own."""
    text = (ROOT / "docs" / page).read_text()
    block = text[text.index(after):].split("```")[1]
    return [line.strip() for line in block.splitlines()
            if line.strip().startswith("randflake.") and not line.strip().startswith("randflake.secret_file")]


def test_the_documented_node_range_and_application_pool_start_a_server_together(make_cluster):
    """installing.md's node range and application-leases.md's example pool, as the pages write
    them: a DBA following both gets a server that starts and leases from the pool."""
    settings = documented_settings("installing.md", "Edit `postgresql.conf`") + documented_settings(
        "application-leases.md", "## Configuring the pool"
    )
    assert any(line.startswith("randflake.node_id_max") for line in settings), settings
    assert any(line.startswith("randflake.app_node_id_min") for line in settings), settings
    cluster = make_cluster(*settings)
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        first, last = conn.execute("SELECT pool_first, pool_last FROM randflake_app_leases()").fetchone()
        node = conn.execute("CALL randflake_lease_acquire('documented', 60, NULL, NULL, NULL)").fetchone()[0]
        assert first <= node <= last
