"""A database using the extension through pg_dump/pg_restore, and through DROP EXTENSION and a new
CREATE EXTENSION: column defaults, the lease table and grants come back; rows and IDs stay."""

from __future__ import annotations

import subprocess

from lib.cluster import pg_config, sql_error, status, wait_for
from lib.extension_catalog import extension_objects


def pg_tool(cluster, tool: str, *args: str) -> None:
    subprocess.run(
        [f"{pg_config('--bindir')}/{tool}", "-h", str(cluster.dir), "-p", str(cluster.port), "-U", "postgres", *args],
        check=True,
        capture_output=True,
        text=True,
    )


def orders(conn) -> list[tuple]:
    return conn.execute("SELECT id, note FROM orders ORDER BY id").fetchall()


def id_default(conn) -> str | None:
    return conn.execute(
        "SELECT column_default FROM information_schema.columns WHERE table_name = 'orders' AND column_name = 'id'"
    ).fetchone()[0]


def app_database(cluster) -> None:
    """Database `app`, the lease keeper's: a keyed table, and grants beyond the defaults on a
    function and on the lease table."""
    with cluster.connect() as conn:
        conn.execute("CREATE DATABASE app")
        conn.execute("CREATE ROLE reporting")
    with cluster.connect("app") as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT randflake_next(), note text)")
        conn.execute("INSERT INTO orders (note) SELECT 'order ' || n FROM generate_series(1, 2000) n")
        conn.execute("GRANT EXECUTE ON FUNCTION randflake_decode(bigint) TO reporting")
        conn.execute("GRANT USAGE ON SCHEMA randflake TO reporting")
        conn.execute("GRANT SELECT ON randflake.node_leases TO reporting")


def test_pg_dump_and_pg_restore_round_trip(make_cluster, tmp_path):
    cluster = make_cluster("randflake.database = 'app'")
    cluster.start()
    app_database(cluster)
    dump = tmp_path / "app.dump"
    pg_tool(cluster, "pg_dump", "--format=custom", f"--file={dump}", "app")
    with cluster.connect() as conn:
        conn.execute("CREATE DATABASE restored")
    pg_tool(cluster, "pg_restore", "--exit-on-error", "--dbname=restored", str(dump))

    with cluster.connect("app") as app, cluster.connect("restored") as restored:
        assert extension_objects(restored) == extension_objects(app)
        assert id_default(restored) == id_default(app) == "randflake_next()"
        assert orders(restored) == orders(app)
        # Lease rows stay with the server that wrote them: a restored copy is another server's
        # database, which takes its own leases.
        assert app.execute("SELECT count(*) FROM randflake.node_leases").fetchone()[0] >= 1
        assert restored.execute("SELECT count(*) FROM randflake.node_leases").fetchone()[0] == 0
        restored.execute("INSERT INTO orders (note) SELECT 'restored ' || n FROM generate_series(1, 2000) n")
        assert restored.execute("SELECT count(*), count(DISTINCT id) FROM orders").fetchone() == (4000, 4000)
        assert restored.execute("SELECT has_table_privilege('reporting', 'randflake.node_leases', 'SELECT')").fetchone()[0]


def test_drop_extension_and_create_it_again(make_cluster):
    cluster = make_cluster("randflake.database = 'app'")
    cluster.start()
    app_database(cluster)
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")  # untouched, for comparison
        fresh = extension_objects(conn)

    with cluster.connect("app") as conn:
        kept = orders(conn)
        error = sql_error(conn, "DROP EXTENSION randflake_pg")
        assert error.sqlstate == "2BP01"
        assert "default value for column id of table orders" in error.diag.message_detail
        assert orders(conn) == kept and id_default(conn) == "randflake_next()"

        conn.execute("DROP EXTENSION randflake_pg CASCADE")
        assert id_default(conn) is None
        assert orders(conn) == kept
        assert conn.execute("SELECT to_regnamespace('randflake')").fetchone()[0] is None

        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("ALTER TABLE orders ALTER COLUMN id SET DEFAULT randflake_next()")
        # A new extension: its own objects and default privileges, not the dropped one's grants.
        assert extension_objects(conn) == fresh
        wait_for(
            lambda: status(conn)["state"] == "active",
            timeout=20,
            what="a lease in the re-created lease table",
        )
        conn.execute("INSERT INTO orders (note) SELECT 'again ' || n FROM generate_series(1, 2000) n")
        assert conn.execute("SELECT count(*), count(DISTINCT id) FROM orders").fetchone() == (4000, 4000)
        assert set(kept) <= set(orders(conn))
