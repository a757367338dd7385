"""What the extension put in a database, read back from the catalogs: every member object with
its definition, comment and privileges (current and as recorded at install for pg_dump).

The upgrade and dump/restore tests compare these between databases, and the SQL reference is
generated from them, so none of them can drift from what `CREATE EXTENSION` really makes."""

from __future__ import annotations

import psycopg

# PostgreSQL 18 also records the row type of a member table and the array types of member types
# as members; they come with the table or type on every major, so they are left out here as on
# 15 to 17.
MEMBERS = """
    SELECT d.classid::regclass::text AS catalog, d.objid, pg_describe_object(d.classid, d.objid, 0) AS name
      FROM pg_depend d JOIN pg_extension e ON d.refobjid = e.oid
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'randflake_pg'
       AND NOT EXISTS (SELECT FROM pg_type t
                        WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                          AND (t.typrelid <> 0 OR t.typcategory = 'A'))
"""


def _acl(conn: psycopg.Connection, acl_sql: str, oid: int) -> list[str]:
    """Privileges as sorted 'grantee:privilege' items, so the order of GRANTs does not matter."""
    return [
        row[0]
        for row in conn.execute(
            f"""SELECT coalesce(nullif(a.grantee::regrole::text, '-'), 'PUBLIC') || ':' || a.privilege_type
                  FROM ({acl_sql}) src(acl), aclexplode(src.acl) a ORDER BY 1""",
            (oid,),
        )
    ]


def _initial_acl(conn: psycopg.Connection, catalog: str, oid: int) -> list[str]:
    return _acl(
        conn, f"SELECT initprivs FROM pg_init_privs WHERE classoid = '{catalog}'::regclass AND objoid = %s AND objsubid = 0", oid
    )


def _comment_and_owner(conn: psycopg.Connection, catalog: str, owner_column: str, oid: int) -> tuple:
    return conn.execute(
        f"SELECT obj_description(oid, '{catalog}'), {owner_column}::regrole::text FROM {catalog} WHERE oid = %s", (oid,)
    ).fetchone()


def _ownership(conn: psycopg.Connection, catalog: str, acl_column: str, owner_column: str, acl_kind: str, oid: int) -> dict:
    """An object's comment, owner, privileges (the defaults of `acl_kind` where none were granted)
    and the privileges recorded for the extension."""
    comment, owner = _comment_and_owner(conn, catalog, owner_column, oid)
    acl_sql = f"SELECT coalesce({acl_column}, acldefault('{acl_kind}', {owner_column})) FROM {catalog} WHERE oid = %s"
    return {
        "comment": comment,
        "owner": owner,
        "acl": _acl(conn, acl_sql, oid),
        "initial_acl": _initial_acl(conn, catalog, oid),
    }


def _function(conn: psycopg.Connection, oid: int) -> dict:
    row = conn.execute(
        # An aggregate has no CREATE FUNCTION to show: its definition is what pg_aggregate holds.
        """SELECT CASE WHEN p.prokind = 'a'
                       THEN (SELECT format('AGGREGATE (SFUNC = %%s, COMBINEFUNC = %%s, SORTOP = %%s)',
                                           a.aggtransfn::regproc, a.aggcombinefn::regproc, a.aggsortop::regoperator)
                               FROM pg_aggregate a WHERE a.aggfnoid = p.oid)
                       ELSE pg_get_functiondef(p.oid) END,
                  obj_description(p.oid, 'pg_proc'),
                  p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid),
                  p.provolatile, p.proisstrict, p.proparallel, p.prosecdef, p.proowner::regrole::text,
                  p.pronamespace::regnamespace::text, p.prokind
             FROM pg_proc p WHERE p.oid = %s""",
        (oid,),
    ).fetchone()
    volatility = {"i": "IMMUTABLE", "s": "STABLE", "v": "VOLATILE"}[row[5]]
    parallel = {"s": "SAFE", "r": "RESTRICTED", "u": "UNSAFE"}[row[7]]
    acl_sql = (
        "SELECT coalesce(proacl, acldefault('f', proowner)) FROM pg_proc WHERE oid = %s"
    )
    return {
        "definition": row[0],
        "comment": row[1],
        "name": row[2],
        "arguments": row[3],
        "result": row[4],
        "attributes": f"{volatility}{' STRICT' if row[6] else ''} PARALLEL {parallel}{' SECURITY DEFINER' if row[8] else ''}",
        "owner": row[9],
        "schema": row[10],
        "procedure": row[11] == "p",
        "aggregate": row[11] == "a",
        "acl": _acl(conn, acl_sql, oid),
        "initial_acl": _initial_acl(conn, "pg_proc", oid),
    }


def _table(conn: psycopg.Connection, oid: int) -> dict:
    columns = conn.execute(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  pg_get_expr(ad.adbin, ad.adrelid), col_description(a.attrelid, a.attnum)
             FROM pg_attribute a LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
            WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum""",
        (oid,),
    ).fetchall()
    # 18 also records NOT NULL as constraints (contype 'n'); the columns' not_null says it on every major.
    constraints = conn.execute(
        """SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
            WHERE conrelid = %s AND contype <> 'n' ORDER BY conname""",
        (oid,),
    ).fetchall()
    indexes = conn.execute(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s ORDER BY 1", (oid,)
    ).fetchall()
    triggers = conn.execute(
        "SELECT pg_get_triggerdef(oid), tgenabled FROM pg_trigger WHERE tgrelid = %s AND NOT tgisinternal ORDER BY 1",
        (oid,),
    ).fetchall()
    return {
        **_ownership(conn, "pg_class", "relacl", "relowner", "r", oid),
        "columns": [
            {"name": c[0], "type": c[1], "not_null": c[2], "default": c[3], "comment": c[4]} for c in columns
        ],
        "constraints": constraints,
        "indexes": [i[0] for i in indexes],
        "triggers": triggers,
    }


def _schema(conn: psycopg.Connection, oid: int) -> dict:
    return _ownership(conn, "pg_namespace", "nspacl", "nspowner", "n", oid)


def _type(conn: psycopg.Connection, oid: int) -> dict:
    row = conn.execute(
        """SELECT t.typname, t.typlen, t.typbyval, t.typalign, t.typstorage, t.typcategory,
                  t.typinput::regproc::text, t.typoutput::regproc::text, t.typreceive::regproc::text,
                  t.typsend::regproc::text, t.typnamespace::regnamespace::text
             FROM pg_type t WHERE t.oid = %s""",
        (oid,),
    ).fetchone()
    keys = ("name", "length", "by_value", "alignment", "storage", "category", "input", "output", "receive", "send", "schema")
    return {**dict(zip(keys, row)), **_ownership(conn, "pg_type", "typacl", "typowner", "T", oid)}


def _cast(conn: psycopg.Connection, oid: int) -> dict:
    source, target, context, method, function = conn.execute(
        """SELECT format_type(castsource, NULL), format_type(casttarget, NULL), castcontext, castmethod,
                  nullif(castfunc, 0)::regprocedure::text
             FROM pg_cast WHERE oid = %s""",
        (oid,),
    ).fetchone()
    return {
        "source": source,
        "target": target,
        "context": {"e": "explicit", "a": "on assignment", "i": "implicit"}[context],
        "method": {"f": f"function {function}", "i": "input and output", "b": "binary-coercible"}[method],
        "comment": conn.execute("SELECT obj_description(%s, 'pg_cast')", (oid,)).fetchone()[0],
    }


def _operator(conn: psycopg.Connection, oid: int) -> dict:
    row = conn.execute(
        """SELECT o.oprname, format_type(o.oprleft, NULL), format_type(o.oprright, NULL), format_type(o.oprresult, NULL),
                  o.oprcode::regprocedure::text, nullif(o.oprcom, 0)::regoperator::text,
                  nullif(o.oprnegate, 0)::regoperator::text, o.oprrest::text, o.oprjoin::text, o.oprcanhash,
                  o.oprcanmerge, o.oprnamespace::regnamespace::text
             FROM pg_operator o WHERE o.oid = %s""",
        (oid,),
    ).fetchone()
    comment, owner = _comment_and_owner(conn, "pg_operator", "oprowner", oid)
    keys = ("symbol", "left", "right", "result", "function", "commutator", "negator", "restrict", "join", "hashes",
            "merges", "schema")
    return {**dict(zip(keys, row)), "comment": comment, "owner": owner}


def _family_members(conn: psycopg.Connection, family: int) -> list[str]:
    """Every operator and support function of an operator family, as sorted text."""
    return [row[0] for row in conn.execute(
        """SELECT format('operator %%s %%s', amopstrategy, amopopr::regoperator) FROM pg_amop WHERE amopfamily = %s
           UNION ALL
           SELECT format('function %%s (%%s, %%s) %%s', amprocnum, format_type(amproclefttype, NULL),
                         format_type(amprocrighttype, NULL), amproc::regprocedure)
             FROM pg_amproc WHERE amprocfamily = %s
           ORDER BY 1""",
        (family, family),
    )]


def _operator_family(conn: psycopg.Connection, oid: int) -> dict:
    name, method = conn.execute(
        "SELECT f.opfname, a.amname FROM pg_opfamily f JOIN pg_am a ON a.oid = f.opfmethod WHERE f.oid = %s", (oid,)
    ).fetchone()
    comment, owner = _comment_and_owner(conn, "pg_opfamily", "opfowner", oid)
    return {"name": name, "method": method, "members": _family_members(conn, oid), "comment": comment, "owner": owner}


def _operator_class(conn: psycopg.Connection, oid: int) -> dict:
    name, method, type_, default, family = conn.execute(
        """SELECT c.opcname, a.amname, format_type(c.opcintype, NULL), c.opcdefault, f.opfname
             FROM pg_opclass c JOIN pg_am a ON a.oid = c.opcmethod JOIN pg_opfamily f ON f.oid = c.opcfamily
            WHERE c.oid = %s""",
        (oid,),
    ).fetchone()
    comment, owner = _comment_and_owner(conn, "pg_opclass", "opcowner", oid)
    return {"name": name, "method": method, "type": type_, "default": default, "family": family, "comment": comment,
            "owner": owner}


DESCRIBERS = {
    "pg_proc": _function,
    "pg_class": _table,
    "pg_namespace": _schema,
    "pg_type": _type,
    "pg_cast": _cast,
    "pg_operator": _operator,
    "pg_opfamily": _operator_family,
    "pg_opclass": _operator_class,
}


def extension_objects(conn: psycopg.Connection) -> dict:
    """{'extension': ..., member name: description} for randflake_pg in this database."""
    version, relocatable, schema, config = conn.execute(
        """SELECT extversion, extrelocatable, extnamespace::regnamespace::text, extconfig
             FROM pg_extension WHERE extname = 'randflake_pg'"""
    ).fetchone()
    objects = {"extension": {"version": version, "relocatable": relocatable, "schema": schema, "config": config}}
    for catalog, oid, name in conn.execute(MEMBERS).fetchall():
        assert catalog in DESCRIBERS, f"no description for {name} ({catalog}): teach extension_catalog.py"
        objects[name] = DESCRIBERS[catalog](conn, oid)
    return objects
