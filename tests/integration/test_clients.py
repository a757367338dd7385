"""The client recipes of docs/clients.md work, each run for real against one scratch cluster.

Every recipe works in a database of its own, owned by the application's role `app`, with a table
`orders (id bigint PRIMARY KEY DEFAULT randflake_next(), note text)`: it inserts rows, gets each
ID from the insert itself, reads the rows back by ID and by string (randflake_to_string /
randflake_from_string), and decodes the IDs as `auditor`, the one role granted EXECUTE on
randflake_decode and randflake_timestamp (`app` is refused). Each result is checked against what
the server, asked separately as superuser, says about the same IDs.

Recipes: Django (`db_default`, the key set from RETURNING), SQLAlchemy 2 (`server_default`,
RETURNING), psycopg 3 in text and binary mode (binary cursors, COPY BINARY, the wire bytes),
node-postgres (examples/node: BigInt or string, never Number; the JSON round trip of
examples/node/test/) and Go with pgx v4 (examples/go-pgx, built from Debian's packages). Each
also keys a table by randflake_key (`keyed_orders`) and reads and writes the key as the canonical
string, checked against the server's id::text and id::bigint.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
from datetime import datetime

import psycopg
import pytest
import sqlalchemy
from sqlalchemy import BigInteger, DateTime, Text, event, func, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from lib.cluster import ROOT, Cluster

sys.path.insert(0, str(ROOT / "examples" / "python"))

NODE_EXAMPLE = ROOT / "examples" / "node"
GO_EXAMPLE = ROOT / "examples" / "go-pgx"
# Debian's Go packages put their sources here; pgx v4 builds from it in GOPATH mode.
DEBIAN_GOPATH = pathlib.Path("/usr/share/gocode")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
EDGE_IDS = [0, 1, -1, INT64_MAX, INT64_MIN]
APP, AUDITOR = "app", "auditor"
ORDERS_DDL = "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT randflake_next(), note text NOT NULL)"


@pytest.fixture(scope="module")
def server():
    """One cluster for every recipe, with the application's role and the auditor's."""
    # Every client here connects through the Unix socket. Without a TCP listener the server cannot
    # be kept from starting by another process's outgoing connection that happens to hold the same
    # local port (the suites' ports lie in Linux's ephemeral range, 32768-60999).
    cluster = Cluster("clients", ("listen_addresses = ''",))
    try:
        started = cluster.start(check=False)
        assert started.returncode == 0, f"the server did not start:\n{started.stderr}\n{cluster.log()[-4000:]}"
        with cluster.connect() as conn:
            # The lease keeper works in database postgres; the recipes' databases share its lease.
            conn.execute("CREATE EXTENSION randflake_pg")
            conn.execute(f"CREATE ROLE {APP} LOGIN")
            conn.execute(f"CREATE ROLE {AUDITOR} LOGIN")
        yield cluster
    finally:
        cluster.destroy()


def recipe_database(server: Cluster, name: str) -> str:
    """A database owned by `app` with the extension, where only `auditor` may decode."""
    with server.connect() as conn:
        conn.execute(f"CREATE DATABASE {name} OWNER {APP}")
    with server.connect(name) as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute(f"GRANT EXECUTE ON FUNCTION randflake_decode(bigint), randflake_timestamp(bigint) TO {AUDITOR}")
        allowed = conn.execute(
            "SELECT r, has_function_privilege(r, f, 'EXECUTE') FROM unnest(%s::text[]) r,"
            " unnest(ARRAY['randflake_decode(bigint)', 'randflake_timestamp(bigint)']) f",
            ([APP, AUDITOR],),
        ).fetchall()
    assert sorted(set(allowed)) == [(APP, False), (AUDITOR, True)]
    return name


def server_says(server: Cluster, dbname: str, ids: list[int]) -> dict[int, tuple]:
    """For each ID, as the superuser reads it: (note in orders or None, string, Unix second,
    node, sequence)."""
    with server.connect(dbname) as conn:
        rows = conn.execute(
            """SELECT s.id, o.note, randflake_to_string(s.id), extract(epoch FROM d.timestamp)::bigint,
                      d.node_id, d.sequence
                 FROM unnest(%s::bigint[]) s(id) LEFT JOIN orders o USING (id), randflake_decode(s.id) d""",
            (ids,),
        ).fetchall()
    return {row[0]: row[1:] for row in rows}


def column_default(server: Cluster, dbname: str, table: str = "orders") -> str:
    with server.connect(dbname) as conn:
        (default,) = conn.execute(
            "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = %s::regclass AND adnum = 1", (table,)
        ).fetchone()
    return default


def unix(moment: datetime) -> int:
    return int(moment.timestamp())


def check_keyed_rows(server: Cluster, dbname: str, keyed: dict[str, str]) -> dict[str, int]:
    """The keys a client read (canonical string -> note) are every row of keyed_orders, each
    exactly as the server prints it; returns each key's public ID as the server casts it."""
    with server.connect(dbname) as conn:
        rows = conn.execute("SELECT id::text, note, id::bigint, randflake_to_string(id::bigint) FROM keyed_orders"
                            ).fetchall()
    assert {text: note for text, note, _, _ in rows} == keyed
    assert all(text == canonical for text, _, _, canonical in rows)
    return {text: public for text, _, public, _ in rows}


# --- Django ---------------------------------------------------------------------------------------


def django_models(server: Cluster, dbname: str):
    """Configures Django once for this process, with the connections `default` (app) and `audit`
    (auditor), and defines the recipe's model."""
    import django
    from django.conf import settings
    from django.db import models

    from randflake_django import RandflakeKeyField, RandflakeNext, RandflakeNextKey

    database = {"ENGINE": "django.db.backends.postgresql", "HOST": str(server.dir), "PORT": server.port,
                "NAME": dbname}
    settings.configure(
        DATABASES={"default": {**database, "USER": APP}, "audit": {**database, "USER": AUDITOR}},
        INSTALLED_APPS=[],
        USE_TZ=True,
    )
    django.setup()

    class Order(models.Model):
        id = models.BigIntegerField(primary_key=True, db_default=RandflakeNext())
        note = models.TextField()

        class Meta:
            app_label = "shop"
            db_table = "orders"

    class KeyedOrder(models.Model):
        id = RandflakeKeyField(primary_key=True, db_default=RandflakeNextKey())
        note = models.TextField()

        class Meta:
            app_label = "shop"
            db_table = "keyed_orders"

    return Order, KeyedOrder


def test_django_sets_the_primary_key_from_the_inserts_returning(server):
    from django.db import connection, connections, transaction
    from django.db.migrations.writer import MigrationWriter
    from django.db.models import F, Value
    from django.db.models.expressions import DatabaseDefault
    from django.db.utils import ProgrammingError
    from django.test.utils import CaptureQueriesContext

    from randflake_django import RandflakeFromString, RandflakeTimestamp, RandflakeToString

    dbname = recipe_database(server, "django_app")
    Order, KeyedOrder = django_models(server, dbname)
    try:
        with connection.schema_editor() as editor:
            editor.create_model(Order)
            editor.execute(f"GRANT SELECT ON orders TO {AUDITOR}")
        assert column_default(server, dbname) == "randflake_next()"
        # What makemigrations would write for the field.
        written, imports = MigrationWriter.serialize(Order._meta.pk)
        assert "db_default=randflake_django.RandflakeNext()" in written and "import randflake_django" in imports

        saved = []
        for number in range(20):
            order = Order(note=f"django order {number}")
            # Not None before the save, but a placeholder: the recipe tests _state.adding instead.
            assert isinstance(order.pk, DatabaseDefault) and order._state.adding
            with CaptureQueriesContext(connection) as queries:
                order.save()
            # One statement: the key came back with the insert, nothing read it again.
            assert [query["sql"] for query in queries.captured_queries] == [
                'INSERT INTO "orders" ("id", "note") VALUES (DEFAULT, '
                f"'django order {number}') RETURNING \"orders\".\"id\""
            ]
            assert isinstance(order.pk, int) and not order._state.adding
            saved.append(order)
        created = Order.objects.create(note="django created")
        saved.append(created)

        truth = server_says(server, dbname, [order.pk for order in saved])
        assert {order.pk: order.note for order in saved} == {id_: values[0] for id_, values in truth.items()}

        for order in saved:
            text = Order.objects.filter(pk=order.pk).values_list(RandflakeToString("id"), flat=True).get()
            assert text == truth[order.pk][1]
            assert Order.objects.get(id=RandflakeFromString(Value(text))).note == order.note

        # Decoding is refused to the application's connection, and works on the auditor's.
        with pytest.raises(ProgrammingError) as refused, transaction.atomic():
            list(Order.objects.annotate(made_at=RandflakeTimestamp("id")))
        assert isinstance(refused.value.__cause__, psycopg.errors.InsufficientPrivilege)
        made_at = dict(Order.objects.using("audit").annotate(made_at=RandflakeTimestamp(F("id")))
                       .values_list("id", "made_at"))
        assert {id_: unix(moment) for id_, moment in made_at.items()} == {
            id_: values[2] for id_, values in truth.items()
        }
        with connections["audit"].cursor() as cursor:
            cursor.execute("SELECT node_id, sequence FROM randflake_decode(%s)", [saved[0].pk])
            assert cursor.fetchone() == truth[saved[0].pk][3:]

        # bulk_create inserts the rows but, in Django 5.2, leaves a db_default key unset on the
        # objects: the recipe says to use save() or create() where the IDs are needed.
        bulk = Order.objects.bulk_create([Order(note=f"django bulk {n}") for n in range(3)])
        assert all(isinstance(order.pk, DatabaseDefault) for order in bulk)
        assert Order.objects.filter(note__startswith="django bulk").count() == 3

        # A randflake_key primary key: the canonical string, from the insert's RETURNING.
        with connection.schema_editor() as editor:
            editor.create_model(KeyedOrder)
        assert column_default(server, dbname, "keyed_orders") == "randflake_next_key()"
        keyed = [KeyedOrder.objects.create(note=f"django keyed {n}") for n in range(10)]
        check_keyed_rows(server, dbname, {order.pk: order.note for order in keyed})
        for order in keyed:
            assert KeyedOrder.objects.get(pk=order.pk).note == order.note
        assert [order.pk for order in KeyedOrder.objects.order_by("pk")] == [order.pk for order in keyed]
    finally:
        for alias in connections:
            connections[alias].close()


# --- SQLAlchemy 2 ---------------------------------------------------------------------------------


class Base(DeclarativeBase):
    pass


class SqlAlchemyOrder(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, server_default=text("randflake_next()"))
    note: Mapped[str] = mapped_column(Text)


class RandflakeKey(sqlalchemy.types.UserDefinedType):
    """The randflake_key column type: psycopg reads its text form, the canonical string. A str
    parameter is sent as text, which the key compares with as a public ID: untyped, the server
    would read it as a key, which only roles with the decoder grant may make."""

    cache_ok = True

    def get_col_spec(self) -> str:
        return "randflake_key"

    def bind_expression(self, bindvalue):
        return sqlalchemy.cast(bindvalue, Text)


class SqlAlchemyKeyedOrder(Base):
    __tablename__ = "keyed_orders"
    id: Mapped[str] = mapped_column(RandflakeKey, primary_key=True, server_default=text("randflake_next_key()"))
    note: Mapped[str] = mapped_column(Text)


def test_sqlalchemy_gets_the_server_default_key_through_returning(server):
    Order = SqlAlchemyOrder
    dbname = recipe_database(server, "sqlalchemy_app")
    url = f"postgresql+psycopg://{{user}}@/{dbname}?host={server.dir}&port={server.port}"
    app_engine = sqlalchemy.create_engine(url.format(user=APP))
    audit_engine = sqlalchemy.create_engine(url.format(user=AUDITOR))
    statements: list[str] = []
    event.listen(app_engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    try:
        Base.metadata.create_all(app_engine)
        assert column_default(server, dbname) == "randflake_next()"
        with app_engine.begin() as conn:
            conn.execute(text(f"GRANT SELECT ON orders TO {AUDITOR}"))

        with Session(app_engine) as session:
            one = Order(note="sqlalchemy one")
            session.add(one)
            statements.clear()
            session.flush()
            assert isinstance(one.id, int)
            assert statements == ["INSERT INTO orders (note) VALUES (%(note)s::VARCHAR) RETURNING orders.id"]

            # Several objects in one flush: without a sentinel column SQLAlchemy cannot match
            # rows of a batched RETURNING to objects, so it inserts them one by one; each object
            # must still get its own row's key.
            many = [Order(note=f"sqlalchemy {n}") for n in range(20)]
            session.add_all(many)
            statements.clear()
            session.flush()
            assert len(statements) == len(many) and all("RETURNING orders.id" in s for s in statements)
            session.commit()
            saved = {order.id: order.note for order in [one, *many]}

        truth = server_says(server, dbname, list(saved))
        assert saved == {id_: values[0] for id_, values in truth.items()}

        with Session(app_engine) as session:
            for id_, values in truth.items():
                assert session.scalar(select(func.randflake_to_string(Order.id)).where(Order.id == id_)) == values[1]
                found = session.scalars(select(Order).where(Order.id == func.randflake_from_string(values[1]))).one()
                assert (found.id, found.note) == (id_, values[0])
            with pytest.raises(sqlalchemy.exc.ProgrammingError) as refused:
                session.execute(select(func.randflake_timestamp(Order.id)))
            assert isinstance(refused.value.orig, psycopg.errors.InsufficientPrivilege)

        # A randflake_key primary key: the canonical string, from RETURNING, found by itself.
        assert column_default(server, dbname, "keyed_orders") == "randflake_next_key()"
        with Session(app_engine) as session:
            keyed = [SqlAlchemyKeyedOrder(note=f"sqlalchemy keyed {n}") for n in range(10)]
            session.add_all(keyed)
            session.commit()
            by_key = {order.id: order.note for order in keyed}
        publics = check_keyed_rows(server, dbname, by_key)
        with Session(app_engine) as session:
            for key, note in by_key.items():
                assert session.scalars(select(SqlAlchemyKeyedOrder.note).where(SqlAlchemyKeyedOrder.id == key)).one() == note
                by_public = select(SqlAlchemyKeyedOrder.id).where(
                    SqlAlchemyKeyedOrder.id == sqlalchemy.cast(publics[key], BigInteger))
                assert session.scalars(by_public).one() == key

        decoded = func.randflake_decode(sqlalchemy.bindparam("id", type_=BigInteger)).table_valued(
            "timestamp", "node_id", "sequence"
        )
        with Session(audit_engine) as session:
            made_at = session.execute(
                select(Order.id, func.randflake_timestamp(Order.id, type_=DateTime(timezone=True)))
            ).all()
            assert {id_: unix(moment) for id_, moment in made_at} == {id_: values[2] for id_, values in truth.items()}
            for id_, values in truth.items():
                row = session.execute(select(decoded.c.timestamp, decoded.c.node_id, decoded.c.sequence),
                                      {"id": id_}).one()
                assert (unix(row[0]), row[1], row[2]) == values[2:]
    finally:
        app_engine.dispose()
        audit_engine.dispose()


# --- psycopg 3 ------------------------------------------------------------------------------------


def copy_binary_out(conn: psycopg.Connection, table: str) -> list[tuple]:
    """(id, note) of every row of `table`, by COPY in binary, the ID read as an int8."""
    with conn.cursor().copy(f"COPY {table} (id, note) TO STDOUT (FORMAT BINARY)") as copy:
        copy.set_types(["int8", "text"])
        return list(copy.rows())


def copy_binary_in(conn: psycopg.Connection, table: str, rows: list[tuple]) -> None:
    """Writes (id, note) rows into `table` by COPY in binary, each ID as an int8."""
    with conn.cursor().copy(f"COPY {table} (id, note) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int8", "text"])
        for row in rows:
            copy.write_row(row)


def test_psycopg_round_trips_ids_exactly_in_text_and_binary(server):
    dbname = recipe_database(server, "psycopg_app")
    with server.connect(dbname, user=APP) as app, server.connect(dbname, user=AUDITOR) as auditor:
        app.execute(ORDERS_DDL)
        app.execute("CREATE TABLE orders_copy (id bigint PRIMARY KEY, note text NOT NULL)")
        for id_ in EDGE_IDS:
            app.execute("INSERT INTO orders (id, note) VALUES (%s, %s)", (id_, f"edge {id_}"))

        # Many rows in one call, each with its own key back, in order (psycopg 3.1+).
        notes = [f"psycopg {n}" for n in range(200)]
        with app.cursor() as cursor:
            cursor.executemany("INSERT INTO orders (note) VALUES (%s) RETURNING id, note",
                               [(note,) for note in notes], returning=True)
            inserted = []
            while True:
                inserted.append(cursor.fetchone())
                if not cursor.nextset():
                    break
        assert [note for _, note in inserted] == notes

        # Binary results: each bigint is 8 big-endian bytes on the wire, read into a Python int.
        with app.cursor(binary=True) as cursor:
            rows = cursor.execute("SELECT id, note, int8send(id) FROM orders ORDER BY note").fetchall()
            assert cursor.pgresult.fformat(0) == 1
            wire = [cursor.pgresult.get_value(n, 0) for n in range(cursor.pgresult.ntuples)]
        text_rows = app.execute("SELECT id, note FROM orders ORDER BY note").fetchall()
        assert [row[:2] for row in rows] == text_rows
        assert set(text_rows) >= set(inserted) | {(id_, f"edge {id_}") for id_ in EDGE_IDS}
        for (id_, _, sent), raw in zip(rows, wire):
            assert raw == sent == struct.pack(">q", id_)

        # Binary parameters (%b) name the same rows as text ones.
        for id_, note in text_rows:
            assert app.execute("SELECT note FROM orders WHERE id = %b", (id_,)).fetchone() == (note,)
            assert app.execute("SELECT note FROM orders WHERE id = %s", (id_,)).fetchone() == (note,)

        # COPY BINARY out of one table and into another: the same 64 bits arrive.
        copied = copy_binary_out(app, "orders")
        copy_binary_in(app, "orders_copy", copied)
        assert sorted(copied, key=lambda row: row[1]) == text_rows
        assert app.execute("SELECT count(*) FROM (TABLE orders EXCEPT TABLE orders_copy) d").fetchone() == (0,)
        assert app.execute("SELECT count(*) FROM orders JOIN orders_copy USING (id, note)").fetchone() == (
            len(text_rows),
        )

        ids = [id_ for id_, _ in text_rows]
        truth = server_says(server, dbname, ids)
        strings = app.execute(
            "SELECT randflake_to_string(id) FROM unnest(%b::bigint[]) WITH ORDINALITY s(id, n) ORDER BY n", (ids,)
        ).fetchall()
        assert [text for (text,) in strings] == [truth[id_][1] for id_ in ids]
        for id_ in ids:
            assert app.execute("SELECT randflake_from_string(%s)", (truth[id_][1],)).fetchone() == (id_,)

        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.execute("SELECT * FROM randflake_decode(%s)", (ids[0],))
        with auditor.cursor(binary=True) as cursor:
            for id_ in ids:
                (made_at, node, sequence, again) = cursor.execute(
                    "SELECT d.*, randflake_timestamp(%b) FROM randflake_decode(%b) d", (id_, id_)
                ).fetchone()
                assert (unix(made_at), node, sequence) == truth[id_][2:] and again == made_at


def test_psycopg_reads_randflake_id_as_its_string_and_as_bigints_bytes(server):
    """The randflake_id type: text results are the canonical string; binary results, binary COPY and
    binary parameters are bigint's eight bytes, read with psycopg's int8 loader; a string parameter
    is an ID; to_jsonb() writes the string."""
    from psycopg.types.numeric import Int8BinaryLoader

    dbname = recipe_database(server, "psycopg_id_type")
    with server.connect(dbname, user=APP) as app:
        app.execute("CREATE TABLE typed (id randflake_id PRIMARY KEY DEFAULT randflake_next(), note text NOT NULL)")
        app.execute("CREATE TABLE plain (id bigint PRIMARY KEY, note text NOT NULL)")
        app.execute("INSERT INTO typed (note) SELECT 'made ' || n FROM generate_series(1, 500) n")
        for id_ in EDGE_IDS:
            app.execute("INSERT INTO typed (id, note) VALUES (%s::bigint, %s)", (id_, f"edge {id_}"))
        truth = dict(app.execute("SELECT note, id::bigint FROM typed").fetchall())
        strings = dict(app.execute("SELECT note, randflake_to_string(id::bigint) FROM typed").fetchall())

        # Text: the canonical string, as a Python str; and a str parameter finds its row.
        text_rows = dict(app.execute("SELECT note, id FROM typed").fetchall())
        assert text_rows == strings
        for note, text in list(text_rows.items())[:50]:
            assert app.execute("SELECT note FROM typed WHERE id = %s", (text,)).fetchone() == (note,)
        assert all(row["id"] == strings[row["note"]] for (row,) in app.execute("SELECT to_jsonb(t) FROM typed t"))

        # Binary: bigint's eight bytes, big-endian, read by the int8 loader into the same ints.
        oid = app.execute("SELECT 'randflake_id'::regtype::oid").fetchone()[0]
        app.adapters.register_loader(oid, Int8BinaryLoader)
        with app.cursor(binary=True) as cursor:
            rows = cursor.execute("SELECT note, id FROM typed").fetchall()
            assert cursor.pgresult.ftype(1) == oid and cursor.pgresult.fformat(1) == 1
            wire = {cursor.pgresult.get_value(n, 0).decode(): cursor.pgresult.get_value(n, 1)
                    for n in range(cursor.pgresult.ntuples)}
        assert dict(rows) == truth
        assert all(wire[note] == struct.pack(">q", id_) for note, id_ in truth.items())
        # A binary int8 parameter names the same row.
        for note, id_ in list(truth.items())[:50]:
            assert app.execute("SELECT note FROM typed WHERE id = %b", (id_,)).fetchone() == (note,)

        # COPY BINARY from the typed table into a bigint one and back: the same 64 bits.
        copied = copy_binary_out(app, "typed")
        copy_binary_in(app, "plain", copied)
        app.execute("CREATE TABLE typed_again (LIKE typed)")
        copy_binary_in(app, "typed_again", copied)
        assert {note: id_ for id_, note in copied} == truth
        assert app.execute("SELECT count(*) FROM typed t JOIN plain p ON p.id = t.id AND p.note = t.note").fetchone() == (
            len(truth),
        )
        assert app.execute("SELECT count(*) FROM (TABLE typed EXCEPT TABLE typed_again) d").fetchone() == (0,)


# --- node-postgres --------------------------------------------------------------------------------


def client_env(server: Cluster, dbname: str) -> dict[str, str]:
    """The libpq variables the node and Go examples connect with, and nothing inherited."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PG", "RANDFLAKE_"))}
    env.update(PGHOST=str(server.dir), PGPORT=str(server.port), PGDATABASE=dbname, PGUSER=APP,
               RANDFLAKE_AUDITOR=AUDITOR)
    return env


@pytest.fixture(scope="module")
def node() -> str:
    """The node binary, with the example's packages installed by `make deps` (npm ci)."""
    binary = shutil.which("node")
    assert binary, "node is not installed: run make deps"
    assert (NODE_EXAMPLE / "node_modules" / "pg").is_dir(), "examples/node has no node_modules: run make deps"
    return binary


def check_program_report(server: Cluster, dbname: str, report: dict, note_prefix: str) -> dict[int, tuple]:
    """What a node or Go recipe printed is what the server says about the same IDs."""
    rows = report["rows"]
    ids = [int(row["id"]) for row in rows]
    assert [row["note"] for row in rows] == [f"{note_prefix} {n}" for n in range(20)]
    truth = server_says(server, dbname, ids)
    assert len(truth) == len(ids) == len(set(ids))
    for row, id_ in zip(rows, ids):
        assert (row["note"], row["text"]) == truth[id_][:2]
    assert report["decodeDenied"] == "42501"
    assert [(int(d["id"]), d["unixSeconds"], d["node"], d["sequence"]) for d in report["decoded"]] == [
        (id_, *truth[id_][2:]) for id_ in ids
    ]
    return truth


def node_report(server, node: str, dbname: str, script: str) -> dict:
    """Runs one of the node-postgres example's scripts against `dbname`; its JSON report."""
    result = subprocess.run([node, script], cwd=NODE_EXAMPLE, env=client_env(server, dbname),
                            capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return json.loads(result.stdout)


def test_node_postgres_recipe(server, node):
    dbname = recipe_database(server, "node_app")
    report = node_report(server, node, dbname, "recipe.mjs")
    assert report["defaultType"] == "string"
    check_program_report(server, dbname, report, "node order")
    # Number() keeps an ID only when a double can hold it; Python's float rounds the same way.
    ids = [int(row["id"]) for row in report["rows"]]
    assert report["survivingNumber"] == [str(id_) for id_ in ids if int(float(id_)) == id_]


def test_node_postgres_reads_and_writes_randflake_key_as_its_string(server, node):
    dbname = recipe_database(server, "node_keyed")
    report = node_report(server, node, dbname, "keyed.mjs")
    publics = check_keyed_rows(server, dbname, {row["id"]: row["note"] for row in report["rows"]})
    assert {row["id"]: int(row["public"]) for row in report["rows"]} == publics
    assert sorted(report["fromJson"], key=lambda row: row["note"]) == sorted(
        ({"id": row["id"], "note": row["note"]} for row in report["rows"]), key=lambda row: row["note"])


def test_node_postgres_json_round_trip(server, node):
    """examples/node/test/json-roundtrip.test.mjs: IDs through JSON as strings, bit for bit, in a
    randflake_id column and in a bigint one, and what JSON.parse does to a bigint."""
    dbname = recipe_database(server, "node_json")
    result = subprocess.run(
        [node, "--test", "--test-reporter=tap", "test/json-roundtrip.test.mjs"],
        cwd=NODE_EXAMPLE, env=client_env(server, dbname), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    counts = dict(re.findall(r"^# (pass|fail|cancelled|skipped|todo) (\d+)$", result.stdout, re.MULTILINE))
    assert counts == {"pass": "12", "fail": "0", "cancelled": "0", "skipped": "0", "todo": "0"}, result.stdout


# --- Go with pgx ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def go_pgx(tmp_path_factory) -> pathlib.Path:
    """examples/go-pgx built with Debian's Go and pgx v4 (no module download: GOPATH mode)."""
    go = shutil.which("go")
    assert go, "go is not installed: run make deps"
    assert (DEBIAN_GOPATH / "src/github.com/jackc/pgx/v4").is_dir(), "pgx v4 is not installed: run make deps"
    binary = tmp_path_factory.mktemp("go-pgx") / "go-pgx"
    env = dict(os.environ, GO111MODULE="off", GOPATH=str(DEBIAN_GOPATH), GOCACHE=str(ROOT / "target" / "go-cache"))
    build = subprocess.run([go, "build", "-o", str(binary), "."], cwd=GO_EXAMPLE, env=env, capture_output=True,
                           text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]
    return binary


def test_go_pgx_recipe(server, go_pgx):
    dbname = recipe_database(server, "go_app")
    result = subprocess.run([str(go_pgx)], env=client_env(server, dbname), capture_output=True, text=True,
                            timeout=120)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    report = json.loads(result.stdout)
    # encoding/json's `string` option: each ID is a quoted decimal in the document.
    assert all(re.search(rf'"id":"{row["id"]}"', result.stdout) for row in report["rows"])
    check_program_report(server, dbname, report, "go order")
    publics = check_keyed_rows(server, dbname, {row["id"]: row["note"] for row in report["keyed"]})
    assert {row["id"]: int(row["public"]) for row in report["keyed"]} == publics
