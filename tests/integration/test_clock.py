"""Clock steps on real servers: every process of the server reads a fake wall clock (libfaketime)
whose offset from real time the test changes while the server runs or between restarts.

Proven here, each without changing the code under test:
* a clock stepped back 1 s or 60 s while sessions generate IDs is refused (never papered over),
  the message names how far behind which second, and the same sessions resume by themselves
  once the clock is past that second; nothing is issued twice;
* a server restarted with its clock 60 s behind the seconds it used does not reuse them: it
  leases from its durable high-water mark on, refuses until the clock gets there, says so in
  randflake_status(), and resumes by itself.

How the clock is faked: libfaketime, preloaded into pg_ctl and so into every server process,
adds the offset written in a file to CLOCK_REALTIME (and CLOCK_REALTIME_COARSE, which the
extension reads), re-reading the file on every reading (FAKETIME_NO_CACHE), so rewriting the file
steps every process's clock at once. The monotonic clocks stay real, as they do when NTP steps a
clock. libfaketime blocks its faking while a process waits in select()/poll()/epoll_wait(); a
postmaster forks background workers (the lease keeper among them) from signal handlers that run
inside such a wait, and those children would then read the real clock forever. A tiny preloaded
shim hands those calls straight to libc, so the keeper sees the fake clock like everyone else;
the sixty-second test checks that it does, through the lease start the keeper writes.
"""

from __future__ import annotations

import re
import threading
import time

import psycopg
import pytest

from lib.cluster import Cluster, decoded_ids, sql_error, status, wait_for
from lib.fake_clock import FakeClock, start_under_fake_clock

BEHIND = re.compile(r"the system clock is (\d+) s behind second (\d+), which this server has already used for IDs")
BEFORE_LEASE = re.compile(
    r"the system clock reads (\d+), (\d+) s before second (\d+), where this server's node lease starts"
)



@pytest.fixture
def faked_server(make_cluster, fake_clock_preload):
    """Factory: faked_server(offset, ids_columns) -> (cluster, clock, status): a server started
    with its clock `offset` s from real time, the extension created, a table `ids` with those
    columns, and randflake_status() once the keeper holds a lease covering the clock."""

    def start(offset: int, ids_columns: str) -> tuple[Cluster, FakeClock, dict]:
        cluster = make_cluster()
        clock = FakeClock(cluster, fake_clock_preload, offset)
        start_under_fake_clock(cluster, clock)
        with cluster.connect() as conn:
            conn.execute("CREATE EXTENSION randflake_pg")
            conn.execute(f"CREATE TABLE ids ({ids_columns})")
            return cluster, clock, wait_for_lease(conn, clock)

    return start


def wait_for_lease(conn: psycopg.Connection, clock: FakeClock) -> dict:
    """Waits until the keeper holds a lease that covers the clock's current second; returns
    randflake_status() then."""

    def covering() -> dict | None:
        now = status(conn)
        return now if now["state"] == "active" and now["issuable_through"] >= clock.now() + 1 else None

    return wait_for(covering, 15, "an active lease covering the clock")


class Inserter(threading.Thread):
    """One session inserting batches of new IDs into `ids` until stopped, remembering every ID it
    got and every refusal (wall time, message) in order. Any other error is kept for the test."""

    BATCH = 200

    def __init__(self, cluster: Cluster):
        super().__init__(daemon=True)
        self.conn = cluster.connect()
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.batches: list[tuple[float, list[int]]] = []
        self.refusals: list[tuple[float, str]] = []
        self.errors: list[psycopg.Error] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                rows = self.conn.execute(
                    f"INSERT INTO ids SELECT randflake_next() FROM generate_series(1, {self.BATCH}) RETURNING id"
                ).fetchall()
                with self.lock:
                    self.batches.append((time.time(), [row[0] for row in rows]))
            except psycopg.Error as error:
                with self.lock:
                    if error.sqlstate == "55000":
                        self.refusals.append((time.time(), error.diag.message_primary))
                    else:
                        self.errors.append(error)
                        return
                time.sleep(0.02)  # pacing: a refused session does not spin

    def ids(self, after: float = 0.0, before: float = float("inf")) -> list[int]:
        """The IDs of the batches that completed between `after` and `before` (wall time)."""
        with self.lock:
            return [id for at, batch in self.batches if after < at < before for id in batch]

    def succeeded_after(self, moment: float, times: int = 1) -> bool:
        with self.lock:
            return sum(at > moment for at, _ in self.batches) >= times

    def refused_after(self, moment: float) -> list[tuple[float, str]]:
        with self.lock:
            return [refusal for refusal in self.refusals if refusal[0] > moment]

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)
        assert not self.is_alive(), "an inserter is stuck"
        self.conn.close()


def start_inserters(cluster: Cluster, count: int) -> list[Inserter]:
    inserters = [Inserter(cluster) for _ in range(count)]
    for inserter in inserters:
        inserter.start()
    wait_for(lambda: all(i.succeeded_after(0) for i in inserters), 15, "every session's first IDs")
    return inserters


def assert_all_unique(conn: psycopg.Connection, inserters: list[Inserter], others: tuple[int, ...] = ()) -> None:
    """Every ID the sessions (and `others`) got is in table `ids` once, and no (second, node,
    sequence) repeats."""
    ids = [id for inserter in inserters for id in inserter.ids()] + list(others)
    assert len(ids) == len(set(ids))
    rows, distinct = conn.execute("SELECT count(*), count(DISTINCT id) FROM ids").fetchone()
    assert rows == distinct == len(ids)
    parts = decoded_ids(conn, ids)
    assert len(set(parts)) == len(ids)


def test_a_clock_stepped_back_one_second_is_refused_until_it_catches_up(faked_server):
    """The clock steps back 1 s while four sessions generate: sessions that already used the
    current second are refused with "1 s behind second S" (counted in clock_refusals), nothing is
    issued twice, and the same sessions carry on by themselves once the slow clock reaches S."""
    cluster, clock, _ = faked_server(0, "id bigint PRIMARY KEY")
    with cluster.connect() as conn:
        inserters = start_inserters(cluster, 4)
        try:
            # The clock stands still in second S until every session has used it: a session's
            # second batch since the freeze began after it. The lease began before S, so one
            # second back is still inside it.
            used = clock.freeze()
            frozen_at = time.time()
            wait_for(lambda: all(i.succeeded_after(frozen_at, 2) for i in inserters), 30, "every session to use S")
            stepped_at = time.time()
            clock.run_from(used - 1)
            wait_for(
                lambda: all(i.succeeded_after(max([stepped_at] + [r[0] for r in i.refusals])) for i in inserters)
                and time.time() > stepped_at + 1.5,
                10,
                "every session to generate again after the step",
            )
        finally:
            for inserter in inserters:
                inserter.stop()
        assert [i.errors for i in inserters] == [[]] * 4
        refusals = [refusal for i in inserters for refusal in i.refusals]
        assert refusals, "no session was refused, yet each had used the second the clock went back from"
        for at, message in refusals:
            behind = BEHIND.fullmatch(message)
            assert behind, message
            assert behind.group(1) == "1"
            assert int(behind.group(2)) == used, "the second refused is the one the clock left"
            assert at < stepped_at + 1.5, "refused after the slow clock had passed the used second"
        assert status(conn)["clock_refusals"] == len(refusals)
        assert_all_unique(conn, inserters)


def test_a_clock_stepped_back_sixty_seconds_is_refused_until_set_right(faked_server):
    """The server starts with its clock 90 s slow, which is then corrected, so its lease began
    well over a minute ago. Then the clock steps back 60 s: every session is refused with a
    message naming the last second it used and how far behind the clock is, and clock_refusals
    counts each refusal; so is a session that only starts then, although its node is idle: the
    server has used later seconds. Once the clock is set right, the same sessions resume by
    themselves. No ID repeats."""
    cluster, clock, lease = faked_server(-90, "id bigint PRIMARY KEY")
    with cluster.connect() as conn:
        assert abs(lease["lease_start"] - (time.time() - 90)) < 5, "the lease keeper does not read the fake clock"
        assert abs(conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()[0] - (time.time() - 90)) < 5
        clock.set(0)
        wait_for_lease(conn, clock)
        refusals_before = status(conn)["clock_refusals"]

        inserters = start_inserters(cluster, 3)
        try:
            started_at = time.time()
            wait_for(lambda: all(i.succeeded_after(started_at) for i in inserters), 30, "every session to generate")
            stepped_at = time.time()
            clock.set(-60)
            wait_for(lambda: all(i.refused_after(stepped_at) for i in inserters), 10, "every session to be refused")
            time.sleep(1.0)  # a deliberate hold: a second of refusals, in which nothing may be issued
            assert not any(i.succeeded_after(stepped_at + 0.2) for i in inserters), "IDs issued 60 s in the past"
            # A session that starts only now, on a node that issued nothing since the clock's
            # second, is refused too: the server as a whole has used later seconds.
            with cluster.connect() as newcomer:
                with pytest.raises(psycopg.Error) as caught:
                    newcomer.execute("SELECT randflake_next()")
            newcomer_refusal = caught.value
            status_behind = status(conn)
            restored_at = time.time()
            clock.set(0)
            wait_for(lambda: all(i.succeeded_after(restored_at + 0.1) for i in inserters), 10, "generation to resume")
        finally:
            for inserter in inserters:
                inserter.stop()
        assert [i.errors for i in inserters] == [[]] * 3

        for inserter in inserters:
            at, message = inserter.refused_after(stepped_at)[0]
            # A session refuses clock readings before the last second it (or, if later, any
            # other session) issued IDs in.
            floor = max(part[0] for part in decoded_ids(conn, inserter.ids(before=at)))
            behind = BEHIND.fullmatch(message)
            assert behind, message
            seconds_behind, second = int(behind.group(1)), int(behind.group(2))
            assert floor <= second <= floor + 1
            assert abs(seconds_behind - (second - int(at - 60))) <= 1
            assert 58 <= seconds_behind <= 61
            assert all(BEHIND.fullmatch(m) for _, m in inserter.refusals)
            resumed = [part[0] for part in decoded_ids(conn, inserter.ids(after=restored_at))]
            assert resumed and min(resumed) >= second

        assert newcomer_refusal.sqlstate == "55000"
        newcomer_behind = BEHIND.fullmatch(newcomer_refusal.diag.message_primary)
        assert newcomer_behind, newcomer_refusal.diag.message_primary
        latest_before_step = max(part[0] for part in decoded_ids(conn, [id for i in inserters for id in i.ids()]))
        assert 58 <= int(newcomer_behind.group(1)) <= 61
        assert int(newcomer_behind.group(2)) <= latest_before_step

        refusals = sum(len(i.refusals) for i in inserters) + 1
        assert status_behind["clock_refusals"] > refusals_before
        assert status(conn)["clock_refusals"] - refusals_before == refusals
        assert status(conn)["state"] == "active"
        assert_all_unique(conn, inserters)


def test_a_restart_with_the_clock_sixty_seconds_back_resumes_after_the_high_water_mark(faked_server):
    """Stopped, then started with its clock 60 s back, the server leases from the second after
    its durable high-water mark, which covers every ID it issued. Until the clock gets there,
    randflake_next() refuses, naming the lease start, and randflake_status() says it waits for the
    clock. Once the clock is right, the same session generates again by itself, in seconds after
    every second used before the restart."""
    cluster, clock, _ = faked_server(0, "id bigint PRIMARY KEY, era int NOT NULL")
    with cluster.connect() as conn:
        deadline = time.time() + 1.5
        while time.time() < deadline:
            conn.execute("INSERT INTO ids SELECT randflake_next(), 1 FROM generate_series(1, 1000)")
        marked = conn.execute("SELECT used_through FROM randflake.node_leases").fetchone()[0]
    cluster.stop("fast")
    stopped_at = time.time()

    clock.set(-60)
    start_under_fake_clock(cluster, clock)
    with cluster.connect() as conn:
        before = [row[0] for row in conn.execute("SELECT id FROM ids WHERE era = 1")]
        last_used = max(part[0] for part in decoded_ids(conn, before))
        waiting = wait_for(lambda: (lambda now: now if now["lease_start"] else None)(status(conn)), 15, "the new lease")
        assert waiting["state"] == "waiting for the clock to reach the lease"
        # The old lease ended at its high-water mark, and the new one starts right after it. The
        # old row stays until the new lease, once published, is renewed past it.
        leases = conn.execute(
            "SELECT lease_start, lease_end, used_through FROM randflake.node_leases ORDER BY lease_start"
        ).fetchall()
        assert len(leases) == 2, leases
        (_, old_end, old_mark), (lease_start, _, _) = leases
        assert old_end == old_mark >= marked
        assert lease_start == waiting["lease_start"] == old_end + 1
        assert last_used <= marked < lease_start <= stopped_at + 12

        error = None
        try:
            conn.execute("SELECT randflake_next()")
        except psycopg.Error as caught:
            error = caught
        assert error is not None, "an ID was issued 60 s before the lease starts"
        assert error.sqlstate == "55000"
        before_lease = BEFORE_LEASE.fullmatch(error.diag.message_primary)
        assert before_lease, error.diag.message_primary
        reads, seconds_before, start = map(int, before_lease.groups())
        assert start == lease_start
        assert abs(reads - clock.now()) <= 2
        assert seconds_before == start - reads > 60
        assert f"resumes by itself at second {start}" in error.diag.message_hint
        assert status(conn)["clock_refusals"] == 1

        clock.set(0)
        restored_at = time.time()

        def generates() -> bool:
            try:
                conn.execute("INSERT INTO ids SELECT randflake_next(), 2 FROM generate_series(1, 1000)")
                return True
            except psycopg.Error as caught:
                # Only while the clock is still more than 10 s before the lease; closer, calls wait.
                assert caught.sqlstate == "55000", caught
                assert BEFORE_LEASE.fullmatch(caught.diag.message_primary), caught.diag.message_primary
                return False

        wait_for(generates, 20, "generation to resume", interval=0.2)
        assert time.time() < max(restored_at, lease_start) + 3, "resumed later than the lease start"
        after = [row[0] for row in conn.execute("SELECT id FROM ids WHERE era = 2")]
        assert min(part[0] for part in decoded_ids(conn, after)) >= lease_start > last_used
        assert status(conn)["state"] == "active"
        rows, distinct = conn.execute("SELECT count(*), count(DISTINCT id) FROM ids").fetchone()
        assert rows == distinct == len(before) + len(after)
        assert len(set(decoded_ids(conn, before + after))) == rows


def test_waiting_for_a_first_lease_is_timed_by_the_monotonic_clock(make_cluster, fake_clock_preload):
    """A call waits a few seconds for the keeper's first lease, then refuses. A wall clock
    stepped back an hour meanwhile must not stretch that wait to an hour."""
    cluster = make_cluster("randflake.database = 'absent'")
    clock = FakeClock(cluster, fake_clock_preload, 0)
    start_under_fake_clock(cluster, clock)
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    outcome: list = []

    def call() -> None:
        with cluster.connect() as conn:
            started = time.monotonic()
            try:
                conn.execute("SELECT randflake_next()")
                outcome.append(("issued", time.monotonic() - started))
            except psycopg.Error as error:
                outcome.append((error.sqlstate, time.monotonic() - started))

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    with cluster.connect() as conn:
        wait_for(
            lambda: conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = 'SELECT randflake_next()'"
            ).fetchone()[0],
            10,
            "the call to be waiting for a lease",
        )
    clock.set(-3600)
    caller.join(timeout=30)
    assert outcome, "the call still waits after 30 s: its deadline followed the wall clock back"
    sqlstate, waited = outcome[0]
    assert sqlstate == "55000" and waited < 15, outcome


def test_ids_reserved_for_a_second_are_refused_once_a_later_one_was_used(faked_server):
    """Session A reserves IDs for second S; session B issues in S+1; the clock steps back to S.
    A's reserved IDs are dated behind the latest second the server used, so A is refused like
    any other session ("1 s behind second S+1"), instead of handing them out."""
    cluster, clock, _ = faked_server(0, "id bigint PRIMARY KEY")
    with cluster.connect() as a, cluster.connect() as b:
        reserved_for = clock.freeze()
        a_id = a.execute("SELECT randflake_next()").fetchone()[0]
        clock.freeze(reserved_for + 1)
        b_id = b.execute("SELECT randflake_next()").fetchone()[0]
        clock.freeze(reserved_for)
        error = sql_error(a, "SELECT randflake_next()")
        clock.set(clock.offset)
        assert error.sqlstate == "55000", error
        behind = BEHIND.fullmatch(error.diag.message_primary)
        assert behind and behind.groups() == ("1", str(reserved_for + 1)), error.diag.message_primary
        seconds = {row[0] for row in a.execute(
            "SELECT extract(epoch FROM d.timestamp)::bigint FROM unnest(%s::bigint[]) AS i, randflake_decode(i) AS d",
            ([a_id, b_id],),
        )}
        assert seconds == {reserved_for, reserved_for + 1}
