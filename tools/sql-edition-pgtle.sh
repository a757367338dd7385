#!/usr/bin/env bash
# Packages the SQL edition for pg_tle (Trusted Language Extensions): prints the statement that
# registers sql-edition/randflake_sql--VERSION.sql as extension randflake_sql, VERSION and the
# description taken from sql-edition/randflake_sql.control, through pgtle.install_extension(name,
# version, description, script). Run its output as a member of pgtle_admin, then
# CREATE EXTENSION randflake_sql as the database's owner (docs/managed-postgresql.md).
#
#   tools/sql-edition-pgtle.sh > randflake_sql-pgtle.sql
set -euo pipefail

dir=$(cd "$(dirname "$0")/../sql-edition" && pwd)
setting() { sed -n "s/^$1 = '\\(.*\\)'\$/\\1/p" "$dir/randflake_sql.control"; }
version=$(setting default_version)
comment=$(setting comment)
script="$dir/randflake_sql--$version.sql"
[ -f "$script" ] || { echo "sql-edition-pgtle: no $script" >&2; exit 1; }
# The script goes in as one dollar-quoted literal: its tag must not occur in it.
tag='$randflake_sql_pgtle$'
if grep -qF "$tag" "$script"; then
    echo "sql-edition-pgtle: $script contains $tag" >&2
    exit 1
fi
printf "SELECT pgtle.install_extension(\n    'randflake_sql',\n    '%s',\n    '%s',\n%s\n" \
    "$version" "${comment//\'/\'\'}" "$tag"
cat "$script"
printf "%s\n);\n" "$tag"
