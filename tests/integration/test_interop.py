"""IDs cross between PostgreSQL and the Python reference port (PyPI randflake, module v2)."""

from __future__ import annotations

import time

from randflake.v2 import Config, Generator, Lease, decode_string, encode_string


def test_ids_made_in_postgres_read_the_same_in_the_reference(shared_cluster):
    reference = Generator(Config(lease=Lease(0, 1730000000, 2803741824), secret=shared_cluster.key_bytes))
    with shared_cluster.connect() as conn:
        rows = conn.execute(
            """SELECT s.id, randflake_to_string(s.id),
                      extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
                 FROM (SELECT randflake_next() AS id FROM generate_series(1, 2000)) s,
                      randflake_decode(s.id) d"""
        ).fetchall()
    for id_, text, second, node, sequence in rows:
        assert encode_string(id_) == text
        assert decode_string(text) == id_
        parts = reference.inspect(id_)
        assert (parts.timestamp, parts.node_id, parts.sequence) == (second, node, sequence)


def test_ids_made_by_the_reference_decode_in_postgres(shared_cluster):
    now = int(time.time())
    clock = iter(range(now - 50, now + 50))
    reference = Generator(
        Config(lease=Lease(4242, now - 100, now + 100), secret=shared_cluster.key_bytes, clock=lambda: next(clock))
    )
    made = []
    for _ in range(50):
        id_ = reference.generate()
        parts = reference.inspect(id_)
        made.append((id_, encode_string(id_), parts.timestamp, parts.node_id, parts.sequence))
    with shared_cluster.connect() as conn:
        for id_, text, second, node, sequence in made:
            row = conn.execute(
                """SELECT randflake_from_string(%s), extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
                     FROM randflake_decode(%s) d""",
                (text, id_),
            ).fetchone()
            assert row == (id_, second, node, sequence)
