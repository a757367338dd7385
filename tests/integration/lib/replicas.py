"""Streaming replicas of a test cluster: made with pg_basebackup, and promoted."""

from __future__ import annotations

import subprocess
import time

from lib.cluster import SCRIPT, Cluster, as_owner, pg_config, write_server_file


def make_standby(make_cluster, primary: Cluster, *settings: str) -> Cluster:
    """A streaming standby of `primary`: pg_basebackup -R into a fresh directory, with its own
    port and socket; later `settings` lines override the primary's postgresql.conf it copied.
    The copy includes the primary's randflake.key, so both servers share the secret."""
    standby = make_cluster()  # for its port, its directory and its clean-up; the contents go
    subprocess.run([SCRIPT, "destroy", standby.dir], check=True)
    bindir = pg_config("--bindir")
    subprocess.run(
        as_owner(
            [
                f"{bindir}/pg_basebackup",
                "-D", str(standby.dir),
                "-h", str(primary.dir),
                "-p", str(primary.port),
                "-U", "postgres",
                "-R", "-X", "stream", "-c", "fast", "--no-sync",
            ]
        ),
        check=True,
    )
    write_server_file(standby.dir / "server.log", "")  # the primary's log came along
    standby.configure(f"port = {standby.port}", f"unix_socket_directories = '{standby.dir}'", *settings)
    return standby


def promote(standby: Cluster) -> float:
    """Promotes the standby and waits until it is out of recovery; returns the wall time."""
    with standby.connect() as conn:
        assert conn.execute("SELECT pg_promote(wait => true, wait_seconds => 60)").fetchone() == (True,)
    return time.time()
