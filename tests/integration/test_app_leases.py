"""Application leases through SQL: randflake_lease_acquire, _extend and _release, and
randflake_app_leases() for monitoring.

One cluster serves the module (range mode, nodes 0..99, application pool 1000..1007); each test
starts from an empty pool, which the superuser empties by deleting the pool's rows. Every refusal
is checked for its SQLSTATE and a HINT, and "changes nothing" is proved by comparing the whole
lease table before and after. Callers are treated as hostile: roles that try to reach another
role's holders, the server's own nodes, the whole pool, the keeper's identity (through their own
operators on the search_path) or every acquisition (through the advisory lock it takes).

The server runs on this host, so Python's clock is the server's; the server reads the coarse
variant of that clock (src/pg/clock.rs), which lags the precise one by at most a kernel tick, so a
second read here just after a boundary may be one ahead of the server's.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections import defaultdict

import psycopg
import pytest
from randflake.v2 import Lease

from lib.cluster import Cluster, server_major, wait_for

POOL = (1000, 1007)
POOL_SIZE = POOL[1] - POOL[0] + 1
SERVER_NODES = (0, 99)
POOL_SETTINGS = (
    f"randflake.node_id_min = {SERVER_NODES[0]}",
    f"randflake.node_id_max = {SERVER_NODES[1]}",
    f"randflake.app_node_id_min = {POOL[0]}",
    f"randflake.app_node_id_max = {POOL[1]}",
)
# The last second an ID can carry: 2058-11-05.
LAST_SECOND = 1_730_000_000 + (1 << 30) - 1
INT_MAX = (1 << 31) - 1
LEASE_FUNCTIONS = (
    "randflake_lease_acquire(text, integer)",
    "randflake_lease_extend(text, integer, integer)",
    "randflake_lease_release(text, integer)",
)
# Roles granted the lease functions. svc_1 and svcx1 differ where a LIKE pattern's `_` would
# match; "Quoted/Svc" needs quoting and holds a `/`.
SERVICES = ("svc_1", "svcx1", "Quoted/Svc")
# Granted, and owns a schema: the search_path attack.
MALLORY = "mallory"
# Member of pg_monitor, and owns a schema.
PEEPER = "peeper"


def quoted(role: str) -> str:
    return '"' + role.replace('"', '""') + '"'


def tombstone(holder: str, role: str, name: str) -> bool:
    """Whether `holder` is what a release writes in place of `role`'s `name`: no application's
    holder (all "app/...") can name it; it may keep whose it was."""
    key = quoted(role) if any(not (c.islower() or c.isdigit() or c == "_") for c in role) else role
    return holder in ("released", f"released/{key}/{name}")


@pytest.fixture(scope="module")
def server():
    cluster = Cluster("app-leases", POOL_SETTINGS)
    cluster.start()
    grants = "PROCEDURE " + ", ".join(LEASE_FUNCTIONS)
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        for role in (*SERVICES, MALLORY):
            conn.execute(f"CREATE ROLE {quoted(role)} LOGIN")
            conn.execute(f"GRANT EXECUTE ON {grants} TO {quoted(role)}")
        conn.execute("CREATE ROLE outsider LOGIN")
        conn.execute("CREATE ROLE watcher LOGIN IN ROLE pg_monitor")
        conn.execute(f"CREATE ROLE {PEEPER} LOGIN IN ROLE pg_monitor")
        for role in (MALLORY, PEEPER):
            conn.execute(f"CREATE SCHEMA {role}_tools AUTHORIZATION {role}")
        # The server's own lease is on record before any test compares the table.
        wait_for(
            lambda: conn.execute("SELECT state = 'active' FROM randflake_status()").fetchone()[0],
            15,
            "the server's own lease",
        )
    yield cluster
    cluster.destroy()


@pytest.fixture
def pool(server: Cluster) -> Cluster:
    """The module's cluster with an empty application pool and no per-role limit."""
    with server.connect() as conn:
        conn.execute(f"DELETE FROM randflake.node_leases WHERE first_node BETWEEN {POOL[0]} AND {POOL[1]}")
    return server


def lease_table(conn: psycopg.Connection) -> list[tuple]:
    """Every row of the lease table. The server's own lease by its identity only: its keeper
    renews it (end, high-water mark, renewed_at) whenever it likes."""
    rows = conn.execute(
        """SELECT first_node, last_node, holder, server_name, lease_start, lease_end, used_through, renewed_at
             FROM randflake.node_leases ORDER BY first_node, lease_start"""
    ).fetchall()
    return [row if POOL[0] <= row[0] <= POOL[1] else row[:5] for row in rows]


def pool_rows(conn: psycopg.Connection) -> list[tuple]:
    """(node, holder, server_name, lease_start, lease_end, used_through) of the pool's rows."""
    return conn.execute(
        f"""SELECT first_node, holder, server_name, lease_start, lease_end, used_through
              FROM randflake.node_leases WHERE first_node BETWEEN {POOL[0]} AND {POOL[1]}
             ORDER BY first_node, lease_start"""
    ).fetchall()


def acquire(conn: psycopg.Connection, holder: str, seconds: int = 600) -> tuple[int, int, int]:
    return conn.execute("CALL randflake_lease_acquire(%s, %s, NULL, NULL, NULL)", (holder, seconds)).fetchone()


def try_acquire(conn: psycopg.Connection, holder: str, seconds: int) -> tuple[int, int, int] | None:
    """A lease, or None while the pool is exhausted."""
    try:
        return acquire(conn, holder, seconds)
    except psycopg.Error as error:
        if error.sqlstate != "53400":
            raise
        return None


def extend(conn: psycopg.Connection, holder: str, node: int, seconds: int = 600) -> tuple[int, int, int]:
    return conn.execute("CALL randflake_lease_extend(%s, %s, %s, NULL, NULL, NULL)", (holder, node, seconds)).fetchone()


def release(conn: psycopg.Connection, holder: str, node: int) -> bool:
    return conn.execute("CALL randflake_lease_release(%s, %s, NULL)", (holder, node)).fetchone()[0]


def refused(conn: psycopg.Connection, statement: str, params: tuple = ()) -> psycopg.Error:
    """Runs a call that must be refused with an ERROR that carries a HINT; returns the error."""
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(statement, params)
    error = caught.value
    if error.sqlstate != "42501":  # PostgreSQL's own permission error has no hint
        assert error.diag.message_hint, f"no HINT for {error.sqlstate} {error.diag.message_primary}"
    return error


# Linux's CLOCK_REALTIME_COARSE, which the time module does not name.
CLOCK_REALTIME_COARSE = 5


def server_second() -> int:
    """The second the server's clock reads now: the coarse clock of this host (src/pg/clock.rs)."""
    return int(time.clock_gettime(CLOCK_REALTIME_COARSE))


def wait_past(second: int) -> None:
    """Waits until the server's clock has passed `second`."""
    timeout = second + 10 - time.time()
    wait_for(lambda: server_second() > second, timeout, f"the server's clock to pass second {second}", interval=0.01)


def server_node(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT first_node FROM randflake_status()").fetchone()[0]


# --- acquire, extend, release ---------------------------------------------------------------


def test_acquire_hands_out_a_pool_node_from_the_servers_clock_under_the_roles_name(pool):
    with pool.connect(user="svc_1") as conn, pool.connect() as admin:
        before = time.time()
        node, start, end = acquire(conn, "worker-1", 5)
        after = time.time()
        assert POOL[0] <= node <= POOL[1]
        assert int(before) - 1 <= start <= int(after), (before, start, after)
        assert end - start == 5
        assert pool_rows(admin) == [
            (node, "app/svc_1/worker-1", "application svc_1: worker-1", start, end - 1, end - 1)
        ]
        # The window is the reference port's Lease, half-open.
        assert Lease(node_id=node, start=start, end_exclusive=end).end_exclusive == end

        # A second lease of the same holder is another node: a holder may hold several.
        other, other_start, _ = acquire(conn, "worker-1", 5)
        assert other != node and other_start >= start
        # The default is ten minutes.
        third, third_start, third_end = acquire(conn, "worker-2")
        assert third_end - third_start == 600 and third not in (node, other)


def test_a_node_is_leased_again_only_after_every_earlier_window_of_it_ended(pool):
    """With the whole pool held by 2-second leases, every node handed out next starts after the
    window it had before."""
    with pool.connect(user="svc_1") as conn, pool.connect() as admin:
        first = {acquire(conn, f"fill-{index}", 2)[0]: None for index in range(POOL_SIZE)}
        assert len(first) == POOL_SIZE
        ends = {node: end for node, _, _, _, end, _ in pool_rows(admin)}
        error = refused(conn, "CALL randflake_lease_acquire('one-more', 2, NULL, NULL, NULL)")
        assert error.sqlstate == "53400"
        wait_for(lambda: time.time() > min(ends.values()) + 1.02, 5, "the first window to end")
        node, start, _ = wait_for(lambda: try_acquire(conn, "next", 2), 5, "a node to come free")
        assert start > ends[node], (node, start, ends[node])


def test_extend_keeps_node_and_start_and_never_moves_the_end_back(pool):
    with pool.connect(user="svc_1") as conn, pool.connect() as admin:
        node, start, end = acquire(conn, "extender", 3)
        before = time.time()
        assert extend(conn, "extender", node, 10)[:2] == (node, start)
        longer = pool_rows(admin)[0][4] + 1
        assert int(before) + 9 <= longer <= int(time.time()) + 10
        # A shorter request leaves the end where it is: the holder may already use those seconds.
        assert extend(conn, "extender", node, 1) == (node, start, longer)
        assert extend(conn, "extender", node, 2) == (node, start, longer)
        # The default is ten minutes from now.
        _, _, default_end = extend(conn, "extender", node)
        assert default_end >= int(before) + 599
        assert pool_rows(admin) == [
            (node, "app/svc_1/extender", "application svc_1: extender", start, default_end - 1, default_end - 1)
        ]


def test_extend_fails_once_the_lease_has_ended(pool):
    with pool.connect(user="svc_1") as conn, pool.connect() as admin:
        node, start, end = acquire(conn, "late", 1)
        wait_past(end - 1)
        before = lease_table(admin)
        error = refused(conn, "CALL randflake_lease_extend('late', %s, 60, NULL, NULL, NULL)", (node,))
        assert error.sqlstate == "55000"
        assert error.diag.message_primary == f'the lease of node {node} by holder "late" ended with second {end - 1}'
        assert "stop issuing" in error.diag.message_hint
        assert lease_table(admin) == before
        # Releasing what has ended gives nothing back and changes nothing.
        assert release(conn, "late", node) is False
        assert lease_table(admin) == before


def test_release_keeps_the_node_until_the_seconds_its_holder_may_have_used(pool):
    """A released ten-minute lease keeps its node for the server's clock plus a minute (the
    allowance for an application clock running ahead); a short one, to its own end."""
    with pool.connect(user="svc_1") as conn, pool.connect() as admin:
        long_node, long_start, long_end = acquire(conn, "long", 600)
        short_node, short_start, short_end = acquire(conn, "short", 3)
        for index in range(POOL_SIZE - 2):
            acquire(conn, f"filler-{index}", 600)
        before = time.time()
        assert release(conn, "long", long_node) is True
        after = time.time()
        assert release(conn, "short", short_node) is True
        rows = {row[0]: row for row in pool_rows(admin)}
        node, holder, shown, start, end, used = rows[long_node]
        assert tombstone(holder, "svc_1", "long")
        assert (shown, start) == ("released by application svc_1: long", long_start)
        assert int(before) + 60 - 1 <= end <= int(after) + 60 and end == used
        assert tombstone(rows[short_node][1], "svc_1", "short")
        assert rows[short_node][2:5] == ("released by application svc_1: short", short_start, short_end - 1)

        # The tombstones hold their nodes: the pool is exhausted, and the holder is gone.
        table = lease_table(admin)
        assert refused(conn, "CALL randflake_lease_acquire('again', 3, NULL, NULL, NULL)").sqlstate == "53400"
        error = refused(conn, "CALL randflake_lease_extend('long', %s, 60, NULL, NULL, NULL)", (long_node,))
        assert error.sqlstate == "55000"
        assert error.diag.message_primary == f'holder "long" holds no lease of node {long_node}'
        assert refused(conn, "CALL randflake_lease_release('long', %s, NULL)", (long_node,)).sqlstate == "55000"
        assert lease_table(admin) == table

        # The short lease's node comes back right after its end, not before.
        assert time.time() < short_end - 0.2, "the test was too slow to look before the end"
        node, start, _ = wait_for(lambda: try_acquire(conn, "again", 3), 6, "the released node to come back")
        assert node == short_node and start >= short_end, (node, start, short_node, short_end)


def test_short_leases_churn_without_overlap(pool):
    """Ten holders against eight nodes, leases of one or two seconds extended or released at
    random, for six seconds: every window a node gets starts at the server's clock and after
    the previous window of that node ends, and the pool runs out and comes back."""
    windows: dict[int, list[list[int]]] = defaultdict(list)  # node -> [[start, end_exclusive, asked_at]]
    counts = {"leases": 0, "exhausted": 0, "extended": 0, "released": 0}
    errors: list = []
    lock = threading.Lock()
    deadline = time.monotonic() + 6

    def holder(index: int) -> None:
        rng = random.Random(index)
        try:
            with pool.connect(user="svc_1") as conn:
                while time.monotonic() < deadline:
                    asked = time.time()
                    lease = try_acquire(conn, f"churn-{index}", rng.choice((1, 2)))
                    if lease is None:
                        with lock:
                            counts["exhausted"] += 1
                        time.sleep(0.05)  # pacing: a holder refused by the exhausted pool does not spin
                        continue
                    node, start, end = lease
                    window = [start, end, asked]
                    with lock:
                        windows[node].append(window)
                        counts["leases"] += 1
                    if rng.random() < 0.5:
                        # A deliberate hold: extensions at random moments of the lease, up to half a
                        # second before its end.
                        time.sleep(rng.uniform(0, max(0.0, end - 0.5 - time.time())))
                        try:
                            _, same_start, new_end = extend(conn, f"churn-{index}", node, rng.choice((1, 2)))
                        except psycopg.Error as error:
                            assert error.sqlstate == "55000", error  # ended meanwhile
                        else:
                            assert same_start == start and new_end >= end
                            window[1] = new_end
                            with lock:
                                counts["extended"] += 1
                    if rng.random() < 0.5 and release(conn, f"churn-{index}", node):
                        with lock:
                            counts["released"] += 1
                    else:
                        wait_past(window[1] - 1)  # the window's end, on the server's clock
        except BaseException as error:  # reported by the test
            errors.append(error)

    threads = [threading.Thread(target=holder, args=(index,)) for index in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert counts["leases"] >= 20 and counts["exhausted"] > 0, counts
    assert counts["extended"] > 0 and counts["released"] > 0, counts
    for node, node_windows in windows.items():
        assert POOL[0] <= node <= POOL[1]
        node_windows.sort()
        for start, _, asked in node_windows:
            assert start >= int(asked) - 1, (node, start, asked)
        for (_, previous_end, _), (start, _, _) in zip(node_windows, node_windows[1:]):
            # Releases of leases this short keep the whole window, so the next starts after it.
            assert start >= previous_end, (node, node_windows)
    print(f"churn: {counts}")


# --- refusals -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    statement: str  # {held}: the node held by "held"; {free}: a pool node nobody holds; {server}: the server's
    sqlstate: str
    message: str  # a fragment the primary message must contain


NOT_IN_POOL = f"is not in the application pool {POOL[0]}..{POOL[1]}"
BAD_HOLDER = "a holder is 1 to 200 bytes of text without invisible or line-breaking characters"


def acquire_case(name: str, holder: str, seconds: str, sqlstate: str, message: str) -> Case:
    return Case(f"acquire {name}", f"CALL randflake_lease_acquire({holder}, {seconds}, NULL, NULL, NULL)", sqlstate, message)


def extend_case(name: str, holder: str, node: str, seconds: str, sqlstate: str, message: str) -> Case:
    return Case(
        f"extend {name}", f"CALL randflake_lease_extend({holder}, {node}, {seconds}, NULL, NULL, NULL)", sqlstate, message
    )


def release_case(name: str, holder: str, node: str, sqlstate: str, message: str) -> Case:
    return Case(f"release {name}", f"CALL randflake_lease_release({holder}, {node}, NULL)", sqlstate, message)


def bad_holders() -> list[tuple[str, str]]:
    """(name, SQL literal) of holders that are not 1 to 200 bytes of text without invisible or
    line-breaking characters."""
    return [
        ("empty", "''"),
        ("201 bytes", f"'{'h' * 201}'"),
        ("201 bytes of two-byte letters", f"'{'é' * 100}h'"),
        ("newline", "E'a\\nb'"),
        ("tab", "E'a\\tb'"),
        ("escape", "E'\\x1b[31m'"),
        ("delete", "E'a\\x7f'"),
        ("C1 control", "E'a\\u0085b'"),
        ("right-to-left override", "E'admin\\u202Enimda'"),
        ("line separator", "E'a\\u2028b'"),
        ("paragraph separator", "E'a\\u2029'"),
        ("zero-width space", "E'a\\u200Bb'"),
        ("byte order mark", "E'\\uFEFFa'"),
        ("word joiner", "E'a\\u2060b'"),
        ("Mongolian vowel separator", "E'a\\u180Eb'"),
        ("combining grapheme joiner", "E'a\\u034Fb'"),
        ("variation selector 16", "E'a\\uFE0F'"),
        ("variation selector 17", "E'a\\U000E0100'"),
        ("language tag", "E'\\U000E0001a'"),
        ("Hangul choseong filler", "E'a\\u115Fb'"),
        ("Hangul jungseong filler", "E'a\\u1160b'"),
        ("Hangul filler", "E'a\\u3164b'"),
        ("Hangul filler alone", "E'\\u3164'"),
        ("halfwidth Hangul filler", "E'a\\uFFA0b'"),
        ("Braille pattern blank", "E'a\\u2800b'"),
        ("Braille pattern blank alone", "E'\\u2800'"),
        ("musical null notehead", "E'a\\U0001D159b'"),
    ]


CASES = [
    acquire_case("NULL holder", "NULL", "5", "22004", "the holder of an application lease must not be NULL"),
    acquire_case("NULL seconds", "'h'", "NULL", "22004", "the seconds of an application lease must not be NULL"),
    acquire_case("zero seconds", "'h'", "0", "22023", "a lease must last at least 1 second, not 0"),
    acquire_case("negative seconds", "'h'", "-1", "22023", "a lease must last at least 1 second, not -1"),
    acquire_case("most negative seconds", "'h'", str(-INT_MAX - 1), "22023", f"not {-INT_MAX - 1}"),
    acquire_case("seconds past the last second", "'h'", str(INT_MAX), "22023", f"past {LAST_SECOND}"),
    *(acquire_case(f"holder {name}", literal, "5", "22023", BAD_HOLDER) for name, literal in bad_holders()),
    extend_case("NULL holder", "NULL", "{held}", "5", "22004", "the holder of an application lease"),
    extend_case("NULL node", "'held'", "NULL", "5", "22004", "the node_id of an application lease must not be NULL"),
    extend_case("NULL seconds", "'held'", "{held}", "NULL", "22004", "the seconds of an application lease"),
    extend_case("zero seconds", "'held'", "{held}", "0", "22023", "at least 1 second, not 0"),
    extend_case("negative seconds", "'held'", "{held}", "-600", "22023", "at least 1 second, not -600"),
    extend_case("seconds past the last second", "'held'", "{held}", str(INT_MAX), "22023", f"past {LAST_SECOND}"),
    extend_case("empty holder", "''", "{held}", "5", "22023", BAD_HOLDER),
    extend_case("node -1", "'held'", "-1", "5", "22023", f"node -1 {NOT_IN_POOL}"),
    extend_case("the server's node", "'held'", "{server}", "5", "22023", NOT_IN_POOL),
    extend_case("node below the pool", "'held'", str(POOL[0] - 1), "5", "22023", NOT_IN_POOL),
    extend_case("node above the pool", "'held'", str(POOL[1] + 1), "5", "22023", NOT_IN_POOL),
    extend_case("the last node", "'held'", "131071", "5", "22023", NOT_IN_POOL),
    extend_case("node past the format", "'held'", str(INT_MAX), "5", "22023", NOT_IN_POOL),
    extend_case("the most negative node", "'held'", str(-INT_MAX - 1), "5", "22023", NOT_IN_POOL),
    extend_case("a free node", "'held'", "{free}", "5", "55000", 'holder "held" holds no lease of node'),
    extend_case("an unknown holder", "'nobody'", "{held}", "5", "55000", 'holder "nobody" holds no lease of node'),
    extend_case("the holder in other case", "'HELD'", "{held}", "5", "55000", "holds no lease"),
    extend_case("the holder with a space", "'held '", "{held}", "5", "55000", "holds no lease"),
    release_case("NULL holder", "NULL", "{held}", "22004", "the holder of an application lease"),
    release_case("NULL node", "'held'", "NULL", "22004", "the node_id of an application lease"),
    release_case("the server's node", "'held'", "{server}", "22023", NOT_IN_POOL),
    release_case("node above the pool", "'held'", str(POOL[1] + 1), "22023", NOT_IN_POOL),
    release_case("node -1", "'held'", "-1", "22023", NOT_IN_POOL),
    release_case("empty holder", "''", "{held}", "22023", BAD_HOLDER),
    release_case("a free node", "'held'", "{free}", "55000", "holds no lease of node"),
    release_case("an unknown holder", "'nobody'", "{held}", "55000", "holds no lease of node"),
    release_case("a holder of 201 bytes", f"'{'h' * 201}'", "{held}", "22023", BAD_HOLDER),
]


def test_the_refusals_are_at_least_forty_cases():
    assert len(CASES) >= 40
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_bad_input_is_refused_with_its_sqlstate_and_a_hint_and_changes_nothing(pool, case: Case):
    with pool.connect(user="svc_1") as conn, pool.connect() as admin:
        held, _, _ = acquire(conn, "held", 600)
        free = next(node for node in range(POOL[0], POOL[1] + 1) if node != held)
        before = lease_table(admin)
        error = refused(conn, case.statement.format(held=held, free=free, server=server_node(admin)))
        assert (error.sqlstate, case.message in error.diag.message_primary) == (case.sqlstate, True), (
            error.sqlstate,
            error.diag.message_primary,
        )
        assert lease_table(admin) == before
        # The lease is intact and still the holder's.
        assert extend(conn, "held", held, 600)[0] == held


def test_an_exhausted_pool_is_refused_and_changes_nothing(pool):
    with pool.connect(user="svc_1") as conn, pool.connect() as admin:
        for index in range(POOL_SIZE):
            acquire(conn, f"all-{index}", 600)
        before = lease_table(admin)
        error = refused(conn, "CALL randflake_lease_acquire('one-too-many', 5, NULL, NULL, NULL)")
        assert error.sqlstate == "53400"
        assert error.diag.message_primary == (
            f"no free node in the application pool: all {POOL_SIZE} nodes of {POOL[0]}..{POOL[1]} are leased"
        )
        assert "Widen the application pool" in error.diag.message_hint
        assert lease_table(admin) == before


def test_calls_outside_autocommit_or_outside_the_keepers_database_are_refused(pool):
    with pool.connect() as admin:
        admin.execute("DROP DATABASE IF EXISTS elsewhere")
        admin.execute("CREATE DATABASE elsewhere")
    with pool.connect(dbname="elsewhere") as other:
        other.execute("CREATE EXTENSION randflake_pg")
        other.execute("GRANT EXECUTE ON PROCEDURE randflake_lease_acquire(text, integer) TO svc_1")
    with pool.connect(user="svc_1") as conn, pool.connect() as admin:
        node, _, _ = acquire(conn, "held", 600)
        before = lease_table(admin)
        with pool.connect(user="svc_1", dbname="elsewhere") as other:
            error = refused(other, "CALL randflake_lease_acquire('h', 5, NULL, NULL, NULL)")
            assert error.sqlstate == "55000"
            assert error.diag.message_primary == (
                'application leases are kept in database "postgres" (randflake.database), not in this one'
            )
            assert 'Connect to database "postgres"' in error.diag.message_hint
        with pool.connect(dbname="elsewhere") as other:
            assert other.execute("SELECT * FROM randflake_app_leases()").fetchall() == []
        with pool.connect(user="svc_1") as in_block:
            in_block.autocommit = False
            for statement, function in (
                ("CALL randflake_lease_acquire('h', 5, NULL, NULL, NULL)", "randflake_lease_acquire"),
                (f"CALL randflake_lease_extend('held', {node}, 5, NULL, NULL, NULL)", "randflake_lease_extend"),
                (f"CALL randflake_lease_release('held', {node}, NULL)", "randflake_lease_release"),
            ):
                error = refused(in_block, statement)
                assert error.sqlstate == "25001"
                assert error.diag.message_primary == (
                    f"CALL {function}() must be a statement of its own: it commits its own transaction"
                )
                assert "autocommit" in error.diag.message_hint
                in_block.rollback()
        assert lease_table(admin) == before


def acquire_in_block(holder: str, before: str = "", after: str = "") -> str:
    """A DO block that runs `before`, CALLs acquire for `holder`, then runs `after`."""
    return f"""DO $$ DECLARE node int; first bigint; after bigint; BEGIN
                   {before}
                   CALL randflake_lease_acquire('{holder}', 600, node, first, after);
                   {after}
               END $$"""


def test_a_call_from_a_do_block_or_a_procedure_commits_the_transaction_it_runs_in(pool):
    """PL/pgSQL run by a DO or CALL of its own in autocommit mode may CALL the lease procedures:
    each commits the transaction the block is in, as a COMMIT there would, and the block goes on
    in a new one. Where PostgreSQL would not let a COMMIT end the transaction, they refuse."""
    with pool.connect() as admin:
        admin.execute("CREATE TEMP TABLE work (step text)")

        def leased(holder: str) -> int:
            return admin.execute(
                "SELECT count(*) FROM randflake.node_leases WHERE holder = %s", (f"app/postgres/{holder}",)
            ).fetchone()[0]

        def work() -> list[str]:
            return [step for (step,) in admin.execute("SELECT step FROM work ORDER BY step").fetchall()]

        with pytest.raises(psycopg.errors.RaiseException):
            admin.execute(acquire_in_block("then-fails", after="INSERT INTO work VALUES ('after'); RAISE 'later';"))
        assert (leased("then-fails"), work()) == (1, []), "a later error takes back what followed, not the lease"

        admin.execute(acquire_in_block("after-commit", before="INSERT INTO work VALUES ('before'); COMMIT;"))
        assert (leased("after-commit"), work()) == (1, ["before"])

        admin.execute(
            """CREATE PROCEDURE take_a_lease(holder text, INOUT node int) LANGUAGE plpgsql AS $$
                   DECLARE first bigint; after bigint;
                   BEGIN CALL randflake_lease_acquire(holder, 600, node, first, after); END $$"""
        )
        admin.execute(
            """CREATE FUNCTION take_a_lease(holder text) RETURNS int LANGUAGE plpgsql AS $$
                   DECLARE node int; first bigint; after bigint;
                   BEGIN CALL randflake_lease_acquire(holder, 600, node, first, after); RETURN node; END $$"""
        )
        try:
            node = admin.execute("CALL take_a_lease('by-a-procedure', NULL)").fetchone()[0]
            assert POOL[0] <= node <= POOL[1] and leased("by-a-procedure") == 1

            before = lease_table(admin)
            error = refused(admin, acquire_in_block("after-writes", before="INSERT INTO work VALUES ('uncommitted');"))
            assert error.sqlstate == "25001"
            assert "would commit what the statements before it wrote" in error.diag.message_primary
            for statement in (
                "SELECT take_a_lease('by-a-function')",
                acquire_in_block("in-an-exception-block", "BEGIN", "EXCEPTION WHEN division_by_zero THEN END;"),
                f"SELECT 1; {acquire_in_block('in-a-query-string')}",
            ):
                error = refused(admin, statement)
                assert error.sqlstate == "25001", statement
                assert "must be a statement of its own" in error.diag.message_primary, statement
            with pool.connect() as in_block:
                in_block.autocommit = False
                error = refused(in_block, "CALL take_a_lease('in-begin', NULL)")
                assert error.sqlstate == "25001"
            assert lease_table(admin) == before and work() == ["before"]
        finally:
            admin.execute("DROP PROCEDURE take_a_lease(text, int)")
            admin.execute("DROP FUNCTION take_a_lease(text)")


# --- durable before returned -----------------------------------------------------------------


def pool_windows(conn: psycopg.Connection, node: int) -> list[tuple[int, int, str]]:
    """(lease_start, lease_end, holder) of every window on record of `node`."""
    return conn.execute(
        "SELECT lease_start, lease_end, holder FROM randflake.node_leases WHERE first_node = %s ORDER BY lease_start",
        (node,),
    ).fetchall()


def lease_every_free_node(conn: psycopg.Connection, prefix: str) -> list[tuple[int, int, int]]:
    """Every node the pool still gives out, each leased to its own holder."""
    leases = []
    while (lease := try_acquire(conn, f"{prefix}-{len(leases)}", 600)) is not None:
        leases.append(lease)
    return leases


def test_a_lease_returned_in_a_pipeline_survives_the_pipelines_later_error(pool):
    """psycopg in autocommit, one pipeline: the acquire, then a statement that fails, without a
    Sync between them. The client holds the window it was returned; the error must not take it
    back, and no other role may be given the node for overlapping seconds. (0.5.0's function
    returned the lease inside the pipeline's implicit transaction, which the error rolled back,
    and another role was leased the node again at once.)"""
    with pool.connect(user="svc_1") as conn, pool.connect(user="svcx1") as other, pool.connect() as admin:
        with pytest.raises(psycopg.errors.DivisionByZero):
            with conn.pipeline() as pipeline:
                leased = conn.execute("CALL randflake_lease_acquire('piped', 600, NULL, NULL, NULL)")
                conn.execute("SELECT 1/0")
                pipeline.sync()
        node, start, end = leased.fetchone()
        assert end == start + 600
        assert pool_windows(admin, node) == [(start, end - 1, "app/svc_1/piped")]
        others = lease_every_free_node(other, "after-pipeline")
        assert len(others) == POOL_SIZE - 1 and node not in [leased_node for leased_node, _, _ in others], others


def test_a_call_that_cannot_commit_its_own_transaction_is_refused_and_changes_nothing(pool):
    """The procedure commits its transaction: it refuses where that commit would not be its own
    to make (a query string of several statements, a function) or would commit what a
    pipeline's earlier statements wrote, and nothing of the refused call or of those statements
    is left."""
    with pool.connect() as admin:
        admin.execute("CREATE TABLE IF NOT EXISTS public.piped_writes (note text)")
        admin.execute("GRANT INSERT, SELECT ON public.piped_writes TO svc_1")
        admin.execute(
            """CREATE OR REPLACE FUNCTION public.lease_from_a_function() RETURNS integer LANGUAGE plpgsql AS $$
               DECLARE node integer; first bigint; after bigint;
               BEGIN CALL randflake_lease_acquire('in-function', 5, node, first, after); RETURN node; END $$"""
        )
        before = lease_table(admin)
    with pool.connect(user="svc_1") as conn:
        for statement in (
            "CALL randflake_lease_acquire('multi', 5, NULL, NULL, NULL); SELECT 1",
            "SELECT 1; CALL randflake_lease_acquire('multi', 5, NULL, NULL, NULL)",
            "SELECT public.lease_from_a_function()",
        ):
            error = refused(conn, statement)
            assert error.sqlstate == "25001", (statement, error)
            assert error.diag.message_primary == (
                "CALL randflake_lease_acquire() must be a statement of its own: it commits its own transaction"
            )
        with pytest.raises(psycopg.errors.ActiveSqlTransaction) as caught:
            with conn.pipeline() as pipeline:
                conn.execute("INSERT INTO public.piped_writes VALUES ('before the call')")
                conn.execute("CALL randflake_lease_acquire('after-a-write', 5, NULL, NULL, NULL)")
                pipeline.sync()
        # PostgreSQL 18 runs a pipeline's statements in an implicit transaction block, where the CALL
        # is refused as not a statement of its own; before 18, as one that follows a write.
        if server_major() >= 18:
            assert caught.value.diag.message_primary == (
                "CALL randflake_lease_acquire() must be a statement of its own: it commits its own transaction"
            )
        else:
            assert caught.value.diag.message_primary == (
                "CALL randflake_lease_acquire() would commit what the statements before it wrote in this transaction"
            )
        assert "Sync" in caught.value.diag.message_hint
        assert conn.execute("SELECT count(*) FROM public.piped_writes").fetchone() == (0,)
    with pool.connect() as admin:
        assert lease_table(admin) == before


def test_a_slow_statement_after_an_acquire_does_not_hold_other_roles_acquisitions(pool):
    """The lock that serialises acquisitions is released at the procedure's own commit: a role
    that sends a slow statement right after its acquire, in the same pipeline, holds up no one.
    (0.5.0's function held the lock until the caller's transaction ended: `SELECT a.*,
    pg_sleep(20) FROM randflake_lease_acquire('slow', 60) a` made every role's acquire wait.)"""
    with pool.connect(user="svc_1") as slow, pool.connect(user="svcx1") as other, pool.connect() as admin:
        error = refused(slow, "SELECT a.*, pg_sleep(20) FROM randflake_lease_acquire('slow', 60) a")
        assert error.sqlstate == "42809", error
        sleeping = threading.Thread(
            target=_then_sleep, args=(slow, "CALL randflake_lease_acquire('slow', 60, NULL, NULL, NULL)"), daemon=True)
        sleeping.start()
        pid = slow.info.backend_pid
        asleep = "SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = %s"
        wait_for(lambda: admin.execute(asleep, (pid,)).fetchone()[0], 10, "the slow role's pipeline to sleep")
        other.execute("SET statement_timeout = '3s'")
        began = time.monotonic()
        node, _, _ = acquire(other, "not-held-up", 5)
        assert time.monotonic() - began < 3 and POOL[0] <= node <= POOL[1]
        admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
        sleeping.join(10)


def _then_sleep(conn: psycopg.Connection, statement: str) -> None:
    """`statement` and a 20 s sleep in one pipeline, without a Sync between them, so that the
    pipeline's transaction stays open until the test cancels the sleep."""
    with pytest.raises(psycopg.errors.QueryCanceled):
        with conn.pipeline() as pipeline:
            conn.execute(statement)
            conn.execute("SELECT pg_sleep(20)")
            pipeline.sync()


def test_releasing_twice_is_refused_the_second_time(pool):
    """A release replaces the holder's row by one no holder names: a second release of the same
    lease finds nothing of the holder's to release (55000), and changes nothing."""
    with pool.connect(user="svc_1") as conn, pool.connect() as admin:
        node, _, _ = acquire(conn, "twice", 600)
        assert release(conn, "twice", node) is True
        before = lease_table(admin)
        error = refused(conn, "CALL randflake_lease_release('twice', %s, NULL)", (node,))
        assert error.sqlstate == "55000"
        assert error.diag.message_primary == f'holder "twice" holds no lease of node {node}'
        assert lease_table(admin) == before


# --- hostile callers ------------------------------------------------------------------------


def test_no_role_reaches_another_roles_holder_or_the_servers_own_lease(pool):
    with pool.connect(user="svc_1") as owner, pool.connect(user="svcx1") as other, pool.connect() as admin:
        node, start, end = acquire(owner, "shared", 600)
        table = lease_table(admin)
        for statement in (
            f"CALL randflake_lease_extend('shared', {node}, 5, NULL, NULL, NULL)",
            f"CALL randflake_lease_extend('shared', {node}, 100000, NULL, NULL, NULL)",
            f"CALL randflake_lease_release('shared', {node}, NULL)",
        ):
            error = refused(other, statement)
            assert (error.sqlstate, error.diag.message_primary) == (
                "55000",
                f'holder "shared" holds no lease of node {node}',
            )
        # Another holder name of the same role is another holder.
        error = refused(owner, f"CALL randflake_lease_release('shared-2', {node}, NULL)")
        assert error.sqlstate == "55000"
        assert lease_table(admin) == table

        # The other role's own "shared" is another holder, on another node.
        their_node, _, _ = acquire(other, "shared", 600)
        assert their_node != node
        holders = {row[0]: row[1] for row in pool_rows(admin)}
        assert holders == {node: "app/svc_1/shared", their_node: "app/svcx1/shared"}
        assert release(other, "shared", their_node) is True
        rows = {row[0]: row for row in pool_rows(admin)}
        assert rows[node][1:5] == ("app/svc_1/shared", "application svc_1: shared", start, end - 1)
        assert tombstone(rows[their_node][1], "svcx1", "shared")

        # The same role and the same holder name are the same holder, from any session.
        with pool.connect(user="svc_1") as second_session:
            assert extend(second_session, "shared", node, 900)[:2] == (node, start)

        # The server's own nodes are out of reach.
        own = server_node(admin)
        table = lease_table(admin)
        own_lease = admin.execute(
            "SELECT first_node, last_node, holder, lease_start FROM randflake.node_leases WHERE first_node = %s", (own,)
        ).fetchall()
        assert len(own_lease) == 1
        for statement in (
            f"CALL randflake_lease_extend('shared', {own}, 5, NULL, NULL, NULL)",
            f"CALL randflake_lease_release('shared', {own}, NULL)",
            f"CALL randflake_lease_release('shared', {SERVER_NODES[1]}, NULL)",
        ):
            assert refused(owner, statement).sqlstate == "22023"
        assert lease_table(admin) == table
        assert admin.execute("SELECT state FROM randflake_status()").fetchone()[0] == "active"


def test_one_role_exhausts_the_pool_unless_the_per_role_limit_is_set(pool):
    with pool.connect(user="svc_1") as greedy, pool.connect(user="svcx1") as other, pool.connect() as admin:
        for index in range(POOL_SIZE):
            acquire(greedy, f"grab-{index}", 3)
        assert refused(other, "CALL randflake_lease_acquire('starved', 5, NULL, NULL, NULL)").sqlstate == "53400"
        admin.execute(f"DELETE FROM randflake.node_leases WHERE first_node BETWEEN {POOL[0]} AND {POOL[1]}")

        admin.execute("ALTER SYSTEM SET randflake.app_leases_per_role = 3")
        admin.execute("SELECT pg_reload_conf()")
        try:
            wait_for(lambda: setting(pool, "randflake.app_leases_per_role") == "3", 10, "the limit to apply")
            with pool.connect(user="svc_1") as greedy, pool.connect(user="svcx1") as other, pool.connect(
                user="Quoted/Svc"
            ) as quoted_role:
                mine = [acquire(greedy, f"grab-{index}", 600)[0] for index in range(3)]
                before = lease_table(admin)
                error = refused(greedy, "CALL randflake_lease_acquire('grab-3', 600, NULL, NULL, NULL)")
                assert error.sqlstate == "53400"
                assert error.diag.message_primary == 'role "svc_1" already holds 3 application leases, its limit'
                assert "randflake.app_leases_per_role" in error.diag.message_hint
                assert lease_table(admin) == before
                # svcx1's count is its own: svc_1's leases would match a LIKE 'app/svc_1/%' pattern's `_`.
                theirs = [acquire(other, f"h{index}", 600)[0] for index in range(3)]
                assert refused(other, "CALL randflake_lease_acquire('h3', 600, NULL, NULL, NULL)").sqlstate == "53400"
                # A role whose name needs quoting gets the rest of the pool; then the pool is out.
                last = [acquire(quoted_role, f"q{index}", 600)[0] for index in range(2)]
                assert sorted(mine + theirs + last) == list(range(POOL[0], POOL[1] + 1))
                error = refused(quoted_role, "CALL randflake_lease_acquire('q2', 600, NULL, NULL, NULL)")
                assert error.diag.message_primary.startswith("no free node in the application pool")
                holders = {row[1].rsplit("/", 1)[0] for row in pool_rows(admin)}
                assert holders == {"app/svc_1", "app/svcx1", 'app/"Quoted/Svc"'}

                # A release gives no node back at once (nor, for the limit, more room: see below).
                assert release(greedy, "grab-0", mine[0]) is True
                before = lease_table(admin)
                assert refused(greedy, "CALL randflake_lease_acquire('grab-3', 600, NULL, NULL, NULL)").sqlstate == "53400"
                assert lease_table(admin) == before
        finally:
            admin.execute("ALTER SYSTEM RESET randflake.app_leases_per_role")
            admin.execute("SELECT pg_reload_conf()")
            wait_for(lambda: setting(pool, "randflake.app_leases_per_role") == "0", 10, "the limit to go")


def test_releasing_does_not_take_a_role_past_its_limit(pool):
    """A released lease keeps its node for up to a minute. A role at its limit that releases and
    leases again in a loop must not collect the pool that way: another role is still served."""
    with pool.connect() as admin:
        admin.execute("ALTER SYSTEM SET randflake.app_leases_per_role = 2")
        admin.execute("SELECT pg_reload_conf()")
        try:
            wait_for(lambda: setting(pool, "randflake.app_leases_per_role") == "2", 10, "the limit to apply")
            with pool.connect(user="svc_1") as greedy, pool.connect(user="svcx1") as other:
                refusals = 0
                for _ in range(POOL_SIZE):
                    lease = try_acquire(greedy, "cycle", 600)
                    if lease is None:
                        refusals += 1
                        continue
                    assert release(greedy, "cycle", lease[0]) is True
                try:
                    acquire(other, "honest", 600)
                except psycopg.Error as error:
                    nodes = pool_rows(admin)
                    pytest.fail(
                        f"svc_1, limited to 2 leases, took all {len(nodes)} nodes by releasing and leasing again "
                        f"({refusals} refusals): {error.diag.message_primary}"
                    )
        finally:
            admin.execute("ALTER SYSTEM RESET randflake.app_leases_per_role")
            admin.execute("SELECT pg_reload_conf()")
            wait_for(lambda: setting(pool, "randflake.app_leases_per_role") == "0", 10, "the limit to go")


def setting(cluster: Cluster, name: str) -> str:
    with cluster.connect() as conn:
        return conn.execute(f"SHOW {name}").fetchone()[0]


HOSTILE_HOLDERS = [
    "'; DROP TABLE randflake.node_leases; --",
    "x' OR holder LIKE '%",
    'double "quote"',
    "back\\slash\\",
    "\\'",
    "%",
    "_",
    "50%_off",
    "$1",
    "$$; SELECT 1; $$",
    "app/svcx1/stolen",
    "../released",
    "released",
    "üñíçødé ✓ 漢字",
    "crab 🦀",
    "h" * 200,
    "é" * 100,
]


def test_holders_are_data_never_sql_or_patterns(pool):
    """Each holder is stored byte for byte under the role's name, works for its own extend and
    release, and matches no other holder (as a LIKE pattern's `%` and `_` would)."""
    for role in ("svc_1", "Quoted/Svc"):
        prefix = f"app/{quoted(role) if '/' in role else role}/"
        for holder in HOSTILE_HOLDERS:
            with pool.connect(user=role) as conn, pool.connect() as admin:
                admin.execute(f"DELETE FROM randflake.node_leases WHERE first_node BETWEEN {POOL[0]} AND {POOL[1]}")
                node, start, _ = acquire(conn, holder, 30)
                assert pool_rows(admin)[0][:3] == (node, prefix + holder, f"application {role}: {holder}"), holder
                table = lease_table(admin)
                lookalikes = {holder.replace("%", "x").replace("_", "y") + "z", holder[:-1], holder.upper() + "Z"}
                for lookalike in {name for name in lookalikes if 0 < len(name.encode()) <= 200} - {holder}:
                    error = refused(conn, "CALL randflake_lease_release(%s, %s, NULL)", (lookalike, node))
                    assert error.sqlstate == "55000", (holder, lookalike)
                assert lease_table(admin) == table
                assert extend(conn, holder, node, 60)[:2] == (node, start)
                assert release(conn, holder, node) is True
                released, shown = pool_rows(admin)[0][1:3]
                assert tombstone(released, role, holder) and shown == f"released by application {role}: {holder}"
    with pool.connect() as admin:
        assert admin.execute("SELECT to_regclass('randflake.node_leases')").fetchone()[0] is not None


def test_nobody_may_execute_the_lease_functions_by_default(pool):
    with pool.connect() as admin:
        for function in (*LEASE_FUNCTIONS, "randflake_app_leases()"):
            (acl,) = admin.execute(
                "SELECT proacl::text[] FROM pg_proc WHERE oid = %s::regprocedure", (function,)
            ).fetchone()
            assert acl is not None and not any(entry.startswith("=") for entry in acl), (function, acl)
            for role in ("outsider", "watcher"):
                (allowed,) = admin.execute(
                    "SELECT has_function_privilege(%s, %s, 'EXECUTE')", (role, function)
                ).fetchone()
                assert allowed == (role == "watcher" and function == "randflake_app_leases()"), (role, function)
        before = lease_table(admin)
    for role in ("outsider", "watcher"):
        with pool.connect(user=role) as conn:
            for statement in (
                "CALL randflake_lease_acquire('h', 5, NULL, NULL, NULL)",
                "CALL randflake_lease_extend('h', 1000, 5, NULL, NULL, NULL)",
                "CALL randflake_lease_release('h', 1000, NULL)",
            ):
                assert refused(conn, statement).sqlstate == "42501"
    with pool.connect(user="outsider") as conn:
        assert refused(conn, "SELECT * FROM randflake_app_leases()").sqlstate == "42501"
    with pool.connect(user="watcher") as conn:
        assert conn.execute("SELECT pool_first, pool_last FROM randflake_app_leases()").fetchall() == [POOL]
    with pool.connect() as admin:
        assert lease_table(admin) == before


# The equality operators the lease functions' SQL (and the trust checks it runs first) use.
SHADOWED_EQUALITIES = (
    ("name", "nameeq"), ("oid", "oideq"), ("integer", "int4eq"), ("bigint", "int8eq"), ("text", "texteq")
)


def shadow_equalities(conn: psycopg.Connection, schema: str) -> None:
    """`=` operators in `schema` that record who runs them, then compare as pg_catalog's do."""
    conn.execute(f"CREATE TABLE {schema}.ran_as (who text)")
    conn.execute(f"GRANT INSERT ON {schema}.ran_as TO PUBLIC")
    conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO PUBLIC")
    for sql_type, compare in SHADOWED_EQUALITIES:
        function = f"{schema}.spy_{compare}"
        conn.execute(
            f"""CREATE FUNCTION {function}({sql_type}, {sql_type}) RETURNS boolean LANGUAGE sql
                AS $$ INSERT INTO {schema}.ran_as VALUES (current_user); SELECT pg_catalog.{compare}($1, $2) $$"""
        )
        conn.execute(f"CREATE OPERATOR {schema}.= (LEFTARG = {sql_type}, RIGHTARG = {sql_type}, FUNCTION = {function})")


def test_a_callers_search_path_cannot_run_its_functions_as_the_keeper(pool):
    """A role with a schema of its own puts `=` operators there and that schema ahead of
    pg_catalog on its search_path, then calls the functions: nothing of the role's may run with
    the keeper's identity (a superuser by default), or the role could make itself superuser."""
    with pool.connect(user=MALLORY) as conn:
        node, _, _ = acquire(conn, "trap", 600)
    calls = [
        (MALLORY, "CALL public.randflake_lease_acquire('trap-2', 5, NULL, NULL, NULL)"),
        (MALLORY, f"CALL public.randflake_lease_extend('trap', {node}, 60, NULL, NULL, NULL)"),
        (MALLORY, f"CALL public.randflake_lease_release('trap', {node}, NULL)"),
        (PEEPER, "SELECT * FROM public.randflake_app_leases()"),
    ]
    for role in (MALLORY, PEEPER):
        with pool.connect(user=role) as conn:
            shadow_equalities(conn, f"{role}_tools")
    ran_as_others = []
    for role, call in calls:
        schema = f"{role}_tools"
        with pool.connect(user=role) as conn:
            conn.execute(f"SET search_path = {schema}, pg_catalog, public")
            try:
                conn.execute(call)
            except psycopg.Error as error:  # a refusal is fine; running the role's code is not
                assert error.sqlstate != "XX000", error
            conn.execute("RESET search_path")
            ran_as = {who for (who,) in conn.execute(f"DELETE FROM {schema}.ran_as RETURNING who").fetchall()}
            assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0] is False
        if ran_as - {role}:
            ran_as_others.append((call, sorted(ran_as - {role})))
    assert ran_as_others == [], f"the callers' operators ran as another role: {ran_as_others}"


def test_no_role_without_write_rights_can_hold_up_acquisitions(pool):
    """A session holding the lease table's lock holds an acquisition up for a second at most: it
    fails with 55P03, naming that session (and so does a WARNING in the log). No role without
    write rights can take the lock acquisitions take, or one above it, and a monitoring role can
    no longer keep a lock on the table open."""
    with pool.connect(user="svc_1") as conn, pool.connect(application_name="blocker") as blocker:
        blocker.autocommit = False
        blocker.execute("LOCK TABLE randflake.node_leases IN ACCESS EXCLUSIVE MODE")
        # Only so that an unbounded wait fails the test rather than hanging it.
        conn.execute("SET statement_timeout = '10s'")
        started = time.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable) as caught:
            acquire(conn, "blocked", 5)
        assert time.monotonic() - started < 3
        named = (f"held up by pid {blocker.info.backend_pid} (role postgres, application 'blocker', "
                 "idle in transaction) holds AccessExclusiveLock")
        assert named in caught.value.diag.message_primary, caught.value
        assert caught.value.diag.message_hint
        blocker.rollback()
        node, _, _ = acquire(conn, "unblocked", 5)
        assert POOL[0] <= node <= POOL[1]
    with pool.connect(user="outsider") as outsider, pool.connect(user="watcher") as watcher, \
            pool.connect(user="svc_1") as conn:
        # No role without write rights can take the lock acquisitions take, or one above it.
        for locker in (outsider, watcher):
            for mode in ("SHARE UPDATE EXCLUSIVE", "SHARE", "EXCLUSIVE", "ACCESS EXCLUSIVE"):
                with locker.transaction(), pytest.raises(psycopg.errors.InsufficientPrivilege):
                    locker.execute(f"LOCK TABLE randflake.node_leases IN {mode} MODE")
        # pg_monitor cannot read the table, nor keep a lock on it through randflake_app_leases().
        with watcher.transaction(), pytest.raises(psycopg.errors.InsufficientPrivilege):
            watcher.execute("SELECT count(*) FROM randflake.node_leases")
        with watcher.transaction(), pytest.raises(psycopg.errors.ActiveSqlTransaction):
            watcher.execute("SELECT * FROM randflake_app_leases()")
        node, _, _ = acquire(conn, "not-held-up", 5)
        assert POOL[0] <= node <= POOL[1]


def _locks_on_the_lease_table(admin: psycopg.Connection, pid: int) -> list[str]:
    return [row[0] for row in admin.execute(
        "SELECT mode FROM pg_locks WHERE pid = %s AND relation = 'randflake.node_leases'::regclass", (pid,))]


def test_no_monitoring_role_can_name_the_lease_table_or_keep_its_lock(pool):
    """PostgreSQL locks a table a statement names while parsing it, before checking privileges:
    with USAGE on schema randflake, a pg_monitor member's `PREPARE ... FROM randflake.node_leases`
    in an open transaction held AccessShareLock without SELECT, and a LOCK TABLE queued behind it
    stopped generation (issue 36). The name no longer resolves for it, and nothing is locked.
    randflake_app_leases() in a pipeline without a Sync, whose implicit transaction stays open
    while a later statement runs, gives the table's lock back before it returns."""
    with pool.connect(user="watcher") as watcher, pool.connect() as admin:
        pid = watcher.info.backend_pid
        with watcher.transaction():
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
                watcher.execute("PREPARE peek AS SELECT 1 FROM randflake.node_leases")
            assert "schema randflake" in caught.value.diag.message_primary, caught.value
        with watcher.transaction():
            watcher.execute("SET LOCAL search_path = randflake, public")
            with pytest.raises(psycopg.errors.UndefinedTable):
                watcher.execute("PREPARE peek AS SELECT 1 FROM node_leases")
            assert _locks_on_the_lease_table(admin, pid) == []
        pooled = threading.Thread(target=_then_sleep, args=(watcher, "SELECT * FROM randflake_app_leases()"), daemon=True)
        pooled.start()
        asleep = "SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = %s"
        wait_for(lambda: admin.execute(asleep, (pid,)).fetchone()[0], 10, "the monitoring pipeline to sleep")
        assert _locks_on_the_lease_table(admin, pid) == []
        admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
        pooled.join(10)



# --- monitoring and configuration -----------------------------------------------------------


def test_randflake_app_leases_matches_the_table(pool):
    with pool.connect(user="svc_1") as conn:
        leases = [acquire(conn, f"m{seconds}", seconds) for seconds in (40, 30, 50, 600)]
        assert release(conn, "m600", leases[3][0]) is True
    with pool.connect(user="watcher") as watcher, pool.connect() as admin:
        for attempt in range(3):
            now = int(time.time())
            row = watcher.execute(
                """SELECT pool_first, pool_last, leases_held, nodes_free, extract(epoch FROM soonest_end)::bigint
                     FROM randflake_app_leases()"""
            ).fetchone()
            held, busy, soonest = admin.execute(
                f"""SELECT count(*) FILTER (WHERE holder LIKE 'app/%%'), count(DISTINCT first_node),
                           min(lease_end) FILTER (WHERE holder LIKE 'app/%%') + 1
                      FROM randflake.node_leases
                     WHERE first_node BETWEEN {POOL[0]} AND {POOL[1]} AND lease_end >= %s""",
                (now,),
            ).fetchone()
            if int(time.time()) == now:
                break
        assert row == (POOL[0], POOL[1], held, POOL_SIZE - busy, soonest)
        # Three held, the released one neither held nor free; the soonest end is the 30-second
        # lease's, the second after its last, as the functions return it.
        assert row[2:] == (3, POOL_SIZE - 4, leases[1][2])
    with pool.connect() as admin:
        admin.execute(f"DELETE FROM randflake.node_leases WHERE first_node BETWEEN {POOL[0]} AND {POOL[1]}")
    with pool.connect(user="watcher") as watcher:
        row = watcher.execute("SELECT leases_held, nodes_free, soonest_end FROM randflake_app_leases()").fetchall()
        assert row == [(0, POOL_SIZE, None)]


BAD_POOLS = [
    ("overlapping the servers' nodes", ("randflake.app_node_id_min = 50", "randflake.app_node_id_max = 200"),
     (50, 200)),
    ("inside the servers' nodes", ("randflake.app_node_id_min = 10", "randflake.app_node_id_max = 20"), (10, 20)),
    ("touching the last server node", ("randflake.app_node_id_min = 99", "randflake.app_node_id_max = 120"), (99, 120)),
    ("only the minimum set", ("randflake.app_node_id_min = 1000",), (1000, -1)),
    ("only the maximum set", ("randflake.app_node_id_max = 1000",), (-1, 1000)),
    ("reversed", ("randflake.app_node_id_min = 1010", "randflake.app_node_id_max = 1000"), (1010, 1000)),
    (
        "with the servers' default range of every node",
        ("randflake.node_id_min = 0", "randflake.node_id_max = 131071", "randflake.app_node_id_min = 1000",
         "randflake.app_node_id_max = 1007"),
        (1000, 1007),
    ),
]


def test_a_bad_application_pool_stops_the_server_from_starting(make_cluster):
    cluster = make_cluster("randflake.node_id_min = 0", "randflake.node_id_max = 99")
    base = (cluster.dir / "postgresql.conf").read_text()
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        # No pool: nothing is leased to applications, and monitoring shows no pool.
        error = refused(conn, "CALL randflake_lease_acquire('h', 5, NULL, NULL, NULL)")
        assert (error.sqlstate, error.diag.message_primary) == (
            "55000",
            "randflake_pg leases no nodes to applications on this server: no application pool is configured",
        )
        assert "randflake.app_node_id_min" in error.diag.message_hint
        assert conn.execute("SELECT * FROM randflake_app_leases()").fetchall() == []
    cluster.stop()
    for name, settings, (first, last) in BAD_POOLS:
        (cluster.dir / "postgresql.conf").write_text(base)
        cluster.configure(*settings)
        logged = len(cluster.log())
        result = cluster.start(check=False)
        assert result.returncode != 0, f"the server started with an application pool {name}"
        nodes = "0..131071" if "default" in name else "0..99"
        expected = (
            f"randflake.app_node_id_min..randflake.app_node_id_max ({first}..{last}) must be both -1, "
            f"or an ascending range outside randflake.node_id_min..randflake.node_id_max ({nodes})"
        )
        assert expected in cluster.log()[logged:], (name, cluster.log()[logged:][-2000:])
    # A pool next to the servers' nodes is fine.
    (cluster.dir / "postgresql.conf").write_text(base)
    cluster.configure("randflake.app_node_id_min = 100", "randflake.app_node_id_max = 100")
    cluster.start()
    with cluster.connect() as conn:
        assert conn.execute("SELECT pool_first, pool_last, nodes_free FROM randflake_app_leases()").fetchall() == [
            (100, 100, 1)
        ]
