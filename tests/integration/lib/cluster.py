"""Scratch PostgreSQL clusters for the integration suites, and what tests do with them.

Every cluster is real: its own data directory and port on 127.0.0.1, randflake_pg preloaded,
a fresh secret in a 0600 key file, all made by tests/scratch-cluster.sh (shared with `make demo`
and the pg_regress run).

Under pytest-xdist (`make server-tests` runs `pytest -n`), each worker is a run of its own: its
ports are the PORTS_PER_WORKER from RANDFLAKE_TEST_PORT_BASE + worker number * PORTS_PER_WORKER,
its directories start with RANDFLAKE_TEST_DIR_PREFIX + "gwN-", and it sees those two variables
set to its own values. The fixtures that make clusters are conftest.py's.
"""

from __future__ import annotations

import os
import pathlib
import pwd
import socket
import subprocess
import time
from typing import Iterator

import psycopg
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "scratch-cluster.sh"

# pytest-xdist names its workers gw0, gw1, ...; a serial run is worker 0 without a name.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# A worker sets the two variables below to its own values; a program one of its tests starts
# inherits them with the worker's name, and must not offset them a second time.
_OFFSET = WORKER.startswith("gw") and os.environ.get("RANDFLAKE_TEST_WORKER") != WORKER
# A whole serial run takes about 125 ports (clusters, formation servers, exporters), so a worker
# never runs out whichever files it gets.
PORTS_PER_WORKER = int(os.environ.get("RANDFLAKE_TEST_PORTS_PER_WORKER", "200"))
# Below Linux's ephemeral ports (32768 up, /proc/sys/net/ipv4/ip_local_port_range), which any
# outgoing connection on the machine may hold: a postgres_fdw session, a walreceiver.
DEFAULT_PORT_BASE = 20000
_PORT_BASE = int(os.environ.get("RANDFLAKE_TEST_PORT_BASE", str(DEFAULT_PORT_BASE)))
# Where clusters' data directories go: one prefix per concurrent run of the suites.
DIR_PREFIX = os.environ.get("RANDFLAKE_TEST_DIR_PREFIX", "/tmp/randflake_pg-it-")
if _OFFSET:
    _PORT_BASE += int(WORKER[2:]) * PORTS_PER_WORKER
    DIR_PREFIX += f"{WORKER}-"
    # What the tests, and the programs they start, read from the environment is this worker's.
    os.environ.update(RANDFLAKE_TEST_PORT_BASE=str(_PORT_BASE), RANDFLAKE_TEST_DIR_PREFIX=DIR_PREFIX,
                      RANDFLAKE_TEST_WORKER=WORKER)


def port_is_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:`port` now: nothing else on the machine (a
    concurrent run of the suites, a server left over) holds it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as PostgreSQL binds
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _ephemeral_ports() -> range:
    try:
        low, high = map(int, pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def _worker_ports() -> Iterator[int]:
    """This worker's ports, in order, passing over those something holds now. Each is handed out
    once, so a server that is stopped and started again keeps its port to itself."""
    ephemeral = _ephemeral_ports()
    for port in range(_PORT_BASE, _PORT_BASE + PORTS_PER_WORKER):
        if port in ephemeral:
            raise RuntimeError(
                f"test port {port} is in the ephemeral range {ephemeral.start}-{ephemeral.stop - 1}, where outgoing "
                "connections take ports: lower RANDFLAKE_TEST_PORT_BASE"
            )
        if port_is_free(port):
            yield port
    raise RuntimeError(f"used up the {PORTS_PER_WORKER} test ports from {_PORT_BASE}: raise RANDFLAKE_TEST_PORTS_PER_WORKER")


ports = _worker_ports()


# Settings every test server starts with, before the test's own (which win): the keeper looks ten
# times a second rather than once, so that no test waits a second for a tick. Lease lengths,
# margins and deadlines are the production ones.
TEST_SETTINGS = ("randflake.keeper_tick = 100ms",)


def owner_ids() -> tuple[int, int]:
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
    os.chown(path, *owner_ids())
    os.chmod(path, mode)


class Cluster:
    """`pg_config` picks another PostgreSQL installation than the suite's (PG_CONFIG);
    `initdb_options` are passed to its initdb."""

    def __init__(self, name: str, settings: tuple[str, ...] = (), pg_config: str | None = None,
                 initdb_options: str = ""):
        self.dir = pathlib.Path(f"{DIR_PREFIX}{name}")
        self.port = next(ports)
        self.env = dict(os.environ, INITDB_OPTIONS=initdb_options)
        if pg_config:
            self.env["PG_CONFIG"] = pg_config
        self.script("destroy")
        self.script("init", str(self.port), *TEST_SETTINGS, *settings)

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

    def postmaster_pid(self) -> int:
        """The running server's postmaster."""
        return int((self.dir / "postmaster.pid").read_text().split()[0])

    def processes(self) -> list[int]:
        """The postmaster and every process it has started, as they are now."""
        postmaster = self.postmaster_pid()
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
        return [postmaster, *map(int, children)]

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


def wait_for(condition, timeout: float, what: str, interval: float = 0.05, details=None):
    """Polls `condition` until it returns something truthy, and returns that; fails after
    `timeout` seconds naming `what` it waited for, and with what `details()` says then, if given
    (a log's tail, the last error: what the report needs to tell why)."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}" + (
            "" if details is None else f": {details()}"
        )
        time.sleep(interval)


def wait_ticks(conn: psycopg.Connection, n: int, timeout: float = 60) -> None:
    """Waits until the lease keeper has completed `n` more ticks than it had when called
    (randflake_status().keeper_ticks), so that whatever it does once a tick it has done `n` times
    since: the event itself, however slowly a loaded machine runs. A tick already under way
    counts, so `n` of them contain at least `n - 1` whole ones."""
    start = status(conn)["keeper_ticks"]
    wait_for(lambda: status(conn)["keeper_ticks"] >= start + n, timeout, f"{n} more ticks of the lease keeper")


def decoded_ids(conn: psycopg.Connection, ids: list[int]) -> list[tuple[int, int, int]]:
    """(Unix second, node, sequence) of each ID, in order."""
    return conn.execute(
        """SELECT extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
             FROM unnest(%s::bigint[]) WITH ORDINALITY AS s(id, n), randflake_decode(s.id) d ORDER BY s.n""",
        (ids,),
    ).fetchall()
