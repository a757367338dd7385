"""docs/sql-reference.md is rendered from what CREATE EXTENSION really makes (functions, the lease
table, privileges, comments) and from the settings the preloaded library defines. This test
renders it from a live server and fails if the committed file differs; `make docs` rewrites it."""

from __future__ import annotations

import os

import psycopg

from conftest import ROOT
from extension_catalog import extension_objects

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
    return [
        f"### `{name}({function['arguments']})`",
        "",
        function["comment"] or "",
        "",
        f"- Returns: `{function['result']}`",
        f"- Attributes: {function['attributes']}",
        f"- EXECUTE: {privileges(function, 'EXECUTE')}",
        "",
    ]


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
        "See the DBA guide (docs/dba-guide.md), \"The secret\".",
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
        "## Functions",
        "",
    ]
    schema = extension["schema"]
    functions = sorted(
        (description for name, description in objects.items() if name.startswith("function ")),
        key=lambda function: (function["schema"] != schema, function["name"]),
    )
    lines += [line for function in functions if function["schema"] == schema for line in render_function(function, schema)]
    lines += ["## Lease table", ""]
    for name, description in sorted(objects.items()):
        if name.startswith("schema "):
            lines += [f"Schema `{name.removeprefix('schema ')}`: {description['comment']}", ""]
        elif name.startswith("table "):
            lines += render_table(name.removeprefix("table "), description)
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
