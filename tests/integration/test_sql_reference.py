"""docs/sql-reference.md is rendered from what CREATE EXTENSION really makes (functions, the lease
table, privileges, comments) and from the settings the preloaded library defines. This test
renders it from a live server and fails if the committed file differs; `make docs` rewrites it."""

from __future__ import annotations

import os

import psycopg

from lib.cluster import ROOT
from lib.extension_catalog import extension_objects

REFERENCE = ROOT / "docs" / "sql-reference.md"
CONTEXTS = {
    "postmaster": "server restart",
    "sighup": "reload (`pg_reload_conf()`)",
    "superuser": "superusers, at any time",
    "user": "any user, at any time",
}


def privileges(description: dict, privilege: str) -> str:
    grantees = sorted(
        item.split(":")[0]
        for item in description["acl"]
        if item.endswith(f":{privilege}") and item.split(":")[0] != description["owner"]
    )
    if "PUBLIC" in grantees:
        return "everyone (PUBLIC)"
    return ", ".join(f"`{grantee}`" for grantee in grantees) + " and superusers" if grantees else "superusers only"


def render_function(function: dict, extension_schema: str) -> list[str]:
    name = function["name"] if function["schema"] == extension_schema else f"{function['schema']}.{function['name']}"
    if function["procedure"]:
        kind = ["- A procedure: `CALL` it, alone; its OUT parameters come back as one row"]
    elif function["aggregate"]:
        kind = ["- An aggregate", f"- Returns: `{function['result']}`", f"- Attributes: {function['attributes']}"]
    else:
        kind = [f"- Returns: `{function['result']}`", f"- Attributes: {function['attributes']}"]
    return [
        f"### `{name}({function['arguments']})`",
        "",
        function["comment"] or "",
        "",
        *kind,
        f"- EXECUTE: {privileges(function, 'EXECUTE')}",
        "",
    ]


def render_view(name: str, view: dict) -> list[str]:
    lines = [f"### View `{name}`", "", view["comment"] or "", "", "| column | type | meaning |", "|---|---|---|"]
    lines += [f"| `{column['name']}` | {column['type']} | {column['comment'] or ''} |" for column in view["columns"]]
    return lines + ["", f"SELECT: {privileges(view, 'SELECT')}.", ""]


def render_table(name: str, table: dict) -> list[str]:
    lines = [f"### Table `{name}`", "", table["comment"] or "", "", "| column | type | not null | default | meaning |", "|---|---|---|---|---|"]
    for column in table["columns"]:
        lines.append(
            f"| `{column['name']}` | {column['type']} | {'yes' if column['not_null'] else 'no'} "
            f"| {'`' + column['default'] + '`' if column['default'] else ''} | {column['comment'] or ''} |"
        )
    lines += ["", "Constraints:", ""]
    lines += [f"- `{constraint}`: `{definition}`" for constraint, definition in table["constraints"]]
    lines += ["", "Triggers:", ""]
    lines += [f"- `{definition}`" for definition, _ in table["triggers"]]
    lines += ["", f"SELECT: {privileges(table, 'SELECT')}; INSERT, UPDATE, DELETE: {privileges(table, 'INSERT')}.", ""]
    return lines


def support_functions(objects: dict) -> set[str]:
    """The functions behind the ID type's input, output, operators and operator classes, as
    regprocedure text: listed with the type, not among the functions users call."""
    used = set()
    for name, description in objects.items():
        if name.startswith("type "):
            used |= {description[key] for key in ("input", "output", "receive", "send")}
        elif name.startswith("operator ") and "function" in description:
            used.add(description["function"])
        elif name.startswith("operator family "):
            used |= {member.split(") ", 1)[1] for member in description["members"] if member.startswith("function ")}
    return {function.split("(")[0] for function in used}


def render_type(objects: dict) -> list[str]:
    lines = []
    for name, type_ in sorted(objects.items()):
        if not name.startswith("type "):
            continue
        lines += [f"## Type `{type_['name']}`", "", type_["comment"] or "", ""]
        lines += [f"- Storage: {type_['length']} bytes, {'passed by value' if type_['by_value'] else 'by reference'}; "
                  f"input `{type_['input']}`, output `{type_['output']}`, binary `{type_['receive']}` and `{type_['send']}`",
                  f"- USAGE: {privileges(type_, 'USAGE')}", ""]
    casts = sorted((name, cast) for name, cast in objects.items() if name.startswith("cast "))
    lines += ["Casts:", "", "| from | to | when | how | meaning |", "|---|---|---|---|---|"]
    lines += [f"| `{c['source']}` | `{c['target']}` | {c['context']} | {c['method']} | {c['comment'] or ''} |" for _, c in casts]
    operators = sorted((o["left"], o["right"], o["symbol"], o) for name, o in objects.items() if name.startswith("operator ")
                       and "symbol" in o)
    lines += ["", "Operators (each one of bigint's own comparison functions):", "", "| left | right | operators |",
              "|---|---|---|"]
    pairs: dict = {}
    for left, right, symbol, _ in operators:
        pairs.setdefault((left, right), []).append(f"`{symbol}`")
    lines += [f"| `{left}` | `{right}` | {' '.join(symbols)} |" for (left, right), symbols in sorted(pairs.items())]
    lines += ["", "Operator classes:", ""]
    for name, description in sorted(objects.items()):
        if name.startswith("operator class "):
            lines.append(f"- `{description['name']}` for {description['method']}"
                         f"{' (default)' if description['default'] else ''}: {description['comment'] or ''}")
        elif name.startswith("operator family "):
            lines.append(f"- family `{description['name']}` for {description['method']}, {len(description['members'])} members: "
                         f"{description['comment'] or ''}")
    return lines + [""]


def render_settings(conn: psycopg.Connection) -> list[str]:
    lines = ["## Settings", "", "Set in `postgresql.conf`; the library must be in `shared_preload_libraries`.", ""]
    for name, boot, unit, low, high, choices, context, short, extra in conn.execute(
        """SELECT name, boot_val, unit, min_val, max_val, enumvals, context, short_desc, extra_desc
             FROM pg_settings WHERE name LIKE 'randflake.%' ORDER BY name"""
    ):
        values = f"one of {', '.join(f'`{choice}`' for choice in choices)}" if choices else None
        if low is not None:
            values = f"{low} to {high}{' ' + unit if unit else ''}"
        lines += [
            f"### `{name}`",
            "",
            short,
            "",
            *([extra, ""] if extra else []),
            f"- Default: {'`' + boot + '`' if boot else '(empty)'}{' ' + unit if unit and boot else ''}",
            *([f"- Values: {values}"] if values else []),
            f"- Changed by: {CONTEXTS[context]}",
            "",
        ]
    hidden = conn.execute("SELECT count(*) = 0 FROM pg_settings WHERE name = 'randflake.secret'").fetchone()[0]
    assert hidden, "randflake.secret is in pg_settings, so the paragraph below is wrong"
    lines += [
        "### `randflake.secret`",
        "",
        "The secret itself: 32 hexadecimal digits. Left out of `pg_settings` and `SHOW ALL`. `SHOW` refuses it to",
        "ordinary roles and tells superusers and members of `pg_read_all_settings` only whether it is set, never",
        "its value. Prefer `randflake.secret_file`; setting both is an error. Changed by: reload, from",
        "`postgresql.conf` only: SQL that gives it a value (`ALTER SYSTEM`, `SET`, `set_config()`, ...) is refused.",
        "See docs/the-secret.md.",
        "",
    ]
    return lines


def render(conn: psycopg.Connection) -> str:
    objects = extension_objects(conn)
    extension = objects.pop("extension")
    lines = [
        "# SQL reference",
        "",
        f"randflake_pg {extension['version']}. Rendered from the objects `CREATE EXTENSION randflake_pg` makes and the",
        "settings the preloaded library defines, by `tests/integration/test_sql_reference.py`; `make test`",
        "fails when this file and the installed extension disagree, and `make docs` rewrites it.",
        "",
        "## Functions and procedures",
        "",
    ]
    schema = extension["schema"]
    functions = sorted(
        (description for name, description in objects.items() if name.startswith("function ")),
        key=lambda function: (function["schema"] != schema, function["name"]),
    )
    support = support_functions(objects)
    lines += [line for function in functions if function["schema"] == schema and function["name"] not in support
              for line in render_function(function, schema)]
    lines += render_type(objects)
    lines += ["## Lease table", ""]
    for name, description in sorted(objects.items()):
        if name.startswith("schema "):
            lines += [f"Schema `{name.removeprefix('schema ')}`: {description['comment']}", ""]
        elif name.startswith("table "):
            lines += render_table(name.removeprefix("table "), description)
        elif name.startswith("view "):
            lines += render_view(name.removeprefix("view "), description)
    lines += [line for function in functions if function["schema"] != schema for line in render_function(function, schema)]
    lines += render_settings(conn)
    return "\n".join(lines).rstrip() + "\n"


def test_the_sql_reference_matches_the_installed_extension(cluster):
    with cluster.connect() as conn:
        rendered = render(conn)
    if os.environ.get("RANDFLAKE_WRITE_SQL_REFERENCE"):
        REFERENCE.write_text(rendered)
    fresh = ROOT / "target" / "sql-reference.md"
    fresh.write_text(rendered)
    assert REFERENCE.read_text() == rendered, f"docs/sql-reference.md is stale: compare with {fresh}, or run `make docs`"
