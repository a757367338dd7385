"""Failover: a streaming standby, made with pg_basebackup, promoted while its primary generates IDs.

Proven here, on real servers and real streaming replication:
* a hot standby issues no IDs (25006) and runs no lease keeper;
* promoted, a standby given its own node range (the recommended recipe) leases that range as a
  new holder (same system identifier, new timeline) and generates IDs within seconds, whether
  the old primary crashed first or is still writing during and after the promotion; no ID,
  and no (second, node, sequence), is ever issued by both servers;
* a hot standby shows a randflake_key column as its primary does: the same canonical strings,
  bigints and binary forms, found by string through the index (the standby has the secret);
* promoted, a standby with the SAME range as its primary leases it only from the second after
  the old primary's replicated lease ends, so its IDs come after every ID of the old primary.
"""

from __future__ import annotations

import struct
import threading
import time

import psycopg
import pytest

from lib.cluster import Cluster, decoded_ids, sql_error, status, wait_for
from lib.replicas import make_standby, promote

TABLE = "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT randflake_next(), origin text NOT NULL)"


class Inserter(threading.Thread):
    """One session inserting batches of rows with default IDs into `t` until stopped or until its
    server goes away, remembering (wall time, IDs) of every batch the server confirmed."""

    def __init__(self, cluster: Cluster, origin: str):
        super().__init__(daemon=True)
        self.conn = cluster.connect()
        self.origin = origin
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.batches: list[tuple[float, list[int]]] = []
        self.lost_server = False
        self.errors: list[psycopg.Error] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                rows = self.conn.execute(
                    "INSERT INTO t (origin) SELECT %s FROM generate_series(1, 100) RETURNING id", (self.origin,)
                ).fetchall()
            except psycopg.OperationalError:
                self.lost_server = True
                return
            except psycopg.Error as error:
                self.errors.append(error)
                return
            with self.lock:
                self.batches.append((time.time(), [row[0] for row in rows]))

    def ids(self, after: float = 0.0) -> list[int]:
        with self.lock:
            return [id for at, batch in self.batches if at > after for id in batch]

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)
        assert not self.is_alive(), "an inserter is stuck"
        self.conn.close()


def start_inserters(cluster: Cluster, origin: str, count: int = 4) -> list[Inserter]:
    inserters = [Inserter(cluster, origin) for _ in range(count)]
    for inserter in inserters:
        inserter.start()
    return inserters


def stop_inserters(inserters: list[Inserter], server_lost: bool = False) -> list[int]:
    """Stops them; returns every ID they got. Only a lost server is an acceptable way to end. When
    their server is gone, each is left to find that out on its next statement before it is
    stopped: stopped first, one between two batches would end without trying the server again."""
    for inserter in inserters:
        if server_lost:
            inserter.join(timeout=30)
        inserter.stop()
    assert [i.errors for i in inserters] == [[]] * len(inserters)
    assert all(i.lost_server == server_lost for i in inserters)
    ids = [id for inserter in inserters for id in inserter.ids()]
    assert ids, "no IDs generated"
    return ids


def prepare_primary(make_cluster, *settings: str) -> tuple[Cluster, int]:
    """A started primary with the extension, table `t` and its lease; returns it and its system
    identifier."""
    primary = make_cluster(*settings)
    primary.start()
    with primary.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute(TABLE)
        conn.execute("INSERT INTO t (origin) VALUES ('primary')")
        system_identifier = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0]
    return primary, system_identifier


def assert_standby_issues_nothing(standby: Cluster) -> None:
    with standby.connect() as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        error = sql_error(conn, "SELECT randflake_next()")
        assert error.sqlstate == "25006"
        assert error.diag.message_primary == "randflake_pg issues no IDs on a standby server"
        error = sql_error(conn, "INSERT INTO t (origin) VALUES ('standby')")
        assert error.sqlstate == "25006"
        on_standby = status(conn)
        assert on_standby["state"] == "standby"
        assert on_standby["keeper_pid"] is None, "a lease keeper runs on a standby"


def first_id_after_promotion(promoted: Cluster, limit: float) -> tuple[int, float]:
    """The first ID the promoted server issues, and how long after the call began it came.
    Calls wait for the new lease by themselves; a call that still fails is retried until `limit`."""
    began = time.monotonic()
    refusals: list[psycopg.Error] = []
    with promoted.connect() as conn:

        def inserted() -> tuple[int] | None:
            try:
                return conn.execute("INSERT INTO t (origin) VALUES ('promoted') RETURNING id").fetchone()
            except psycopg.Error as error:
                assert error.sqlstate == "55000", error
                refusals.append(error)
                return None

        (id,) = wait_for(inserted, limit, "an ID after promotion", interval=0.2, details=lambda: refusals[-1])
        return id, time.monotonic() - began


@pytest.mark.parametrize("old_primary", ["crashes before the promotion", "writes on through the promotion"])
def test_a_standby_with_its_own_range_takes_over_at_once_and_never_repeats_an_id(make_cluster, old_primary):
    """Primary nodes 0..99, standby nodes 100..199. The promoted standby leases 100..199 as
    `<system identifier>/2` and issues IDs within seconds. Whether the old primary crashed
    (-m immediate, inserts in flight) or kept inserting while and after the standby was promoted
    (split brain), the two servers never issue the same ID or (second, node, sequence)."""
    primary, system_identifier = prepare_primary(make_cluster, "randflake.node_id_min = 0", "randflake.node_id_max = 99")
    standby = make_standby(make_cluster, primary, "randflake.node_id_min = 100", "randflake.node_id_max = 199")
    assert standby.key_hex == primary.key_hex
    standby.start()
    assert_standby_issues_nothing(standby)

    on_primary = start_inserters(primary, "primary")
    time.sleep(2)  # a load period: the primary issues for a while before the promotion
    if old_primary == "crashes before the promotion":
        primary.stop("immediate")
        primary_ids = stop_inserters(on_primary, server_lost=True)

    promoted_at = promote(standby)
    first, waited = first_id_after_promotion(standby, limit=10)
    assert waited < 6, f"the promoted standby took {waited:.1f} s to issue its first ID"
    on_promoted = start_inserters(standby, "promoted")
    time.sleep(2)  # a load period: the promoted standby issues for a while
    promoted_ids = [first, *stop_inserters(on_promoted)]
    if old_primary == "writes on through the promotion":
        primary_ids = stop_inserters(on_primary)
        assert any(i.ids(after=promoted_at + 1) for i in on_primary), "the old primary did not write on"
        primary.stop("immediate")

    assert len(set(primary_ids)) == len(primary_ids)
    assert len(set(promoted_ids)) == len(promoted_ids)
    assert set(primary_ids).isdisjoint(promoted_ids)
    with standby.connect() as conn:
        parts = decoded_ids(conn, primary_ids + promoted_ids)
        assert len(set(parts)) == len(parts)
        assert {node for _, node, _ in parts[: len(primary_ids)]} <= set(range(0, 100))
        assert {node for _, node, _ in parts[len(primary_ids) :]} <= set(range(100, 200))

        rows, distinct = conn.execute("SELECT count(*), count(DISTINCT id) FROM t").fetchone()
        assert rows == distinct
        in_table = {row[0] for row in conn.execute("SELECT id FROM t WHERE origin = 'promoted'")}
        assert in_table == set(promoted_ids)
        replicated = [row[0] for row in conn.execute("SELECT id FROM t WHERE origin = 'primary'")]
        assert {node for _, node, _ in decoded_ids(conn, replicated)} <= set(range(0, 100))

        leases = conn.execute(
            "SELECT first_node, last_node, holder FROM randflake.node_leases ORDER BY first_node, lease_start"
        ).fetchall()
        assert (100, 199, f"{system_identifier}/2") in leases
        assert (0, 99, f"{system_identifier}/1") in leases, "the old primary's lease was not replicated"
        assert {holder for first_node, _, holder in leases if first_node >= 100} == {f"{system_identifier}/2"}
        promoted = status(conn)
        assert (promoted["state"], promoted["first_node"], promoted["last_node"]) == ("active", 100, 199)
        assert promoted["keeper_pid"] is not None


def test_a_standby_with_the_same_range_waits_until_the_old_primarys_lease_has_ended(make_cluster):
    """Primary and standby both have nodes 0..99 and 8-second leases. After the primary crashes,
    the standby's replicated lease table says until when the primary may have used those nodes
    (and every ID the primary issued is within it); promoted, the standby is a new holder and its
    lease starts strictly after that second. Its first ID comes once the clock reaches its lease,
    and every one of its IDs is in a later second than every ID of the old primary."""
    settings = ("randflake.node_id_min = 0", "randflake.node_id_max = 99", "randflake.lease_seconds = 8")
    primary, system_identifier = prepare_primary(make_cluster, *settings)
    standby = make_standby(make_cluster, primary)
    standby.start()
    assert_standby_issues_nothing(standby)

    with primary.connect() as conn:
        taken = status(conn)["renewed_at"]
        on_primary = start_inserters(primary, "primary")
        wait_for(lambda: status(conn)["renewed_at"] > taken, 30, "the primary to renew its lease")
    primary.stop("immediate")
    primary_ids = stop_inserters(on_primary, server_lost=True)

    with standby.connect() as conn:
        wait_for(
            lambda: conn.execute("SELECT pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()").fetchone() == (True,),
            10,
            "the standby to replay what it received",
        )
        old_leases = conn.execute("SELECT holder, lease_start, lease_end FROM randflake.node_leases").fetchall()
    assert [holder for holder, _, _ in old_leases] == [f"{system_identifier}/1"]
    old_end = old_leases[0][2]

    promoted_at = promote(standby)
    first, waited = first_id_after_promotion(standby, limit=old_end - promoted_at + 10)
    # The first call waited for the lease to start (at most the old lease's remaining seconds).
    assert time.time() <= max(old_end + 1, promoted_at) + 3
    on_promoted = start_inserters(standby, "promoted")
    time.sleep(1.5)  # a load period: the promoted standby issues for a while
    promoted_ids = [first, *stop_inserters(on_promoted)]

    with standby.connect() as conn:
        leases = conn.execute(
            "SELECT holder, first_node, last_node, lease_start, lease_end FROM randflake.node_leases ORDER BY lease_start"
        ).fetchall()
        # The old primary's lease ends before the new one starts; it is pruned once the new one,
        # whose row keeps its bound, is renewed past it.
        *older, (holder, first_node, last_node, new_start, _) = leases
        assert all(old_holder == f"{system_identifier}/1" and old_end_ < new_start for old_holder, _, _, _, old_end_ in older)
        assert (holder, first_node, last_node) == (f"{system_identifier}/2", 0, 99)
        assert new_start > old_end
        assert new_start <= max(old_end + 1, int(promoted_at) + 2), "the new lease starts later than it must"

        assert set(primary_ids).isdisjoint(promoted_ids)
        primary_parts = decoded_ids(conn, primary_ids)
        promoted_parts = decoded_ids(conn, promoted_ids)
        assert len(set(primary_parts + promoted_parts)) == len(primary_ids) + len(promoted_ids)
        assert max(second for second, _, _ in primary_parts) <= old_end
        assert min(second for second, _, _ in promoted_parts) >= new_start
        rows, distinct = conn.execute("SELECT count(*), count(DISTINCT id) FROM t").fetchone()
        assert rows == distinct


def test_a_standby_shows_randflake_keys_as_its_primary_does(make_cluster):
    """The plain values travel in the WAL; the standby, which has the same secret, prints,
    sends and parses them as the primary does, rows copied by pg_basebackup and streamed alike."""
    primary, _ = prepare_primary(make_cluster)
    keyed = "SELECT id::text, id::bigint, note FROM keyed ORDER BY keyed.id"
    with primary.connect() as conn:
        conn.execute("CREATE TABLE keyed (id randflake_key PRIMARY KEY DEFAULT randflake_next_key(), note text)")
        conn.execute("INSERT INTO keyed (note) SELECT 'copied ' || n FROM generate_series(1, 500) n")
    standby = make_standby(make_cluster, primary)
    standby.start()
    with primary.connect() as conn:
        conn.execute("INSERT INTO keyed (note) SELECT 'streamed ' || n FROM generate_series(1, 500) n")
        written = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        expected = conn.execute(keyed).fetchall()
    with standby.connect() as conn:
        wait_for(lambda: conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (written,)).fetchone()[0],
                 30, "the standby to replay the inserts")
        assert conn.execute(keyed).fetchall() == expected
        assert len(expected) == 1000
        with conn.cursor(binary=True) as cursor:
            wire = [row[0] for row in cursor.execute("SELECT id FROM keyed ORDER BY id")]
        assert wire == [struct.pack(">q", public) for _, public, _ in expected]
        conn.execute("SET enable_seqscan = off")
        for text, _, note in expected[::97]:
            assert conn.execute("SELECT note FROM keyed WHERE id = %s", (text,)).fetchall() == [(note,)]
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN SELECT note FROM keyed WHERE id = %s",
                                                          (expected[0][0],)))
        assert "keyed_pkey" in plan, plan
