"""A pg_auto_failover formation on loopback: a highly available fleet coordinator for the tests
and the demo.

One monitor and two data nodes, run by pg_auto_failover 2.0's `pg_autoctl` as the server's user,
with synchronous replication (pg_auto_failover's default for a standby in the replication quorum)
and trust authentication on 127.0.0.1. The data nodes preload randflake_pg with
`randflake.node_source = off` and one secret file, and the primary holds the fleet's lease table.

Each `pg_autoctl run` is a process group of its own: its services and the postmaster, which
pg_autoctl starts as a child (PostgreSQL's own children leave the group). A SIGKILL of that
group is what a crashed database machine looks like to the rest of the formation.

Run as a script, it measures what pg_auto_failover does on loopback:

    target/venv/bin/python tests/integration/lib/formation.py failover --runs 5 [--defaults]
    target/venv/bin/python tests/integration/lib/formation.py standby-down --runs 3 [--defaults]
    target/venv/bin/python tests/integration/lib/formation.py failover --monitor \
        pgautofailover.node_considered_unhealthy_timeout=10000 --keeper timeout.network_partition_timeout=10 ...

`failover` kills the primary (pg_autoctl and postmaster) and times each step of the promotion;
`standby-down` stops the standby and times how the primary's synchronous_standby_names changes.
Ports and directories come from RANDFLAKE_TEST_PORT_BASE and RANDFLAKE_TEST_DIR_PREFIX, as for
the suites.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import psycopg
import pytest

if not __package__:  # run as a program: the suites' directory, whose lib/ this is, goes on the path
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from lib.cluster import DIR_PREFIX, owner_ids, pg_config, ports, wait_for  # noqa: E402

PG_AUTOCTL = shutil.which("pg_autoctl") or "/usr/bin/pg_autoctl"

# tools/deps.sh installs pg_auto_failover for Debian's PostgreSQL 15 only: the monitor needs its
# extension in the installation under test.
needs_pg_auto_failover = pytest.mark.skipif(
    not os.access(PG_AUTOCTL, os.X_OK)
    or not (pathlib.Path(pg_config("--sharedir")) / "extension" / "pgautofailover.control").exists(),
    reason="pg_auto_failover (pg_autoctl and the pgautofailover extension) is not installed for this PostgreSQL",
)

# What makes a loopback test formation fail over in seconds rather than in the default ~50 s,
# without false alarms on a loaded 2-core machine. The monitor calls a primary unhealthy only
# when its pg_autoctl has not reported for node_considered_unhealthy_timeout AND the monitor's
# own health check could not connect (period, timeout, retries); a promoted standby then stays
# read-only for primary_demote_timeout, the time a partitioned old primary is given to notice
# and shut itself down (its keeper's network_partition_timeout, below).
FAST_MONITOR: Mapping[str, str] = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "3000",
    "pgautofailover.primary_demote_timeout": "4000",
}
# A primary that reaches neither the monitor nor a standby for this many seconds stops
# PostgreSQL. It must end before the monitor lets the new primary take writes, at the earliest
# node_considered_unhealthy_timeout + primary_demote_timeout (7 s above) after the last report.
FAST_KEEPER: Mapping[str, str] = {"timeout.network_partition_timeout": "3"}

# pg_autoctl sizes shared_buffers and friends from the machine's memory; three servers on a
# shared test machine need far less. pg_autoctl's pg_basebackup asks for a spread checkpoint,
# which sleeps 100 ms per dirty buffer unless checkpoints may finish at once.
SMALL_SERVER = ("shared_buffers = '32MB'", "maintenance_work_mem = '16MB'", "effective_cache_size = '256MB'",
                "fsync = off", "wal_keep_size = '256MB'", "checkpoint_completion_target = 0")

WRITABLE_STATES = {"single", "primary", "wait_primary", "join_primary", "apply_settings"}


@dataclass
class Node:
    """One server of the formation and the `pg_autoctl run` process that manages it."""

    name: str
    port: int
    pgdata: pathlib.Path
    log: pathlib.Path
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def conninfo(self, user: str = "postgres", dbname: str = "postgres", **options: str) -> str:
        extra = "".join(f" {key}={value}" for key, value in options.items())
        return f"host=127.0.0.1 port={self.port} user={user} dbname={dbname} connect_timeout=2{extra}"

    def connect(self, **options) -> psycopg.Connection:
        return psycopg.connect(self.conninfo(), autocommit=True, **options)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def server_log(self, chars: int = 4000) -> str:
        logs = sorted((self.pgdata / "log").glob("*.log"), key=lambda path: path.stat().st_mtime)
        return logs[-1].read_text(errors="replace")[-chars:] if logs else ""


class Formation:
    """A monitor and two data nodes on 127.0.0.1, created by `create()` and removed by
    `destroy()` (also on leaving a `with` block). `node_settings` are postgresql.conf lines for
    both data nodes, after randflake_pg's own; `monitor_settings` and `keeper_settings` default
    to the fast failover above, and `None` keeps pg_auto_failover's defaults."""

    def __init__(
        self,
        name: str,
        node_settings: Sequence[str] = (),
        monitor_settings: Mapping[str, str] | None = FAST_MONITOR,
        keeper_settings: Mapping[str, str] | None = FAST_KEEPER,
    ):
        self.root = pathlib.Path(f"{DIR_PREFIX}{name}")
        self.bindir = pathlib.Path(pg_config("--bindir"))
        self.node_settings = tuple(node_settings)
        self.monitor_settings = dict(monitor_settings or {})
        self.keeper_settings = dict(keeper_settings or {})
        self.secret_file = self.root / "randflake.key"
        self.monitor = self._node("monitor")
        self.nodes = [self._node("node1"), self._node("node2")]
        self._monitor_conn: psycopg.Connection | None = None

    def _node(self, name: str) -> Node:
        return Node(name, free_port(), self.root / name, self.root / f"{name}.autoctl.log")

    def __enter__(self) -> Formation:
        return self.create()

    def __exit__(self, *_) -> None:
        self.destroy()

    # --- processes -------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        # pg_autoctl keeps its configuration and state under the XDG directories: inside the
        # formation, so that runs never share them and destroy() removes them.
        return dict(
            os.environ,
            HOME=str(self.root),
            XDG_CONFIG_HOME=str(self.root / "config"),
            XDG_DATA_HOME=str(self.root / "share"),
            XDG_RUNTIME_DIR=str(self.root / "run"),
            PG_CONFIG=str(self.bindir / "pg_config"),
            PATH=f"{self.bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        )

    def _as_owner(self) -> dict:
        if os.getuid() != 0:
            return {}
        uid, gid = owner_ids()
        return {"user": uid, "group": gid, "extra_groups": []}

    def autoctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Runs a pg_autoctl command to completion as the server's user."""
        result = subprocess.run([PG_AUTOCTL, *args], env=self.env(), cwd=self.root, capture_output=True,
                                text=True, **self._as_owner())
        with open(self.root / "commands.log", "a") as log:
            log.write(f"$ pg_autoctl {' '.join(args)}  (exit {result.returncode})\n{result.stdout}{result.stderr}\n")
        if check and result.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
        return result

    def start(self, node: Node) -> None:
        """Starts `pg_autoctl run` for `node` (which starts its PostgreSQL): a killed or stopped
        node rejoins the formation, as a standby if the other node was promoted meanwhile."""
        assert not node.running, f"{node.name} is already running"
        log = open(node.log, "a")
        node.process = subprocess.Popen([PG_AUTOCTL, "run", "--pgdata", str(node.pgdata)], env=self.env(),
                                        cwd=self.root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True, **self._as_owner())
        log.close()

    def kill(self, node: Node) -> float:
        """SIGKILLs `node`'s pg_autoctl processes and its postmaster at once (the backends exit
        when they notice their postmaster is gone); returns the wall-clock time of the kill."""
        assert node.running, f"{node.name} is not running"
        postmaster = node.postmaster_pid()
        killed_at = time.time()
        os.killpg(node.process.pid, signal.SIGKILL)
        if postmaster:  # in the group too, unless pg_autoctl was between restarts of it
            try:
                os.kill(postmaster, signal.SIGKILL)
            except ProcessLookupError:
                pass
        node.process.wait()
        return killed_at

    def stop(self, node: Node, timeout: float = 60) -> None:
        """Stops `node` cleanly: pg_autoctl's fast shutdown, which stops PostgreSQL first."""
        if not node.running:
            return
        node.process.send_signal(signal.SIGINT)
        try:
            node.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(node)

    def stop_data_nodes(self) -> None:
        """Both data nodes down at once: nothing can be promoted, the coordinator is gone."""
        for node in self.nodes:
            if node.running:
                node.process.send_signal(signal.SIGINT)
        for node in self.nodes:
            self.stop(node)

    # --- creation and removal ----------------------------------------------------------------

    def create(self) -> Formation:
        """Creates and starts the formation; on any failure, removes what it made."""
        self.destroy()
        try:
            self._create()
        except BaseException:
            print(self.logs(), file=sys.stderr)
            self.destroy()
            raise
        return self

    def prepare(self) -> None:
        """The formation's directory, pg_autoctl's own under it, and the data nodes' secret file:
        what comes before the first `pg_autoctl create`."""
        self.root.mkdir(parents=True)
        for sub in ("config", "share", "run"):
            (self.root / sub).mkdir(mode=0o700)
        owner = owner_ids()
        for path in (self.root, self.root / "config", self.root / "share", self.root / "run"):
            os.chown(path, *owner)
        # One secret for the two data nodes, as for every server of a fleet.
        self.secret_file.write_text(os.urandom(16).hex())
        os.chown(self.secret_file, *owner)
        os.chmod(self.secret_file, 0o600)

    def _create(self) -> None:
        self.prepare()
        pg_ctl = str(self.bindir / "pg_ctl")
        common = ["--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--pgctl", pg_ctl]
        self.autoctl("create", "monitor", "--pgdata", str(self.monitor.pgdata), "--pgport", str(self.monitor.port),
                     *common)
        # pg_autoctl starts the monitor's postmaster with `-h <listen_addresses>` (default `*`).
        self.autoctl("config", "set", "--pgdata", str(self.monitor.pgdata), "postgresql.listen_addresses", "127.0.0.1")
        monitor_lines = (f"{name} = '{value}'" for name, value in self.monitor_settings.items())
        self.configure(self.monitor, *SMALL_SERVER, *monitor_lines)
        self.start(self.monitor)
        self._wait(lambda: self._ping(self.monitor, user="autoctl_node", dbname="pg_auto_failover"), 60, "the monitor")

        first, second = self.nodes
        self._create_node(first, common)
        # The standby's data directory is a base backup of the primary's, postgresql.conf with
        # its settings included, so the randflake_pg lines are written once, here.
        self.configure(
            first,
            "shared_preload_libraries = 'pg_stat_statements, randflake_pg'",
            f"randflake.secret_file = '{self.secret_file}'",
            "randflake.node_source = 'off'",
            *SMALL_SERVER,
            *self.node_settings,
        )
        self.start(first)
        self.wait_for_states({first.name: "single"}, 60)
        self._wait(lambda: self._ping(first), 60, f"{first.name} to accept connections")
        with first.connect() as conn:
            conn.execute("CREATE EXTENSION randflake_pg")
        self._create_node(second, common)
        self.start(second)
        self.wait_healthy(120)

    def _create_node(self, node: Node, common: list[str]) -> None:
        self.autoctl("create", "postgres", "--pgdata", str(node.pgdata), "--pgport", str(node.port),
                     "--listen", "127.0.0.1", "--name", node.name, "--dbname", "postgres",
                     "--monitor", self.monitor_uri(), *common)
        for name, value in self.keeper_settings.items():
            self.autoctl("config", "set", "--pgdata", str(node.pgdata), name, value)

    def configure(self, node: Node, *lines: str) -> None:
        # pg_autoctl includes its own file on the first line of postgresql.conf: lines appended
        # at the end win over it.
        with open(node.pgdata / "postgresql.conf", "a") as conf:
            conf.write("".join(line + "\n" for line in lines))

    def destroy(self) -> None:
        """Kills every process of this formation, including a previous run's, and removes it."""
        if self._monitor_conn is not None:
            self._monitor_conn.close()
            self._monitor_conn = None
        for node in (*self.nodes, self.monitor):
            if node.running:
                self.kill(node)
        for pidfile in (self.root / "run").glob("**/pg_autoctl.pid") if self.root.exists() else ():
            _kill_stale_group(pidfile)
        for node in (*self.nodes, self.monitor):
            postmaster = node.postmaster_pid()
            if postmaster and node.pgdata.exists():
                subprocess.run([str(self.bindir / "pg_ctl"), "-D", str(node.pgdata), "-m", "immediate", "stop"],
                               capture_output=True, **self._as_owner())
        shutil.rmtree(self.root, ignore_errors=True)

    # --- what the monitor says -----------------------------------------------------------------

    def monitor_uri(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    def _monitor(self) -> psycopg.Connection:
        if self._monitor_conn is None or self._monitor_conn.closed or self._monitor_conn.broken:
            self._monitor_conn = psycopg.connect(self.monitor.conninfo(user="autoctl_node", dbname="pg_auto_failover"),
                                                 autocommit=True)
        return self._monitor_conn

    def states(self) -> dict[str, tuple[str, str]]:
        """{node name: (reported state, assigned state)}, as the monitor sees them now."""
        rows = self._monitor().execute(
            "SELECT nodename, current_group_state::text, assigned_group_state::text "
            "FROM pgautofailover.current_state('default')"
        ).fetchall()
        return {name: (reported, assigned) for name, reported, assigned in rows}

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def primary(self) -> Node:
        """The node the monitor has made primary (it may still be converging to it)."""
        for name, (_, assigned) in self.states().items():
            if assigned in WRITABLE_STATES:
                return self.node(name)
        raise LookupError(f"the monitor names no primary: {self.states()}")

    def standby(self) -> Node:
        primary = self.primary()
        return next(node for node in self.nodes if node is not primary)

    def events(self, count: int = 20) -> list[tuple]:
        """The monitor's latest events, oldest first: (time, node name, reported, assigned, description)."""
        rows = self._monitor().execute(
            "SELECT eventtime, nodename, reportedstate::text, goalstate::text, description "
            "FROM pgautofailover.last_events('default', 0, %s) ORDER BY eventid", (count,)
        ).fetchall()
        return rows

    def number_sync_standbys(self) -> int:
        return self._monitor().execute(
            "SELECT number_sync_standbys FROM pgautofailover.formation WHERE formationid = 'default'"
        ).fetchone()[0]

    def wait_for_states(self, expected: Mapping[str, str], timeout: float) -> None:
        """Waits until every named node has reported the state the monitor assigned it, and that
        state is `expected[name]`."""

        def reached() -> bool:
            states = self.states()
            return all(states.get(name) == (state, state) for name, state in expected.items())

        self._wait(reached, timeout, f"the formation to reach {dict(expected)}")

    def wait_healthy(self, timeout: float) -> tuple[Node, Node]:
        """Waits for a primary with a secondary, both converged; returns (primary, standby)."""

        def healthy() -> bool:
            converged = sorted(reported for reported, assigned in self.states().values() if reported == assigned)
            return converged == ["primary", "secondary"]

        self._wait(healthy, timeout, "a primary and a secondary")
        return self.primary(), self.standby()

    def wait_writable(self, timeout: float) -> Node:
        """Waits until a data node accepts read-write sessions, as members' connections demand."""
        found: list[Node] = []

        def writable() -> bool:
            try:
                with psycopg.connect(self.conninfo(), autocommit=True) as conn:
                    port = conn.execute("SELECT current_setting('port')::int").fetchone()[0]
            except psycopg.OperationalError:
                return False
            found.append(next(node for node in self.nodes if node.port == port))
            return True

        self._wait(writable, timeout, "a writable data node", interval=0.05)
        return found[-1]

    # --- what members use ----------------------------------------------------------------------

    @property
    def hosts(self) -> str:
        return ",".join("127.0.0.1" for _ in self.nodes)

    @property
    def ports(self) -> str:
        return ",".join(str(node.port) for node in self.nodes)

    def conninfo(self, dbname: str = "postgres", connect_timeout: int = 2) -> str:
        """A libpq connection string that reaches whichever data node takes writes now."""
        return (f"host={self.hosts} port={self.ports} dbname={dbname} user=postgres "
                f"target_session_attrs=read-write connect_timeout={connect_timeout}")

    def foreign_server_options(self, connect_timeout: int = 2) -> str:
        """The OPTIONS of a member's postgres_fdw server for the formation: every data node, in
        a fixed order, and only a read-write session accepted. libpq tries the hosts in turn, so
        a connection lands on the current primary wherever it is."""
        return (f"host '{self.hosts}', port '{self.ports}', dbname 'postgres', target_session_attrs 'read-write', "
                f"connect_timeout '{connect_timeout}', keepalives '1', keepalives_idle '2', keepalives_interval '1', "
                "keepalives_count '2', tcp_user_timeout '4000'")

    # --- diagnostics ---------------------------------------------------------------------------

    def logs(self, chars: int = 3000) -> str:
        """The end of every pg_autoctl and server log, for a failed test's report."""
        commands = self.root / "commands.log"
        parts = [f"--- {commands} ---\n{commands.read_text(errors='replace')[-chars:]}"] if commands.exists() else []
        for node in (self.monitor, *self.nodes):
            if node.log.exists():
                parts.append(f"--- {node.log} ---\n{node.log.read_text(errors='replace')[-chars:]}")
            parts.append(f"--- {node.name} server log ---\n{node.server_log(chars)}")
        return "\n".join(parts)

    @staticmethod
    def _ping(node: Node, **options) -> bool:
        try:
            psycopg.connect(node.conninfo(**options), autocommit=True).close()
            return True
        except psycopg.OperationalError:
            return False

    def _wait(self, condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
        """wait_for, with a node that does not answer yet taken as a no, and the monitor's states
        and every log in the report of a timeout."""

        def answered() -> bool:
            try:
                return condition()
            except psycopg.OperationalError:
                return False

        wait_for(answered, timeout, what, interval,
                 details=lambda: f"monitor says {self._safe_states()}\n{self.logs()}")

    def _safe_states(self) -> object:
        try:
            return self.states()
        except psycopg.Error as error:
            return f"(monitor unreachable: {error})"


def free_port() -> int:
    """The suites' next port that nothing holds now (lib.cluster's ports pass over held ones)."""
    return next(ports)


def _kill_stale_group(pidfile: pathlib.Path) -> None:
    """A pg_autoctl left running by an earlier run of the same formation (a crashed test)."""
    try:
        pid = int(pidfile.read_text().split("\n", 1)[0])
        if "pg_autoctl" in pathlib.Path(f"/proc/{pid}/cmdline").read_text():
            os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


# --- measurements (run as a script) ------------------------------------------------------------


def measure_failover(formation: Formation) -> dict[str, float]:
    """Kills the primary and times, from the kill: the monitor's decision (prepare_promotion), the
    standby's promotion (stop_replication: promoted, still read-only), the first read-write
    session, the new primary's report of wait_primary; then restarts the old primary and times
    its return as a secondary."""
    old, new = formation.wait_healthy(120)
    killed = formation.kill(old)
    start = time.monotonic()
    marks: dict[str, float] = {}
    while "writable" not in marks or "wait_primary" not in marks:
        states = formation.states()
        reported, assigned = states[new.name]
        if assigned == "prepare_promotion" or reported in ("prepare_promotion", "stop_replication"):
            marks.setdefault("decided", time.monotonic() - start)
        if reported == "stop_replication":
            marks.setdefault("promoted", time.monotonic() - start)
        if reported == "wait_primary":
            marks.setdefault("wait_primary", time.monotonic() - start)
        if "writable" not in marks and Formation._ping(new, target_session_attrs="read-write"):
            marks["writable"] = time.monotonic() - start
        assert time.monotonic() - start < 180, f"no failover after 180 s: {states}"
        time.sleep(0.05)  # poll interval: the new primary's states and its first read-write session, each timed
    marks.setdefault("decided", marks["promoted"] if "promoted" in marks else marks["writable"])
    restarted = time.monotonic()
    formation.start(old)
    formation.wait_for_states({old.name: "secondary", new.name: "primary"}, 180)
    marks["rejoined"] = time.monotonic() - restarted
    marks["killed_at"] = killed
    return marks


def measure_standby_down(formation: Formation) -> dict[str, object]:
    """Stops the standby and times when the primary stops waiting for it
    (synchronous_standby_names emptied), then starts it and times the way back."""
    primary, standby = formation.wait_healthy(120)

    def standby_names() -> str:
        with primary.connect() as conn:
            return conn.execute("SHOW synchronous_standby_names").fetchone()[0]

    before = standby_names()
    start = time.monotonic()
    formation.stop(standby)
    stopped = time.monotonic() - start
    formation._wait(lambda: standby_names() == "", 180, "synchronous_standby_names to be emptied", interval=0.05)
    emptied = time.monotonic() - start
    states_async = formation.states()
    restart = time.monotonic()
    formation.start(standby)
    formation._wait(lambda: standby_names() == before, 180, "synchronous_standby_names back", interval=0.05)
    back = time.monotonic() - restart
    formation.wait_healthy(120)
    return {"before": before, "stopped": stopped, "async_after": emptied, "states_while_async": states_async,
            "sync_again_after_start": back, "number_sync_standbys": formation.number_sync_standbys()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["failover", "standby-down"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--defaults", action="store_true", help="pg_auto_failover's default timeouts")
    parser.add_argument("--monitor", action="append", default=[], metavar="NAME=VALUE",
                        help="a monitor setting instead of the fast ones (repeat; with --defaults, on top of them)")
    parser.add_argument("--keeper", action="append", default=[], metavar="NAME=VALUE",
                        help="a data node's pg_autoctl setting, e.g. timeout.network_partition_timeout=10")
    options = parser.parse_args()
    settings: dict = {"monitor_settings": None, "keeper_settings": None} if options.defaults else {}
    label = "defaults" if options.defaults else "fast settings"
    if options.monitor or options.keeper:
        settings = {"monitor_settings": dict(item.split("=", 1) for item in options.monitor),
                    "keeper_settings": dict(item.split("=", 1) for item in options.keeper)}
        label = " ".join(options.monitor + options.keeper)
    name = "defaults" if options.defaults else "custom" if options.monitor or options.keeper else "fast"
    with Formation(f"measure-{options.what}-{name}", **settings) as formation:
        print(f"formation up ({label}): monitor {formation.monitor.port}, data nodes {formation.ports}", flush=True)
        results = []
        for run in range(options.runs):
            if options.what == "failover":
                marks = measure_failover(formation)
                print(f"run {run + 1}: " + ", ".join(f"{key} {value:.2f} s" for key, value in marks.items()
                                                     if key != "killed_at"), flush=True)
            else:
                marks = measure_standby_down(formation)
                print(f"run {run + 1}: {marks}", flush=True)
            results.append(marks)
        if options.what == "failover":
            for key in ("decided", "promoted", "writable", "wait_primary", "rejoined"):
                values = [marks[key] for marks in results if key in marks]
                if values:
                    print(f"{key:>12}: min {min(values):.2f}  median {statistics.median(values):.2f}  "
                          f"max {max(values):.2f} s over {len(values)} runs")
        for event in formation.events(12):
            print("  event", event[0].strftime("%H:%M:%S.%f")[:-3], *event[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
