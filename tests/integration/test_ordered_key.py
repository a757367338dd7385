"""randflake_key: the plain value on disk, the encrypted ID everywhere an ID travels. Its text and
binary forms against randflake_to_string() and bigint's, bad input, the casts and the plans they
allow, the generator, time ranges, who may learn the plain value, a server without a secret,
COPY, pg_dump/pg_restore, parallel workers, logical decoding through a walsender, logical
replication in text and binary modes, and moving a bigint column to the type and back."""

from __future__ import annotations

import json
import pathlib
import re
import struct
import subprocess

import psycopg
import pytest
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types.numeric import Int2, Int4, Int8
from randflake.sparx64 import Sparx64

from lib.cluster import pg_config, sql_error, wait_for, write_server_file
from lib.dba_guide import block, run_sql

KEYED = "CREATE TABLE {name} (id randflake_key PRIMARY KEY DEFAULT randflake_next_key(), note text)"


def keyed_table(conn, name: str, rows: int) -> None:
    conn.execute(KEYED.format(name=name))
    conn.execute(f"INSERT INTO {name} (note) SELECT 'row ' || n FROM generate_series(1, %s) n", (rows,))


def public_ids(conn, table: str) -> list[int]:
    """The public IDs of `table`, sorted as bigints."""
    return [row[0] for row in conn.execute(f"SELECT id::bigint FROM {table} ORDER BY 1").fetchall()]


def pg_tool(cluster, tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [f"{pg_config('--bindir')}/{tool}", "-h", str(cluster.dir), "-p", str(cluster.port), "-U", "postgres", *args],
        check=True, capture_output=True, text=True,
    )


class WireKey(bytes):
    """Bytes sent as a randflake_key parameter in binary format, as a driver would."""


def binary_key_dumper(conn) -> None:
    oid = conn.execute("SELECT 'randflake_key'::regtype::oid").fetchone()[0]

    class KeyDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj):
            return bytes(obj)

    KeyDumper.oid = oid
    conn.adapters.register_dumper(WireKey, KeyDumper)


def test_text_json_and_binary_forms_are_the_public_id(shared_cluster):
    with shared_cluster.connect() as conn:
        keyed_table(conn, "forms", 300)
        rows = conn.execute(
            "SELECT id::text, randflake_to_string(id::bigint), to_json(id)::text, id::bigint, id::randflake_id::text,"
            " (id::bigint)::randflake_key = id FROM forms"
        ).fetchall()
        for text, canonical, as_json, public, as_randflake_id, back in rows:
            assert text == canonical == as_randflake_id
            assert json.loads(as_json) == canonical
            assert back
        # Binary output is bigint's eight bytes of the public ID.
        with conn.cursor(binary=True) as cursor:
            binary = cursor.execute("SELECT id, id::bigint FROM forms").fetchall()
        assert all(wire == struct.pack(">q", public) for wire, public in binary)
        # Text and binary input: the canonical string, a bigint and eight bytes all find the row.
        binary_key_dumper(conn)
        text, _, _, public, _, _ = rows[7]
        for parameter in (text, public, WireKey(struct.pack(">q", public))):
            found = conn.execute("SELECT id::text FROM forms WHERE id = %s", (parameter,)).fetchall()
            assert found == [(text,)], parameter
        assert conn.execute("SELECT %s::randflake_key::text", (WireKey(struct.pack(">q", public)),)).fetchone() == (text,)


@pytest.mark.parametrize(
    "text",
    ["", "00", "0a", "ABC", " 1", "1 ", "1=", "w", "g000000000000", "vvvvvvvvvvvvvv", "1" * 40, "é"],
)
def test_non_canonical_strings_are_refused(shared_cluster, text):
    with shared_cluster.connect() as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute("SELECT %s::randflake_key", (text,))
        error = caught.value
        assert error.sqlstate == "22P02", error
        assert "base32hex" in error.diag.message_hint


def test_binary_input_of_the_wrong_length_is_refused(shared_cluster):
    with shared_cluster.connect() as conn:
        binary_key_dumper(conn)
        for wire in (b"", b"1234", b"123456789"):
            with pytest.raises(psycopg.Error) as caught:
                conn.execute("SELECT %s::randflake_key", (WireKey(wire),))
            assert caught.value.sqlstate == "22P03", caught.value
            assert f"{len(wire)} bytes instead of 8" in caught.value.diag.message_primary
            assert "bigint" in caught.value.diag.message_hint


def test_bad_input_is_refused_on_every_path_into_the_type(shared_cluster):
    """The same errors whichever way a bad value comes in: a text parameter, an array element,
    COPY in text and in binary format (a field of four bytes), a composite's field."""
    with shared_cluster.connect() as conn:
        conn.execute("CREATE TABLE refused (id randflake_key)")
        for statement, parameters in (("SELECT %b::randflake_key", ("0a",)),
                                      ("SELECT '{3vgoe12ccb8gh,g000000000000}'::randflake_key[]", ()),
                                      ("SELECT ROW('ABC')::refused", ())):
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(statement, parameters)
            assert caught.value.sqlstate == "22P02", (statement, caught.value)
            assert "base32hex" in caught.value.diag.message_hint, statement
        with pytest.raises(psycopg.Error) as caught, conn.cursor() as cursor:
            with cursor.copy("COPY refused FROM STDIN") as copy:
                copy.write(b"3vgoe12ccb8gh\nvvvvvvvvvvvvvv\n")
        assert caught.value.sqlstate == "22P02" and "base32hex" in caught.value.diag.message_hint, caught.value
        header = b"PGCOPY\n\xff\r\n\0" + struct.pack(">ii", 0, 0)
        row = struct.pack(">hi", 1, 4) + b"1234"
        with pytest.raises(psycopg.Error) as caught, conn.cursor() as cursor:
            with cursor.copy("COPY refused FROM STDIN (FORMAT binary)") as copy:
                copy.write(header + row + struct.pack(">h", -1))
        assert caught.value.sqlstate == "22P03", caught.value
        assert "4 bytes instead of 8" in caught.value.diag.message_primary and "bigint" in caught.value.diag.message_hint
        assert conn.execute("SELECT count(*) FROM refused").fetchone() == (0,)


def test_equality_with_text_bigint_and_string_parameters_uses_the_index(shared_cluster):
    with shared_cluster.connect() as conn:
        keyed_table(conn, "lookups", 2000)
        conn.execute("ANALYZE lookups")
        text, public = conn.execute("SELECT l.id::text, l.id::bigint FROM lookups l ORDER BY l.id OFFSET 1000 LIMIT 1").fetchone()
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for name, parameter_type, value in (("by_text", "(text)", f"'{text}'"), ("by_bigint", "(bigint)", str(public)),
                                            ("by_string", "", f"'{text}'")):
            conn.execute(f"PREPARE {name}{parameter_type} AS SELECT id::text FROM lookups WHERE id = $1")
            assert conn.execute(f"EXECUTE {name}({value})").fetchall() == [(text,)]
            plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN EXECUTE {name}({value})"))
            assert "Scan using lookups_pkey" in plan, plan
            assert "$1" in plan, plan  # the generic plan: the parameter is not folded into a constant


def test_integer_ids_of_every_width_find_their_row_through_the_index(shared_cluster):
    """A public ID small enough for a smallint or an integer (one in 2^32 fits in an integer) is
    still an ID: a literal, or a parameter a driver types by its value as psycopg 3 does, finds
    its row through the index whatever its width, in text and binary format."""
    with shared_cluster.connect() as conn:
        keyed_table(conn, "widths", 2000)
        small = {5: "five", -30000: "smallint", 2_000_000_000: "integer", 2**40: "bigint"}
        for public, note in small.items():
            conn.execute("INSERT INTO widths (id, note) VALUES (%s::bigint, %s)", (public, note))
        conn.execute("ANALYZE widths")
        text = conn.execute("SELECT id::text FROM widths WHERE note = 'five'").fetchone()[0]
        assert conn.execute("SELECT note FROM widths WHERE id = 5").fetchone() == ("five",)
        assert conn.execute("SELECT note FROM widths WHERE id IN (5, -30000) ORDER BY id::bigint"
                            ).fetchall() == [("smallint",), ("five",)]
        parameters = [(Int2(5), "five"), (Int4(5), "five"), (Int8(5), "five"), (5, "five"),
                      (-30000, "smallint"), (2_000_000_000, "integer"), (2**40, "bigint"), (text, "five")]
        for parameter, note in parameters:
            for placeholder in ("%t", "%b"):  # str: unknown in text format, text in binary
                query = f"SELECT note FROM widths WHERE id = {placeholder}"
                assert conn.execute(query, (parameter,)).fetchall() == [(note,)], (parameter, placeholder)
                plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {query}", (parameter,)))
                assert "Index Scan using widths_pkey" in plan, (parameter, placeholder, plan)
        # A server-side prepared statement, planned once for any value.
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for parameter_type, value in (("smallint", "5"), ("integer", "5")):
            conn.execute(f"PREPARE by_{parameter_type}({parameter_type}) AS SELECT note FROM widths WHERE id = $1")
            assert conn.execute(f"EXECUTE by_{parameter_type}({value})").fetchall() == [("five",)]
            plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN EXECUTE by_{parameter_type}({value})"))
            assert "Index Scan using widths_pkey" in plan and "$1" in plan, plan


def plan_of(conn, query: str, parameters=()) -> str:
    return "\n".join(row[0] for row in conn.execute(f"EXPLAIN {query}", parameters))


def test_a_role_that_may_only_read_finds_rows_by_public_id_through_the_index(shared_cluster):
    """Issue 36: a role with SELECT on a key table and no decoder grant finds rows by their
    public ID sent typed, as drivers send it (bigint from pgx and JDBC's setLong, integer and
    smallint from psycopg for the few IDs that fit, text in binary format from psycopg, a
    randflake_id), by `= ANY` of an array and through joins to a bigint ID column, each through
    the key's index, in custom and generic plans; an untyped string is read as a key, which it
    may not make, and it is told how to compare instead."""
    with shared_cluster.connect() as conn:
        keyed_table(conn, "by_public", 3000)
        conn.execute("INSERT INTO by_public (id, note) VALUES (5::bigint, 'five')")
        conn.execute("CREATE TABLE public_refs (ref bigint PRIMARY KEY, n int)")
        conn.execute("INSERT INTO public_refs SELECT id::bigint, row_number() OVER () FROM by_public"
                     " WHERE note <> 'five' ORDER BY note LIMIT 4")
        conn.execute("ANALYZE by_public")
        conn.execute("ANALYZE public_refs")
        conn.execute("CREATE ROLE lookup_only LOGIN")
        conn.execute("GRANT SELECT ON by_public, public_refs TO lookup_only")
        rows = conn.execute("SELECT id::text, id::bigint, note FROM by_public WHERE note <> 'five' LIMIT 3").fetchall()
    (text, public, note), others = rows[0], rows[1:]
    with shared_cluster.connect(user="lookup_only") as conn:
        lookups = [(public, "%b", note), (public, "%t", note), (Int8(public), "%b", note), (text, "%b", note),
                   (Int2(5), "%b", "five"), (Int4(5), "%t", "five"), (5, "%t", "five")]
        for parameter, placeholder, expected in lookups:
            query = f"SELECT note FROM by_public WHERE id = {placeholder}"
            assert conn.execute(query, (parameter,)).fetchall() == [(expected,)], (parameter, placeholder)
            assert "Index Scan using by_public_pkey" in plan_of(conn, query, (parameter,)), (parameter, placeholder)
        by_id = "SELECT note FROM by_public WHERE id = %s::randflake_id"
        assert conn.execute(by_id, (text,)).fetchall() == [(note,)]
        assert "Index Scan using by_public_pkey" in plan_of(conn, by_id, (text,))
        # Arrays: the index looks each ID up.
        for array in ([public, *(row[1] for row in others)], [text, *(row[0] for row in others)]):
            query = "SELECT note FROM by_public WHERE id = ANY(%b) ORDER BY note"
            assert conn.execute(query, (array,)).fetchall() == sorted([(note,), *((row[2],) for row in others)])
            assert "Index Scan using by_public_pkey" in plan_of(conn, query, (array,)), array
        # A generic plan keeps the parameter and still probes the index.
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for parameter_type, value in (("bigint", str(public)), ("text", f"'{text}'"), ("integer", "5")):
            conn.execute(f"PREPARE public_by_{parameter_type}({parameter_type}) AS SELECT note FROM by_public WHERE id = $1")
            assert conn.execute(f"EXECUTE public_by_{parameter_type}({value})").fetchone()[0] in (note, "five")
            plan = plan_of(conn, f"EXECUTE public_by_{parameter_type}({value})")
            assert "Index Scan using by_public_pkey" in plan and "$1" in plan, plan
        conn.execute("RESET plan_cache_mode")
        # Joins to a bigint ID column: a nested loop probing the key's index, and a hash join.
        join = "SELECT r.n, b.note FROM public_refs r JOIN by_public b ON b.id = r.ref ORDER BY r.n"
        expected = conn.execute(
            "SELECT r.n, b.note FROM public_refs r, by_public b WHERE b.id::bigint = r.ref ORDER BY r.n").fetchall()
        assert len(expected) == 4
        for settings, node in (("SET enable_hashjoin = off; SET enable_mergejoin = off", "Index Scan using by_public_pkey"),
                               ("SET enable_nestloop = off; SET enable_mergejoin = off", "Hash Join")):
            conn.execute(settings)
            assert conn.execute(join).fetchall() == expected, settings
            assert node in plan_of(conn, join), (settings, plan_of(conn, join))
            conn.execute("RESET ALL")
        # A semi-join with a set of bigint IDs hashes both sides within the key's hash family.
        semi = "SELECT note FROM by_public WHERE id IN (SELECT unnest(%s::bigint[])) ORDER BY note"
        assert conn.execute(semi, ([public, *(row[1] for row in others)],)).fetchall() == sorted(
            [(note,), *((row[2],) for row in others)])
        # An untyped string is input of the key, which only roles that may decode can do.
        for statement, parameters in (("SELECT note FROM by_public WHERE id = %t", (text,)),
                                      (f"SELECT note FROM by_public WHERE id = '{text}'", ()),
                                      ("SELECT %s::bigint::randflake_key", (public,))):
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
                conn.execute(statement, parameters)
            hint = caught.value.diag.message_hint
            assert "randflake_decode(bigint)" in hint and "$1::text" in hint, (statement, caught.value)


def test_only_roles_that_may_decode_turn_public_ids_into_keys(shared_cluster):
    """Every route from a public form to a key asks for the decoder grant, EXECUTE on
    randflake_decode(bigint): text and binary input, COPY, casts, assignment. A GRANT or REVOKE
    made by another session applies to a session's very next statement."""
    with shared_cluster.connect() as conn:
        conn.execute("CREATE ROLE key_maker LOGIN")
        public = conn.execute("SELECT randflake_next()").fetchone()[0]
        text = conn.execute("SELECT randflake_to_string(%s)", (public,)).fetchone()[0]
    routes = [("SELECT %s::randflake_key", (text,)), ("SELECT %s::bigint::randflake_key", (public,)),
              ("SELECT %s::randflake_id::randflake_key", (text,)),
              ("SELECT ARRAY[%s]::text::randflake_key[]", (text,)),
              ("CREATE TEMP TABLE made_keys AS SELECT %s::bigint::randflake_key AS id", (public,))]
    with shared_cluster.connect(user="key_maker") as maker, shared_cluster.connect() as admin:
        binary_key_dumper(maker)
        routes.append(("SELECT %s::randflake_key", (WireKey(struct.pack(">q", public)),)))
        maker.execute("CREATE TEMP TABLE copied (id randflake_key)")

        def copy_in() -> None:
            with maker.cursor() as cursor, cursor.copy("COPY copied FROM STDIN") as copy:
                copy.write(f"{text}\n".encode())

        def refused_everywhere() -> None:
            for statement, parameters in routes:
                with pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
                    maker.execute(statement, parameters)
                assert "GRANT EXECUTE ON FUNCTION" in caught.value.diag.message_hint, statement
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                copy_in()

        refused_everywhere()
        admin.execute("GRANT EXECUTE ON FUNCTION randflake_decode(bigint) TO key_maker")
        for statement, parameters in routes[:4]:
            maker.execute(statement, parameters)
        copy_in()
        assert maker.execute("SELECT id::bigint FROM copied").fetchone() == (public,)
        admin.execute("REVOKE EXECUTE ON FUNCTION randflake_decode(bigint) FROM key_maker")
        refused_everywhere()


def test_keys_sort_by_creation_and_are_randflake_next_ids(shared_cluster):
    with shared_cluster.connect() as conn:
        conn.execute("CREATE TABLE made (n serial, id randflake_key NOT NULL DEFAULT randflake_next_key(),"
                     " from_next randflake_key DEFAULT randflake_next())")
        for _ in range(3):
            conn.execute("INSERT INTO made (n) SELECT nextval('made_n_seq') FROM generate_series(1, 100)")
        # One backend: sorting by the key is sorting by creation.
        by_key = [row[0] for row in conn.execute("SELECT n FROM made ORDER BY id")]
        assert by_key == sorted(by_key)
        # The plain value decodes like the public ID, and both generators draw from one sequence of IDs.
        decoded = conn.execute(
            "SELECT randflake_key_decode(id) = randflake_decode(id::bigint),"
            " randflake_key_decode(from_next) = randflake_decode(from_next::bigint) FROM made"
        ).fetchall()
        assert all(a and b for a, b in decoded)
        assert conn.execute("SELECT count(DISTINCT x) FROM (SELECT id FROM made UNION ALL SELECT from_next FROM made) s(x)"
                            ).fetchone() == (600,)


def public_id_of(secret: bytes, second: int, node: int, sequence: int) -> int:
    """The public ID whose plain value is (second, node, sequence): the Python reference port's cipher."""
    encrypted = bytearray(8)
    Sparx64(secret).encrypt(encrypted, ((second - 1730000000) << 34 | node << 17 | sequence).to_bytes(8, "little"))
    return int.from_bytes(encrypted, "little", signed=True)


def test_sorts_and_index_builds_follow_the_key_order_through_the_sort_support(shared_cluster):
    """The btree operator class has a sort support function, and what it sorts (as the first sort
    column and as a later one, ascending and descending) is in the key order, the plain value's:
    by second, then node, then sequence. The keys: several nodes and sequences in each of a few
    seconds (one past 2041, whose stored value has its top bit set), the bounds of seconds and
    what the generator makes. amcheck finds the index that CREATE INDEX built with it sound."""
    with shared_cluster.connect() as conn:
        support = conn.execute("""
            SELECT p.amproc::regproc::text FROM pg_amproc p JOIN pg_opfamily f ON f.oid = p.amprocfamily
             WHERE f.opfname = 'randflake_key_ops' AND f.opfmethod = (SELECT oid FROM pg_am WHERE amname = 'btree')
               AND p.amprocnum = 2""").fetchall()
        assert support == [("randflake_key_sortsupport",)]
        conn.execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        conn.execute("CREATE TABLE made_keys (id randflake_key NOT NULL)")
        # 2026-01-01, 2045-01-01 and the last second: within each, ordering by sequence before
        # node (or signed, across them) would put these keys in another order.
        grid = [public_id_of(shared_cluster.key_bytes, second, node, sequence)
                for second in (1767225600, 2366841600, 2803741823)
                for node in (0, 1, 2, 70000, 131071) for sequence in (0, 1, 2, 65536, 131071)]
        conn.execute("INSERT INTO made_keys SELECT unnest(%s::bigint[])::randflake_key", (grid,))
        others = [shared_cluster.connect() for _ in range(2)]
        try:
            for _ in range(20):
                for session in (conn, *others):
                    session.execute("INSERT INTO made_keys SELECT randflake_next_key() FROM generate_series(1, 200)")
        finally:
            for session in others:
                session.close()
        conn.execute("""
            INSERT INTO made_keys SELECT randflake_key_lowest(t) FROM unnest(%(times)s::timestamptz[]) t
            UNION ALL SELECT randflake_key_highest(t) FROM unnest(%(times)s::timestamptz[]) t""",
                     {"times": ["2026-01-01", "2040-06-01", "2045-01-01", "2058-01-01"]})
        conn.execute("CREATE TABLE sorted_keys AS SELECT id, row_number() OVER () AS n FROM"
                     " (SELECT id FROM made_keys ORDER BY random()) shuffled")
        conn.execute("CREATE INDEX sorted_keys_id ON sorted_keys (id)")
        conn.execute("SELECT bt_index_check('sorted_keys_id', true)")
        conn.execute("SET enable_indexscan = off")
        conn.execute("SET enable_bitmapscan = off")
        by_parts = ("SELECT array_agg(s.n ORDER BY {first} d.timestamp {way}, {then})"
                    " FROM sorted_keys s, randflake_key_decode(s.id) d")
        by_key = "SELECT array_agg(n) FROM (SELECT n FROM sorted_keys ORDER BY {first} id {way}) s"
        for first in ("", "n % 3,"):
            for way in ("ASC", "DESC"):
                expected, sequence_first = (conn.execute(by_parts.format(
                    first=first.replace("n", "s.n"), way=way, then=then.format(way=way))).fetchone()[0]
                    for then in ("d.node_id {way}, d.sequence {way}", "d.sequence {way}, d.node_id {way}"))
                assert expected != sequence_first
                plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + by_key.format(first=first, way=way)))
                assert "Sort" in plan, plan
                assert conn.execute(by_key.format(first=first, way=way)).fetchone()[0] == expected, (first, way)


def test_max_and_min_follow_the_key_order_from_the_index_end_or_any_scan(shared_cluster):
    """max() and min() give the newest and oldest key in the key's order (keys past 2041, whose
    stored value has its top bit set, included): from the btree index's end when there is one,
    and the same by a plain, a parallel (combining the workers' results) and an empty scan."""
    with shared_cluster.connect() as conn:
        keyed_table(conn, "extremes", 20000)
        conn.execute("""
            INSERT INTO extremes (id) SELECT randflake_key_lowest(t) FROM unnest(%(times)s::timestamptz[]) t
            UNION ALL SELECT randflake_key_highest(t) FROM unnest(%(times)s::timestamptz[]) t""",
                     {"times": ["2026-01-01", "2040-06-01", "2045-01-01", "2058-01-01"]})
        conn.execute("ANALYZE extremes")
        expected = conn.execute("SELECT (SELECT id FROM extremes ORDER BY id DESC LIMIT 1),"
                                " (SELECT id FROM extremes ORDER BY id LIMIT 1)").fetchone()
        assert expected == conn.execute("SELECT randflake_key_highest('2058-01-01'), randflake_key_lowest('2026-01-01')"
                                        ).fetchone()
        query = "SELECT max(id), min(id) FROM extremes"

        def explained(explain: str) -> str:
            return "\n".join(row[0] for row in conn.execute(f"{explain} {query}"))

        plan = explained("EXPLAIN")
        assert "Index Only Scan Backward using extremes_pkey" in plan and "Seq Scan" not in plan, plan
        assert conn.execute(query).fetchone() == expected
        for setting in ("enable_indexscan = off", "enable_indexonlyscan = off", "enable_bitmapscan = off"):
            conn.execute(f"SET {setting}")
        plan = explained("EXPLAIN")
        assert "Seq Scan" in plan, plan
        assert conn.execute(query).fetchone() == expected
        for setting in ("parallel_setup_cost = 0", "parallel_tuple_cost = 0", "min_parallel_table_scan_size = 0",
                        "max_parallel_workers_per_gather = 2"):
            conn.execute(f"SET {setting}")
        plan = explained("EXPLAIN (ANALYZE)")
        assert "Partial Aggregate" in plan and "Workers Launched: 2" in plan, plan
        assert conn.execute(query).fetchone() == expected
        assert conn.execute("SELECT max(id), min(id) FROM extremes WHERE false").fetchone() == (None, None)


def test_a_time_range_is_an_index_range_scan(shared_cluster):
    with shared_cluster.connect() as conn:
        keyed_table(conn, "timed", 3000)
        conn.execute("ANALYZE timed")
        first, last = conn.execute("SELECT min(randflake_key_timestamp(id)), max(randflake_key_timestamp(id)) FROM timed").fetchone()
        conn.execute("SET enable_seqscan = off")
        condition = "id >= randflake_key_lowest(%s) AND id < randflake_key_lowest(%s::timestamptz + interval '1 second')"
        plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN SELECT count(*) FROM timed WHERE {condition}", (first, last)))
        assert "Index" in plan and "timed_pkey" in plan, plan
        assert conn.execute(f"SELECT count(*) FROM timed WHERE {condition}", (first, last)).fetchone() == (3000,)
        assert conn.execute(f"SELECT count(*) FROM timed WHERE {condition}", (first, first)).fetchone() == conn.execute(
            "SELECT count(*) FROM timed WHERE randflake_key_timestamp(id) = %s", (first,)).fetchone()
        error = sql_error(conn, "SELECT randflake_key_lowest('2020-01-01')")
        assert error.sqlstate == "22008" and "1730000000" in error.diag.message_hint


def test_declarative_partitions_by_time_route_and_prune(shared_cluster):
    with shared_cluster.connect() as conn:
        conn.execute("CREATE TABLE events (id randflake_key NOT NULL DEFAULT randflake_next_key(), note text)"
                     " PARTITION BY RANGE (id)")
        # The recipe of docs/sql-reference.md's randflake_key section: a partition a day.
        conn.execute("""
            DO $$
            DECLARE day date;
            BEGIN
                FOR day IN SELECT generate_series(current_date - 1, current_date + 1, interval '1 day')::date LOOP
                    EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                                   'events_' || to_char(day, 'YYYYMMDD'),
                                   randflake_key_lowest(day::timestamptz), randflake_key_lowest(day::timestamptz + interval '1 day'));
                END LOOP;
            END $$""")
        conn.execute("INSERT INTO events (note) SELECT 'e' FROM generate_series(1, 50)")
        today = conn.execute("SELECT 'events_' || to_char(current_date, 'YYYYMMDD')").fetchone()[0]
        placed = conn.execute("SELECT tableoid::regclass::text, count(*) FROM events GROUP BY 1").fetchall()
        assert placed == [(today, 50)]
        plan = "\n".join(row[0] for row in conn.execute(
            "EXPLAIN SELECT * FROM events WHERE id >= randflake_key_lowest(current_date::timestamptz)"
            " AND id < randflake_key_lowest(current_date + 1)"))
        scanned = {word for word in plan.replace("(", " ").split() if word.startswith("events_")}
        assert scanned == {today} or "Subplans Removed: 2" in plan, plan


DECODERS = ("randflake_decode", "randflake_timestamp", "randflake_node_id", "randflake_sequence")


def test_untyped_calls_to_the_decoders_keep_their_0_5_0_reading(shared_cluster):
    """A decoder called with an untyped literal or parameter (as node-postgres sends every
    parameter) decodes it as a bigint, as in 0.5.0: no decoder has a second, randflake_key
    version that would make such a call ambiguous."""
    with shared_cluster.connect() as conn:
        id_ = conn.execute("SELECT randflake_next()").fetchone()[0]
        for decoder in DECODERS:
            expected = conn.execute(f"SELECT {decoder}(%s::bigint)", (id_,)).fetchall()
            assert conn.execute(f"SELECT {decoder}('{id_}')").fetchall() == expected, decoder
            # psycopg sends a str parameter untyped (OID 0), like node-postgres any parameter.
            assert conn.execute(f"SELECT {decoder}(%s)", (str(id_),)).fetchall() == expected, decoder
            assert conn.execute(f"SELECT {decoder}(12345)").fetchall() == conn.execute(
                f"SELECT {decoder}(12345::bigint)").fetchall(), decoder
        # No function of the extension has a randflake_key version beside another of its name
        # and arity, where an untyped argument could not choose between them.
        overloaded = conn.execute("""
            SELECT p.proname, array_agg(p.oid::regprocedure::text)
              FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                   JOIN pg_extension e ON d.refclassid = 'pg_extension'::regclass AND d.refobjid = e.oid
             WHERE e.extname = 'randflake_pg'
             GROUP BY p.proname, p.pronargs
            HAVING count(*) > 1 AND bool_or('randflake_key'::regtype = ANY (p.proargtypes))""").fetchall()
        assert overloaded == []


def test_the_partition_maintenance_recipe_makes_days_ahead_and_detaches_old_ones(cluster):
    """docs/ordered-keys.md's key-partitions blocks, run as written: partitions made ahead,
    inserts routed, a range of the key pruned to its day, an old day detached, and a second run
    changing nothing."""
    run_sql(block("ordered-keys.md", "key-partitions"), {}, str(cluster.dir), cluster.port)
    with cluster.connect() as conn:
        conn.execute("SET timezone = 'UTC'")
        # A day the retention has passed, as an earlier run would have left it.
        conn.execute("""
            DO $$ DECLARE day date := current_date - 40;
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                               'events_' || to_char(day, 'YYYYMMDD'), randflake_key_lowest(day::timestamptz),
                               randflake_key_lowest(day::timestamptz + interval '1 day'));
            END $$""")
        old = conn.execute("SELECT 'events_' || to_char(current_date - 40, 'YYYYMMDD')").fetchone()[0]
        ahead = [row[0] for row in conn.execute(
            "SELECT 'events_' || to_char(d, 'YYYYMMDD') FROM generate_series(current_date, current_date + 7,"
            " interval '1 day') d ORDER BY d")]
    attached = "SELECT array_agg(inhrelid::regclass::text ORDER BY inhrelid::regclass::text) FROM pg_inherits" \
               " WHERE inhparent = 'events'::regclass"
    for _ in range(2):
        run_sql(block("ordered-keys.md", "key-partitions-maintain"), {}, str(cluster.dir), cluster.port)
        with cluster.connect() as conn:
            assert conn.execute(attached).fetchone()[0] == ahead
            assert conn.execute("SELECT relispartition FROM pg_class WHERE relname = %s", (old,)).fetchone() == (False,)
    with cluster.connect() as conn:
        conn.execute("SET timezone = 'UTC'")
        conn.execute("INSERT INTO events (note) SELECT 'e' FROM generate_series(1, 50)")
        assert conn.execute("SELECT tableoid::regclass::text, count(*) FROM events GROUP BY 1").fetchall() == [
            (ahead[0], 50)]
        plan = "\n".join(row[0] for row in conn.execute(
            "EXPLAIN (ANALYZE, COSTS OFF) SELECT * FROM events WHERE id >= randflake_key_lowest(current_date::timestamptz)"
            " AND id < randflake_key_lowest(current_date + 1)"))
        assert set(re.findall(r" on (events_\d{8})", plan)) == {ahead[0]}, plan
        assert "Subplans Removed: 7" in plan, plan


PARTMAN = pathlib.Path(pg_config("--sharedir")) / "extension" / "pg_partman.control"


@pytest.mark.skipif(not PARTMAN.exists(), reason="no pg_partman here (Debian packages 4.7 for 15: postgresql-15-partman)")
def test_pg_partman_refuses_a_randflake_key_control_column(shared_cluster):
    """What docs/ordered-keys.md says of pg_partman: it manages date, timestamp and integer
    control columns only. Should a later version accept the type, this test says so."""
    with shared_cluster.connect() as conn:
        conn.execute("CREATE SCHEMA partman")
        conn.execute("CREATE EXTENSION pg_partman SCHEMA partman")
        conn.execute("CREATE TABLE partman_events (id randflake_key NOT NULL DEFAULT randflake_next_key())"
                     " PARTITION BY RANGE (id)")
        error = sql_error(conn, "SELECT partman.create_parent('public.partman_events', 'id', 'native', 'daily')")
        assert "only supports partitioning of data types that are integer or date/timestamp" in error.diag.message_primary
        assert "randflake_key" in error.diag.message_primary


def test_no_function_a_plain_role_may_call_returns_the_plain_value(shared_cluster):
    with shared_cluster.connect() as conn:
        conn.execute("CREATE ROLE outsider_key LOGIN")
        keyed_table(conn, "private", 10)
        conn.execute("GRANT SELECT ON private TO outsider_key")
    with shared_cluster.connect(user="outsider_key") as conn:
        # What a plain role may do: read the public IDs, compare and look up.
        text = conn.execute("SELECT id::text FROM private ORDER BY id LIMIT 1").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM private WHERE id = %s::text", (text,)).fetchone() == (1,)
        for call in ("randflake_key_decode(id)", "randflake_key_timestamp(id)", "randflake_key_node_id(id)",
                     "randflake_key_sequence(id)", "randflake_decode(id::bigint)", "randflake_key_lowest(now())",
                     "randflake_key_highest(now())", "randflake_key_order_bigint(id, 5::bigint)",
                     "randflake_bigint_order(id::bigint, 5::bigint)"):
            error = sql_error(conn, f"SELECT {call} FROM private")
            assert error.sqlstate == "42501", (call, error)
    with shared_cluster.connect() as conn:
        # Every function a role without grants may execute that takes a randflake_key returns
        # nothing that holds its plain value: a key (shown encrypted), a comparison, or the public ID.
        callable_ = conn.execute("""
            SELECT p.oid::regprocedure::text, p.prorettype::regtype::text
              FROM pg_proc p
             WHERE 'randflake_key'::regtype = ANY (p.proargtypes)
               AND has_function_privilege('outsider_key', p.oid, 'EXECUTE')""").fetchall()
        allowed = {"randflake_key", "boolean", "integer", "bigint", "randflake_id", "cstring", "bytea"}
        assert {returned for _, returned in callable_} <= allowed, callable_
        integer_results = {name for name, returned in callable_ if returned in {"integer", "bigint"}}
        assert integer_results == {"randflake_key_cmp(randflake_key,randflake_key)",
                                   "randflake_key_to_bigint(randflake_key)", "randflake_key_hash(randflake_key)",
                                   "randflake_key_hash_extended(randflake_key,bigint)"}, integer_results
        # The hashes are bigint's of the public ID: nothing the public ID does not show.
        assert conn.execute("SELECT bool_and(randflake_key_hash(id) = hashint8(id::bigint)"
                            " AND randflake_key_hash_extended(id, 7) = hashint8extended(id::bigint, 7)) FROM private"
                            ).fetchone() == (True,)


def test_without_a_secret_input_and_output_fail_cleanly(cluster):
    with cluster.connect() as conn:
        keyed_table(conn, "kept", 5)
        expected = public_ids(conn, "kept")
    cluster.configure("randflake.secret_file = ''")
    cluster.stop()
    cluster.start()
    with cluster.connect() as conn:
        for statement in ("SELECT id FROM kept", "SELECT '1'::randflake_key", "SELECT id::bigint FROM kept",
                          "SELECT 5::bigint::randflake_key", "SELECT count(*) FROM kept WHERE id = 5"):
            error = sql_error(conn, statement)
            assert error.sqlstate == "55000", (statement, error)
            assert "randflake.secret_file" in error.diag.message_hint
        with pytest.raises(psycopg.Error) as caught, conn.cursor() as cursor, cursor.copy("COPY kept TO STDOUT") as copy:
            list(copy)
        assert caught.value.sqlstate == "55000"
        with conn.cursor(binary=True) as cursor:
            with pytest.raises(psycopg.Error) as caught:
                cursor.execute("SELECT id FROM kept")
            assert caught.value.sqlstate == "55000"
        binary_key_dumper(conn)
        with pytest.raises(psycopg.Error) as caught:
            conn.execute("SELECT %s::randflake_key", (WireKey(struct.pack(">q", expected[0])),))
        assert caught.value.sqlstate == "55000"
        # What needs no secret still works: ordering and counting the plain values.
        assert conn.execute("SELECT count(*) FROM kept a JOIN kept b ON a.id < b.id").fetchone() == (10,)
    cluster.configure("randflake.secret_file = 'randflake.key'")
    cluster.reload()
    with cluster.connect() as conn:
        assert public_ids(conn, "kept") == expected
    assert "terminated by signal" not in cluster.log()


def test_copy_text_and_binary_round_trip(shared_cluster):
    with shared_cluster.connect() as conn:
        keyed_table(conn, "copied", 500)
        conn.execute("CREATE TABLE copied_text (LIKE copied)")
        conn.execute("CREATE TABLE copied_binary (LIKE copied)")
        with conn.cursor() as cursor:
            with cursor.copy("COPY copied (id) TO STDOUT") as copy:
                text = b"".join(bytes(chunk) for chunk in copy)
            with cursor.copy("COPY copied TO STDOUT (FORMAT binary)") as copy:
                binary = b"".join(bytes(chunk) for chunk in copy)
            with cursor.copy("COPY copied_text (id) FROM STDIN") as copy:
                copy.write(text)
            with cursor.copy("COPY copied_binary FROM STDIN (FORMAT binary)") as copy:
                copy.write(binary)
        strings = sorted(text.decode().split())
        assert strings == sorted(row[0] for row in conn.execute("SELECT randflake_to_string(id::bigint) FROM copied"))
        expected = public_ids(conn, "copied")
        assert public_ids(conn, "copied_text") == expected == public_ids(conn, "copied_binary")
        # Binary COPY carries the public ID: bigint's bytes, readable into a bigint column.
        conn.execute("CREATE TABLE copied_bigint (id bigint, note text)")
        with conn.cursor() as cursor, cursor.copy("COPY copied_bigint FROM STDIN (FORMAT binary)") as copy:
            copy.write(binary)
        assert public_ids(conn, "copied_bigint") == expected


@pytest.mark.parametrize("dump_format", ["plain", "custom", "directory"])
def test_pg_dump_and_pg_restore_keep_the_public_ids(cluster, tmp_path, dump_format):
    with cluster.connect() as conn:
        conn.execute("CREATE DATABASE app")
    with cluster.connect("app") as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        keyed_table(conn, "orders", 1000)
        expected = public_ids(conn, "orders")
        conn.execute("CREATE DATABASE restored")
    dump = tmp_path / "dump"
    pg_tool(cluster, "pg_dump", f"--format={dump_format}", f"--file={dump}", "app")
    if dump_format == "plain":
        pg_tool(cluster, "psql", "-X", "-v", "ON_ERROR_STOP=1", "-q", "-d", "restored", "-f", str(dump))
    else:
        pg_tool(cluster, "pg_restore", "--exit-on-error", "--dbname=restored", str(dump))
    with cluster.connect("restored") as conn:
        assert public_ids(conn, "orders") == expected
        assert conn.execute("SELECT count(*) FROM orders WHERE id > (SELECT id FROM orders ORDER BY id LIMIT 1)"
                            ).fetchone() == (999,)


def test_an_owner_with_the_decoder_grant_dumps_and_restores_its_key_tables(cluster, tmp_path):
    """pg_dump and pg_restore run by a database owner that is not a superuser: restoring a key
    table parses every key from its public ID, which needs the decoder grant. Without it the
    restore fails on the first key, saying which grant is missing; with it, every ID comes back."""
    with cluster.connect() as conn:
        conn.execute("CREATE ROLE app_owner LOGIN")
        for database in ("owned_app", "owned_restored", "owned_refused"):
            conn.execute(f"CREATE DATABASE {database} OWNER app_owner")
            with cluster.connect(database) as owned:
                owned.execute("CREATE EXTENSION randflake_pg")
    with cluster.connect("owned_app", user="app_owner") as conn:
        keyed_table(conn, "orders", 500)
        expected = public_ids(conn, "orders")
    dump = tmp_path / "owned.dump"
    owner = ("-U", "app_owner")

    def restore(database: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [f"{pg_config('--bindir')}/pg_restore", "-h", str(cluster.dir), "-p", str(cluster.port), *owner,
             "--exit-on-error", "--no-owner", "--no-comments", f"--dbname={database}", str(dump)],
            capture_output=True, text=True)

    subprocess.run([f"{pg_config('--bindir')}/pg_dump", "-h", str(cluster.dir), "-p", str(cluster.port), *owner,
                    "--format=custom", "--no-comments", f"--file={dump}", "owned_app"], check=True)
    refused = restore("owned_refused")
    assert refused.returncode != 0
    assert "permission denied to turn a public ID into a randflake_key" in refused.stderr, refused.stderr
    assert "GRANT EXECUTE ON FUNCTION" in refused.stderr, refused.stderr
    with cluster.connect("owned_restored") as conn:
        conn.execute("GRANT EXECUTE ON FUNCTION randflake_decode(bigint) TO app_owner")
    restored = restore("owned_restored")
    assert restored.returncode == 0, restored.stderr
    with cluster.connect("owned_restored", user="app_owner") as conn:
        assert public_ids(conn, "orders") == expected


def test_parallel_workers_print_and_parse_keys(shared_cluster):
    with shared_cluster.connect() as conn:
        keyed_table(conn, "wide", 20000)
        conn.execute("ANALYZE wide")
        for setting in ("parallel_setup_cost = 0", "parallel_tuple_cost = 0", "min_parallel_table_scan_size = 0",
                        "max_parallel_workers_per_gather = 2", "force_parallel_mode = on"):
            conn.execute(f"SET {setting}")
        query = ("SELECT count(*) FROM wide WHERE id::text = randflake_to_string(id::bigint)"
                 " AND id = id::text::randflake_key AND id::bigint::randflake_key = id")
        plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN (ANALYZE, VERBOSE) {query}"))
        assert "Workers Launched: 2" in plan, plan
        assert conn.execute(query).fetchone() == (20000,)


def test_a_walsender_decodes_keys_as_their_public_ids(make_cluster, tmp_path):
    cluster = make_cluster("wal_level = logical", "max_wal_senders = 4", "max_replication_slots = 4")
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute(KEYED.format(name="decoded"))
        conn.execute("SELECT pg_create_logical_replication_slot('keys', 'test_decoding')")
        conn.execute("INSERT INTO decoded (note) SELECT 'row' FROM generate_series(1, 20)")
        end = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        expected = sorted(row[0] for row in conn.execute("SELECT randflake_to_string(id::bigint) FROM decoded"))
    # pg_recvlogical reads through a walsender, which prints each key with the type's output.
    out = tmp_path / "changes"
    pg_tool(cluster, "pg_recvlogical", "-d", "postgres", "--slot=keys", "--start", f"--endpos={end}", "-f", str(out),
            "--no-loop")
    changes = out.read_text()
    printed = sorted(line.split("id[public.randflake_key]:'")[1].split("'")[0] for line in changes.splitlines()
                     if "table public.decoded" in line)
    assert printed == expected, changes[:2000]


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_logical_replication_carries_the_public_ids(make_cluster, binary):
    """A subscriber with the same secret ends up with the publisher's keys: the initial copy
    (COPY in text), inserts, updates and deletes found by their key, whether the walsender sends
    each key as its canonical string or, with binary = true, as bigint's eight bytes."""
    settings = ("wal_level = logical", "max_wal_senders = 4", "max_replication_slots = 4")
    publisher, subscriber = make_cluster(*settings), make_cluster(*settings)
    write_server_file(subscriber.dir / "randflake.key", publisher.key_hex + "\n")
    for server in (publisher, subscriber):
        server.start()
        with server.connect() as conn:
            conn.execute("CREATE EXTENSION randflake_pg")
            conn.execute(KEYED.format(name="replicated"))
    with publisher.connect() as conn:
        conn.execute("INSERT INTO replicated (note) SELECT 'copied ' || n FROM generate_series(1, 300) n")
        conn.execute("CREATE PUBLICATION keys FOR TABLE replicated")
    with subscriber.connect() as conn:
        conn.execute(f"CREATE SUBSCRIPTION keys CONNECTION 'host={publisher.dir} port={publisher.port} user=postgres"
                     f" dbname=postgres' PUBLICATION keys WITH (binary = {str(binary).lower()})")
        assert conn.execute("SELECT subbinary FROM pg_subscription WHERE subname = 'keys'").fetchone() == (binary,)
    with publisher.connect() as conn:
        conn.execute("INSERT INTO replicated (note) SELECT 'streamed ' || n FROM generate_series(1, 300) n")
        # Updates and deletes name their row by the key, which the subscriber parses and finds.
        conn.execute("UPDATE replicated SET note = note || ' updated' WHERE id IN"
                     " (SELECT id FROM replicated ORDER BY id LIMIT 50)")
        conn.execute("DELETE FROM replicated WHERE id IN (SELECT id FROM replicated ORDER BY id DESC LIMIT 20)")
        rows = "SELECT id::text, id::bigint, note FROM replicated ORDER BY replicated.id"
        expected = conn.execute(rows).fetchall()
    assert len(expected) == 580
    with subscriber.connect() as conn:
        wait_for(lambda: conn.execute(rows).fetchall() == expected, 60, "the subscriber to catch up")
        assert conn.execute("SELECT count(*) FROM replicated WHERE id::text = randflake_to_string(id::bigint)"
                            ).fetchone() == (580,)
        conn.execute("DROP SUBSCRIPTION keys")


def test_alter_column_type_to_the_key_and_back_keeps_the_public_ids(shared_cluster):
    with shared_cluster.connect() as conn:
        conn.execute("CREATE TABLE moved (id bigint PRIMARY KEY DEFAULT randflake_next(), note text)")
        conn.execute("INSERT INTO moved (note) SELECT 'm' FROM generate_series(1, 1000)")
        before = public_ids(conn, "moved")
        conn.execute("ALTER TABLE moved ALTER COLUMN id DROP DEFAULT,"
                     " ALTER COLUMN id TYPE randflake_key USING id::randflake_key,"
                     " ALTER COLUMN id SET DEFAULT randflake_next_key()")
        assert public_ids(conn, "moved") == before
        conn.execute("INSERT INTO moved (note) VALUES ('after')")
        conn.execute("ALTER TABLE moved ALTER COLUMN id DROP DEFAULT,"
                     " ALTER COLUMN id TYPE bigint USING id::bigint,"
                     " ALTER COLUMN id SET DEFAULT randflake_next()")
        after = public_ids(conn, "moved")
        assert set(before) < set(after) and len(after) == 1001
