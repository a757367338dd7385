"""Issue 36: without the decoder grant, no SQL route tells the order, second, node or sequence of
randflake IDs better than chance.

The attacks are generated from the catalog, so an object added to the extension is attacked
without editing this file: every function, aggregate and procedure, cast, operator, support
function of the extension's operator families and I/O function of its types (pg_depend, pg_proc,
pg_cast, pg_operator, pg_amproc, pg_type) is called from its signature, as `nobody` (a login
role and nothing more) and as `reader` (SELECT on a randflake_key table and a bigint ID table),
on IDs whose origin the superuser knows: the IDs alone, in pairs, and against the key table's
keys, in every public form an ID takes (bigint, integer, smallint, text, randflake_id) and
through every route into the extension's types (literals, casts in each context, untyped and
binary parameters, COPY, arrays, records, ranges, multiranges, domains, JSON, partition bounds),
and through what reaches a type's operator families without calling a function by name (array
and record comparison, GREATEST, sorting, hashes, hash partitioning, an index of each access
method, hash, merge and semi-joins on each operator that says it can make them).

Each result (a value, its rank in the result type's own order, or which rows fail and how) is
scored against the truth decoded by the superuser: creation order, key order, second, node,
sequence, the plain value and core hashes of it. A probe that orders the IDs better than chance,
names a second, node, sequence or plain value for more IDs than chance would, or splits them by
node or second, is a route, and the test fails naming it. One exception is named and checked:
the reader may learn the order of the keys in the key column it may read, as
docs/ordered-keys.md says. That the scoring finds what the decoder grant and the superuser may
learn is checked too, so that a pass says something.
"""

from __future__ import annotations

import csv
import math
import random
import re
import struct
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from itertools import combinations, permutations
from typing import Callable

import psycopg
import pytest
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types.numeric import Int2, Int4, Int8

from lib.cluster import wait_for

EPOCH = 1730000000
ROLES = ("nobody", "reader")
# IDs of known origin: SESSIONS backends (one node each) make ROUNDS IDs in each table in each of
# at least SECONDS seconds.
SECONDS, SESSIONS, ROUNDS = 3, 4, 5
SMALL = 60  # public IDs that fit in a smallint, decoded by the superuser: what integer casts take
PAIRS = 30  # items of a domain compared in pairs
# When a probe fails as a whole, this many items (or pairs of items, or key-table keys by IDs) are
# tried one statement at a time, to see whether which of them fail tells something.
ONE_BY_ONE, PAIRS_ONE_BY_ONE, CROSS_ONE_BY_ONE = 30, 24, (12, 24)
# A refusal of privilege is tried on this many rows first: the same refusal for all of them is a
# refusal of the statement.
PRIVILEGE_SAMPLE = 8
MAKERS_IN_PAIRS = 3  # routes into a type used as arguments, of those that work
SIGMAS = 6  # how far from chance an ordering must be, in standard deviations of a random one
INT8, INT4, INT2, TEXT, VARCHAR, CSTRING, INTERNAL, BOOL, TIMESTAMPTZ = 20, 23, 21, 25, 1043, 2275, 2281, 16, 1184
# Errors raised while a statement is parsed or planned: the same for every row, so a probe failing
# so is not retried row by row.
PLAN_TIME = {"42601", "42883", "42846", "42804", "42P18", "42725", "42P01", "42703", "42809", "0A000", "42P13", "42P09"}
ALLOWED = "the key column's own order, to those who may read it"
KEY_COLUMN_ORDER = "the key column, ranked by its own ordering"


# --- The IDs of known origin ---------------------------------------------------------------------

@dataclass
class Item:
    label: int  # what the attacker sees beside the ID: a random permutation, or the table's `made`
    public: int
    string: str
    second: int
    node: int
    sequence: int
    made: int | None = None
    rank: int = 0  # position in the key order (second, node, sequence): the plain value's, unsigned
    twins: dict[str, str] = field(default_factory=dict)  # core functions of the plain value

    @property
    def plain(self) -> int:
        value = (self.second - EPOCH) << 34 | self.node << 17 | self.sequence
        return value - (1 << 64) if value >= 1 << 63 else value

    def order_targets(self) -> dict[str, int]:
        targets = {"key order": self.rank, "second": self.second, "node": self.node, "sequence": self.sequence}
        if self.made is not None:
            targets["creation order"] = self.made
        return targets

    def exact_targets(self) -> dict[str, str]:
        return {"second": str(self.second), "second - 1730000000": str(self.second - EPOCH), "node": str(self.node),
                "sequence": str(self.sequence), "plain value": str(self.plain), **self.twins}


@dataclass(eq=False)  # hashed by identity: the scoring caches by domain
class Domain:
    """IDs as an attacker holds them: `source` is a FROM item with a label `n` and the columns
    `columns` names (b bigint, s text, i integer, sm smallint, k the key column)."""
    name: str
    source: str
    columns: set[str]
    items: dict[int, Item]
    key_type: int | None = None
    order_allowed: bool = False

    def labels(self, count: int | None = None) -> list[int]:
        return sorted(self.items)[:count]


TWINS = """
    SELECT p, hashint8(p), hashint8extended(p, 0), hash_array(ARRAY[p]), hash_array_extended(ARRAY[p], 0),
           hash_record(ROW(p)), hash_record_extended(ROW(p), 0),
           (SELECT min(r) FROM generate_series(0, 63) r
             WHERE satisfies_hash_partition('twin_parts'::regclass, 64, r, p)),
           randflake_to_string(p)
      FROM unnest(%s::bigint[]) p"""
TWIN_NAMES = ("hashint8", "hashint8extended", "hash_array", "hash_array_extended", "hash_record",
              "hash_record_extended", "hash partition of 64", "string")


def decoded(conn, query: str, parameters=()) -> list[Item]:
    """Items of `query` (label, id, made), decoded by the superuser, with their key order and the
    core functions of their plain values that an attacker could compute for every candidate."""
    rows = conn.execute(f"""
        SELECT s.label, s.id, randflake_to_string(s.id), extract(epoch FROM d.timestamp)::bigint, d.node_id,
               d.sequence, s.made
          FROM ({query}) s, randflake_decode(s.id) d""", parameters).fetchall()
    items = [Item(*row) for row in rows]
    for rank, item in enumerate(sorted(items, key=lambda i: (i.second, i.node, i.sequence))):
        item.rank = rank
    twins = {row[0]: row[1:] for row in conn.execute(TWINS, ([item.plain for item in items],))}
    for item in items:
        item.twins = {f"{name} of the plain value": str(value) for name, value in zip(TWIN_NAMES, twins[item.plain])}
    return items


MADE_IN = (("hidden", "randflake_next()"), ("ids_pub", "DEFAULT"), ("ids_key", "DEFAULT"))


def make_known_ids(cluster) -> None:
    """Rows of hidden, ids_pub and ids_key made in turn by SESSIONS backends, in batches of IDs of
    SECONDS different seconds at least; `made` counts them in the order they were made. The
    server's backends share one position, which uses a node's 131072 sequences up before the next,
    and each backend holds the run of 64 IDs it took last: each round's rows come from backends
    begun for it, after a node's worth of keys more than before the last round, so that the rounds'
    IDs lie on several nodes however slowly the machine runs them."""
    driver = cluster.connect()

    def issued_second() -> int:
        """The second of an ID issued now: the generator's own, which may run ahead of the clock a
        session reads (a new node's first second may still be in use)."""
        return driver.execute("SELECT extract(epoch FROM d.timestamp)::bigint"
                              " FROM randflake_decode(randflake_next()) d").fetchone()[0]

    try:
        made, latest = 0, None
        for _ in range(SECONDS):
            if latest is not None:
                wait_for(lambda: issued_second() > latest, 10, "IDs of the next second")
            for round_number in range(ROUNDS):
                # round_number + 1 nodes' worth: each round lands on a later node than the one
                # before, whether they share a second (the position adds up) or each begins its
                # own (it starts at node 0).
                driver.execute("SELECT count(randflake_next_key()) FROM generate_series(1, %s)",
                               (131072 * (round_number + 1),))
                sessions = [cluster.connect() for _ in range(SESSIONS)]
                try:
                    for session in sessions:
                        for table, value in MADE_IN:
                            made += 1
                            session.execute(f"INSERT INTO {table} (id, made) VALUES ({value}, %s)", (made,))
                finally:
                    for session in sessions:
                        session.close()
            latest = issued_second()
    finally:
        driver.close()


@dataclass
class World:
    cluster: object
    domains: dict[str, Domain]
    catalog: "Catalog"


@pytest.fixture(scope="module")
def world(_module_cluster) -> World:
    cluster = _module_cluster
    rng = random.Random(36)
    with cluster.connect() as conn:
        conn.execute("SET timezone = 'UTC'")
        # hidden: IDs of known origin that no attacker can read; they reach the attacker only as
        # the values of its own temporary tables.
        conn.execute("CREATE TABLE hidden (id bigint NOT NULL, made int NOT NULL)")
        conn.execute("CREATE TABLE ids_pub (id bigint NOT NULL DEFAULT randflake_next(), made int NOT NULL)")
        conn.execute("CREATE TABLE ids_key (id randflake_key PRIMARY KEY DEFAULT randflake_next_key(),"
                     " made int NOT NULL)")
        conn.execute("CREATE TABLE twin_parts (v bigint) PARTITION BY HASH (v)")
        for statement in ("CREATE ROLE nobody LOGIN", "CREATE ROLE reader LOGIN",
                          "GRANT SELECT ON ids_pub, ids_key TO reader", "CREATE ROLE decoder LOGIN",
                          "GRANT EXECUTE ON FUNCTION randflake_decode(bigint) TO decoder"):
            conn.execute(statement)
    make_known_ids(cluster)
    with cluster.connect() as conn:
        conn.execute("SET timezone = 'UTC'")
        made = decoded(conn, "SELECT made AS label, id, made FROM hidden")
        small_ids = rng.sample(range(-32768, 32768), SMALL)
        small = decoded(conn, "SELECT 0 AS label, v AS id, NULL::int AS made FROM unnest(%s::bigint[]) v", (small_ids,))
        for items in (made, small):
            # The attacker's labels say nothing of creation: a random permutation.
            for label, item in zip(rng.sample(range(1, len(items) + 1), len(items)), items):
                item.label = label
        public = decoded(conn, "SELECT made AS label, id, made FROM ids_pub")
        keys = decoded(conn, "SELECT made AS label, id::bigint AS id, made FROM ids_key")
        # The ground truth's key order is the type's: second, then node, then sequence.
        by_key = [row[0] for row in conn.execute("SELECT made FROM ids_key ORDER BY id")]
        assert by_key == [item.made for item in sorted(keys, key=lambda item: item.rank)]
        key_type = conn.execute("SELECT 'randflake_key'::regtype::oid").fetchone()[0]
        catalog = read_catalog(conn)
    seconds = {item.second for item in made}
    by_node = Counter(item.node for item in made)
    # The scoring's own test needs the nodes spread: IDs mostly of one node would hide it.
    assert len(seconds) >= SECONDS and len(by_node) >= 3 and max(by_node.values()) <= len(made) / 2, \
        (seconds, by_node)
    domains = {
        "made": Domain("made", "pg_temp.dom_made", {"b", "s"}, {i.label: i for i in made}),
        "small": Domain("small", "pg_temp.dom_small", {"i", "sm"}, {i.label: i for i in small}),
        "pub_table": Domain("pub_table", "(SELECT made AS n, id AS b, randflake_to_string(id) AS s"
                                         " FROM public.ids_pub)", {"b", "s"}, {i.label: i for i in public}),
        "key_table": Domain("key_table", "(SELECT made AS n, id AS k FROM public.ids_key)", {"k"},
                            {i.label: i for i in keys}, key_type=key_type, order_allowed=True),
    }
    return World(cluster, domains, catalog)


# --- The catalog ---------------------------------------------------------------------------------

MEMBERS = """
    WITH members AS (
        SELECT d.classid, d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
         WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'randflake_pg'
    ), families AS (
        SELECT f.oid FROM members m JOIN pg_opfamily f ON m.classid = 'pg_opfamily'::regclass AND f.oid = m.objid
        UNION SELECT c.opcfamily FROM members m
                JOIN pg_opclass c ON m.classid = 'pg_opclass'::regclass AND c.oid = m.objid
    ), types AS (
        SELECT t.* FROM members m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
    ), type_io AS (
        SELECT t.oid AS type, io.what, io.proc::oid AS proc FROM types t,
               LATERAL (VALUES ('input', t.typinput), ('output', t.typoutput), ('receive', t.typreceive),
                               ('send', t.typsend), ('typmod input', t.typmodin), ('typmod output', t.typmodout),
                               ('analyze', t.typanalyze), ('subscript', t.typsubscript)) io(what, proc)
         WHERE io.proc::oid <> 0
    )
"""
ROUTINES = MEMBERS + """
    SELECT p.oid::regprocedure::text, quote_ident(n.nspname) || '.' || quote_ident(p.proname), p.prokind::text,
           p.proretset, p.prorettype::oid, p.proargtypes::oid[], coalesce(p.proallargtypes, p.proargtypes::oid[]),
           coalesce(p.proargmodes::text[], '{}')
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE p.oid IN (SELECT objid FROM members WHERE classid = 'pg_proc'::regclass
                     UNION SELECT amproc FROM pg_amproc WHERE amprocfamily IN (SELECT oid FROM families)
                     UNION SELECT proc FROM type_io)
     ORDER BY 1"""
CASTS = MEMBERS + """
    SELECT format('cast %s AS %s', format_type(c.castsource, NULL), format_type(c.casttarget, NULL)),
           c.castsource::oid, c.casttarget::oid, c.castcontext::text
      FROM members m JOIN pg_cast c ON m.classid = 'pg_cast'::regclass AND c.oid = m.objid ORDER BY 1"""
OPERATORS = MEMBERS + """
    SELECT 'operator ' || o.oid::regoperator::text, format('OPERATOR(%I.%s)', n.nspname, o.oprname), o.oprleft::oid,
           o.oprright::oid, array_remove(ARRAY[CASE WHEN o.oprcanhash THEN 'hash' END,
                                               CASE WHEN o.oprcanmerge THEN 'merge' END], NULL)
      FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace
     WHERE o.oid IN (SELECT objid FROM members WHERE classid = 'pg_operator'::regclass
                     UNION SELECT amopopr FROM pg_amop WHERE amopfamily IN (SELECT oid FROM families))
     ORDER BY 1"""
SUPPORTS = MEMBERS + """
    SELECT format('support function %s of %s family %s (%s, %s): %s', a.amprocnum, am.amname, f.opfname,
                  format_type(a.amproclefttype, NULL), format_type(a.amprocrighttype, NULL), a.amproc::regprocedure),
           'function ' || a.amproc::regprocedure::text, am.amname
      FROM pg_amproc a JOIN pg_opfamily f ON f.oid = a.amprocfamily JOIN pg_am am ON am.oid = f.opfmethod
     WHERE a.amprocfamily IN (SELECT oid FROM families) ORDER BY 1"""
TYPE_IO = MEMBERS + """
    SELECT format('%s function of type %s: %s', what, format_type(type, NULL), proc::regprocedure),
           'function ' || proc::regprocedure::text, what, format_type(type, NULL)
      FROM type_io ORDER BY 1"""
EXTENSION_TYPES = MEMBERS + """
    SELECT t.oid::oid, format_type(t.oid, NULL),
           EXISTS (SELECT FROM pg_opclass c JOIN pg_am a ON a.oid = c.opcmethod
                    WHERE c.opcintype = t.oid AND c.opcdefault AND a.amname = 'btree'),
           array(SELECT DISTINCT a.amname FROM pg_opclass c JOIN pg_am a ON a.oid = c.opcmethod
                  WHERE c.opcintype = t.oid AND c.opcdefault ORDER BY 1)
      FROM types t WHERE t.typtype = 'b' AND t.typcategory <> 'A' ORDER BY 1"""


@dataclass
class Routine:
    label: str  # "function name(argument types)"
    call: str  # the qualified name
    kind: str  # pg_proc.prokind
    retset: bool
    returns: int
    arguments: list[int]  # the types of its input arguments
    all_arguments: list[int]
    modes: list[str]


@dataclass
class Catalog:
    types: dict[int, str]  # every type met, as format_type writes it
    extension_types: dict[int, tuple[str, bool, list[str]]]  # name, has a btree order, access methods
    routines: list[Routine]
    casts: list[tuple]
    operators: list[tuple]
    supports: list[tuple]
    type_io: list[tuple]

    def objects(self) -> dict[str, set[str]]:
        """Each object the extension creates, with the probes' coverage labels that attack it
        (any one will do)."""
        objects = {r.label: {r.label} for r in self.routines}
        objects.update({label: {label} for label, *_ in self.casts})
        objects.update({label: {label} for label, *_ in self.operators})
        # A support function taking `internal` is reached only by its access method.
        objects.update({label: {function, f"access method {am}"} for label, function, am in self.supports})
        objects.update({label: {function, f"{what} of {name}"} for label, function, what, name in self.type_io})
        return objects


def read_catalog(conn) -> Catalog:
    routines = [Routine("function " + row[0], *row[1:]) for row in conn.execute(ROUTINES)]
    casts = conn.execute(CASTS).fetchall()
    operators = conn.execute(OPERATORS).fetchall()
    extension_types = {oid: (name, ordered, ams) for oid, name, ordered, ams in conn.execute(EXTENSION_TYPES)}
    met = {t for r in routines for t in (r.returns, *r.all_arguments)} | {t for c in casts for t in c[1:3]}
    met |= {t for o in operators for t in o[2:4]} | {BOOL, TIMESTAMPTZ, INT8, INT4, INT2, TEXT}
    types = dict(conn.execute("SELECT oid::oid, format_type(oid, NULL) FROM pg_type WHERE oid = ANY(%s)", (list(met),)))
    return Catalog(types, extension_types, routines, casts, operators, conn.execute(SUPPORTS).fetchall(),
                   conn.execute(TYPE_IO).fetchall())


# --- Probes ------------------------------------------------------------------------------------

@dataclass
class Probe:
    name: str
    shape: str  # one, pair, cross, set, statements, call
    domain: str
    covers: frozenset = frozenset()
    expr: str = ""  # one: over the row x; pair: over x and y; cross: x a key-table row, y a row of `domain`
    ordered: bool = False  # one: also rank the rows by the expression's own order
    run: Callable | None = None  # set: conn -> {label: (value, rank)}
    statement: Callable | None = None  # statements: (item, item) -> SQL, run and undone for each pair
    reference: bool = False  # places IDs against keys of chosen times: more than the allowed order
    route: bool = False  # a route into a type: a failure is always tried row by row


@dataclass
class Outcome:
    probe: Probe
    rows: dict = field(default_factory=dict)  # label or (label, label) -> (value, sqlstate, message)
    ranks: dict = field(default_factory=dict)
    refused: tuple | None = None  # (sqlstate, message, hint) when every attempt failed alike
    errors: list = field(default_factory=list)  # (sqlstate, message) of each failure seen


def public_forms(catalog: Catalog) -> list[tuple[str, str, str]]:
    """(name, column, expression over {x}) of every form a public ID takes."""
    forms = [("bigint", "b", "{x}.b"), ("integer", "i", "{x}.i"), ("smallint", "sm", "{x}.sm"), ("text", "s", "{x}.s"),
             ("varchar", "s", "{x}.s::varchar")]
    # The extension's other types (randflake_id) hold public IDs too.
    forms += [(name, "b", f"{{x}}.b::{name}") for name, _, _ in catalog.extension_types.values()
              if name != "randflake_key"]
    return forms


def plain_forms(catalog: Catalog, type_oid: int, domain: Domain) -> list[tuple[str, str]]:
    """The forms of an argument of a type that is not the extension's own."""
    columns = {INT8: ("b", "{x}.b"), INT4: ("i", "{x}.i"), INT2: ("sm", "{x}.sm"), TEXT: ("s", "{x}.s"),
               VARCHAR: ("s", "{x}.s::varchar"), CSTRING: ("s", "{x}.s::cstring")}
    column, form = columns.get(type_oid, (None, None))
    return [(catalog.types[type_oid], form)] if column in domain.columns else []


def makers(catalog: Catalog, type_oid: int, index: int, domain: Domain) -> list[tuple[str, str]]:
    """Every route from a public form of an ID into the extension's type `type_oid`: its text
    input, each cast (the catalog's and every public form's, explicit and implicit), and input
    inside arrays, records, ranges, multiranges, domains and JSON."""
    name = catalog.extension_types[type_oid][0]
    routes = []
    if "s" in domain.columns:
        routes.append((f"text input of {name}", f"{{x}}.s::{name}"))
    sources = [(form_name, form) for form_name, column, form in public_forms(catalog) if column in domain.columns]
    for _, source, target, _ in catalog.casts:
        if target == type_oid:  # casts from the extension's other types are among the public forms
            sources += plain_forms(catalog, source, domain)
    for form_name, form in dict.fromkeys(sources):
        if form_name == name:
            continue
        routes.append((f"explicit cast {form_name} to {name}", f"CAST({form} AS {name})"))
        # An argument of a function taking the type: the parser applies an implicit cast there.
        routes.append((f"implicit cast {form_name} to {name}", f"pg_temp.implicit_{index}({form})"))
    if "s" in domain.columns:
        routes += [
            (f"array input of {name}[]", f"(('{{' || {{x}}.s || '}}')::{name}[])[1]"),
            (f"record input with a {name} field", f"(('(' || {{x}}.s || ')')::pg_temp.row_{index}).k"),
            (f"range input over {name}", f"lower(('[' || {{x}}.s || ',' || {{x}}.s || ']')::pg_temp.range_{index})"),
            (f"multirange input over {name}",
             f"lower(('{{[' || {{x}}.s || ',' || {{x}}.s || ']}}')::pg_temp.mrange_{index})"),
            (f"domain over {name} from text", f"{{x}}.s::pg_temp.domain_{index}"),
            ("jsonb_populate_record",
             f"(jsonb_populate_record(NULL::pg_temp.row_{index}, jsonb_build_object('k', {{x}}.s))).k"),
            ("json_populate_record",
             f"(json_populate_record(NULL::pg_temp.row_{index}, json_build_object('k', {{x}}.s))).k"),
            ("jsonb_to_record",
             f"(SELECT r.k FROM jsonb_to_record(jsonb_build_object('k', {{x}}.s)) AS r(k {name}))"),
        ]
    if "b" in domain.columns:
        routes.append(("jsonb_populate_record of a number",
                       f"(jsonb_populate_record(NULL::pg_temp.row_{index}, jsonb_build_object('k', {{x}}.b))).k"))
    return routes


def fill(template: str, alias: str) -> str:
    return template.replace("{x}", alias)


DEFAULTS = {INT8: "0::bigint", INT4: "0", INT2: "0::smallint", TEXT: "''::text", BOOL: "false", TIMESTAMPTZ: "now()"}


class Generator:
    """Makes the probes of one attacker: from the catalog, the domains it may use and the routes
    into the extension's types that worked for it."""

    def __init__(self, world: World, role: str):
        self.world, self.catalog, self.role = world, world.catalog, role
        self.domains = [world.domains[name] for name in ("made", "small")]
        if role == "reader":
            self.domains += [world.domains["pub_table"], world.domains["key_table"]]
        self.working: dict[tuple[int, str], list[tuple[str, str]]] = {}
        self.type_index = {oid: index for index, oid in enumerate(self.catalog.extension_types)}

    def key_forms(self, type_oid: int, domain: Domain, alias: str) -> list[tuple[str, str]]:
        if domain.key_type == type_oid:
            return [("the key column", f"{alias}.k")]
        if domain.key_type is not None:
            return []
        routes = makers(self.catalog, type_oid, self.type_index[type_oid], domain)
        chosen = self.working.get((type_oid, domain.name)) or routes[:1]
        return [(name, fill(form, alias)) for name, form in chosen[:MAKERS_IN_PAIRS]]

    def forms(self, type_oid: int, domain: Domain, alias: str, raw: bool = True) -> list[tuple[str, str]]:
        """An argument of type `type_oid` made of the row `alias`: the extension's types through
        the routes into them and, with `raw`, as a bare public form for the parser to resolve."""
        if type_oid in self.catalog.extension_types:
            forms = self.key_forms(type_oid, domain, alias)
            if raw and domain.key_type is None:
                forms += [(f"bare {name}", fill(form, alias)) for name, column, form in public_forms(self.catalog)
                          if column in domain.columns and name not in (self.catalog.types[type_oid], "varchar")]
            return forms
        return [(name, fill(form, alias)) for name, form in plain_forms(self.catalog, type_oid, domain)]

    def default(self, type_oid: int) -> str:
        return DEFAULTS.get(type_oid, f"NULL::{self.catalog.types.get(type_oid, 'unknown')}")

    def routine_call(self, routine: Routine, arguments: list[str]) -> str:
        if routine.kind == "a":
            columns = ", ".join(f"a{i}" for i in range(len(arguments)))
            return f"(SELECT {routine.call}({columns}) FROM (VALUES ({', '.join(arguments)})) s({columns}))"
        call = f"{routine.call}({', '.join(arguments)})"
        return f"(SELECT string_agg(r::text, ';') FROM {call} AS r)" if routine.retset else call

    def capable(self, routine: Routine) -> list[int]:
        """The positions of `routine`'s arguments that can hold an ID."""
        kinds = {INT8, INT4, INT2, TEXT, VARCHAR, CSTRING} | set(self.catalog.extension_types)
        return [i for i, t in enumerate(routine.arguments) if t in kinds]

    def route_probes(self) -> list[Probe]:
        """Every route into each of the extension's types, from each domain of public IDs, and
        two bounds that must come in order (a range literal, a range partition) for pairs."""
        probes = []
        for type_oid, (name, ordered, _) in self.catalog.extension_types.items():
            index = self.type_index[type_oid]
            for domain in self.domains:
                if domain.key_type is not None or domain.name == "pub_table":  # as `made`'s IDs
                    continue
                for route, form in makers(self.catalog, type_oid, index, domain):
                    probes.append(Probe(route, "one", domain.name, self.route_covers(route, name), fill(form, "x"),
                                        ordered=True, route=True))
                probes += client_routes(self.catalog, type_oid, index, domain)
            made = self.world.domains["made"]
            if ordered:
                probes.append(Probe(f"range input over {name}, bounds of two IDs", "pair", "made", frozenset(),
                                    f"(('[' || x.s || ',' || y.s || ']')::pg_temp.range_{index})::text"))
            for quoted in (True, False):
                def bounds(a: Item, b: Item, quoted=quoted, index=index) -> str:
                    low, high = (f"'{a.string}'", f"'{b.string}'") if quoted else (a.public, b.public)
                    return (f"CREATE TEMP TABLE bounded PARTITION OF pg_temp.rparts_{index}"
                            f" FOR VALUES FROM ({low}) TO ({high})")
                form = "strings" if quoted else "bigints"
                probes.append(Probe(f"range partition of {name} bounded by two IDs as {form}", "statements",
                                    made.name, frozenset(), statement=bounds))
        return probes

    def route_covers(self, route: str, type_name: str) -> frozenset:
        covers = {f"input of {type_name}"} if "input" in route or "json" in route or "domain" in route else set()
        for label, source, target, _ in self.catalog.casts:
            if self.catalog.types[target] == type_name and route.startswith(("explicit cast", "implicit cast")) \
                    and f" {self.catalog.types[source]} to " in route:
                covers.add(label)
        return frozenset(covers)

    def catalog_probes(self) -> list[Probe]:
        probes = []
        for routine in self.catalog.routines:
            probes += self.routine_probes(routine)
        for label, call, left, right, joins in self.catalog.operators:
            probes += self.operator_probes(label, call, left, right, joins)
        for label, source, target, context in self.catalog.casts:
            if source in self.catalog.extension_types:
                probes += self.cast_out_probes(label, source, target)
        return probes

    def routine_probes(self, routine: Routine) -> list[Probe]:
        covers = frozenset({routine.label})
        positions = self.capable(routine)
        if routine.kind == "p" or not positions or INTERNAL in routine.arguments:
            # Nothing of an ID goes in: called once, for its refusal or its result.
            arguments = [self.default(t) if m in ("i", "b") else "NULL" for t, m in
                         zip(routine.all_arguments, routine.modes or ["i"] * len(routine.all_arguments))]
            statement = (f"CALL {routine.call}({', '.join(arguments)})" if routine.kind == "p"
                         else f"SELECT ({self.routine_call(routine, arguments)})::text")
            probes = [Probe(routine.label, "call", "made", covers, statement)]
            if routine.returns in self.catalog.extension_types and INTERNAL not in routine.arguments:
                probes += self.reference_probes(routine)
            return probes
        probes = []
        for domain in self.domains:
            for position in positions:
                for form_name, form in self.forms(routine.arguments[position], domain, "x"):
                    arguments = [form if i == position else self.same_row(t, domain, "x")
                                 for i, t in enumerate(routine.arguments)]
                    probes.append(Probe(f"{routine.label}, argument {position + 1} {form_name}", "one", domain.name,
                                        covers, self.routine_call(routine, arguments), ordered=True))
            pairs = list(combinations(positions, 2)) or ([(0, 0)] if routine.kind == "a" else [])
            for first, second in pairs if domain.name != "pub_table" else []:
                probes += self.pair_probes(routine.label, domain, routine.arguments[first], routine.arguments[second],
                                           lambda a, b, r=routine, i=first, j=second: self.pair_call(r, i, j, a, b),
                                           covers)
        return probes

    def pair_call(self, routine: Routine, first: int, second: int, a: str, b: str) -> str:
        if routine.kind == "a" and first == second:
            return f"(SELECT {routine.call}(v) FROM (VALUES ({a}), ({b})) s(v))"
        arguments = [a if i == first else b if i == second else self.default(t)
                     for i, t in enumerate(routine.arguments)]
        return self.routine_call(routine, arguments)

    def same_row(self, type_oid: int, domain: Domain, alias: str) -> str:
        if type_oid in self.catalog.extension_types:
            forms = self.forms(type_oid, domain, alias, raw=False)
            return forms[0][1] if forms else self.default(type_oid)
        return self.default(type_oid)

    def pair_probes(self, label: str, domain: Domain, left: int, right: int, build, covers) -> list[Probe]:
        """Two IDs of `domain` as the two arguments, in the same form where both arguments take
        the same type, and for the reader the key table's keys against the domain's IDs."""
        probes = []
        lefts, rights = self.forms(left, domain, "x"), self.forms(right, domain, "y")
        for (left_name, a), (right_name, b) in [(l, r) for l in lefts for r in rights]:
            bare = (left_name.startswith("bare "), right_name.startswith("bare "))
            # Of one type on both sides: the same form on both, or a bare form against the first
            # route, for the parser to resolve.
            if left == right and (left_name != right_name if bare[0] == bare[1] else
                                  (left_name, a) != lefts[0] and (right_name, b) != rights[0]):
                continue
            probes.append(Probe(f"{label}, {left_name} and {right_name}", "pair", domain.name, covers, build(a, b)))
        if domain.name in ("made", "small") and self.role == "reader":
            keys = self.world.domains["key_table"]
            for key_side in (0, 1):
                side_type = (left, right)[key_side]
                other_type = (right, left)[key_side]
                if side_type != keys.key_type:
                    continue
                for other_name, other in self.forms(other_type, domain, "y"):
                    a, b = ("x.k", other) if key_side == 0 else (other, "x.k")
                    probes.append(Probe(f"{label}, the key column against {other_name} of hidden IDs", "cross",
                                        domain.name, covers, build(a, b)))
        return probes

    def operator_probes(self, label: str, call: str, left: int, right: int, joins: list[str]) -> list[Probe]:
        covers = frozenset({label})
        probes = []
        for domain in self.domains:
            if left and right and domain.name != "pub_table":
                probes += self.pair_probes(label, domain, left, right, lambda a, b: f"({a}) {call} ({b})", covers)
                probes += self.join_probes(label, call, domain, left, right, joins)
            for side, type_oid in ((0, left), (1, right)):
                if not type_oid:
                    continue
                for form_name, form in self.forms(type_oid, domain, "x"):
                    other = self.same_row((left, right)[1 - side], domain, "x") if left and right else ""
                    expr = f"({form}) {call} ({other})" if side == 0 else f"({other}) {call} ({form})"
                    if not (left and right):
                        expr = f"{call} ({form})" if side == 1 else f"({form}) {call}"
                    probes.append(Probe(f"{label}, {form_name} on side {side + 1}", "one", domain.name, covers, expr,
                                        ordered=True))
        return probes

    def join_probes(self, label: str, call: str, domain: Domain, left: int, right: int,
                    joins: list[str]) -> list[Probe]:
        """An operator that says it can hash or merge (HASHES, MERGES), as the condition of such a
        join and of a semi-join, which reach its families' support: each ID's count of rows it
        joins, among the domain's own IDs and, for the reader, among the key table's keys."""
        if not joins:
            return []
        probes = []
        sides = [(domain, self.forms(left, domain, "x", raw=False))]
        if self.role == "reader" and left == self.world.domains["key_table"].key_type and domain.name == "made":
            sides.append((self.world.domains["key_table"], [("the key column", "x.k")]))
        rights = self.forms(right, domain, "y", raw=False)
        for (other, lefts), method in [(side, method) for side in sides for method in (*joins, "semi")]:
            if not lefts or not rights or other.key_type is not None and domain.key_type is not None:
                continue
            (left_name, a), (right_name, b) = lefts[0], rights[0]
            probes.append(join_probe(f"{label}, {method} join of {left_name} of {other.name} with {right_name}",
                                     method, other, domain, (a, call, b), frozenset({label})))
        return probes

    def cast_out_probes(self, label: str, source: int, target: int) -> list[Probe]:
        probes = []
        for domain in self.domains:
            for form_name, form in self.forms(source, domain, "x", raw=False):
                target_name = self.catalog.types[target]
                probes.append(Probe(f"{label}, explicit, of {form_name}", "one", domain.name, frozenset({label}),
                                    f"CAST({form} AS {target_name})", ordered=True))
                probes.append(Probe(f"{label}, implicit, of {form_name}", "one", domain.name, frozenset({label}),
                                    f"(ARRAY[NULL::{target_name}, {form}])[2]", ordered=True))
        return probes

    def reference_probes(self, routine: Routine) -> list[Probe]:
        """A function that makes a value of the extension's type from no ID (a time, or nothing):
        IDs compared with what it makes for the seconds around the IDs' own."""
        probes = []
        for domain in self.domains:
            seconds = sorted({item.second for item in domain.items.values()})
            if domain.name == "small" or not seconds:
                continue
            chosen = ",".join(str(s) for s in range(seconds[0] - 1, seconds[-1] + 2)) if len(seconds) < 50 else ""
            arguments = ["to_timestamp(s)" if t == TIMESTAMPTZ else self.default(t) for t in routine.arguments]
            for form_name, form in self.forms(routine.returns, domain, "x", raw=False):
                expr = (f"(SELECT string_agg(({form} < r.ref)::text, ',' ORDER BY r.s) FROM (SELECT s, "
                        f"{self.routine_call(routine, arguments)} AS ref FROM unnest(ARRAY[{chosen}]::bigint[]) s) r)")
                probes.append(Probe(f"{routine.label} against {form_name} for the seconds around the IDs", "one",
                                    domain.name, frozenset({routine.label}), expr, reference=True))
        return probes

    def core_probes(self) -> list[Probe]:
        """Core functions that reach the extension's operator classes: its hashes, its order
        inside arrays, records, ranges, GREATEST, sorting, hash partitioning and indexes."""
        probes = []
        for type_oid, (name, ordered, ams) in self.catalog.extension_types.items():
            index = self.type_index[type_oid]
            for domain in self.domains:
                if domain.name in ("small", "pub_table"):
                    continue
                forms = self.key_forms(type_oid, domain, "x")
                for form_name, k in forms:
                    hashes = "hash" in ams
                    for what, expr in (("itself", k), ("hash_array", f"hash_array(ARRAY[{k}])"),
                                       ("hash_array_extended", f"hash_array_extended(ARRAY[{k}], 0)"),
                                       ("hash_record", f"hash_record(ROW({k}))"),
                                       ("hash_record_extended", f"hash_record_extended(ROW({k}), 0)"),
                                       ("its hash partition of 64", "(SELECT min(r) FROM generate_series(0, 63) r WHERE"
                                        f" satisfies_hash_partition('pg_temp.parts_{index}'::regclass, 64, r, {k}))"),
                                       ("to_jsonb", f"to_jsonb({k})"), ("ARRAY[]", f"ARRAY[{k}]"),
                                       ("ROW()", f"ROW({k})")):
                        if not hashes and "hash" in what:
                            continue
                        covers = frozenset({f"access method {am}" for am in ams if am in ("btree", "hash")})
                        name_ = KEY_COLUMN_ORDER if (what == "itself" and domain.key_type) else f"{what} of {form_name}"
                        probes.append(Probe(name_, "one", domain.name, covers, expr, ordered=True))
                    for am in ams:
                        probes.append(index_probe(am, name, form_name, k, domain))
                if not ordered:
                    continue
                lefts, rights = self.key_forms(type_oid, domain, "x"), self.key_forms(type_oid, domain, "y")
                for (form_name, a), (_, b) in zip(lefts, rights):
                    for what, expr in (("ARRAY[] <", f"ARRAY[{a}] < ARRAY[{b}]"), ("ROW() <", f"ROW({a}) < ROW({b})"),
                                       ("btarraycmp", f"btarraycmp(ARRAY[{a}], ARRAY[{b}])"),
                                       ("btrecordcmp", f"btrecordcmp(ROW({a}), ROW({b}))"),
                                       ("GREATEST", f"GREATEST({a}, {b})"), ("LEAST", f"LEAST({a}, {b})"),
                                       ("sorted", f"(SELECT string_agg(v::text, ',' ORDER BY v)"
                                                  f" FROM (VALUES ({a}), ({b})) s(v))"),
                                       ("range constructor", f"pg_temp.range_{index}({a}, {b})::text")):
                        probes.append(Probe(f"{what} of two {form_name}", "pair", domain.name,
                                            frozenset({"access method btree"}), expr))
        return probes


def index_probe(am: str, type_name: str, form_name: str, k: str, domain: Domain) -> Probe:
    """A temporary table of `k`, an index of `am` on it, and each row's count of rows up to it
    found through that index where the planner can use it."""
    def run(conn):
        conn.execute("DROP TABLE IF EXISTS pg_temp.indexed")
        conn.execute(f"CREATE TEMP TABLE indexed AS SELECT x.n, {k} AS k FROM {domain.source} x")
        conn.execute(f"CREATE INDEX ON pg_temp.indexed USING {am} (k)")
        conn.execute("SET enable_seqscan = off")
        try:
            condition = "y.k = x.k" if am == "hash" else "y.k <= x.k"
            rows = conn.execute(f"SELECT x.n, (SELECT count(*) FROM pg_temp.indexed y WHERE {condition})::text"
                                " FROM pg_temp.indexed x").fetchall()
        finally:
            conn.execute("RESET enable_seqscan")
        return {n: (value, None) for n, value in rows}
    name = KEY_COLUMN_ORDER + f" through a {am} index" if domain.key_type else f"{am} index of {form_name}"
    return Probe(name, "set", domain.name, frozenset({f"access method {am}"}), run=run)


# Planner settings that leave one way to join: a hash join, a merge join, or a semi-join (x IN
# (SELECT y ...)), which the planner may also make by hashing or sorting the y side.
JOINS = {"hash": ("enable_nestloop", "enable_mergejoin"), "merge": ("enable_nestloop", "enable_hashjoin"),
         "semi": ("enable_nestloop",)}


def join_probe(name: str, method: str, left: Domain, right: Domain, condition: str, covers: frozenset) -> Probe:
    """For each row y of `right`, how many rows x of `left` meet `condition` by a join of
    `method`, where the planner can make one; for a semi-join, whether each x meets it for any y."""
    a, operator, b = condition

    def run(conn):
        for setting in JOINS[method]:
            conn.execute(f"SET {setting} = off")
        try:
            if method == "semi":
                found = {row[0] for row in conn.execute(
                    f"SELECT x.n FROM {left.source} x WHERE ({a}) {operator} ANY (SELECT {b} FROM {right.source} y)")}
                return {n: (str(n in found).lower(), None) for n in left.items}
            rows = conn.execute(f"SELECT y.n, count(x.n)::text FROM {right.source} y"
                                f" LEFT JOIN {left.source} x ON ({a}) {operator} ({b}) GROUP BY y.n").fetchall()
            return {n: (value, None) for n, value in rows}
        finally:
            for setting in JOINS[method]:
                conn.execute(f"RESET {setting}")
    return Probe(name, "set", left.name if method == "semi" else right.name, covers, run=run)


def client_routes(catalog: Catalog, type_oid: int, index: int, domain: Domain) -> list[Probe]:
    """Routes into the type from the client: untyped, text, binary and integer parameters, COPY in
    text, CSV and binary, and INSERT (assignment) from each public form."""
    name = catalog.extension_types[type_oid][0]
    items = [domain.items[label] for label in domain.labels()]

    def ranked(conn, table: str) -> dict:
        rows = conn.execute(f"SELECT n, k::text, dense_rank() OVER (ORDER BY k) FROM {table}").fetchall()
        return {n: (value, rank) for n, value, rank in rows}

    def values_query(placeholder: str, values) -> Callable:
        def run(conn):
            rows = ", ".join(f"({item.label}, {placeholder}::{name})" for item in items)
            conn.execute(f"TRUNCATE pg_temp.assigned_{index}")
            conn.execute(f"INSERT INTO pg_temp.assigned_{index} (n, k) SELECT * FROM (VALUES {rows}) v",
                         [values(item) for item in items])
            return ranked(conn, f"pg_temp.assigned_{index}")
        return run

    def copy(options: str, payload: Callable) -> Callable:
        def run(conn):
            conn.execute(f"TRUNCATE pg_temp.assigned_{index}")
            statement = f"COPY pg_temp.assigned_{index} (n, k) FROM STDIN {options}"
            with conn.cursor() as cursor, cursor.copy(statement) as copying:
                copying.write(payload())
            return ranked(conn, f"pg_temp.assigned_{index}")
        return run

    def assign(form: str) -> Callable:
        def run(conn):
            conn.execute(f"TRUNCATE pg_temp.assigned_{index}")
            conn.execute(f"INSERT INTO pg_temp.assigned_{index} (n, k)"
                         f" SELECT x.n, {fill(form, 'x')} FROM {domain.source} x")
            return ranked(conn, f"pg_temp.assigned_{index}")
        return run

    def binary_copy() -> bytes:
        rows = b"".join(struct.pack(">hiiiq", 2, 4, item.label, 8, item.public) for item in items)
        return b"PGCOPY\n\xff\r\n\0" + struct.pack(">ii", 0, 0) + rows + struct.pack(">h", -1)

    wire = wire_class(type_oid)
    covers = frozenset({f"input of {name}"})
    binary = frozenset({f"receive of {name}"})
    probes = []
    for form_name, column, form in public_forms(catalog):
        if column in domain.columns and form_name != name:
            casts = frozenset(label for label, source, target, _ in catalog.casts
                              if target == type_oid and catalog.types[source] == form_name)
            probes.append(Probe(f"INSERT of {form_name} into a {name} column", "set", domain.name, casts,
                                run=assign(form)))
    if "s" in domain.columns:
        probes += [
            Probe(f"untyped parameters as {name}", "set", domain.name, covers,
                  run=values_query("%t", lambda i: i.string)),
            Probe(f"text parameters as {name}", "set", domain.name, covers,
                  run=values_query("%b", lambda i: i.string)),
            Probe(f"binary parameters of {name}", "set", domain.name, binary,
                  run=values_query("%b", lambda i: wire(struct.pack(">q", i.public)))),
            Probe(f"bigint parameters cast to {name}", "set", domain.name, frozenset(),
                  run=values_query("%b", lambda i: Int8(i.public))),
            Probe(f"COPY into a {name} column", "set", domain.name, covers,
                  run=copy("", lambda: "".join(f"{i.label}\t{i.string}\n" for i in items))),
            Probe(f"COPY CSV into a {name} column", "set", domain.name, covers,
                  run=copy("(FORMAT csv)", lambda: "".join(f"{i.label},{i.string}\n" for i in items))),
            Probe(f"binary COPY into a {name} column", "set", domain.name, binary,
                  run=copy("(FORMAT binary)", binary_copy)),
        ]
        literals = ", ".join(f"({item.label}, '{item.string}'::{name})" for item in items)
        probes.append(Probe(f"literal {name} values", "set", domain.name, covers, run=lambda conn: {
            n: (v, r) for n, v, r in conn.execute(
                f"SELECT n, k::text, dense_rank() OVER (ORDER BY k) FROM (VALUES {literals}) v(n, k)")}))
    if "i" in domain.columns:
        probes += [
            Probe(f"integer parameters cast to {name}", "set", domain.name, frozenset(),
                  run=values_query("%b", lambda i: Int4(i.public))),
            Probe(f"smallint parameters cast to {name}", "set", domain.name, frozenset(),
                  run=values_query("%b", lambda i: Int2(i.public))),
        ]
    return probes


_WIRES: dict[int, type] = {}


def wire_class(type_oid: int) -> type:
    """Bytes a driver sends as a binary parameter of the type `type_oid`."""
    return _WIRES.setdefault(type_oid, type(f"Wire{type_oid}", (bytes,), {}))


def register_wires(conn) -> None:
    for type_oid, wire in _WIRES.items():
        dumper = type(f"Dumper{type_oid}", (Dumper,), {"format": Format.BINARY, "oid": type_oid,
                                                         "dump": lambda self, obj: bytes(obj)})
        conn.adapters.register_dumper(wire, dumper)


# --- Running probes as an attacker ------------------------------------------------------------------

TRY_EACH = """
CREATE FUNCTION pg_temp.try_each(statements text[], undo boolean) RETURNS TABLE (k int, value text, state text,
                                                                               message text, hint text)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. coalesce(array_length(statements, 1), 0) LOOP
        k := i; value := NULL; state := NULL; message := NULL; hint := NULL;
        BEGIN
            IF undo THEN
                EXECUTE statements[i];
                RAISE EXCEPTION 'undone' USING ERRCODE = 'RF000';
            END IF;
            EXECUTE statements[i] INTO value;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
            IF state = 'RF000' THEN
                state := NULL; message := NULL; hint := NULL;
            END IF;
        END;
        RETURN NEXT;
    END LOOP;
END $$"""


def prepare(conn, world: World, generator: Generator) -> list[str]:
    """The attacker's own scratch objects (temporary: any role may make them) and the IDs it is
    given; returns what it could not make."""
    failed = []
    conn.execute("SET timezone = 'UTC'")
    conn.execute("SET statement_timeout = '30s'")
    conn.execute(TRY_EACH)
    made, small = world.domains["made"], world.domains["small"]
    conn.execute("CREATE TEMP TABLE dom_made (n int PRIMARY KEY, b bigint, s text)")
    conn.execute("CREATE TEMP TABLE dom_small (n int PRIMARY KEY, i integer, sm smallint)")
    with conn.cursor() as cursor:
        cursor.executemany("INSERT INTO dom_made VALUES (%s, %s, %s)",
                           [(i.label, i.public, i.string) for i in map(made.items.get, made.labels())])
        cursor.executemany("INSERT INTO dom_small VALUES (%s, %s, %s)",
                           [(i.label, i.public, i.public) for i in map(small.items.get, small.labels())])
    for type_oid, (name, ordered, _) in world.catalog.extension_types.items():
        index = generator.type_index[type_oid]
        statements = [f"CREATE FUNCTION pg_temp.implicit_{index}({name}) RETURNS {name} LANGUAGE sql AS 'SELECT $1'",
                      f"CREATE TEMP TABLE row_{index} (k {name})",
                      f"CREATE TEMP TABLE assigned_{index} (n int, k {name})",
                      f"CREATE DOMAIN pg_temp.domain_{index} AS {name}",
                      f"CREATE TEMP TABLE parts_{index} (k {name}) PARTITION BY HASH (k)"]
        if ordered:
            statements += [f"CREATE TYPE pg_temp.range_{index} AS RANGE (subtype = {name},"
                           f" multirange_type_name = pg_temp.mrange_{index})",
                           f"CREATE TEMP TABLE rparts_{index} (k {name}) PARTITION BY RANGE (k)"]
        for statement in statements:
            try:
                conn.execute(statement)
            except psycopg.Error as error:
                failed.append(f"{statement}: {error.sqlstate} {error}")
        wire_class(type_oid)
    register_wires(conn)
    return failed


def describe(error: psycopg.Error) -> tuple:
    return error.sqlstate, error.diag.message_primary, error.diag.message_hint


def attempt(conn, sql: str, parameters=None):
    try:
        return conn.execute(sql, parameters).fetchall(), None
    except psycopg.Error as error:
        if conn.broken:
            raise
        return None, error


def one_by_one(conn, statements: list[str], undo: bool = False) -> list[tuple]:
    return conn.execute("SELECT value, state, message, hint FROM pg_temp.try_each(%s, %s) ORDER BY k",
                        (statements, undo)).fetchall()


def settle(outcome: Outcome, keys: list, results: list[tuple]) -> Outcome:
    """Rows tried one by one: a refusal if all failed alike, else each row's value or error."""
    failures = {(state, message) for value, state, message, hint in results}
    outcome.errors += [(state, message) for value, state, message, hint in results if state]
    if len(failures) == 1 and None not in next(iter(failures)):
        _, state, message, hint = results[0]
        outcome.refused = (state, message, hint)
    else:
        outcome.rows = {key: (value, state, message) for key, (value, state, message, _) in zip(keys, results)}
    return outcome


def run_probe(conn, world: World, probe: Probe) -> Outcome:
    outcome = Outcome(probe)
    domain = world.domains[probe.domain]
    if probe.shape == "call":  # undone: a call that was allowed leaves nothing behind
        return settle(outcome, ["call"], one_by_one(conn, [probe.expr], undo=True))
    if probe.shape == "set":
        try:
            results = probe.run(conn)
        except psycopg.Error as error:
            if conn.broken:
                raise
            outcome.refused = describe(error)
            outcome.errors.append(describe(error)[:2])
            return outcome
        outcome.rows = {n: (value, None, None) for n, (value, rank) in results.items()}
        outcome.ranks = {n: rank for n, (value, rank) in results.items() if rank is not None}
        return outcome
    if probe.shape == "statements":
        labels = domain.labels(PAIRS_ONE_BY_ONE)
        keys = list(permutations(labels, 2))
        statements = [probe.statement(domain.items[a], domain.items[b]) for a, b in keys]
        sample = settle(Outcome(probe), keys[:PRIVILEGE_SAMPLE], one_by_one(conn, statements[:PRIVILEGE_SAMPLE], True))
        if sample.refused is not None and sample.refused[0] == "42501":
            return sample
        return settle(outcome, keys, one_by_one(conn, statements, undo=True))
    if probe.shape == "one":
        rows, error = attempt(conn, f"SELECT x.n, ({probe.expr})::text FROM {domain.source} x")
        keys = domain.labels(ONE_BY_ONE)
        statements = [f"SELECT ({probe.expr})::text FROM {domain.source} x WHERE x.n = {n}" for n in keys]
    elif probe.shape == "pair":
        labels = ",".join(map(str, domain.labels(PAIRS)))
        rows, error = attempt(conn, f"SELECT x.n, y.n, ({probe.expr})::text FROM {domain.source} x, {domain.source} y"
                                    f" WHERE x.n <> y.n AND x.n IN ({labels}) AND y.n IN ({labels})")
        keys = list(permutations(domain.labels(PAIRS_ONE_BY_ONE), 2))
        statements = [f"SELECT ({probe.expr})::text FROM {domain.source} x, {domain.source} y"
                      f" WHERE x.n = {a} AND y.n = {b}" for a, b in keys]
    else:  # cross: the key table's keys (x) against IDs of the domain (y)
        table = world.domains["key_table"]
        labels = ",".join(map(str, domain.labels(PAIRS)))
        rows, error = attempt(conn, f"SELECT x.n, y.n, ({probe.expr})::text FROM {table.source} x, {domain.source} y"
                                    f" WHERE y.n IN ({labels})")
        keys = [(a, b) for a in table.labels(CROSS_ONE_BY_ONE[0]) for b in domain.labels(CROSS_ONE_BY_ONE[1])]
        statements = [f"SELECT ({probe.expr})::text FROM {table.source} x, {domain.source} y"
                      f" WHERE x.n = {a} AND y.n = {b}" for a, b in keys]
    if error is not None:
        outcome.errors.append(describe(error)[:2])
        # A refusal of privilege in a pair is that of its routes or functions, each of which is
        # tried row by row on its own; elsewhere a sample of rows must all be refused alike.
        if error.sqlstate in PLAN_TIME or (error.sqlstate == "42501" and probe.shape != "one"):
            outcome.refused = describe(error)
            return outcome
        if error.sqlstate == "42501" and not probe.route:
            sample = settle(Outcome(probe), keys[:PRIVILEGE_SAMPLE], one_by_one(conn, statements[:PRIVILEGE_SAMPLE]))
            if sample.refused is not None:
                outcome.refused = sample.refused
                outcome.errors += sample.errors
                return outcome
        return settle(outcome, keys, one_by_one(conn, statements))
    if probe.shape == "one":
        outcome.rows = {n: (value, None, None) for n, value in rows}
        if probe.ordered:
            ranked, error = attempt(conn, f"SELECT x.n, dense_rank() OVER (ORDER BY {probe.expr})"
                                          f" FROM {domain.source} x")
            if error is None:
                outcome.ranks = dict(ranked)
            elif error.sqlstate != "42883":  # no ordering for the result's type: no route
                outcome.errors.append(describe(error)[:2])
    else:
        outcome.rows = {(a, b): (value, None, None) for a, b, value in rows}
    return outcome


def attack(world: World, role: str) -> tuple[list[Outcome], list[str]]:
    """Every probe of `role`, run in one session of it; and the scratch objects it could not make."""
    generator = Generator(world, role)
    with world.cluster.connect(user=role) as conn:
        failed = prepare(conn, world, generator)
        outcomes = [run_probe(conn, world, probe) for probe in generator.route_probes()]
        # The routes into a type that worked for this role make the arguments of everything else.
        for outcome in outcomes:
            probe = outcome.probe
            if probe.shape == "one" and outcome.refused is None and all(s is None for _, s, _ in outcome.rows.values()):
                for type_oid in world.catalog.extension_types:
                    domain = world.domains[probe.domain]
                    for route, form in makers(world.catalog, type_oid, generator.type_index[type_oid], domain):
                        if route == probe.name and fill(form, "x") == probe.expr:
                            generator.working.setdefault((type_oid, domain.name), []).append((route, form))
        for probe in generator.catalog_probes() + generator.core_probes():
            outcomes.append(run_probe(conn, world, probe))
    return outcomes, failed


# --- Scoring -------------------------------------------------------------------------------------

STAMP = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?)([+-]\d\d(?::?\d\d)?)?")


def unix(match: re.Match) -> float:
    zone = match.group(2) or "+00"
    zone = zone + ":00" if len(zone) == 3 else zone
    stamp = datetime.fromisoformat(match.group(1).replace(" ", "T") + zone)
    return stamp.astimezone(timezone.utc).timestamp()


def scalar(text: str | None):
    """A value made comparable: numbers (and booleans, and timestamps as Unix time) before
    strings."""
    if text is None:
        return None
    if text in ("true", "false"):  # a boolean as ::text writes it
        return (0, int(text == "true"))
    for convert in (int, float):
        try:
            return (0, convert(text))
        except ValueError:
            pass
    stamp = STAMP.fullmatch(text)
    if stamp:
        return (0, unix(stamp))
    if text.startswith("\\x") and 2 < len(text) <= 18:
        return (0, int.from_bytes(bytes.fromhex(text[2:]), "big", signed=True))
    return (1, text)


@lru_cache(maxsize=None)
def components(text: str | None) -> tuple:
    """A record's fields, each comparable; any other value as one."""
    if text and text.startswith("(") and text.endswith(")"):
        try:
            return tuple(scalar(part or None) for part in next(csv.reader([text[1:-1]])))
        except (csv.Error, StopIteration):
            pass
    return (scalar(text),)


@lru_cache(maxsize=None)
def tokens(text: str | None) -> frozenset:
    """Everything a value could be read as: itself, its parts, its numbers, its timestamps as Unix
    seconds, eight bytes as an integer."""
    if text is None:
        return frozenset()
    found = {text, *(part for part in re.split(r'[\s(){}\[\],;"]+', text) if part)}
    found.update(str(int(number)) for number in re.findall(r"-?\d+", text))
    found.update(str(math.floor(unix(stamp))) for stamp in STAMP.finditer(text))
    if text.startswith("\\x") and len(text) == 18:
        raw = bytes.fromhex(text[2:])
        found.update({str(int.from_bytes(raw, "big", signed=True)), str(int.from_bytes(raw, "big"))})
    return frozenset(found)


def order_threshold(values: list) -> float:
    """SIGMAS standard deviations of the share of pairs a random order gets right, for a target
    with these values (Kendall's S under independence, with the target's ties)."""
    n = len(values)
    ties = Counter(values).values()
    variance = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in ties)) / 18
    untied = n * (n - 1) / 2 - sum(t * (t - 1) / 2 for t in ties)
    return max(0.15, SIGMAS * math.sqrt(variance) / (2 * untied)) if untied else 1.0


@dataclass
class Truth:
    """A domain's ground truth, by label, as the scoring reads it."""
    order: dict[str, dict[int, int]]
    exact: dict[str, dict[int, str]]
    counts: dict[str, Counter]
    values: frozenset  # every exact target of every ID


_TRUTHS: dict[int, Truth] = {}


def truth_of(domain: Domain) -> Truth:
    if id(domain) not in _TRUTHS:
        items = domain.items.values()
        order = {t: {i.label: i.order_targets()[t] for i in items} for t in next(iter(items)).order_targets()}
        exact = {t: {i.label: i.exact_targets()[t] for i in items} for t in next(iter(items)).exact_targets()}
        _TRUTHS[id(domain)] = Truth(order, exact, {t: Counter(v.values()) for t, v in exact.items()},
                                    frozenset(v for values in exact.values() for v in values.values()))
    return _TRUTHS[id(domain)]


@lru_cache(maxsize=None)
def before(domain: Domain, target: str, labels: tuple) -> tuple[list, float]:
    """The pairs of `labels` whose first ID comes before the second by `target`, and the
    threshold for a share of them."""
    truth = truth_of(domain).order[target]
    pairs = [(a, b) for a in labels for b in labels if truth[a] < truth[b]]
    return pairs, order_threshold([truth[label] for label in labels])


@dataclass
class Finding:
    probe: str
    domain: str
    method: str
    feature: str
    target: str
    score: float
    chance: float
    threshold: float
    allowed: bool

    def __str__(self) -> str:
        return (f"{self.method} of {self.target} from {self.feature}: {self.score:.3f} against chance"
                f" {self.chance:.3f} (threshold {self.threshold:.3f})")


def by_probe(findings: list[Finding], allowed: bool) -> list[str]:
    """One line for each probe that did better than chance, saying what it told."""
    grouped = defaultdict(list)
    for finding in findings:
        if finding.allowed == allowed:
            grouped[(finding.domain, finding.probe)].append(str(finding))
    verdict = f"allowed ({ALLOWED})" if allowed else "ROUTE"
    return [f"{verdict}: [{domain}] {probe}: " + "; ".join(told) for (domain, probe), told in sorted(grouped.items())]


def ordered_findings(outcome: Outcome, domain: Domain, features: dict[str, dict], method: str) -> list[Finding]:
    """Each feature (label -> comparable) against each order target: the share of the pairs of
    IDs, one before the other, whose feature is in the same order (ties count a half)."""
    findings = []
    for feature, values in features.items():
        labels = tuple(sorted(label for label, value in values.items() if value is not None))
        if len(labels) < 8 or len({values[label] for label in labels}) < 2:
            continue
        for target in truth_of(domain).order:
            pairs, threshold = before(domain, target, labels)
            if not pairs:
                continue
            lower = higher = 0
            for a, b in pairs:
                if values[a] < values[b]:
                    lower += 1
                elif values[b] < values[a]:
                    higher += 1
            score = (lower + (len(pairs) - lower - higher) / 2) / len(pairs)
            if abs(score - 0.5) > threshold:
                findings.append(Finding(outcome.probe.name, domain.name, method, feature, target, score, 0.5, threshold,
                                        domain.order_allowed and not outcome.probe.reference))
    return findings


def pair_order_findings(outcome: Outcome, domain: Domain, features: dict[str, dict]) -> list[Finding]:
    """Features of ordered pairs: for two IDs, one before the other, whether the feature of
    (first, second) exceeds that of (second, first)."""
    findings = []
    labels = tuple(sorted({a for a, _ in outcome.rows} | {b for _, b in outcome.rows}))
    if len(labels) < 8:
        return []
    for feature, values in features.items():
        if len(set(values.values())) < 2:
            continue
        for target in truth_of(domain).order:
            pairs, threshold = before(domain, target, labels)
            if not pairs:
                continue
            score = 0.0
            for a, b in pairs:
                ab, ba = values.get((a, b)), values.get((b, a))
                score += 0.5 if ab is None or ba is None or ab == ba else 1.0 if ab > ba else 0.0
            score /= len(pairs)
            if abs(score - 0.5) > threshold:
                findings.append(Finding(outcome.probe.name, domain.name, "order, pair by pair", feature, target, score,
                                        0.5, threshold, domain.order_allowed))
    return findings


def exact_findings(outcome: Outcome, domain: Domain, observations: list[tuple[frozenset, int]],
                   what: str) -> list[Finding]:
    """Observations (the tokens of a result, the ID it is about) that name an ID's second, node,
    sequence, plain value or a core hash of it, against how often they name another ID's."""
    truth = truth_of(domain)
    relevant = [(found & truth.values, subject) for found, subject in observations]
    if len(relevant) < 8 or not any(found for found, _ in relevant):
        return []
    findings = []
    for target, by_label in truth.exact.items():
        counts, others = truth.counts[target], len(by_label) - 1
        hits = chance = 0.0
        for found, subject in relevant:
            own = by_label[subject] in found
            hits += own
            if found:
                chance += (sum(counts[value] for value in found) - own) / others
        n = len(relevant)
        hits, chance = hits / n, chance / n
        threshold = chance + max(0.25, 5 * math.sqrt(chance * (1 - chance) / n))
        if hits > threshold and hits * n >= 3:
            findings.append(Finding(outcome.probe.name, domain.name, "exact recovery", what, target, hits, chance,
                                    threshold, False))
    return findings


def agreement(keys: dict, truth: dict) -> tuple[float, int]:
    """Of the pairs of IDs that got the same result, the share with the same target, and how
    many such pairs there are."""
    groups = defaultdict(Counter)
    for label, key in keys.items():
        groups[key][truth[label]] += 1
    same = sum(count * (count - 1) for group in groups.values() for count in group.values())
    pairs = sum(size * (size - 1) for size in (sum(group.values()) for group in groups.values()))
    return (same / pairs if pairs else 0.0), pairs


def group_findings(outcome: Outcome, domain: Domain, features: dict[str, dict]) -> list[Finding]:
    """Whether IDs that get the same result share a node or a second more often than IDs do at
    random: a share 0.3 above that of all pairs, beyond every one of 1000 random relabellings."""
    findings = []
    for target in ("node", "second"):
        for feature, keys in features.items():
            truth = {label: truth_of(domain).order[target][label] for label in keys}
            observed, pairs = agreement(keys, truth)
            base, _ = agreement({label: 0 for label in keys}, truth)
            if pairs < 20 or observed - base <= 0.3:
                continue
            rng, labels, shuffled = random.Random(36), list(truth), list(truth.values())
            chances = []
            for _ in range(1000):
                rng.shuffle(shuffled)
                chances.append(agreement(keys, dict(zip(labels, shuffled)))[0])
            if observed > max(chances):
                findings.append(Finding(outcome.probe.name, domain.name, "grouping", feature, target, observed,
                                        sum(chances) / len(chances), max(chances), False))
    return findings


def score(outcome: Outcome, world: World) -> list[Finding]:
    probe = outcome.probe
    domain = world.domains[probe.domain]
    if outcome.refused is not None or not outcome.rows or probe.shape == "call":
        return []
    varied = len({state for _, state, _ in outcome.rows.values()}) > 1
    if probe.shape == "cross":
        return cross_findings(outcome, world, domain, varied)
    features = defaultdict(dict)
    if probe.shape in ("one", "set"):
        texts, states = {}, {}
        for label, (value, state, message) in outcome.rows.items():
            for position, part in enumerate(components(value)):
                features[f"value part {position + 1}"][label] = part
            texts[label] = value
            if varied:
                features["error"][label] = (1, state or "")
                states[label] = state or ""
        if outcome.ranks:
            features["rank in the result's order"] = {label: (0, rank) for label, rank in outcome.ranks.items()}
        observations = [(tokens(value) | tokens(message) if message else tokens(value), label)
                        for label, (value, _, message) in outcome.rows.items()]
        return (ordered_findings(outcome, domain, features, "order")
                + exact_findings(outcome, domain, observations, "value")
                + group_findings(outcome, domain, {"value": texts, **({"error": states} if varied else {})}))
    for (a, b), (value, state, message) in outcome.rows.items():
        for position, part in enumerate(components(value)):
            features[f"value part {position + 1}"][(a, b)] = part
        features["which ID it names first"][(a, b)] = first_named(value, domain.items[a], domain.items[b])
        if varied:
            features["error"][(a, b)] = (1, state or "")
    # What a pair's result says of either ID alone, the same function says with one ID and a
    # default: the probes of single IDs look for that.
    return pair_order_findings(outcome, domain, features)


def cross_findings(outcome: Outcome, world: World, domain: Domain, varied: bool) -> list[Finding]:
    """Each hidden ID (y) by what its comparisons with all the key table's keys (x) say."""
    keys = world.domains["key_table"]
    summed = defaultdict(lambda: defaultdict(float))
    for (a, b), (value, state, message) in outcome.rows.items():
        summed["keys it is true for"][b] += value == "true"
        for position, part in enumerate(components(value)):
            if part is not None and part[0] == 0:
                summed[f"sum of value part {position + 1}"][b] += part[1]
        named = first_named(value, keys.items[a], domain.items[b])
        summed["which it names first, summed"][b] += named[1] if named else 0
        if varied:
            summed["keys it fails with"][b] += state is not None
    totals = {name: {b: (0, total) for b, total in values.items()} for name, values in summed.items()}
    return ordered_findings(outcome, domain, totals, "order against the key table")


def first_named(value: str | None, a: Item, b: Item):
    """1 if the result names the first ID (its string or number) before the second, -1 if the
    second first, 0 if neither or both at once."""
    if value is None:
        return None
    if all(part is None or part[0] == 0 for part in components(value)):
        return (0, 0)  # numbers: no ID's string, and a public ID is no result's number here

    def where(item: Item):
        places = [value.find(name) for name in (item.string, str(item.public)) if name in value]
        return min(places) if places else None

    first, second = where(a), where(b)
    if first == second:
        return (0, 0)
    if second is None or (first is not None and first < second):
        return (0, 1)
    return (0, -1)


def report(role: str, outcomes: list[Outcome], findings: list[Finding], failed: list[str]) -> str:
    refusals = Counter()
    examples = {}
    for outcome in outcomes:
        for state, message in outcome.errors or ([outcome.refused[:2]] if outcome.refused else []):
            refusals[state] += 1
            examples.setdefault(state, f"{outcome.probe.name}: {message}")
    lines = [f"{role}: {len(outcomes)} probes, {sum(1 for o in outcomes if o.refused is None)} ran,"
             f" {sum(1 for o in outcomes if o.refused)} refused as a whole"]
    lines += [f"  {state} x{count}, e.g. {examples[state]}" for state, count in refusals.most_common()]
    lines += [f"  could not make: {text}" for text in failed]
    lines += [f"  {line}" for line in by_probe(findings, allowed=True)]
    return "\n".join(lines)


# --- The tests -----------------------------------------------------------------------------------

@pytest.mark.parametrize("role", ROLES)
def test_no_route_tells_the_order_or_origin_of_ids(world, shared_cluster, role):
    """Every probe generated from the catalog, as `role`: none orders, places or splits the IDs
    better than chance, except the reader's own key column by its order; each object was
    attacked; each refusal is a clear error."""
    outcomes, failed = attack(world, role)
    findings = [finding for outcome in outcomes for finding in score(outcome, world)]
    summary = report(role, outcomes, findings, failed)
    print(summary)
    problems = by_probe(findings, allowed=False)
    # Every object of the extension was attacked: a new function, cast or operator gets probes
    # from its signature, or this names it.
    covered = set().union(*(outcome.probe.covers for outcome in outcomes))
    problems += [f"not attacked: {label}" for label, ways in world.catalog.objects().items() if not ways & covered]
    # A refusal must say what it is; an internal error or a crash is a bug even when it hides
    # the order.
    problems += [f"unclear error {state} from {outcome.probe.name}: {message}" for outcome in outcomes
                 for state, message in outcome.errors if (state or "XX")[:2] in ("XX", "58") or not message]
    if role == "reader":
        # The one allowed route, named: ORDER BY over the key column it may read gives the order
        # of its keys, and the scoring sees it.
        exception = [f for f in findings if f.allowed and f.probe == KEY_COLUMN_ORDER and f.target == "key order"]
        if not exception or exception[0].score < 0.99:
            problems.append(f"the allowed route ({ALLOWED}) was not found: the scoring would miss an order")
    assert not problems, "\n".join(problems) + "\n\n" + summary


def test_the_scoring_sees_what_the_decoder_grant_and_the_superuser_may_learn(world, shared_cluster):
    """The same probes and scoring, run where the order may be learned: they find it. A test that
    cannot fail proves nothing."""
    expected = {
        ("decoder", "(SELECT d::text FROM randflake_decode(x.b) d)"):
            ("exact recovery", {"second", "node", "sequence"}),
        ("decoder", "x.b::randflake_key"): ("order", {"key order", "creation order", "second"}),
        ("postgres", "hash_array(ARRAY[(SELECT ((extract(epoch FROM d.timestamp)::bigint - 1730000000) << 34)"
                     " | (d.node_id::bigint << 17) | d.sequence FROM randflake_decode(x.b) d)])"):
            ("exact recovery", {"hash_array of the plain value"}),
    }
    for (role, expr), (method, targets) in expected.items():
        generator = Generator(world, role)
        with world.cluster.connect(user=role) as conn:
            prepare(conn, world, generator)
            probe = Probe(f"{role}: {expr}", "one", "made", expr=expr, ordered=True)
            outcome = run_probe(conn, world, probe)
        assert outcome.refused is None, outcome.refused
        found = {f.target for f in score(outcome, world) if f.method == method}
        assert targets <= found, (role, expr, found)
    with world.cluster.connect(user="reader") as conn:
        outcome = run_probe(conn, world, Probe(KEY_COLUMN_ORDER, "one", "key_table", expr="x.k", ordered=True))
    found = [f for f in score(outcome, world) if f.target == "key order"]
    assert found and all(f.allowed for f in found) and found[0].score == 1.0, found


@pytest.mark.parametrize("role", ["nobody", "reader", "decoder", "postgres"])
def test_only_the_decoder_grant_turns_a_public_id_into_a_key(world, shared_cluster, role):
    """A literal, a cast from bigint, a binary parameter and COPY in text and binary: refused with
    42501 and a hint naming the grant to a role without it, done for a superuser and a role
    granted EXECUTE on randflake_decode(bigint)."""
    item = world.domains["made"].items[1]
    wire = wire_class(world.domains["key_table"].key_type)
    routes = {
        "a literal": lambda conn: conn.execute(f"SELECT '{item.string}'::randflake_key::bigint").fetchone()[0],
        "a cast from bigint": lambda conn: conn.execute(
            f"SELECT {item.public}::bigint::randflake_key::bigint").fetchone()[0],
        "a binary parameter": lambda conn: conn.execute("SELECT %b::randflake_key::bigint",
                                                        (wire(struct.pack(">q", item.public)),)).fetchone()[0],
        "COPY": lambda conn: copied(conn, "", f"{item.string}\n".encode()),
        "binary COPY": lambda conn: copied(conn, "(FORMAT binary)", b"PGCOPY\n\xff\r\n\0" + struct.pack(">ii", 0, 0)
                                           + struct.pack(">hiq", 1, 8, item.public) + struct.pack(">h", -1)),
    }
    with world.cluster.connect(user=role) as conn:
        register_wires(conn)
        conn.execute("CREATE TEMP TABLE copied (k randflake_key)")
        for route, make in routes.items():
            if role in ("decoder", "postgres"):
                assert make(conn) == item.public, route
                continue
            with pytest.raises(psycopg.Error) as caught:
                make(conn)
            error = caught.value
            assert error.sqlstate == "42501", (route, error.sqlstate, str(error))
            hint = error.diag.message_hint
            assert hint and "randflake_decode" in hint, (route, hint)


def copied(conn, options: str, payload: bytes) -> int:
    conn.execute("TRUNCATE copied")
    with conn.cursor() as cursor, cursor.copy(f"COPY copied FROM STDIN {options}") as copy:
        copy.write(payload)
    return conn.execute("SELECT k::bigint FROM copied").fetchone()[0]
