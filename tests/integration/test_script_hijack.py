"""Install and upgrade scripts that no database owner can hijack.

A script runs as a superuser with `search_path` set to the extension's schema (and pg_temp);
pg_catalog is searched first, yet a call that none of its functions or operators matches exactly
(format(text, VARIADIC "any"), an operator whose operands need a cast) goes to whichever visible
candidate matches better. The owner of a database may create functions and operators in `public`
and in a schema it owns, so a script naming anything unqualified there runs the owner's code as
superuser. These tests plant, as such an owner, better-matching overloads of every function and
operator that the installed scripts and the extension's SQL function bodies name, in `public`
and in the extension's schema, then run CREATE EXTENSION and every upgrade path as a superuser:
nothing planted may run, and the owner stays what it was."""

from __future__ import annotations

import itertools
import pathlib
import re
from dataclasses import dataclass

import psycopg
import pytest

from lib.cluster import Cluster, pg_config
from lib.releases import RELEASES, release_scripts  # noqa: F401 (the fixture puts the releases' scripts in place)

# The argument types an attacker substitutes where pg_catalog takes "any", a polymorphic type or
# a type the caller's value must be cast to. Only concrete types: PL/pgSQL and SQL functions
# cannot take "any" or unknown, and a non-superuser can write no other kind.
CONCRETE_TYPES = [
    "text", "name", '"char"', "character varying", "smallint", "integer", "bigint", "numeric", "real",
    "double precision", "boolean", "oid", "regclass", "regproc", "regprocedure", "regtype", "regnamespace",
    "regrole", "bytea", "json", "jsonb", "timestamp with time zone", "date", "interval", "aclitem", "text[]",
]
POLYMORPHIC = {'"any"', "anyelement", "anynonarray", "anycompatible", "anycompatiblenonarray"}
POLYMORPHIC_ARRAY = {"anyarray", "anycompatiblearray"}
# How many arguments a call of a variadic function is planted for.
MOST_VARIADIC_ARGUMENTS = 6
# Operators SQL's own syntax calls by name: IN, CASE ... WHEN and IS DISTINCT FROM (=, <>),
# BETWEEN (>=, <=), LIKE, ILIKE and SIMILAR TO (~~, ~~*, ~).
OPERATORS_OF_SYNTAX = {"=", "<>", "<", "<=", ">", ">=", "~~", "~~*", "~"}

OWNED_SCHEMA = "owned_schema"
PINNED = "search_path=pg_catalog, pg_temp"


def pinned(cluster: Cluster, dbname: str, user: str = "postgres") -> psycopg.Connection:
    """A connection whose own statements resolve nothing in a schema the owner can write."""
    return cluster.connect(dbname, user=user, options="-c search_path=pg_catalog,pg_temp")


def script_texts() -> list[str]:
    """Every install and upgrade script of randflake_pg in the installation."""
    directory = pathlib.Path(pg_config("--sharedir")) / "extension"
    scripts = sorted(directory.glob("randflake_pg--*.sql"))
    assert any(script.name.count("--") == 2 for script in scripts), f"no upgrade script in {directory}"
    return [script.read_text() for script in scripts]


def sql_function_bodies(conn: psycopg.Connection) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            """SELECT p.prosrc
                 FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
                 JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
                 JOIN pg_language l ON l.oid = p.prolang
                WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'randflake_pg'
                  AND l.lanname IN ('sql', 'plpgsql')"""
        )
    ]


@dataclass(frozen=True)
class Plant:
    """One function, or one operator with its function, for the owner to create."""

    name: str  # the function's name, or the operator's symbol
    arguments: tuple[str, ...]
    result: str
    variadic: bool = False
    operator: bool = False

    def identity(self) -> tuple:
        return (self.operator, self.name, self.arguments)


def called_names(texts: list[str]) -> tuple[set[str], set[str]]:
    """Every identifier followed by "(" and every run of operator characters in `texts`,
    qualified or not: a name the scripts qualify cannot be hijacked, so planting it costs
    nothing, and a call added unqualified later is planted without changing this test."""
    functions: set[str] = set()
    operators: set[str] = set(OPERATORS_OF_SYNTAX)
    for text in texts:
        functions |= {name.lower() for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", text)}
        operators |= set(re.findall(r"[-+*/<>=~!@#%^&|`?]+", text))
    return functions, operators


def plants(conn: psycopg.Connection, texts: list[str]) -> list[Plant]:
    """Overloads of the functions and operators `texts` call that would win over pg_catalog's
    for some argument types: every polymorphic or "any" argument of a pg_catalog overload made
    concrete, each concrete argument replaced by a type that casts to it implicitly, every
    concrete type for every argument, and VARIADIC arrays of every concrete type."""
    functions, operators = called_names(texts)
    pseudo = {row[0] for row in conn.execute("SELECT format_type(oid, NULL) FROM pg_type WHERE typtype = 'p'")}
    implicit_sources: dict[str, list[str]] = {}
    for target, source in conn.execute(
        """SELECT format_type(c.casttarget, NULL), format_type(c.castsource, NULL)
             FROM pg_cast c JOIN pg_type s ON s.oid = c.castsource
            WHERE c.castcontext = 'i' AND s.typtype <> 'p'"""
    ):
        implicit_sources.setdefault(target, []).append(source)

    def concrete_variants(arguments: list[str]) -> list[tuple[str, ...]]:
        """`arguments` with each polymorphic one made concrete, then each one in turn replaced by
        a type that casts to it implicitly; nothing if an argument is a pseudo-type a function
        written in SQL cannot take (internal, cstring, record...)."""
        variants = []
        for concrete in CONCRETE_TYPES:
            array = concrete if concrete.endswith("[]") else f"{concrete}[]"
            made = [concrete if a in POLYMORPHIC else array if a in POLYMORPHIC_ARRAY else a for a in arguments]
            if any(a in pseudo for a in made):
                return []
            variants.append(tuple(made))
            if made == arguments:
                break
        for made in list(variants):
            for position, argument in enumerate(made):
                for source in implicit_sources.get(argument, []):
                    variants.append((*made[:position], source, *made[position + 1:]))
        return variants

    def plain_result(result: str) -> str:
        return "text" if result in pseudo else result

    existing: set[tuple] = set()
    wanted: list[Plant] = []
    overloads = conn.execute(
        """SELECT p.proname, ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) WITH ORDINALITY AS a(t, n) ORDER BY n),
                  p.provariadic <> 0, format_type(p.prorettype, NULL)
             FROM pg_proc p
            WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY(%s)""",
        (sorted(functions),),
    ).fetchall()
    for name, arguments, variadic, result in overloads:
        existing.add((False, name, tuple(arguments)))
        calls = [arguments]
        if variadic:
            element = arguments[-1] if arguments[-1] == '"any"' else arguments[-1].removesuffix("[]")
            calls = [arguments[:-1] + [element] * count for count in range(MOST_VARIADIC_ARGUMENTS + 1)]
        for call in calls:
            wanted += [Plant(name, made, plain_result(result)) for made in concrete_variants(call)]
            wanted += [Plant(name, (concrete,) * len(call), plain_result(result)) for concrete in CONCRETE_TYPES]
    for name in {row[0] for row in overloads}:
        for concrete in CONCRETE_TYPES:
            if not concrete.endswith("[]"):
                wanted.append(Plant(name, (f"{concrete}[]",), "text", variadic=True))
                wanted.append(Plant(name, ("text", f"{concrete}[]"), "text", variadic=True))

    binary = conn.execute(
        """SELECT o.oprname, format_type(o.oprleft, NULL), format_type(o.oprright, NULL), format_type(o.oprresult, NULL)
             FROM pg_operator o
            WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprkind = 'b' AND o.oprname = ANY(%s)""",
        (sorted(operators),),
    ).fetchall()
    for symbol, left, right, result in binary:
        existing.add((True, symbol, (left, right)))
        wanted += [Plant(symbol, made, plain_result(result), operator=True) for made in concrete_variants([left, right])]
    for symbol in {row[0] for row in binary}:
        wanted += [Plant(symbol, (concrete, concrete), "boolean", operator=True) for concrete in CONCRETE_TYPES]

    chosen: dict[tuple, Plant] = {}
    for plant in wanted:
        if plant.identity() not in existing:
            chosen.setdefault(plant.identity(), plant)
    return list(chosen.values())


def plant(cluster: Cluster, dbname: str, owner: str, schemas: list[str], texts: list[str]) -> list[Plant]:
    """Creates the plants in each of `schemas` as `owner`; each, when called, raises a WARNING
    naming itself and, called by a superuser, makes `owner` a superuser, as the attack did.
    Returns what was planted in each."""
    with pinned(cluster, dbname, user=owner) as conn:
        chosen = plants(conn, texts)
        statements = []
        for schema, (number, item) in itertools.product(schemas, enumerate(chosen)):
            function = f'{schema}."planted_operator_{number}"' if item.operator else f'{schema}."{item.name}"'
            arguments = list(item.arguments)
            if item.variadic:
                arguments[-1] = f"VARIADIC {arguments[-1]}"
            described = f"{schema}.{item.name}({', '.join(item.arguments)})".replace("'", "''")
            statements.append(
                f"""CREATE FUNCTION {function}({', '.join(arguments)}) RETURNS {item.result}
                    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $planted$
                    BEGIN
                        RAISE WARNING 'planted % ran', '{described}';
                        IF current_setting('is_superuser') = 'on' THEN
                            ALTER ROLE {owner} SUPERUSER;
                        END IF;
                        RETURN NULL;
                    END
                    $planted$;"""
            )
            if item.operator:
                statements.append(
                    f"CREATE OPERATOR {schema}.{item.name} (LEFTARG = {item.arguments[0]}, "
                    f"RIGHTARG = {item.arguments[1]}, FUNCTION = {function});"
                )
        conn.execute("\n".join(statements))
    return chosen


def fired_plants(cluster: Cluster, dbname: str, owner: str, statement: str) -> tuple[list[str], psycopg.Error | None]:
    """Runs `statement` as a superuser whose search_path is the default, as a DBA's session;
    returns the planted objects that ran and the statement's error, if any."""
    with cluster.connect(dbname) as admin:
        warnings: list[str] = []
        admin.add_notice_handler(lambda notice: warnings.append(notice.message_primary))
        try:
            admin.execute(statement)
            error = None
        except psycopg.Error as failed:
            error = failed
    return [warning for warning in warnings if warning.startswith("planted ")], error


def owned_database(cluster: Cluster, name: str) -> str:
    """A database owned by a new non-superuser role `name`, which also owns a schema in it."""
    with pinned(cluster, "postgres") as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN")
        admin.execute(f"CREATE DATABASE {name} OWNER {name}")
    with pinned(cluster, name, user=name) as owner:
        owner.execute(f"CREATE SCHEMA {OWNED_SCHEMA}")
    return name


def is_superuser(cluster: Cluster, role: str) -> bool:
    with pinned(cluster, "postgres") as conn:
        return conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]


def assert_nothing_planted_ran(cluster: Cluster, owner: str, texts: list[str], schema: str, statement: str) -> None:
    schemas = ["public"] if schema == "public" else ["public", schema]
    assert ATTACK in {item.identity() for item in plant(cluster, owner, owner, schemas, texts)}
    fired, error = fired_plants(cluster, owner, owner, statement)
    assert not fired, f"{statement} ran objects the database owner planted: {sorted(set(fired))}"
    assert error is None, f"{statement} failed among the planted objects: {error}"
    assert not is_superuser(cluster, owner)


SCHEMAS = ["public", OWNED_SCHEMA]
# The overload issue 28 planted: it beats pg_catalog.format(text, VARIADIC "any").
ATTACK = (False, "format", ("text",) * 5)


@pytest.fixture
def texts(shared_cluster) -> list[str]:
    """What the scripts and the extension's SQL function bodies say."""
    with pinned(shared_cluster, "postgres") as conn:
        return script_texts() + sql_function_bodies(conn)


def test_the_plants_catch_unqualified_calls(shared_cluster, texts):
    """The control: calls a script might make without naming pg_catalog run the plants."""
    owner = owned_database(shared_cluster, "owner_control")
    plant(shared_cluster, owner, owner, ["public"], texts)
    fired, error = fired_plants(
        shared_cluster, owner, owner,
        "DO $$ BEGIN PERFORM format('%s_%s', 'a', 'b'); PERFORM count(*) FROM pg_class WHERE oid = 1259; END $$",
    )
    assert error is None
    assert sorted(set(fired)) == ["planted public.=(oid, integer) ran", "planted public.format(text, text, text) ran"]
    assert is_superuser(shared_cluster, owner), "a planted object called by a superuser makes its owner one"
    with pinned(shared_cluster, "postgres") as admin:
        admin.execute(f"ALTER ROLE {owner} NOSUPERUSER")


@pytest.mark.parametrize("schema", SCHEMAS)
def test_create_extension_runs_nothing_an_owner_planted(shared_cluster, texts, schema):
    owner = owned_database(shared_cluster, f"owner_fresh_{schema}")
    # As the attack ran it: a superuser's plain CREATE EXTENSION, in public unless told otherwise.
    statement = "CREATE EXTENSION randflake_pg" + ("" if schema == "public" else f" SCHEMA {schema}")
    assert_nothing_planted_ran(shared_cluster, owner, texts, schema, statement)


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("previous", RELEASES)
def test_every_update_runs_nothing_an_owner_planted(shared_cluster, texts, previous, schema):
    """A released install script cannot change, so the release is installed before anything is
    planted; every update script from it on runs among the plants."""
    owner = owned_database(shared_cluster, f"owner_{previous.replace('.', '_')}_{schema}")
    with shared_cluster.connect(owner) as admin:
        admin.execute(f"CREATE EXTENSION randflake_pg VERSION '{previous}' SCHEMA {schema}")
    assert_nothing_planted_ran(shared_cluster, owner, texts, schema, "ALTER EXTENSION randflake_pg UPDATE")


def test_sql_functions_pin_search_path_and_nothing_lives_in_pg_catalog(shared_cluster):
    """Every member function written in SQL or PL/pgSQL resolves names in pg_catalog only,
    whoever calls it; and no member is in pg_catalog, where a script run with pg_catalog first
    on search_path would have created it."""
    with pinned(shared_cluster, "postgres") as conn:
        members = """
            SELECT d.classid, d.objid
              FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
             WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'randflake_pg'"""
        functions = conn.execute(
            f"""SELECT p.oid::regprocedure::text, p.proconfig
                  FROM ({members}) m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
                  JOIN pg_language l ON l.oid = p.prolang
                 WHERE l.lanname IN ('sql', 'plpgsql')"""
        ).fetchall()
        in_pg_catalog = conn.execute(
            f"""SELECT pg_describe_object(m.classid, m.objid, 0)
                  FROM ({members}) m, pg_identify_object(m.classid, m.objid, 0) i
                 WHERE i.schema = 'pg_catalog'"""
        ).fetchall()
    assert len(functions) >= 4, functions
    unpinned = {name: config for name, config in functions if config != [PINNED]}
    assert not unpinned, f"functions whose search_path is not exactly pg_catalog, pg_temp: {unpinned}"
    assert not in_pg_catalog
