"""Application leases under load, with real processes and real faults.

Six or more OS processes each lease a node with randflake_lease_acquire (four-second leases, so
that they churn), make IDs with the reference Python port (PyPI randflake, `randflake.v2`) as fast
as they can, extend ahead of the end, and now and then release and lease again; SQL sessions
insert rows with DEFAULT randflake_next() meanwhile; a killer sends SIGKILL to random generator
processes, which are started again and lease again. Each process writes the IDs it made to a
file per lease, next to the lease's window (written before any ID of it is made).

Required afterwards: no ID twice among all of them (application and database); every
application ID decodes, under the secret of the cluster's key file, to the node of the lease it
was made under and a second inside that lease's window; no node's windows overlap; the
database's IDs are in the servers' own nodes. IDs per second per process are printed (pytest -s).

The same runs in range mode (one server) and in fleet mode (a coordinator and two members, the
generators spread over both members).

This file is also the generator program: `python test_app_lease_load.py worker ...`.
"""

from __future__ import annotations

import argparse
import array
import dataclasses
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

import psycopg
from randflake.v2 import Config, ErrInvalidLease, ErrResourceExhausted, Generator, Lease

LEASE_SECONDS = 4
# Extend once a third of the window has passed: two renewals' worth of slack on a busy machine.
EXTEND_WHEN_LEFT = LEASE_SECONDS * 2 / 3
# Sixteen nodes for six generators and the leases that killed ones leave behind: nodes are
# leased again within the run, and the pool may run out for a moment.
APP_POOL = (1000, 1015)
APP_POOL_SETTINGS = (f"randflake.app_node_id_min = {APP_POOL[0]}", f"randflake.app_node_id_max = {APP_POOL[1]}")
GENERATORS = 6
# The load runs in rounds of RUN_SECONDS until it has done what the checks need (a loaded machine
# gets through less in a round), at most MAX_ROUNDS: the IDs, inserts and kills below, and a node
# leased twice. Each round starts a new process per slot, which leases before it makes an ID, and
# more leases than the pool has nodes make a reuse certain: three rounds reach it, however few
# leases a loaded machine gets through in each.
RUN_SECONDS = 20
MAX_ROUNDS = 6
MIN_APP_IDS, MIN_DB_IDS, MIN_KILLS = 10_000, 1_000, 4
APP_ROLE = "generator"
LEASE_FUNCTIONS = (
    "PROCEDURE randflake_lease_acquire(text, integer), randflake_lease_extend(text, integer, integer), "
    "randflake_lease_release(text, integer)"
)
# Worth retrying: the pool is exhausted for a moment, or another server chose the same node.
RETRY_SQLSTATES = {"53400", "40001"}


# --- the generator process --------------------------------------------------------------------


def record_window(stem: str, node: int, start: int, end_exclusive: int) -> None:
    """The lease's window, replaced whole: it is on disk before any ID made under it."""
    with open(f"{stem}.window.tmp", "w") as window:
        window.write(f"{node} {start} {end_exclusive}\n")
    os.replace(f"{stem}.window.tmp", f"{stem}.window")


def lease_until(conn: psycopg.Connection, holder: str, until: float, stats: Counter) -> tuple[int, int, int] | None:
    while time.time() < until:
        try:
            return conn.execute("CALL randflake_lease_acquire(%s, %s, NULL, NULL, NULL)", (holder, LEASE_SECONDS)).fetchone()
        except psycopg.Error as error:
            if error.sqlstate not in RETRY_SQLSTATES:
                raise
            stats["exhausted" if error.sqlstate == "53400" else "races"] += 1
            time.sleep(0.05)  # pacing: a refused generator does not spin
    return None


def release(conn: psycopg.Connection, holder: str, node: int) -> None:
    """Gives the lease back; one already taken back (55000) is gone anyway."""
    try:
        conn.execute("CALL randflake_lease_release(%s, %s, NULL)", (holder, node))
    except psycopg.Error as error:
        if error.sqlstate != "55000":
            raise


def issue(conn: psycopg.Connection, lease: tuple[int, int, int], args, secret: bytes, stats: Counter) -> None:
    """Makes IDs under one lease until it ends, is released, or the run is over."""
    node, start, end = lease
    stem = str(args.out / f"{args.holder}.{node}.{start}")
    record_window(stem, node, start, end)
    generator = Generator(Config(lease=Lease(node_id=node, start=start, end_exclusive=end), secret=secret))
    ids = os.open(f"{stem}.ids", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            now = time.time()
            if now >= args.until:
                release(conn, args.holder, node)
                return
            if now >= end - EXTEND_WHEN_LEFT:
                try:
                    _, _, end = conn.execute(
                        "CALL randflake_lease_extend(%s, %s, %s, NULL, NULL, NULL)", (args.holder, node, LEASE_SECONDS)
                    ).fetchone()
                except psycopg.Error as error:
                    if error.sqlstate != "55000":
                        raise
                    stats["lost"] += 1  # ended before the extension came: the generator stops at its end
                    return
                record_window(stem, node, start, end)
                generator.extend_lease(Lease(node_id=node, start=start, end_exclusive=end))
                stats["extended"] += 1
                if random.random() < args.release_rate:
                    release(conn, args.holder, node)
                    stats["released"] += 1
                    return
            batch = array.array("q")
            ended = False
            try:
                for _ in range(500):
                    batch.append(generator.generate())
            except ErrInvalidLease:
                ended = True
            except ErrResourceExhausted:
                # Pacing: the second's sequence is used up; the generator's own wait for the next
                # second, as an application's.
                time.sleep(1 - time.time() % 1)
            os.write(ids, batch.tobytes())
            stats["ids"] += len(batch)
            if ended:
                stats["lapsed"] += 1
                return
    finally:
        os.close(ids)


def worker(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="test_app_lease_load.py worker")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--holder", required=True)
    parser.add_argument("--secret-file", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--until", type=float, required=True)
    parser.add_argument("--release-rate", type=float, default=0.1)
    args = parser.parse_args(argv)
    secret = bytes.fromhex(args.secret_file.read_text().strip())
    stats: Counter = Counter()
    with psycopg.connect(host=args.host, port=args.port, user=args.user, dbname="postgres", autocommit=True) as conn:
        while time.time() < args.until:
            lease = lease_until(conn, args.holder, args.until, stats)
            if lease is None:
                break
            stats["leases"] += 1
            issue(conn, lease, args, secret, stats)
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        sys.exit("usage: test_app_lease_load.py worker --host ... (run by the test)")
    sys.exit(worker(sys.argv[2:]))


# --- the test ---------------------------------------------------------------------------------

# The generator processes need none of the test's imports.
from lib.cluster import Cluster, needs_postgres_fdw  # noqa: E402
from lib.fleet import join_fleet, lease_of, member_settings  # noqa: E402


@dataclasses.dataclass
class Incarnation:
    """One generator process: slot `slot`'s `number`th, on member `member`."""

    slot: int
    number: int
    member: int
    process: subprocess.Popen
    started: float
    ended: float | None = None
    killed: bool = False
    stats: dict = dataclasses.field(default_factory=dict)

    @property
    def holder(self) -> str:
        return f"gen-{self.slot}-{self.number}"


class Load:
    """Generator processes on `members`, a killer, and SQL sessions inserting on every member."""

    def __init__(self, members: list[Cluster], key_file: pathlib.Path, out: pathlib.Path, seed: int):
        self.members, self.key_file, self.out = members, key_file, out
        self.until = 0.0
        self.rng = random.Random(seed)
        self.incarnations: list[Incarnation] = []
        self.current: dict[int, Incarnation] = {}
        self.inserted = Counter()
        self.errors: list = []

    def spawn(self, slot: int, number: int) -> Incarnation:
        member = slot % len(self.members)
        cluster = self.members[member]
        holder = f"gen-{slot}-{number}"
        process = subprocess.Popen(
            [sys.executable, __file__, "worker", "--host", str(cluster.dir), "--port", str(cluster.port),
             "--user", APP_ROLE, "--holder", holder, "--secret-file", str(self.key_file), "--out", str(self.out),
             "--until", str(self.until)],
            stdout=subprocess.PIPE,
            stderr=open(self.out / f"{holder}.err", "w"),
            text=True,
        )
        incarnation = Incarnation(slot, number, member, process, time.time())
        self.incarnations.append(incarnation)
        self.current[slot] = incarnation
        return incarnation

    def kill_at_random(self) -> None:
        """SIGKILL for a random generator every one to two and a half seconds, then a new one in its
        place, until four seconds before the end."""
        try:
            while time.time() < self.until - 4:
                time.sleep(self.rng.uniform(1.0, 2.5))  # faults at random moments, by design
                # Only a generator holding a lease: killing one that is still starting proves nothing.
                leased = [incarnation for incarnation in self.current.values() if self.has_leased(incarnation)]
                if not leased:
                    continue
                victim = leased[self.rng.randrange(len(leased))]
                os.kill(victim.process.pid, signal.SIGKILL)
                victim.process.wait()
                victim.ended, victim.killed = time.time(), True
                self.spawn(victim.slot, victim.number + 1)
        except BaseException as error:  # reported by the test
            self.errors.append(error)

    def insert(self, member: int) -> None:
        try:
            with self.members[member].connect() as conn:
                while time.time() < self.until:
                    conn.execute("INSERT INTO made SELECT FROM generate_series(1, 100)")
                    self.inserted[member] += 100
                    time.sleep(0.005)  # pacing: room for the generators on a small machine, fewer IDs to check
        except BaseException as error:
            self.errors.append(error)

    def has_leased(self, incarnation: Incarnation) -> bool:
        return any(self.out.glob(f"{incarnation.holder}.*.window"))

    def enough(self) -> bool:
        """Whether the rounds so far made the IDs, inserts, kills and node reuse the checks ask for."""
        windows = read_windows(self.out)
        made = sum(len(window.ids) for window in windows)
        killed = sum(incarnation.killed for incarnation in self.incarnations)
        return (
            made > MIN_APP_IDS
            and all(self.inserted[member] > MIN_DB_IDS for member in range(len(self.members)))
            and killed >= MIN_KILLS
            and node_reuses(windows) > 0
        )

    def run(self, seconds: float) -> None:
        """One round: every slot gets a new generator process, all of which stop after `seconds`."""
        self.until = time.time() + seconds
        try:
            for slot in range(GENERATORS):
                self.spawn(slot, self.current[slot].number + 1 if slot in self.current else 0)
            threads = [threading.Thread(target=self.kill_at_random)]
            threads += [threading.Thread(target=self.insert, args=(member,)) for member in range(len(self.members))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert self.errors == []
            for incarnation in self.current.values():
                out, _ = incarnation.process.communicate(timeout=30)
                incarnation.ended = time.time()
                assert incarnation.process.returncode == 0, (
                    incarnation.holder,
                    (self.out / f"{incarnation.holder}.err").read_text()[-3000:],
                )
                incarnation.stats = json.loads(out)
        finally:
            # No generator outlives a failed run.
            for incarnation in self.incarnations:
                if incarnation.process.poll() is None:
                    incarnation.process.kill()
                    incarnation.process.wait()


@dataclasses.dataclass(frozen=True)
class Window:
    holder: str
    node: int
    start: int
    end_exclusive: int
    ids: array.array


def read_windows(out: pathlib.Path) -> list[Window]:
    """Every lease a generator recorded, with the IDs it made under it. A SIGKILL can cut an
    ID's eight bytes short: such a tail was never handed out."""
    windows = []
    for path in sorted(out.glob("*.window")):
        stem = str(path)[: -len(".window")]
        node, start, end = map(int, path.read_text().split())
        ids = array.array("q")
        if os.path.exists(f"{stem}.ids"):
            data = pathlib.Path(f"{stem}.ids").read_bytes()
            ids.frombytes(data[: len(data) - len(data) % 8])
        holder = pathlib.Path(stem).name.split(".")[0]
        windows.append(Window(holder, node, start, end, ids))
    return windows


def node_reuses(windows: list[Window]) -> int:
    """How many of the leases were of a node already leased earlier in the run."""
    return len(windows) - len({window.node for window in windows})


def check(checker: Cluster, members: list[Cluster], windows: list[Window], key: bytes) -> dict:
    """All the run's IDs in one table of `checker`, and the required properties; returns counts."""
    with checker.connect() as conn:
        conn.execute("CREATE TABLE every_id (id bigint NOT NULL, source text NOT NULL, lease int)")
        conn.execute(
            "CREATE TABLE leases (lease int PRIMARY KEY, holder text, node int, start bigint, end_exclusive bigint)"
        )
        with conn.cursor().copy("COPY leases FROM STDIN") as copy:
            for number, window in enumerate(windows):
                copy.write_row((number, window.holder, window.node, window.start, window.end_exclusive))
        with conn.cursor().copy("COPY every_id (id, lease, source) FROM STDIN") as copy:
            for number, window in enumerate(windows):
                if window.ids:
                    copy.write("".join(f"{id_}\t{number}\tapp\n" for id_ in window.ids))
        for index, member in enumerate(members):
            with member.connect() as source:
                rows = source.execute("SELECT id FROM made").fetchall()
            with conn.cursor().copy("COPY every_id (id, source) FROM STDIN") as copy:
                copy.write("".join(f"{id_}\tdb{index}\n" for (id_,) in rows))
        counts = dict(conn.execute("SELECT source, count(*) FROM every_id GROUP BY source").fetchall())
        duplicates = conn.execute(
            "SELECT id, array_agg(source) FROM every_id GROUP BY id HAVING count(*) > 1 LIMIT 10"
        ).fetchall()
        assert duplicates == [], f"IDs made twice: {duplicates}"

        outside = conn.execute(
            """SELECT l.holder, l.node, l.start, l.end_exclusive, d.node_id, extract(epoch FROM d.timestamp)::bigint
                 FROM every_id e JOIN leases l USING (lease), randflake_decode(e.id) d
                WHERE d.node_id <> l.node OR extract(epoch FROM d.timestamp) NOT BETWEEN l.start AND l.end_exclusive - 1
                LIMIT 10"""
        ).fetchall()
        assert outside == [], f"application IDs outside the window they were made under: {outside}"

        for index, member in enumerate(members):
            first, last = own_nodes(member)
            strays = conn.execute(
                """SELECT d.node_id, count(*) FROM every_id e, randflake_decode(e.id) d
                    WHERE e.source = %s AND d.node_id NOT BETWEEN %s AND %s GROUP BY d.node_id""",
                (f"db{index}", first, last),
            ).fetchall()
            assert strays == [], f"member {index}'s IDs outside its nodes {first}..{last}: {strays}"

        # The reference port reads a sample the same way, with the key file's secret.
        sample = conn.execute(
            """SELECT e.id, extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
                 FROM every_id e, randflake_decode(e.id) d WHERE e.source = 'app' ORDER BY random() LIMIT 2000"""
        ).fetchall()
    reader = Generator(Config(lease=Lease(node_id=0, start=1_730_000_000, end_exclusive=1_730_000_001), secret=key))
    read = [(id_, *dataclasses.astuple(reader.inspect(id_))) for id_, _, _, _ in sample]
    assert sample, "no application IDs"
    mismatches = [(ours, sql) for ours, sql in zip(read, sample) if ours != sql]
    assert mismatches == [], f"the reference port and SQL disagree on {len(mismatches)} IDs: {mismatches[:3]}"

    # A node's windows never overlap: a node is leased again only after its last window ended.
    by_node = defaultdict(list)
    for window in windows:
        assert APP_POOL[0] <= window.node <= APP_POOL[1], window
        by_node[window.node].append(window)
    for node, node_windows in by_node.items():
        node_windows.sort(key=lambda window: window.start)
        for earlier, later in zip(node_windows, node_windows[1:]):
            assert later.start >= earlier.end_exclusive, (
                node, earlier.holder, earlier.end_exclusive, later.holder, later.start
            )
    return {**counts, "leases": len(windows), "node reuses": node_reuses(windows)}


def own_nodes(member: Cluster) -> tuple[int, int]:
    with member.connect() as conn:
        return conn.execute("SELECT first_node, last_node FROM randflake_status()").fetchone()


def report(load: Load, windows: list[Window], counts: dict, mode: str) -> None:
    """IDs per second per generator slot, over the time its processes ran."""
    made = Counter()
    for window in windows:
        made[int(window.holder.split("-")[1])] += len(window.ids)
    print(f"\n{mode}: {counts}")
    for slot in range(GENERATORS):
        processes = [incarnation for incarnation in load.incarnations if incarnation.slot == slot]
        ran = sum(incarnation.ended - incarnation.started for incarnation in processes)
        stats = Counter()
        for incarnation in processes:
            stats.update(incarnation.stats)
        print(
            f"  generator {slot} (member {slot % len(load.members)}): {made[slot]} IDs in {ran:.1f} s = "
            f"{made[slot] / ran:.0f} IDs/s; {len(processes)} processes ({len(processes) - 1} killed); "
            f"last process: {dict(stats)}"
        )


def run_and_check(members: list[Cluster], leases_on: Cluster, tmp_path: pathlib.Path, mode: str, seed: int) -> None:
    """The load on `members`, whose application leases are kept on `leases_on`; the first member
    (which has the members' secret) checks."""
    key_file = tmp_path / "app.key"
    key_file.write_text(members[0].key_hex + "\n")
    key_file.chmod(0o600)
    out = tmp_path / "ids"
    out.mkdir()
    for member in members:
        with member.connect() as conn:
            conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN")
            conn.execute(f"GRANT EXECUTE ON {LEASE_FUNCTIONS} TO {APP_ROLE}")
    load = Load(members, key_file, out, seed)
    for rounds in range(1, MAX_ROUNDS + 1):
        load.run(RUN_SECONDS)
        if load.enough():
            break
    checked = time.monotonic()
    windows = read_windows(out)
    counts = check(members[0], members, windows, members[0].key_bytes)
    report(load, windows, counts, mode)
    print(f"  rounds of {RUN_SECONDS} s: {rounds}; checked in {time.monotonic() - checked:.1f} s")

    killed = sum(incarnation.killed for incarnation in load.incarnations)
    assert killed >= MIN_KILLS, killed
    assert counts["app"] > MIN_APP_IDS, counts
    assert all(counts[f"db{index}"] > MIN_DB_IDS for index in range(len(members))), counts
    holders = {window.holder for window in windows}
    assert len(holders) >= GENERATORS + killed // 2, "killed processes' successors leased again"
    # Generators on every member were served.
    assert {int(holder.split("-")[1]) % len(members) for holder in holders} == set(range(len(members)))
    assert counts["node reuses"] > 0, (
        f"no node was leased twice in {rounds} rounds of {RUN_SECONDS} s ({counts['leases']} leases of "
        f"{APP_POOL[1] - APP_POOL[0] + 1} nodes): the run proved nothing about reuse"
    )
    # Every generator that ran to the end of its round released its lease.
    finals = [f"app/{APP_ROLE}/{incarnation.holder}" for incarnation in load.incarnations if not incarnation.killed]
    with leases_on.connect() as conn:
        still_held = conn.execute(
            """SELECT holder, lease_end FROM randflake.node_leases
                WHERE holder = ANY(%s) AND lease_end >= extract(epoch FROM clock_timestamp())""",
            (finals,),
        ).fetchall()
    assert still_held == [], still_held


def test_generators_and_the_database_never_collide_in_range_mode(make_cluster, tmp_path):
    cluster = make_cluster("randflake.node_id_min = 0", "randflake.node_id_max = 99", *APP_POOL_SETTINGS)
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute(
            "CREATE TABLE made (id bigint PRIMARY KEY DEFAULT randflake_next(), at timestamptz DEFAULT clock_timestamp())"
        )
    run_and_check([cluster], cluster, tmp_path, "range mode", seed=1)


@needs_postgres_fdw
def test_generators_and_the_database_never_collide_in_fleet_mode(make_cluster, tmp_path):
    """A coordinator and two members; the application pool is the same on both members and
    outside the fleet's pool, and the generators lease through both."""
    coordinator = make_cluster(
        "randflake.node_source = 'off'", "randflake.node_id_min = 0", "randflake.node_id_max = 29"
    )
    coordinator.start()
    with coordinator.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    members = [make_cluster(*member_settings(), *APP_POOL_SETTINGS) for _ in range(2)]
    (members[1].dir / "randflake.key").write_text(members[0].key_hex)
    for member in members:
        member.start()
        join_fleet(member, coordinator)
        lease_of(coordinator, member)
    run_and_check(members, coordinator, tmp_path, "fleet mode", seed=2)
