"""The scalar accessors randflake_timestamp, randflake_node_id and randflake_sequence: each equal
to the matching column of randflake_decode on every published vector (under that vector's own
secret) and on random values, and to the Python reference port; NULL in, NULL out."""

from __future__ import annotations

import json
import random

from randflake.v2 import Config, Generator, Lease

from lib.cluster import ROOT, wait_for, write_server_file

VECTORS = json.loads((ROOT / "randflake" / "tests" / "data" / "reference_vectors.json").read_text())["randflake"]

ACCESSORS_AND_DECODE = """
    SELECT extract(epoch FROM randflake_timestamp(s.id))::bigint, randflake_node_id(s.id), randflake_sequence(s.id),
           extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
      FROM unnest(%s::bigint[]) WITH ORDINALITY AS s(id, n), randflake_decode(s.id) d
     ORDER BY s.n"""


def parts_of(cluster, ids: list[int]) -> list[tuple]:
    """Each ID through the three accessors, then through randflake_decode, in a new session."""
    with cluster.connect() as conn:
        return conn.execute(ACCESSORS_AND_DECODE, (ids,)).fetchall()


def test_every_published_vector_reads_the_same_through_each_accessor(cluster):
    assert len(VECTORS) == 18
    by_secret: dict[str, list[dict]] = {}
    for vector in VECTORS:
        by_secret.setdefault(vector["secret"], []).append(vector)
    for secret, vectors in by_secret.items():
        ids = [int(vector["encrypted_id"]) for vector in vectors]
        expected = [(v["timestamp"], v["node_id"], v["sequence"]) * 2 for v in vectors]
        write_server_file(cluster.dir / "randflake.key", secret + "\n")
        cluster.reload()
        # The postmaster rereads the key file a moment after the reload request; sessions
        # started before that still have the previous secret.
        wait_for(lambda: parts_of(cluster, ids) == expected, 10, f"the vectors of secret {secret[:4]}... to decode")


def test_random_values_read_the_same_as_decode_and_the_reference(shared_cluster):
    """Any bigint decrypts to some parts, so every value is a valid input: random ones, the
    extremes, and IDs this server made."""
    reference = Generator(Config(lease=Lease(0, 1730000000, 2803741824), secret=shared_cluster.key_bytes))
    draw = random.Random(20261123)
    values = [0, 1, -1, 2**63 - 1, -(2**63)] + [draw.randrange(-(2**63), 2**63) for _ in range(20_000)]
    with shared_cluster.connect() as conn:
        values += [row[0] for row in conn.execute("SELECT randflake_next() FROM generate_series(1, 5000)")]
        rows = conn.execute(ACCESSORS_AND_DECODE, (values,)).fetchall()
        # The same comparison done entirely in SQL, over a million values.
        differing = conn.execute(
            """SELECT count(*)
                 FROM (SELECT ((g * 6364136223846793005 + 1442695040888963407) % 18446744073709551616
                               - 9223372036854775808)::bigint AS id
                         FROM generate_series(1::numeric, 1000000::numeric) g) s,
                      randflake_decode(s.id) d
                WHERE (randflake_timestamp(s.id), randflake_node_id(s.id), randflake_sequence(s.id))
                      IS DISTINCT FROM (d.timestamp, d.node_id, d.sequence)"""
        ).fetchone()[0]
    assert differing == 0
    assert len(rows) == len(values)
    for value, row in zip(values, rows):
        parts = reference.inspect(value)
        assert row[:3] == row[3:] == (parts.timestamp, parts.node_id, parts.sequence), value


def test_null_in_null_out_and_one_call_per_row(shared_cluster):
    with shared_cluster.connect() as conn:
        assert conn.execute(
            "SELECT randflake_timestamp(NULL), randflake_node_id(NULL), randflake_sequence(NULL)"
        ).fetchone() == (None, None, None)
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT randflake_next(), note text)")
        conn.execute("INSERT INTO orders (note) SELECT 'n' || g FROM generate_series(1, 3000) g")
        # The argument is the row's own column, so the STABLE function runs once per row, not
        # once per query: every row gets its own sequence.
        distinct = conn.execute(
            "SELECT count(DISTINCT (randflake_timestamp(id), randflake_node_id(id), randflake_sequence(id))) FROM orders"
        ).fetchone()[0]
    assert distinct == 3000
