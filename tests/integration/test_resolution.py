"""Installing the extension changes nothing between PostgreSQL's own types (issue 36).

A type with implicit casts from built-in types changes how PostgreSQL reads expressions that never
mention it: 0.6.0's randflake_key, implicitly castable from text and every integer width, made
`'10'::text = 32` true and `WHERE code = 32` on a text column fail with `invalid Randflake ID
string`, where PostgreSQL alone says `operator does not exist`. Operators, functions and casts an
extension adds all take part in the resolution of operators, function calls, IN lists, CASE,
COALESCE, UNION and assignments, so the only proof that it changes none of them is to run such
expressions with and without it.

One server, two databases: `postgres`, where CREATE EXTENSION randflake_pg ran (into `public`, on
the default search_path), and a database made from template0 without it, which is the oracle: no
answer is written down here. A corpus of statements between built-in types runs in both, each in a
statement of its own (autocommit), and each must end the same way: the same column types (as
format_type() names them, typmod included: what pg_typeof() says and more), command tag and rows
in text form, or the same SQLSTATE and message. The test lists every statement that ends
differently, with both outcomes.

Beside it, structural guards on the catalog, which fail at once and name the object: no cast the
extension makes is implicit from a built-in type or joins two built-in types, and no operator or
function of the extension stands between built-in types alone where PostgreSQL has one of that name.
"""

from __future__ import annotations

import dataclasses
import itertools

import psycopg

ORACLE = "resolution_oracle"

# Typed and untyped values of PostgreSQL's own types, all meaning ten where they mean a number.
VALUES = (
    "'10'::text", "'10'::varchar", "'10'::char(3)", "10::smallint", "10::integer", "10::bigint", "10::numeric",
    "10.0::float8", "10::real", "'10'", "NULL::text", "NULL",
)
# Comparison, the string category's concatenation and the numeric category's arithmetic: each
# resolves by a different route (exact match, anynonarray/anycompatible polymorphism, implicit
# widening), and each is where an added implicit cast could offer another candidate.
OPERATORS = ("=", "<>", "<", "||", "+")

# What every session of both databases holds before the probes run.
SETUP = (
    """CREATE TEMP TABLE resolution_codes (code text, name varchar(10), flag char(3), n integer, s smallint,
                                          b bigint, x numeric, f float8)""",
    """INSERT INTO resolution_codes VALUES ('32', '32', '32', 32, 32, 32, 32, 32),
                                          ('10', '10', '10', 10, 10, 10, 10, 10),
                                          ('x-1', 'x-1', 'x-1', -1, -1, -1, -1, -1)""",
    # Where the assignment probes write: nothing reads it back, so a probe that inserts in one
    # database and fails in the other cannot change a later probe's answer.
    "CREATE TEMP TABLE resolution_sink (code text, flag char(3), n integer, b bigint, x numeric)",
)


@dataclasses.dataclass(frozen=True)
class Probe:
    statement: str
    params: tuple | None = None  # sent by psycopg as a driver would: ints typed by size, str untyped

    def __str__(self) -> str:
        return self.statement if self.params is None else f"{self.statement}  with parameters {self.params!r}"


def operator_probes() -> list[Probe]:
    """Every typed or untyped value against every other, through every operator."""
    return [Probe(f"SELECT {left} {op} {right}") for left, op, right in itertools.product(VALUES, OPERATORS, VALUES)]


# The exact probes of issue 36, and strings that are, or are not, an ID's canonical form.
ISSUE = [
    "SELECT '10'::text = 32",
    "SELECT '10'::text = 32::bigint",
    "SELECT '10'::varchar = 32",
    "SELECT 32 = '10'::text",
    "SELECT '10' = 32",
    "SELECT 'x-1' = 1",
    "SELECT 'x-1'::text = 1",
    "SELECT 'x-1'::text = 1::bigint",
    "SELECT '3vgoe12ccb8gh'::text = 4594531474933654033",
    "SELECT '3vgoe12ccb8gh' = 4594531474933654033",
    "SELECT '10'::text < 32",
    "SELECT '10'::text BETWEEN 1 AND 99",
    "SELECT 10 BETWEEN '1'::text AND '20'::text",
    "SELECT '10'::text IS DISTINCT FROM 10",
    "SELECT 10 IS NOT DISTINCT FROM '10'::text",
    "SELECT ROW('10'::text) = ROW(10)",
    "SELECT '10'::text = 10.0",
    "SELECT NULLIF('10'::text, 10)",
    "SELECT NULLIF(10, '10')",
]

IN_LISTS = [
    "SELECT 10 IN ('10', 20)",
    "SELECT '10'::text IN (10, 20)",
    "SELECT 10 IN ('10'::text, 20)",
    "SELECT 10::bigint IN (10::integer, 10::smallint, '10')",
    "SELECT '10' IN ('10'::text, 10)",
    "SELECT '10' IN (10, 20)",
    "SELECT 10 NOT IN ('10'::varchar)",
    "SELECT 'x-1'::text IN (1, 2)",
    "SELECT 10 = ANY (ARRAY['10', '20'])",
    "SELECT '10'::text = ANY (ARRAY[10, 20])",
    "SELECT 10 = ANY ('{10,20}')",
    "SELECT '10'::text = ANY ('{10,20}'::integer[])",
    "SELECT 10::smallint = ALL (ARRAY[10::bigint, 10::numeric])",
]

CONDITIONALS = [
    "SELECT COALESCE('10', 10)",
    "SELECT COALESCE(NULL, 10)",
    "SELECT COALESCE('10'::text, 10)",
    "SELECT COALESCE(10, '10'::text)",
    "SELECT COALESCE(10::smallint, 10::bigint)",
    "SELECT COALESCE(NULL, '10')",
    "SELECT COALESCE('10', '20')",
    "SELECT COALESCE(10::integer, 2.5)",
    "SELECT COALESCE(NULL::text, 10::bigint)",
    "SELECT GREATEST('10', 9)",
    "SELECT GREATEST('10'::text, 9)",
    "SELECT GREATEST('a', 'b')",
    "SELECT LEAST(1::smallint, 2::bigint, '3')",
    "SELECT LEAST(1, 2.5, '3')",
    "SELECT LEAST('10'::text, 9::bigint)",
    "SELECT CASE WHEN true THEN '10' ELSE 10 END",
    "SELECT CASE WHEN true THEN '10'::text ELSE 10 END",
    "SELECT CASE WHEN true THEN 10::bigint ELSE '10'::text END",
    "SELECT CASE 10 WHEN '10' THEN 'yes' END",
    "SELECT CASE '10'::text WHEN 10 THEN 'yes' END",
    "SELECT CASE 10 WHEN '10'::text THEN 'yes' END",
    "SELECT CASE 10::bigint WHEN 10::integer THEN 1 ELSE 2.5 END",
    "SELECT CASE WHEN false THEN NULL ELSE NULL END",
]

# Set operations, VALUES and ARRAY[] choose one type for a column or element from its inputs.
COLUMN_TYPES = [
    "SELECT 1 UNION SELECT '2'",
    "SELECT '1' UNION SELECT 2",
    "SELECT '1'::text UNION SELECT 2",
    "SELECT 1 UNION SELECT '2'::text",
    "SELECT 1::smallint UNION ALL SELECT 2::bigint",
    "SELECT 1 UNION SELECT 2.5",
    "SELECT NULL UNION SELECT NULL",
    "SELECT '1' UNION SELECT '2'",
    "SELECT 1::integer UNION SELECT '2'::varchar",
    "SELECT '10'::text INTERSECT SELECT 10",
    "SELECT 10::bigint EXCEPT SELECT '10'",
    "SELECT pg_typeof(x) FROM (SELECT 1 UNION ALL SELECT '2') s(x)",
    "SELECT pg_typeof(x) FROM (SELECT '1' UNION ALL SELECT '2') s(x)",
    "SELECT pg_typeof(x) FROM (SELECT 1::smallint UNION ALL SELECT '2' UNION ALL SELECT 3::bigint) s(x)",
    "VALUES (1), ('2')",
    "VALUES ('1'), (2::bigint)",
    "VALUES ('1'::text), (2)",
    "SELECT pg_typeof(column1) FROM (VALUES (1::smallint), ('2'), (3::bigint)) v",
    "SELECT ARRAY['1', 2]",
    "SELECT ARRAY[1, '2']",
    "SELECT ARRAY['1'::text, 2]",
    "SELECT ARRAY[1::smallint, 2::bigint]",
    "SELECT ARRAY['a', 'b']",
    "SELECT ARRAY[NULL, '1']",
    "SELECT ARRAY[10] || '20'",
    "SELECT ARRAY[1, 2] = '{1,2}'",
    "SELECT ARRAY['10'::text] = ARRAY[10]",
]

# Function calls whose overload is chosen from untyped or mismatched arguments, and aggregates,
# whose names an extension may overload for its own types.
FUNCTIONS = [
    "SELECT length('abc')",
    "SELECT length('10')",
    "SELECT length(10)",
    "SELECT abs('-5')",
    "SELECT upper('abc')",
    "SELECT upper(10)",
    "SELECT round('2.5')",
    "SELECT round(2.5, '1')",
    "SELECT round('2.5', 0)",
    "SELECT substr('abcdef', '2', 3)",
    "SELECT left('abc', '2')",
    "SELECT repeat('ab', '3')",
    "SELECT lpad('5', 3, '0')",
    "SELECT to_char(10, '99')",
    "SELECT concat('a', 1, 2.5, NULL)",
    "SELECT format('%s-%s', 10, '10'::text)",
    "SELECT sqrt('16')",
    "SELECT power('2', 3)",
    "SELECT md5(10)",
    "SELECT md5('10')",
    "SELECT generate_series('1', '3')",
    "SELECT generate_series(1, '3')",
    "SELECT date_part('year', '2024-01-01')",
    "SELECT pg_typeof('10')",
    "SELECT pg_typeof(NULL)",
    "SELECT hashtext('10')",
    "SELECT int8(10::integer)",
    "SELECT int8('10')",
    "SELECT text(10)",
    "SELECT max('10')",
    "SELECT min(NULL)",
    "SELECT max(x) FROM (VALUES ('1'), ('2')) v(x)",
    "SELECT min(x), max(x) FROM (VALUES (1::smallint), (2::smallint)) v(x)",
    "SELECT sum('10')",
    "SELECT avg('10')",
    "SELECT count('x')",
    "SELECT array_agg(x) FROM (VALUES ('1'), ('2')) v(x)",
]

# A text column compared with numbers (the issue's `WHERE code = 32`), and every other column
# type with numbers and strings: the text column holds 'x-1', which no reading as an ID accepts.
COLUMN_COMPARISONS = [
    f"SELECT count(*) FROM resolution_codes WHERE {column} = {value}"
    for column, value in itertools.product(
        ("code", "name", "flag", "n", "s", "b", "x", "f"),
        ("32", "32::bigint", "32::smallint", "'32'", "'32'::text", "32.0"),
    )
]

TABLES = [
    "SELECT code FROM resolution_codes WHERE code = 32",
    "SELECT code FROM resolution_codes WHERE code IN (32, 10) ORDER BY code",
    "SELECT code FROM resolution_codes WHERE code IN ('32', 10) ORDER BY code",
    "SELECT code FROM resolution_codes WHERE code = ANY (ARRAY[32])",
    "SELECT code FROM resolution_codes WHERE code > 5 ORDER BY code",
    "SELECT code FROM resolution_codes WHERE code BETWEEN 1 AND 99 ORDER BY code",
    "SELECT n FROM resolution_codes WHERE n IN ('32'::text) ORDER BY n",
    "SELECT count(*) FROM resolution_codes WHERE code = n",
    "SELECT count(*) FROM resolution_codes WHERE n = code",
    "SELECT count(*) FROM resolution_codes WHERE b = code",
    "SELECT count(*) FROM resolution_codes WHERE s = code",
    "SELECT count(*) FROM resolution_codes WHERE code = b::text",
    "SELECT count(*) FROM resolution_codes a JOIN resolution_codes z ON a.code = z.n",
    "SELECT count(*) FROM resolution_codes a JOIN resolution_codes z USING (code)",
    "SELECT code || n FROM resolution_codes ORDER BY 1",
    "SELECT n + '1' FROM resolution_codes ORDER BY 1",
    "SELECT code, count(*) FROM resolution_codes GROUP BY 1 ORDER BY 1",
    "SELECT code FROM resolution_codes UNION SELECT n::text FROM resolution_codes ORDER BY 1",
    "SELECT code FROM resolution_codes UNION SELECT n FROM resolution_codes ORDER BY 1",
    "SELECT COALESCE(code, n) FROM resolution_codes",
    "SELECT CASE code WHEN 32 THEN 'a' END FROM resolution_codes",
    # Assignment: the casts PostgreSQL applies on INSERT and UPDATE.
    "INSERT INTO resolution_sink (code) VALUES (32) RETURNING code",
    "INSERT INTO resolution_sink (code) VALUES (32::bigint) RETURNING code",
    "INSERT INTO resolution_sink (flag) VALUES (32) RETURNING flag",
    "INSERT INTO resolution_sink (n) VALUES ('32') RETURNING n",
    "INSERT INTO resolution_sink (n) VALUES ('32'::text) RETURNING n",
    "INSERT INTO resolution_sink (b) VALUES ('32'::text) RETURNING b",
    "INSERT INTO resolution_sink (b) VALUES (32::numeric) RETURNING b",
    "INSERT INTO resolution_sink (x) VALUES ('32'::varchar) RETURNING x",
    "INSERT INTO resolution_sink (code, n) SELECT n, s FROM resolution_codes ORDER BY n RETURNING code, n",
    "UPDATE resolution_sink SET n = '5'::text WHERE false",
    "UPDATE resolution_sink SET b = code WHERE false",
]

# What a driver sends: psycopg types a Python int by its size (smallint, integer, bigint) and
# leaves a str untyped, as node-postgres leaves every parameter.
PARAMETERS = [
    Probe("SELECT count(*) FROM resolution_codes WHERE code = %s", (32,)),
    Probe("SELECT count(*) FROM resolution_codes WHERE code = %s", (2**20,)),
    Probe("SELECT count(*) FROM resolution_codes WHERE code = %s", (2**40,)),
    Probe("SELECT count(*) FROM resolution_codes WHERE code = %s", ("32",)),
    Probe("SELECT count(*) FROM resolution_codes WHERE n = %s", ("32",)),
    Probe("SELECT count(*) FROM resolution_codes WHERE b = %s", (32,)),
    Probe("SELECT %s = 32", ("10",)),
    Probe("SELECT %s::text = %s", ("10", 32)),
    Probe("SELECT %s = %s", ("10", 32)),
    Probe("SELECT %s IN (32, 10)", ("32",)),
    Probe("SELECT pg_typeof(%s)", ("10",)),
    Probe("SELECT pg_typeof(%s)", (10,)),
    Probe("SELECT length(%s)", ("abc",)),
    Probe("SELECT abs(%s)", ("-5",)),
]

CORPUS = [
    *operator_probes(),
    *(Probe(statement) for statement in (*ISSUE, *IN_LISTS, *CONDITIONALS, *COLUMN_TYPES, *FUNCTIONS,
                                          *COLUMN_COMPARISONS, *TABLES)),
    *PARAMETERS,
]


class Outcomes:
    """Runs probes in one database and describes how each ended."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn
        self.type_names: dict[tuple[int, int], str] = {}
        for statement in SETUP:
            conn.execute(statement)

    def type_name(self, oid: int, typmod: int) -> str:
        # By name, not OID: the extension's types have OIDs of their own in each database.
        if (oid, typmod) not in self.type_names:
            modifier = typmod if typmod >= 0 else "NULL"
            self.type_names[oid, typmod] = self.conn.execute(f"SELECT format_type({oid}, {modifier})").fetchone()[0]
        return self.type_names[oid, typmod]

    def of(self, probe: Probe) -> str:
        try:
            # Without parameters, psycopg sends the statement as written (no placeholders read).
            cursor = self.conn.execute(probe.statement, probe.params)
        except psycopg.Error as error:
            return f"ERROR {error.sqlstate}: {error.diag.message_primary}"
        # The rows as the server wrote them in text form, so that no Python adapter can make two
        # different answers look alike.
        result = cursor.pgresult
        columns = [self.type_name(result.ftype(i), result.fmod(i)) for i in range(result.nfields)]
        fields = range(result.nfields)
        rows = [tuple(text(result.get_value(r, c)) for c in fields) for r in range(result.ntuples)]
        return f"{cursor.statusmessage} ({', '.join(columns)}) {rows}"


def text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def extension_schema(conn: psycopg.Connection) -> str | None:
    row = conn.execute(
        "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'randflake_pg'"
    ).fetchone()
    return row and row[0]


def test_the_corpus_is_large_and_distinct():
    assert len(CORPUS) >= 80
    assert len({(probe.statement, probe.params) for probe in CORPUS}) == len(CORPUS)


def test_builtin_expressions_resolve_as_without_the_extension(shared_cluster):
    with shared_cluster.connect() as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {ORACLE}")
        # template0: PostgreSQL's own objects only, whatever template1 may have been given.
        admin.execute(f"CREATE DATABASE {ORACLE} TEMPLATE template0")
    with shared_cluster.connect(ORACLE) as plain, shared_cluster.connect() as extended:
        # The two differ in the extension alone: not in where it lives, their collation or settings.
        assert extension_schema(plain) is None
        assert extension_schema(extended) == "public"
        settings = (
            "SELECT current_setting('search_path'), datcollate, datctype, encoding FROM pg_database"
            " WHERE datname = current_database()"
        )
        assert plain.execute(settings).fetchone() == extended.execute(settings).fetchone()
        assert extended.execute("SELECT current_setting('search_path')").fetchone()[0] == '"$user", public'
        without, with_it = Outcomes(plain), Outcomes(extended)
        differences = []
        oracle = []
        for probe in CORPUS:
            expected, actual = without.of(probe), with_it.of(probe)
            oracle.append(expected)
            if expected != actual:
                differences.append(f"{probe}\n    without the extension: {expected}\n    with it: {actual}")
    # The corpus means something only if PostgreSQL alone both answers and refuses a good share of it.
    refused = sum(outcome.startswith("ERROR ") for outcome in oracle)
    assert 50 <= refused <= len(oracle) - 50, f"{refused} of {len(oracle)} probes fail without the extension"
    assert not differences, (
        f"{len(differences)} of {len(CORPUS)} statements between PostgreSQL's own types end differently "
        "with the extension installed:\n" + "\n".join(differences)
    )


# The objects the extension made (pg_depend's 'e' entries), of one catalog.
MEMBERS = """
    SELECT d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
     WHERE d.refclassid = 'pg_extension'::regclass AND d.classid = '{catalog}'::regclass
       AND d.deptype = 'e' AND e.extname = 'randflake_pg'
"""
BUILTIN = "(SELECT typnamespace = 'pg_catalog'::regnamespace FROM pg_type WHERE oid = {type})"


def test_no_cast_of_the_extension_reaches_between_builtin_types(shared_cluster):
    """An implicit cast from a built-in type offers every operator and function of the target to
    values of that type, so `text = integer` finds `randflake_key = randflake_key`; a cast between
    two built-in types would change PostgreSQL's own directly."""
    with shared_cluster.connect() as conn:
        casts = conn.execute(
            f"""SELECT format('%s -> %s', castsource::regtype, casttarget::regtype), castcontext,
                       {BUILTIN.format(type='castsource')}, {BUILTIN.format(type='casttarget')}
                  FROM pg_cast WHERE oid IN ({MEMBERS.format(catalog='pg_cast')}) ORDER BY 1"""
        ).fetchall()
    # Guards against a query that finds nothing: the extension does make casts.
    assert casts, "found no cast made by the extension"
    implicit = [name for name, context, from_builtin, _ in casts if context == "i" and from_builtin]
    assert not implicit, f"implicit casts from built-in types: {implicit}"
    between = [name for name, _, from_builtin, to_builtin in casts if from_builtin and to_builtin]
    assert not between, f"casts between built-in types: {between}"


def test_no_operator_or_function_of_the_extension_stands_between_builtin_types(shared_cluster):
    """An operator of built-in operand types, or a function of built-in argument types named as
    one of PostgreSQL's, is another candidate for expressions that never mention the extension."""
    with shared_cluster.connect() as conn:
        operators = conn.execute(
            f"""SELECT oid::regoperator::text FROM pg_operator
                 WHERE oid IN ({MEMBERS.format(catalog='pg_operator')})
                   AND (oprleft = 0 OR {BUILTIN.format(type='oprleft')}) AND {BUILTIN.format(type='oprright')}
                 ORDER BY 1"""
        ).fetchall()
        functions = conn.execute(
            f"""SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.oid IN ({MEMBERS.format(catalog='pg_proc')})
                   AND EXISTS (SELECT FROM pg_proc b WHERE b.pronamespace = 'pg_catalog'::regnamespace
                                                     AND b.proname = p.proname)
                   AND NOT EXISTS (SELECT FROM unnest(p.proargtypes::oid[]) a(argtype)
                                    WHERE NOT {BUILTIN.format(type='a.argtype')})
                 ORDER BY 1"""
        ).fetchall()
        assert conn.execute(f"SELECT count(*) FROM ({MEMBERS.format(catalog='pg_operator')}) m").fetchone()[0] > 0
    assert not operators, f"operators between built-in types: {[row[0] for row in operators]}"
    assert not functions, (
        f"functions of built-in argument types named as PostgreSQL's own: {[row[0] for row in functions]}"
    )
