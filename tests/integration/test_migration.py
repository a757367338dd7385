"""Moving existing tables over to randflake_next(), as docs/migrating.md describes.

Proven on real tables holding rows and foreign keys:
* a bigserial key: SET DEFAULT randflake_next(), with the sequence dropped or left, rewrites
  nothing (the same files, the same tuples at the same places with the same xmin);
* an identity key: DROP IDENTITY then SET DEFAULT, likewise; an int key takes the default but
  fails at the first insert (22003), and widening it to bigint does rewrite the table;
* foreign keys between old and new IDs keep working and are still enforced;
* what breaks in code that assumed increasing IDs: the largest IDs are no longer the newest
  rows, polling with `id > last seen` misses new rows (about half are negative), and currval()
  of the old sequence either fails or, in a session that used it before, returns a stale ID;
* an old ID inserted again fails with 23505 on the primary key, and so does a new ID equal to an
  old one: rows planted with the very IDs this server is about to issue make INSERT ... DEFAULT
  fail with 23505, and the retry, which gets a fresh ID, succeeds; with ON CONFLICT (id) the
  same collision silently drops the new row (DO NOTHING) or overwrites the old one (DO UPDATE).
"""

from __future__ import annotations

import time

import psycopg
from randflake.v2 import Config, Generator, Lease

from lib.cluster import Cluster, decoded_ids, sql_error, status, wait_for
from lib.fake_clock import FakeClock, start_under_fake_clock

OLD_ROWS = 1000
NEW_ROWS = 200


def storage(conn: psycopg.Connection, relations: list[str]) -> dict:
    """Each relation's data file, and where and by which transaction each table row was written:
    all of it changes if a statement rewrites the table."""
    files = dict(conn.execute(
        "SELECT relname::text, relfilenode FROM pg_class WHERE relname = ANY(%s)", (relations,)
    ).fetchall())
    assert len(files) == len(relations), files
    rows = {}
    for table in relations:
        if conn.execute("SELECT relkind FROM pg_class WHERE relname = %s", (table,)).fetchone()[0] == "r":
            rows[table] = conn.execute(
                f"""SELECT md5(string_agg(ctid::text || ':' || xmin::text || ':' || t::text, ',' ORDER BY ctid))
                      FROM {table} t"""
            ).fetchone()[0]
    return {"files": files, "rows": rows}


def first_id_of_second(secret: bytes, node: int, second: int) -> int:
    """The first ID `node` issues in `second` (sequence 0), made by the Python reference port."""
    return Generator(Config(lease=Lease(node, second, second + 1), secret=secret, clock=lambda: second)).generate()


def test_a_bigserial_key_moves_without_a_rewrite(shared_cluster: Cluster):
    conn = shared_cluster.connect()
    conn.execute("CREATE TABLE customers (id bigserial PRIMARY KEY, name text NOT NULL)")
    conn.execute(
        """CREATE TABLE orders (id bigserial PRIMARY KEY,
                                customer_id bigint NOT NULL REFERENCES customers, amount int NOT NULL)"""
    )
    conn.execute(f"INSERT INTO customers (name) SELECT 'old ' || g FROM generate_series(1, {OLD_ROWS}) g")
    conn.execute(
        f"INSERT INTO orders (customer_id, amount) SELECT 1 + g % {OLD_ROWS}, g FROM generate_series(1, 3000) g"
    )
    # A session of the application that inserted before the change, and keeps running.
    legacy = shared_cluster.connect()
    legacy_id = legacy.execute("INSERT INTO orders (customer_id, amount) VALUES (1, 0) RETURNING id").fetchone()[0]
    relations = ["customers", "customers_pkey", "orders", "orders_pkey"]
    before = storage(conn, relations)

    with conn.transaction():
        conn.execute("ALTER TABLE customers ALTER COLUMN id SET DEFAULT randflake_next()")
        conn.execute("DROP SEQUENCE customers_id_seq")
        # orders keeps its sequence, still owned by the column, e.g. to go back.
        conn.execute("ALTER TABLE orders ALTER COLUMN id SET DEFAULT randflake_next()")
    assert storage(conn, relations) == before
    assert conn.execute(
        "SELECT pg_get_serial_sequence('customers', 'id'), pg_get_serial_sequence('orders', 'id')"
    ).fetchone() == (None, "public.orders_id_seq")

    new_ids = [row[0] for row in conn.execute(
        f"INSERT INTO customers (name) SELECT 'new ' || g FROM generate_series(1, {NEW_ROWS}) g RETURNING id"
    ).fetchall()]
    assert len(set(new_ids)) == NEW_ROWS and not set(new_ids) & set(range(1, OLD_ROWS + 1))
    # Foreign keys: new orders of old and new customers, checked as before.
    conn.execute("INSERT INTO orders (customer_id, amount) SELECT unnest(%s::bigint[]), 1", (new_ids,))
    conn.execute("INSERT INTO orders (customer_id, amount) VALUES (%s, 2)", (OLD_ROWS,))
    assert conn.execute(
        "SELECT count(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.name LIKE 'new %'"
    ).fetchone()[0] == NEW_ROWS
    missing = min(new_ids) - 1 if min(new_ids) - 1 not in new_ids else min(new_ids) - 2
    assert sql_error(conn, f"INSERT INTO orders (customer_id, amount) VALUES ({missing}, 3)").sqlstate == "23503"

    # Code that took the largest IDs for the newest rows, or polled for `id > last seen`.
    newest_by_id = {row[0] for row in conn.execute(f"SELECT id FROM customers ORDER BY id DESC LIMIT {NEW_ROWS}")}
    assert newest_by_id != set(new_ids)
    polled = conn.execute("SELECT count(*) FROM customers WHERE id > %s", (OLD_ROWS,)).fetchone()[0]
    negative = sum(1 for id_ in new_ids if id_ < 0)
    assert polled == NEW_ROWS - negative and 0 < negative < NEW_ROWS, (polled, negative)

    # currval() of the sequence left behind: an error in a new session, a stale ID in an old one.
    with shared_cluster.connect() as fresh:
        fresh.execute("INSERT INTO orders (customer_id, amount) VALUES (1, 4)")
        assert sql_error(fresh, "SELECT currval('orders_id_seq')").sqlstate == "55000"
    inserted = legacy.execute("INSERT INTO orders (customer_id, amount) VALUES (1, 5) RETURNING id").fetchone()[0]
    assert legacy.execute("SELECT currval('orders_id_seq')").fetchone()[0] == legacy_id != inserted
    legacy.close()

    # An old ID inserted again is refused by the primary key.
    error = sql_error(conn, "INSERT INTO customers (id, name) VALUES (17, 'again')")
    assert error.sqlstate == "23505" and error.diag.constraint_name == "customers_pkey"
    conn.close()


def test_an_identity_key_moves_without_a_rewrite_but_an_int_one_must_widen(shared_cluster: Cluster):
    conn = shared_cluster.connect()
    conn.execute("CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL)")
    conn.execute(
        """CREATE TABLE event_tags (event_id bigint NOT NULL REFERENCES events ON DELETE CASCADE,
                                    tag text NOT NULL, PRIMARY KEY (event_id, tag))"""
    )
    conn.execute("CREATE TABLE counters (id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, note text)")
    conn.execute(f"INSERT INTO events (kind) SELECT 'old' FROM generate_series(1, {OLD_ROWS})")
    conn.execute("INSERT INTO event_tags SELECT id, 't' || (id % 3) FROM events")
    conn.execute("INSERT INTO counters (note) SELECT 'old' FROM generate_series(1, 100)")
    relations = ["events", "events_pkey", "event_tags", "event_tags_pkey"]
    before = storage(conn, relations)

    with conn.transaction():
        # Also drops the identity's own sequence.
        conn.execute("ALTER TABLE events ALTER COLUMN id DROP IDENTITY")
        conn.execute("ALTER TABLE events ALTER COLUMN id SET DEFAULT randflake_next()")
    assert storage(conn, relations) == before
    assert conn.execute(
        "SELECT pg_get_serial_sequence('events', 'id'), count(*) FROM pg_class WHERE relname = 'events_id_seq'"
    ).fetchone() == (None, 0)

    new_id = conn.execute("INSERT INTO events (kind) VALUES ('new') RETURNING id").fetchone()[0]
    conn.execute("INSERT INTO event_tags VALUES (%s, 't0'), (%s, 't1')", (new_id, new_id))
    conn.execute("DELETE FROM events WHERE id = %s", (new_id,))
    assert conn.execute("SELECT count(*) FROM event_tags WHERE event_id = %s", (new_id,)).fetchone()[0] == 0
    # GENERATED ALWAYS refused explicit IDs; a plain default does not, and the key catches reuse.
    error = sql_error(conn, "INSERT INTO events (id, kind) VALUES (42, 'again')")
    assert error.sqlstate == "23505" and error.diag.constraint_name == "events_pkey"

    # An int key accepts the default (bigint casts to int on assignment) and then fails.
    conn.execute("ALTER TABLE counters ALTER COLUMN id DROP IDENTITY")
    conn.execute("ALTER TABLE counters ALTER COLUMN id SET DEFAULT randflake_next()")
    assert sql_error(conn, "INSERT INTO counters (note) VALUES ('new')").sqlstate == "22003"
    files = storage(conn, ["counters"])["files"]
    conn.execute("ALTER TABLE counters ALTER COLUMN id TYPE bigint")
    assert storage(conn, ["counters"])["files"] != files, "widening the key was expected to rewrite the table"
    conn.execute("INSERT INTO counters (note) VALUES ('new')")
    assert conn.execute("SELECT count(*) FROM counters").fetchone()[0] == 101
    conn.close()



def test_a_new_id_equal_to_an_old_one_fails_on_the_primary_key_and_a_retry_succeeds(make_cluster, fake_clock_preload):
    # One node, so that the IDs this server will issue next are known: (second, 7, sequence 0)
    # is the first ID of every second, and a sequence restarts at 0 each second.
    cluster = make_cluster("randflake.node_id_min = 7", "randflake.node_id_max = 7")
    clock = FakeClock(cluster, fake_clock_preload)
    start_under_fake_clock(cluster, clock)
    conn = cluster.connect()
    conn.execute("CREATE EXTENSION randflake_pg")
    conn.execute("CREATE TABLE accounts (id bigserial PRIMARY KEY, name text NOT NULL)")
    conn.execute(f"INSERT INTO accounts (name) SELECT 'old ' || g FROM generate_series(1, {OLD_ROWS}) g")
    conn.execute("ALTER TABLE accounts ALTER COLUMN id SET DEFAULT randflake_next()")
    wait_for(lambda: status(conn)["state"] == "active", 15, "an active lease")

    # Old rows that hold, as if by the worst luck, the first ID of each of the coming seconds.
    now = int(time.time())
    planted: list[int] = []
    for second in range(now - 1, now + 60):
        planted.append(first_id_of_second(cluster.key_bytes, 7, second))
    conn.execute("INSERT INTO accounts (id, name) SELECT unnest(%s::bigint[]), 'planted'", (planted,))

    with cluster.connect() as app:
        error = sql_error(app, "INSERT INTO accounts (name) VALUES ('new') RETURNING id")
        assert error.sqlstate == "23505" and error.diag.constraint_name == "accounts_pkey", error
        # The application retries the statement; each try evaluates the default again. Only a
        # second boundary between the two tries can bring another planted ID first.
        for _ in range(3):
            try:
                new_id = app.execute("INSERT INTO accounts (name) VALUES ('new') RETURNING id").fetchone()[0]
                break
            except psycopg.errors.UniqueViolation:
                continue
        else:
            raise AssertionError("three retries all met a planted ID")

        # ON CONFLICT on the key turns the same bad luck into silent damage: the first ID of the
        # next second is planted too, and the new row is dropped, or the old row overwritten.
        # The server's clock stops at the start of a second no ID has yet: the call is its first.
        def first_call_of_a_new_second(statement: str) -> list[tuple]:
            with clock.frozen():
                return app.execute(statement).fetchall()

        assert first_call_of_a_new_second(
            "INSERT INTO accounts (name) VALUES ('dropped') ON CONFLICT (id) DO NOTHING RETURNING id"
        ) == []
        overwritten = first_call_of_a_new_second(
            """INSERT INTO accounts (name) VALUES ('overwrote')
                   ON CONFLICT (id) DO UPDATE SET name = excluded.name RETURNING id"""
        )
        assert len(overwritten) == 1 and overwritten[0][0] in planted
    assert conn.execute("SELECT count(*) FROM accounts WHERE name = 'dropped'").fetchone()[0] == 0
    assert conn.execute("SELECT name FROM accounts WHERE id = %s", overwritten[0]).fetchone()[0] == "overwrote"
    assert new_id not in planted
    (second, node, sequence), = decoded_ids(conn, [new_id])
    assert node == 7 and sequence > 0 and now - 1 <= second < now + 60
    assert conn.execute("SELECT count(*) FROM accounts").fetchone()[0] == OLD_ROWS + len(planted) + 1
    conn.close()
