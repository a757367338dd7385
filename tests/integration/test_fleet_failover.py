"""Fleet mode with a highly available coordinator: the lease table lives on a pg_auto_failover
formation (tests/integration/lib/formation.py: a monitor and two data nodes with synchronous
replication), and members reach whichever data node is primary through a postgres_fdw server
naming both, with `target_session_attrs 'read-write'`.

Proven here, on real servers and real crashes (SIGKILL of the primary's pg_autoctl and
postmaster), with members inserting IDs concurrently throughout:
* through three failovers, one of them with lease commits in flight (written on the primary,
  not yet on the standby), no member refuses an ID, and application processes leasing nodes
  through the members (randflake_lease_acquire/_extend/_release, short leases that churn) resume
  as soon as the formation takes writes and are never granted overlapping windows of a node: a failover completes well within the two
  thirds of a lease a member can issue without renewing; a member restarted right after a
  failover issues within 5 s; no ID and no (second, node) is ever issued by two members, though
  the members over the run hold more leases than the pool has blocks, so blocks change hands
  after failovers; a killed primary never takes writes again until it has rejoined as standby;
* with the standby down, pg_auto_failover drops the primary to asynchronous replication, and
  members keep issuing past their margin; the standby's return makes it synchronous again;
* with both data nodes down, members issue until their lease ends, then refuse with 55000, and
  resume by themselves once the formation is back.

Run with `-rP` (or `-s`) to see the figures each test prints.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass

import psycopg
import pytest

from lib.cluster import Cluster, needs_postgres_fdw, port_is_free, wait_for
from lib.formation import Formation, Node, free_port, needs_pg_auto_failover

pytestmark = [needs_postgres_fdw, needs_pg_auto_failover]

BLOCK = 8
# The failover test: three members over a pool of four blocks. Each restart leaves the member's
# old block leased until its lease ends, so five member lives share four blocks.
LEASE_SECONDS = 24
MEMBERS = 3
# A member renews once a third of its lease has passed: it issues through a coordinator outage
# of two thirds of a lease, less the second a renewal may wait for the keeper's next tick.
MARGIN = LEASE_SECONDS * 2 // 3 - 1
# The outage tests: a shorter lease, so that a margin runs out sooner.
SHORT_LEASE_SECONDS = 15
# How soon a (re)started member must issue its first ID.
FIRST_ID_WITHIN = 5.0
# The application pool of the failover test, outside every test's member pool: few nodes and
# short leases, so that nodes change hands many times across the failovers.
APP_POOL = (5000, 5005)
APP_LEASE_SECONDS = 3


def formation_member_settings(lease_seconds: int, blocks: int, first_node: int = 0) -> tuple[str, ...]:
    """A member's settings; its pool is `blocks` blocks from `first_node` on. The tests share the
    formation's lease table, and a test's members must not wait for blocks that the previous
    test's members still hold: each test has a pool of its own."""
    return (
        "randflake.node_source = 'fleet'",
        "randflake.fleet_lease_table = 'randflake_fleet.node_leases'",
        f"randflake.fleet_block_size = {BLOCK}",
        f"randflake.lease_seconds = {lease_seconds}",
        f"randflake.node_id_min = {first_node}",
        f"randflake.node_id_max = {first_node + blocks * BLOCK - 1}",
        f"randflake.app_node_id_min = {APP_POOL[0]}",
        f"randflake.app_node_id_max = {APP_POOL[1]}",
    )


class Inserter(threading.Thread):
    """One session inserting small batches keyed by randflake_next() into `made` until stopped,
    remembering when each batch was confirmed and every refusal (an error from the server)."""

    def __init__(self, cluster: Cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stopping = threading.Event()
        self.confirmed: list[float] = []
        self.refusals: list[tuple[float, str, str]] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with self.cluster.connect() as conn:
                while not self.stopping.is_set():
                    try:
                        conn.execute("INSERT INTO made SELECT FROM generate_series(1, 50)")
                        self.confirmed.append(time.time())
                    except psycopg.Error as error:
                        if conn.broken:
                            raise
                        self.refusals.append((time.time(), error.sqlstate, error.diag.message_primary))
                    self.stopping.wait(0.02)
        except BaseException as error:  # reported by the test, not swallowed
            self.failure = error

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert self.failure is None, f"inserter on {self.cluster.dir} failed: {self.failure!r}"

    def largest_gap(self, start: float, end: float) -> float:
        """The longest time between confirmed batches from `start` to `end` (wall clock)."""
        times = [start, *(at for at in self.confirmed if start < at < end), end]
        return max(later - earlier for earlier, later in zip(times, times[1:]))


class AppLeaser(threading.Thread):
    """An application process's lease loop through one member: acquire a short lease, extend it a
    second later, a second after that release it (every other time) or let it lapse. Records every window the
    server granted, with its latest end, and every refusal."""

    def __init__(self, cluster: Cluster, holder: str):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.holder = holder
        self.stopping = threading.Event()
        self.granted: list[list[int]] = []  # [node, start, end_exclusive], the end as last extended
        self.confirmed: list[float] = []
        self.refusals: list[tuple[float, str | None, str]] = []
        self.failure: BaseException | None = None

    def call(self, conn: psycopg.Connection, query: str, *args) -> tuple:
        row = conn.execute(query, args).fetchone()
        self.confirmed.append(time.time())
        return row

    def run(self) -> None:
        conn = None
        rounds = 0
        try:
            while not self.stopping.is_set():
                try:
                    if conn is None or conn.broken:
                        conn = self.cluster.connect()
                    node, start, end = self.call(
                        conn, "CALL randflake_lease_acquire(%s, %s, NULL, NULL, NULL)", self.holder, APP_LEASE_SECONDS)
                    window = [node, start, end]
                    self.granted.append(window)
                    self.stopping.wait(1)
                    _, extended_start, extended_end = self.call(
                        conn, "CALL randflake_lease_extend(%s, %s, %s, NULL, NULL, NULL)", self.holder, node, APP_LEASE_SECONDS)
                    assert extended_start == start and extended_end >= end, (window, extended_start, extended_end)
                    window[2] = extended_end
                    self.stopping.wait(1)
                    rounds += 1
                    if rounds % 2:
                        self.call(conn, "CALL randflake_lease_release(%s, %s, NULL)", self.holder, node)
                except psycopg.OperationalError as error:
                    self.refusals.append((time.time(), error.sqlstate, str(error).strip()[:200]))
                    self.stopping.wait(0.1)
                except psycopg.Error as error:
                    self.refusals.append((time.time(), error.sqlstate, error.diag.message_primary))
                    self.stopping.wait(0.1)
        except BaseException as error:  # reported by the test, not swallowed
            self.failure = error
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert self.failure is None, f"{self.holder} failed: {self.failure!r}"

    def first_success_after(self, moment: float) -> float | None:
        return next((at for at in self.confirmed if at > moment), None)


def overlapping_app_windows(leasers: list[AppLeaser]) -> list[tuple]:
    """Pairs of granted windows of one node whose seconds overlap: each would let two processes
    issue IDs with the same (second, node)."""
    by_node: dict[int, list[tuple[int, int, str]]] = {}
    for leaser in leasers:
        for node, start, end in leaser.granted:
            by_node.setdefault(node, []).append((start, end, leaser.holder))
    overlaps = []
    for node, windows in by_node.items():
        windows.sort()
        for earlier, later in zip(windows, windows[1:]):
            if later[0] < earlier[1]:
                overlaps.append((node, earlier, later))
    return overlaps


def start_cluster(cluster: Cluster) -> None:
    """Starts `cluster`, first moving it to another port if an outgoing connection on this
    machine holds its own (see lib.cluster.port_is_free)."""
    if not port_is_free(cluster.port):
        cluster.port = free_port()
        cluster.configure(f"port = {cluster.port}")
    cluster.start()


@dataclass
class Member:
    cluster: Cluster
    label: str
    inserter: Inserter | None = None

    def start_inserting(self, previous: Inserter | None = None) -> None:
        """Starts a new inserting session; a `previous` one's record carries over."""
        self.inserter = Inserter(self.cluster)
        if previous is not None:
            self.inserter.confirmed.extend(previous.confirmed)
            self.inserter.refusals.extend(previous.refusals)
        self.inserter.start()

    def stop_inserting(self) -> Inserter:
        inserter, self.inserter = self.inserter, None
        inserter.stop()
        return inserter

    def first_id(self, timeout: float = 30) -> float:
        """Seconds until an insert succeeds from now (the ID it made is kept with the others)."""
        started = time.monotonic()
        with self.cluster.connect() as conn:

            def inserted() -> bool:
                try:
                    conn.execute("INSERT INTO made DEFAULT VALUES")
                    return True
                except psycopg.Error:
                    return False

            wait_for(inserted, timeout, f"a first ID on {self.label}", details=lambda: self.cluster.log()[-3000:])
            return time.monotonic() - started

    def restart(self) -> float:
        """Restarts the member and returns the seconds from its start to its first ID."""
        previous = self.stop_inserting()
        self.cluster.stop()
        started = time.monotonic()
        start_cluster(self.cluster)
        self.first_id(60)
        took = time.monotonic() - started
        self.start_inserting(previous)
        return took

    def status(self) -> dict:
        with self.cluster.connect() as conn:
            cursor = conn.execute("SELECT * FROM randflake_status()")
            return dict(zip((column.name for column in cursor.description), cursor.fetchone()))

    def leases_taken(self) -> list[tuple[int, int, int, int]]:
        """(first node, last node, start, end) of every lease the keeper logged taking."""
        return [tuple(map(int, match)) for match in
                re.findall(r"leased nodes (\d+)\.\.(\d+) for seconds (\d+)\.\.(\d+)", self.cluster.log())]


def join_formation(member: Cluster, formation: Formation) -> None:
    """A DBA's set-up on a member, with the formation's data nodes in one foreign server."""
    with member.connect() as conn:
        conn.execute("CREATE EXTENSION postgres_fdw")
        conn.execute(
            f"CREATE SERVER randflake_coordinator FOREIGN DATA WRAPPER postgres_fdw "
            f"OPTIONS ({formation.foreign_server_options()})"
        )
        conn.execute("CREATE USER MAPPING FOR postgres SERVER randflake_coordinator OPTIONS (user 'postgres')")
        conn.execute("CREATE SCHEMA randflake_fleet")
        conn.execute(
            "IMPORT FOREIGN SCHEMA randflake LIMIT TO (node_leases, commit_evidence) "
            "FROM SERVER randflake_coordinator INTO randflake_fleet"
        )
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("CREATE TABLE made (id bigint PRIMARY KEY DEFAULT randflake_next())")


def start_members(make_cluster, formation: Formation, count: int, lease_seconds: int, blocks: int,
                  first_node: int) -> list[Member]:
    members = []
    for index in range(count):
        cluster = make_cluster(*formation_member_settings(lease_seconds, blocks, first_node))
        # One secret for the whole fleet: the formation's.
        (cluster.dir / "randflake.key").write_text(formation.secret_file.read_text())
        start_cluster(cluster)
        join_formation(cluster, formation)
        members.append(Member(cluster, f"member{index}"))
    for member in members:
        took = member.first_id()
        assert took < FIRST_ID_WITHIN + 1, f"{member.label} took {took:.1f} s to issue its first ID"
        member.start_inserting()
    return members


def check_no_duplicates(members: list[Member]) -> tuple[int, int]:
    """Gathers every ID of every member: none may repeat, and no (second, node) may have been
    used by two members. Returns (IDs, distinct (second, node) pairs)."""
    seen: dict[int, str] = {}
    duplicates = []
    used: dict[tuple[int, int], str] = {}
    shared = []
    for member in members:
        with member.cluster.connect() as conn:
            ids = [row[0] for row in conn.execute("SELECT id FROM made").fetchall()]
            pairs = conn.execute(
                "SELECT DISTINCT extract(epoch FROM d.timestamp)::bigint, d.node_id "
                "FROM made, randflake_decode(made.id) d"
            ).fetchall()
        assert ids, f"{member.label} made no IDs"
        for id_ in ids:
            if id_ in seen:
                duplicates.append((id_, seen[id_], member.label))
            seen[id_] = member.label
        for pair in pairs:
            if pair in used:
                shared.append((pair, used[pair], member.label))
            used[pair] = member.label
    print(f"IDs gathered from {len(members)} members: {len(seen)}, duplicates: {len(duplicates)}, "
          f"(second, node) pairs: {len(used)}, used by two members: {len(shared)}")
    assert duplicates == [], duplicates[:10]
    assert shared == [], shared[:10]
    return len(seen), len(used)


def refusals(members: list[Member]) -> list[tuple]:
    return sorted((at, member.label, state, message) for member in members if member.inserter
                  for at, state, message in member.inserter.refusals)


def writers_waiting_for_the_standby(primary: Node) -> list[str]:
    """The members' lease transactions committed on the primary and waiting for the standby."""
    with primary.connect() as conn:
        return [row[0] for row in conn.execute(
            "SELECT query FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND application_name = 'postgres_fdw'"
        ).fetchall()]


def next_renewal_due(primary: Node, lease_seconds: int, first_node: int) -> float:
    """The wall-clock second at which the first current lease of the pool from `first_node` falls
    due for renewal: once its lease_end < now + 2/3 of a lease (randflake::Terms::renewal), at the
    keeper's next tick."""
    with primary.connect() as conn:
        return conn.execute(
            "SELECT min(lease_end) - %s FROM randflake.node_leases "
            "WHERE lease_end >= extract(epoch FROM now()) AND first_node BETWEEN %s AND %s",
            (lease_seconds * 2 // 3 - 1, first_node, first_node + 999),
        ).fetchone()[0]


def hold_lease_commits(primary: Node, standby: Node) -> tuple[int, list[str]]:
    """Stops the standby's WAL receiver just before the next renewal falls due, so that the
    renewal commits on the primary but waits for the standby; returns the stopped receiver's pid
    and the lease commits waiting. The caller kills the primary, then lets the receiver go on."""
    with standby.connect() as conn:
        receiver = conn.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()[0]
    due = next_renewal_due(primary, LEASE_SECONDS, 0)
    time.sleep(max(0.0, due - 0.3 - time.time()))  # a deliberate hold: the fault lands as the renewal commits
    os.kill(receiver, signal.SIGSTOP)
    try:
        waiting = wait_for(lambda: writers_waiting_for_the_standby(primary), 10, "a lease commit", interval=0.01)
    except AssertionError:
        waiting = []  # none in time: the test reports it, with the failover's other measurements
    return receiver, waiting


def first_lease_write_after(node: Node, moment: float, timeout: float) -> float | None:
    """The wall-clock time of the first lease write `node` stored after `moment`
    (randflake.node_leases.renewed_at, the writing transaction's start), or None."""

    def first_write() -> float | None:
        try:
            with node.connect() as conn:
                return conn.execute(
                    "SELECT extract(epoch FROM min(renewed_at))::float8 FROM randflake.node_leases "
                    "WHERE renewed_at > to_timestamp(%s)", (moment,)
                ).fetchone()[0]
        except psycopg.OperationalError:
            return None

    try:
        return wait_for(first_write, timeout, f"a lease write on {node.name}", interval=0.1)
    except AssertionError:
        return None  # none in time: the test reports it, with the failover's other measurements


class ZombieWatch(threading.Thread):
    """Tries read-write sessions on a killed primary while it restarts and rejoins: pg_autoctl
    must ask the monitor before it lets PostgreSQL take writes, or members could lease there."""

    def __init__(self, node: Node):
        super().__init__(daemon=True)
        self.node = node
        self.stopping = threading.Event()
        self.accepted_writes = 0
        self.tries = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            self.tries += 1
            try:
                with psycopg.connect(self.node.conninfo(target_session_attrs="read-write"), autocommit=True):
                    self.accepted_writes += 1
            except psycopg.OperationalError:
                pass
            self.stopping.wait(0.02)


@pytest.fixture(scope="module")
def formation():
    with Formation("fleet-failover") as formation:
        yield formation


@pytest.fixture(autouse=True)
def formation_report(request, formation):
    """A failed test's report ends with the formation's logs; every test starts with a healthy one."""
    formation.wait_healthy(120)
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(formation.logs())


def test_members_keep_issuing_through_three_failovers_and_never_collide(formation, make_cluster):
    """Three SIGKILLs of the coordinator's primary while three members insert; the second with a
    renewal committed on the primary and held back from the standby. A member restarts right
    after the first and the third failover, the second restart once the first one's old block
    is free again."""
    members = start_members(make_cluster, formation, MEMBERS, LEASE_SECONDS, blocks=MEMBERS + 1, first_node=0)
    leasers = [AppLeaser(member.cluster, f"app-{member.label}") for member in members[1:]]
    for leaser in leasers:
        leaser.start()
    time.sleep(2)  # a load period: the members and the application leasers run before the first failover
    run_started = time.time()
    cycles = []
    restarted_at: float | None = None
    # Who restarts right after which failover: the second restart waits until the first one's
    # old block is free again, which takes up to a lease.
    restarts = {0: members[0], 2: members[1]}
    for number, in_flight in enumerate((False, True, False)):
        primary, standby = formation.wait_healthy(120)
        cycle: dict = {"killed": primary.name}
        receiver = None
        if in_flight:
            receiver, cycle["commits_in_flight"] = hold_lease_commits(primary, standby)
        killed_at = formation.kill(primary)
        if receiver is not None:
            os.kill(receiver, signal.SIGCONT)
        new = formation.wait_writable(60)
        cycle["writable"] = time.time() - killed_at
        assert new is standby
        first_write = first_lease_write_after(new, killed_at, LEASE_SECONDS)
        cycle["first_lease_write"] = None if first_write is None else first_write - killed_at
        cycle["gaps"] = {m.label: m.inserter.largest_gap(killed_at, time.time()) for m in members}
        writable_at = killed_at + cycle["writable"]
        cycle["app_resumed"] = {}
        for leaser in leasers:
            try:
                resumed = wait_for(lambda: leaser.first_success_after(writable_at), 30, f"{leaser.holder} to resume")
            except AssertionError:
                resumed = None  # not in time: the test reports it, with the failover's other measurements
            cycle["app_resumed"][leaser.holder] = None if resumed is None else resumed - writable_at
        if number in restarts:
            member = restarts[number]
            if restarted_at is not None:
                # A deliberate hold: the old block's lease must run out, in real time.
                time.sleep(max(0.0, restarted_at + LEASE_SECONDS + 1 - time.time()))
            restarted_at = time.time()
            cycle["restarted"] = member.label
            cycle["restart_to_first_id"] = member.restart()
        watch = ZombieWatch(primary)
        watch.start()
        formation.start(primary)
        formation.wait_for_states({primary.name: "secondary", new.name: "primary"}, 120)
        watch.stopping.set()
        watch.join()
        cycle["old_primary_rejoined"] = time.time() - killed_at
        cycle["zombie_writes"] = (watch.accepted_writes, watch.tries)
        cycle["killed_at"] = killed_at
        cycles.append(cycle)
    time.sleep(1)  # a load period: the members insert after the last failover
    all_refusals = refusals(members)
    inserters = [member.stop_inserting() for member in members]
    for leaser in leasers:
        leaser.stop()
    leases = {member.label: member.leases_taken() for member in members}

    print(f"\nfleet failover run: {time.time() - run_started:.1f} s, lease {LEASE_SECONDS} s, margin {MARGIN} s, "
          f"{MEMBERS} members, pool of {MEMBERS + 1} blocks of {BLOCK}")
    for number, cycle in enumerate(cycles, 1):
        first_write = cycle["first_lease_write"]
        print(f"failover {number}: killed {cycle['killed']}"
              + (f" with {len(cycle['commits_in_flight'])} lease commit(s) in flight"
                 if "commits_in_flight" in cycle else "")
              + f"; writable after {cycle['writable']:.2f} s; first lease write on the new primary after "
              + ("none" if first_write is None else f"{first_write:.2f} s")
              + f"; old primary back as standby after {cycle['old_primary_rejoined']:.1f} s, "
              f"read-write sessions it accepted meanwhile: {cycle['zombie_writes'][0]} of {cycle['zombie_writes'][1]}")
        print("    longest pause between a member's confirmed inserts from the kill to the first lease write: "
              + ", ".join(f"{label} {gap:.2f} s" for label, gap in cycle["gaps"].items()))
        print("    application leasing resumed after the formation took writes: " + ", ".join(
            f"{holder} " + ("never" if took is None else f"{took:.2f} s") for holder, took in cycle["app_resumed"].items()))
        if "restarted" in cycle:
            print(f"    {cycle['restarted']} restarted after it: first ID "
                  f"{cycle['restart_to_first_id']:.2f} s after its start")
    for label, taken in leases.items():
        print(f"leases taken by {label}: {taken}")
    print(f"refusals: {len(all_refusals)} {all_refusals[:5]}")
    print(f"batches confirmed: {sum(len(inserter.confirmed) for inserter in inserters)}")
    overlaps = overlapping_app_windows(leasers)
    for leaser in leasers:
        nodes = {node for node, _, _ in leaser.granted}
        print(f"{leaser.holder}: {len(leaser.granted)} application leases granted over nodes {sorted(nodes)}, "
              f"{len(leaser.refusals)} calls refused, the first: {leaser.refusals[:2]}")
    print(f"overlapping application windows of one node: {len(overlaps)}")

    for cycle in cycles:
        assert cycle["writable"] < MARGIN - 3, (
            f"the formation took {cycle['writable']:.1f} s to take writes again: too close to the members' margin")
        assert cycle["first_lease_write"] is not None and cycle["first_lease_write"] < MARGIN, cycle
        assert cycle["zombie_writes"][0] == 0, "a killed primary took writes before rejoining as standby"
        if "restart_to_first_id" in cycle:
            assert cycle["restart_to_first_id"] < FIRST_ID_WITHIN, cycle
        assert all(took is not None and took < FIRST_ID_WITHIN for took in cycle["app_resumed"].values()), cycle
    assert cycles[1]["commits_in_flight"], "no lease commit was in flight when the primary was killed"
    assert all_refusals == [], all_refusals[:10]
    # Five member lives over four blocks: a block changed hands after the failovers.
    assert sum(len(taken) for taken in leases.values()) > MEMBERS + 1, leases
    # More application leases than the pool has nodes: nodes changed hands across the failovers.
    granted_nodes = [node for leaser in leasers for node, _, _ in leaser.granted]
    assert len(granted_nodes) > APP_POOL[1] - APP_POOL[0] + 1, granted_nodes
    assert max(granted_nodes.count(node) for node in set(granted_nodes)) >= 2, granted_nodes
    assert overlaps == [], overlaps[:10]
    check_no_duplicates(members)


def test_standby_down_primary_turns_asynchronous_and_members_keep_issuing(formation, make_cluster):
    """What pg_auto_failover does when the standby stops: once it has not reported for
    node_considered_unhealthy_timeout, the monitor assigns the primary wait_primary, whose
    synchronous_standby_names is empty. A lease write made before that waits for the standby.
    The standby is stopped just before a renewal falls due, to show what the keeper does then;
    members keep issuing for longer than a whole lease without the standby."""
    members = start_members(make_cluster, formation, 2, SHORT_LEASE_SECONDS, blocks=3, first_node=1000)
    primary, standby = formation.wait_healthy(120)

    def standby_names() -> str:
        with primary.connect() as conn:
            return conn.execute("SHOW synchronous_standby_names").fetchone()[0]

    synchronous = standby_names()
    logs_before = {member.label: len(member.cluster.log()) for member in members}
    due = next_renewal_due(primary, SHORT_LEASE_SECONDS, 1000)
    time.sleep(max(0.0, due - 0.5 - time.time()))  # a deliberate hold: the fault lands as the renewal commits
    stopped_at = time.time()
    formation.stop(standby)
    stop_took = time.time() - stopped_at
    asynchronous_at = None
    waiting_seen: list[tuple[float, int]] = []
    states_seen: list = []
    renewals: dict[str, list[float]] = {member.label: [] for member in members}
    # Down for longer than a member's whole lease: it must have renewed meanwhile.
    while time.time() < stopped_at + SHORT_LEASE_SECONDS + 2:
        if asynchronous_at is None:
            if standby_names() == "":
                asynchronous_at = time.time()
            waiting = len(writers_waiting_for_the_standby(primary))
            if waiting:
                waiting_seen.append((time.time() - stopped_at, waiting))
        states = formation.states()
        if not states_seen or states_seen[-1][1] != states:
            states_seen.append((time.time() - stopped_at, states))
        for member in members:
            renewed = member.status()["renewed_at"].timestamp()
            if renewed > stopped_at and renewed not in renewals[member.label]:
                renewals[member.label].append(renewed)
        time.sleep(0.1)  # poll interval: synchronous_standby_names, lease commits waiting, states, renewals
    keeper_states = {member.label: member.status()["state"] for member in members}
    down_refusals = refusals(members)
    restarted_at = time.time()
    formation.start(standby)
    formation._wait(lambda: standby_names() == synchronous, 120, "synchronous replication to return")
    synchronous_again = time.time() - restarted_at
    formation.wait_healthy(60)
    time.sleep(1)  # a load period: the members insert once the formation is healthy again
    for member in members:
        member.stop_inserting()
    keeper_warnings = [line for member in members
                       for line in member.cluster.log()[logs_before[member.label]:].splitlines()
                       if "lease keeper" in line and "WARNING" in line]

    async_after = asynchronous_at - stopped_at if asynchronous_at else float("nan")
    print(f"\nstandby {standby.name} stopped in {stop_took:.1f} s, just before a renewal fell due; the primary's "
          f"synchronous_standby_names {synchronous!r} -> '' after {async_after:.2f} s "
          f"(number_sync_standbys {formation.number_sync_standbys()})")
    print(f"lease commits waiting for the standby meanwhile (s after the stop, how many): {waiting_seen[:3]}"
          f"{' ... ' + str(waiting_seen[-1]) if len(waiting_seen) > 3 else ''}")
    for offset, states in states_seen:
        print(f"    {offset:6.2f} s: {states}")
    for label, times in renewals.items():
        print(f"{label} published renewals at " + ", ".join(f"{at - stopped_at:.1f}" for at in times)
              + " s after the stop")
    print(f"member states after {SHORT_LEASE_SECONDS + 2} s without a standby: {keeper_states}")
    print(f"keeper warnings meanwhile ({len(keeper_warnings)}):")
    for line in keeper_warnings[:8]:
        print(f"    {line}")
    print(f"standby restarted: synchronous again after {synchronous_again:.2f} s; refusals: {len(down_refusals)}")

    assert synchronous.startswith("ANY 1 (")
    assert asynchronous_at is not None, "pg_auto_failover kept the primary synchronous without its standby"
    assert states_seen[-1][1][primary.name] == ("wait_primary", "wait_primary")
    assert formation.number_sync_standbys() == 0
    # Members keep issuing while the primary is asynchronous (what the keeper does today).
    assert down_refusals == [], down_refusals[:10]
    assert all(renewals[label] and renewals[label][-1] > asynchronous_at for label in renewals), renewals
    assert all(state == "active" for state in keeper_states.values()), keeper_states
    check_no_duplicates(members)


def test_both_data_nodes_down_members_refuse_after_their_margin_and_resume(formation, make_cluster):
    """Both data nodes stopped: members issue through the end of the lease they hold, then refuse
    with 55000, and resume without a restart once the formation takes writes again."""
    members = start_members(make_cluster, formation, 2, SHORT_LEASE_SECONDS, blocks=3, first_node=2000)
    time.sleep(1)  # a load period: the members insert before the data nodes stop
    stopped_at = time.time()
    formation.stop_data_nodes()
    # What each member may still issue: through the end of the lease it holds.
    issuable = {member.label: member.status()["issuable_through"].timestamp() for member in members}
    first_refusal: dict[str, tuple] = {}

    def every_member_refused() -> bool:
        for member in members:
            if member.label not in first_refusal and member.inserter.refusals:
                first_refusal[member.label] = member.inserter.refusals[0]
        return len(first_refusal) == len(members)

    wait_for(every_member_refused, stopped_at + SHORT_LEASE_SECONDS + 10 - time.time(), "every member to refuse",
             interval=0.1, details=lambda: f"members still issuing: {first_refusal}")
    for node in formation.nodes:
        formation.start(node)
    restarted_at = time.time()
    primary = formation.wait_writable(120)
    writable_at = time.time()
    resumed = {}

    def every_member_resumed() -> bool:
        for member in members:
            refused_last = member.inserter.refusals[-1][0]
            after = [at for at in member.inserter.confirmed if at > refused_last]
            if member.label not in resumed and after:
                resumed[member.label] = after[0]
        return len(resumed) == len(members)

    wait_for(every_member_resumed, 30, "every member to resume", interval=0.1,
             details=lambda: f"members did not resume: {resumed}")
    time.sleep(1)  # a load period: the members insert after resuming
    inserters = {member.label: member.stop_inserting() for member in members}

    print(f"\nboth data nodes stopped; lease {SHORT_LEASE_SECONDS} s")
    for member in members:
        at, sqlstate, message = first_refusal[member.label]
        refused = inserters[member.label].refusals
        last_before = max(t for t in inserters[member.label].confirmed if t < at)
        print(f"{member.label}: issuable through {issuable[member.label] - stopped_at:.1f} s after the stop; "
              f"last ID {last_before - stopped_at:.2f} s, first refusal {at - stopped_at:.2f} s after it "
              f"({sqlstate}: {message}); {len(refused)} refusals; resumed {resumed[member.label] - writable_at:.2f} s "
              f"after the formation took writes again")
    print(f"formation writable again {writable_at - restarted_at:.1f} s after the data nodes were started; "
          f"primary {primary.name}")

    for member in members:
        at, sqlstate, message = first_refusal[member.label]
        assert sqlstate == "55000" and "node lease covers IDs only through second" in message, first_refusal
        # No refusal while the lease still covered the clock's second.
        assert at >= issuable[member.label] + 1, (at, issuable[member.label])
        assert all(state == "55000" for _, state, _ in inserters[member.label].refusals)
        assert resumed[member.label] - writable_at < FIRST_ID_WITHIN, resumed
    check_no_duplicates(members)
