"""Scratch PostgreSQL clusters for the integration suite.

Every cluster is real: its own data directory and port on 127.0.0.1, randflake_pg preloaded,
a fresh secret in a 0600 key file, all made by tests/scratch-cluster.sh (shared with `make demo`
and the pg_regress run).
"""

from __future__ import annotations

import itertools
import os
import pathlib
import pwd
import subprocess
import time

import psycopg
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "scratch-cluster.sh"
_ports = itertools.count(int(os.environ.get("RANDFLAKE_TEST_PORT_BASE", "55500")))
# Where clusters' data directories go: one prefix per concurrent run of the suites.
_DIR_PREFIX = os.environ.get("RANDFLAKE_TEST_DIR_PREFIX", "/tmp/randflake_pg-it-")


def _owner_ids() -> tuple[int, int]:
    """The uid/gid the server runs as: `postgres` when the tests run as root."""
    if os.getuid() == 0:
        entry = pwd.getpwnam("postgres")
        return entry.pw_uid, entry.pw_gid
    return os.getuid(), os.getgid()


def pg_config(option: str, command: str | None = None) -> str:
    """A directory of the PostgreSQL installation the tests run against, e.g. pg_config("--bindir");
    with `command`, of the installation whose pg_config that is."""
    command = command or os.environ.get("PG_CONFIG", "pg_config")
    return subprocess.run([command, option], check=True, capture_output=True, text=True).stdout.strip()


def server_major(command: str | None = None) -> int:
    """The major version of that installation, e.g. 18."""
    return int(pg_config("--version", command).split()[1].split(".")[0])


def as_owner(command: list[str]) -> list[str]:
    """`command`, run as the server's user: `postgres` when the tests run as root."""
    return ["runuser", "-u", "postgres", "--", *command] if os.getuid() == 0 else command


# Fleet members reach their coordinator through postgres_fdw. Every major that
# tools/postgres-major.sh provides has it; another installation named by PG_CONFIG may not.
needs_postgres_fdw = pytest.mark.skipif(
    not (pathlib.Path(pg_config("--sharedir")) / "extension" / "postgres_fdw.control").exists(),
    reason="this PostgreSQL installation has no postgres_fdw",
)


def write_server_file(path: pathlib.Path, content: str, mode: int = 0o600) -> None:
    """Writes a file the server's user owns, with exactly `mode`."""
    path.write_text(content)
    os.chown(path, *_owner_ids())
    os.chmod(path, mode)


class Cluster:
    """`pg_config` picks another PostgreSQL installation than the suite's (PG_CONFIG);
    `initdb_options` are passed to its initdb."""

    def __init__(self, name: str, settings: tuple[str, ...] = (), pg_config: str | None = None,
                 initdb_options: str = ""):
        self.dir = pathlib.Path(f"{_DIR_PREFIX}{name}")
        self.port = next(_ports)
        self.env = dict(os.environ, INITDB_OPTIONS=initdb_options)
        if pg_config:
            self.env["PG_CONFIG"] = pg_config
        self.script("destroy")
        self.script("init", str(self.port), *settings)

    def script(self, command: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """tests/scratch-cluster.sh COMMAND on this cluster."""
        return subprocess.run([SCRIPT, command, self.dir, *args], check=check, capture_output=command == "start",
                              text=True, env=self.env)

    @property
    def key_hex(self) -> str:
        return (self.dir / "randflake.key").read_text().strip()

    @property
    def key_bytes(self) -> bytes:
        return bytes.fromhex(self.key_hex)

    def start(self, check: bool = True) -> subprocess.CompletedProcess:
        return self.script("start", check=check)

    def stop(self, mode: str = "fast") -> None:
        self.script("stop", mode)

    def destroy(self) -> None:
        self.script("destroy")

    def configure(self, *settings: str) -> None:
        """Appends settings to postgresql.conf; later lines win over earlier ones."""
        with open(self.dir / "postgresql.conf", "a") as conf:
            for setting in settings:
                conf.write(setting + "\n")

    def reload(self) -> None:
        with self.connect() as conn:
            conn.execute("SELECT pg_reload_conf()")

    def connect(self, dbname: str = "postgres", user: str = "postgres", **kwargs) -> psycopg.Connection:
        return psycopg.connect(
            host=str(self.dir), port=self.port, user=user, dbname=dbname, autocommit=True, **kwargs
        )

    def log(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture
def make_cluster(request):
    """Factory: make_cluster(*settings) -> an initialised, not yet started Cluster."""
    made: list[Cluster] = []

    def make(*settings: str, **options) -> Cluster:
        cluster = Cluster(f"{request.node.name[:40]}-{len(made)}", settings, **options)
        made.append(cluster)
        return cluster

    yield make
    report = getattr(request.node, "rep_call", None)
    for cluster in made:
        if report is not None and report.failed:
            print(f"--- end of {cluster.dir}/server.log ---\n{cluster.log()[-6000:]}")
        cluster.destroy()


@pytest.fixture
def cluster(make_cluster) -> Cluster:
    """A started cluster with the extension created in database `postgres`."""
    cluster = make_cluster()
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    return cluster


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report


def sql_error(conn: psycopg.Connection, statement: str) -> psycopg.Error:
    """Runs a statement that must fail; returns the error."""
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(statement)
    return caught.value


def status(conn: psycopg.Connection) -> dict:
    """randflake_status() as a dict, timestamps as Unix seconds."""
    cursor = conn.execute("SELECT * FROM randflake_status()")
    row = cursor.fetchone()
    values = {column.name: value for column, value in zip(cursor.description, row)}
    return {name: (value.timestamp() if hasattr(value, "timestamp") else value) for name, value in values.items()}


def wait_for(condition, timeout: float, what: str, interval: float = 0.05):
    """Polls `condition` until it returns something truthy, and returns that; fails after
    `timeout` seconds naming `what` it waited for."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(interval)


def decoded_ids(conn: psycopg.Connection, ids: list[int]) -> list[tuple[int, int, int]]:
    """(Unix second, node, sequence) of each ID, in order."""
    return conn.execute(
        """SELECT extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
             FROM unnest(%s::bigint[]) WITH ORDINALITY AS s(id, n), randflake_decode(s.id) d ORDER BY s.n""",
        (ids,),
    ).fetchall()
