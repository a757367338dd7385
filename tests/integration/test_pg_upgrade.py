"""pg_upgrade from an older major to the suite's, with randflake_pg installed and IDs in tables.

The older installation is named by RANDFLAKE_UPGRADE_FROM (the pg_config of a PostgreSQL with
randflake_pg installed; `make test-all` passes its staged 15 to the 18 run; the suite's own
pg_config upgrades within one major, as pg_upgrade's own tests do). Proven on real servers and the
real pg_upgrade:
* pg_upgrade accepts the cluster (the new major has the library, and no lease keeper writes
  while it runs its servers in binary-upgrade mode);
* the upgraded server is a new holder (pg_upgrade gives it a new system identifier): as the DBA
  guide says, it leases its range again only from the second after the old server's lease ends,
  so no (second, node) of the old server is ever issued again;
* every old ID decodes on the upgraded server exactly as it did before, and a randflake_key
  column keeps its public IDs (strings and bigints) and its order, new keys sorting after it.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from lib.cluster import Cluster, as_owner, decoded_ids, pg_config, server_major, status, wait_for, write_server_file

OLD_PG_CONFIG = os.environ.get("RANDFLAKE_UPGRADE_FROM")
pytestmark = pytest.mark.skipif(not OLD_PG_CONFIG, reason="RANDFLAKE_UPGRADE_FROM names no older PostgreSQL")

# Short leases: the upgraded server waits for the old holder's lease to end.
# A randflake_key column's public IDs, in the order of the key.
KEYS = "SELECT id::text, id::bigint, n FROM keyed ORDER BY keyed.id"
SETTINGS = ("randflake.node_id_min = 10", "randflake.node_id_max = 209", "randflake.lease_seconds = 10")


def assert_key_index_intact(conn, old_keys) -> None:
    """The upgraded randflake_key index, which pg_upgrade carries over file by file, read through
    the index itself: its order is the old order, lookups by a string and by a bigint find their
    rows, and amcheck (where the installation has it) finds every heap row in it, in order."""
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET enable_bitmapscan = off")
    plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {KEYS}"))
    assert "Index Scan using keyed_pkey" in plan and "Sort" not in plan, plan
    assert conn.execute(KEYS).fetchall() == old_keys
    for text, public, n in old_keys[::997]:
        assert conn.execute("SELECT n FROM keyed WHERE id = %s", (text,)).fetchone() == (n,)
        assert conn.execute("SELECT n FROM keyed WHERE id = %s", (public,)).fetchone() == (n,)
    conn.execute("RESET enable_seqscan")
    conn.execute("RESET enable_bitmapscan")
    if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'amcheck'").fetchone():
        conn.execute("CREATE EXTENSION amcheck")
        conn.execute("SELECT bt_index_parent_check('keyed_pkey', heapallindexed => true)")


def test_pg_upgrade_keeps_every_id_and_reuses_no_second(make_cluster):
    old_bindir = pg_config("--bindir", OLD_PG_CONFIG)
    new_bindir = pg_config("--bindir")
    assert server_major(OLD_PG_CONFIG) <= server_major()

    old: Cluster = make_cluster(*SETTINGS, pg_config=OLD_PG_CONFIG)
    old.start()
    with old.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT randflake_next(), n int NOT NULL)")
        conn.execute("INSERT INTO orders (n) SELECT g FROM generate_series(1, 50000) g")
        old_ids = [row[0] for row in conn.execute("SELECT id FROM orders ORDER BY n")]
        old_decoded = decoded_ids(conn, old_ids)
        old_holder, old_lease_end = conn.execute("SELECT holder, lease_end FROM randflake.node_leases").fetchone()
        conn.execute("CREATE TABLE keyed (id randflake_key PRIMARY KEY DEFAULT randflake_next_key(), n int NOT NULL)")
        conn.execute("INSERT INTO keyed (n) SELECT g FROM generate_series(1, 20000) g")
        old_keys = conn.execute(KEYS).fetchall()
    old.stop()

    # Checksums as in the old cluster (18's initdb turns them on by default; 15's initdb knows no
    # --no-data-checksums); the same secret.
    new: Cluster = make_cluster(*SETTINGS, initdb_options="--no-data-checksums" if server_major() >= 18 else "")
    write_server_file(new.dir / "randflake.key", old.key_hex + "\n")
    work = pathlib.Path(f"{new.dir}.pg_upgrade")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    if os.getuid() == 0:
        shutil.chown(work, "postgres", "postgres")
    try:
        result = subprocess.run(
            as_owner([f"{new_bindir}/pg_upgrade", "-b", old_bindir, "-B", new_bindir, "-d", str(old.dir),
                      "-D", str(new.dir), "-p", str(old.port), "-P", str(new.port), "-U", "postgres",
                      f"--socketdir={work}", "--retain"]),
            cwd=work, capture_output=True, text=True,
        )
        logs = "".join(f"--- {log} ---\n{log.read_text(errors='replace')[-3000:]}\n"
                       for log in sorted(new.dir.glob("pg_upgrade_output.d/*/log/*.log")))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:] + logs
        # Both servers that pg_upgrade ran (in binary-upgrade mode) logged to this file.
        server_logs = "".join(log.read_text(errors="replace")
                              for log in new.dir.glob("pg_upgrade_output.d/*/log/pg_upgrade_server.log"))
        assert "database system is ready" in server_logs
        assert "randflake_pg keeper launcher" not in server_logs and "randflake_pg lease keeper" not in server_logs
    finally:
        shutil.rmtree(work, ignore_errors=True)

    new.start()
    with new.connect() as conn:
        assert decoded_ids(conn, old_ids) == old_decoded
        assert conn.execute(KEYS).fetchall() == old_keys
        assert_key_index_intact(conn, old_keys)
        wait_for(lambda: status(conn)["state"] == "active", 40, "the upgraded server's own lease")
        # Its own lease, after the old one; the old row, wholly before it, goes once the new
        # lease is renewed (a row is pruned only by a renewal of a later lease of its block).
        holder, lease_start = conn.execute(
            "SELECT holder, lease_start FROM randflake.node_leases ORDER BY lease_start DESC LIMIT 1").fetchone()
        assert holder != old_holder and lease_start > old_lease_end
        wait_for(lambda: conn.execute("SELECT array_agg(holder) FROM randflake.node_leases").fetchone()[0] == [holder],
                 20, "the old lease's row to be pruned")
        conn.execute("INSERT INTO orders (n) SELECT 50000 + g FROM generate_series(1, 50000) g")
        new_ids = [row[0] for row in conn.execute("SELECT id FROM orders WHERE n > 50000 ORDER BY n")]
        new_decoded = decoded_ids(conn, new_ids)
        assert conn.execute("SELECT count(DISTINCT id) FROM orders").fetchone()[0] == 100000
        conn.execute("INSERT INTO keyed (n) SELECT 20000 + g FROM generate_series(1, 1000) g")
        by_key = [row[0] for row in conn.execute("SELECT n FROM keyed ORDER BY id")]
        assert by_key[:20000] == [n for _, _, n in old_keys] and min(by_key[20000:]) > 20000
    old_seconds = {(second, node) for second, node, _ in old_decoded}
    assert not old_seconds & {(second, node) for second, node, _ in new_decoded}
    assert min(second for second, _, _ in new_decoded) > old_lease_end
    assert all(10 <= node <= 209 for _, node, _ in new_decoded)
