#!/usr/bin/env bash
# A private, writable copy of a PostgreSQL installation, for the test suites: `cargo pgrx test`
# installs its build there (with `sudo cp`, which rewrites a library in place), the packaged
# build is unpacked there, and every test server runs from there. So no test ever writes into
# the library or extension directories that running servers use.
#
# PostgreSQL finds its files relative to its binaries when they move together, so the copy is
# the binaries, the server's libraries and the share directory at the same relative places
# (headers are linked, not copied). Also writes a pgrx configuration naming the copy's pg_config,
# for PGRX_HOME.
# Usage: tools/stage-postgres.sh <pg_config> <stage directory>
set -euo pipefail

pg_config=$1
stage=$2
major=$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')

rm -rf "$stage"
for option in --bindir --pkglibdir --sharedir; do
    dir=$("$pg_config" "$option")
    mkdir -p "$stage$(dirname "$dir")"
    cp -a "$dir" "$stage$dir"
done
# Wheel-built servers find their bundled libraries through an $ORIGIN-relative RPATH that may
# point outside those directories; each such directory comes along too.
for binary in "$("$pg_config" --bindir)"/* "$("$pg_config" --pkglibdir)"/*.so; do
    # Not every file there is ELF (Debian ships a Python script in bindir).
    { readelf -d "$binary" 2>/dev/null || true; } | sed -n 's/.*R\(UN\)\?PATH.*\[\(.*\)\]/\2/p' | tr ':' '\n' |
        sed -n 's|^\$ORIGIN|'"$(dirname "$binary")"'|p'
done | sort -u | while read -r libs; do
    libs=$(realpath -m "$libs")
    if [ -d "$libs" ] && [ ! -e "$stage$libs" ]; then
        mkdir -p "$stage$(dirname "$libs")"
        cp -a "$libs" "$stage$libs"
    fi
done
include=$("$pg_config" --includedir-server)
mkdir -p "$stage$(dirname "$include")"
ln -s "$include" "$stage$include"
# Whatever randflake_pg an earlier `make install` left in the original is not what is tested.
rm -f "$stage$("$pg_config" --pkglibdir)"/randflake_pg* "$stage$("$pg_config" --sharedir)"/extension/randflake_pg*

staged=$stage$("$pg_config" --bindir)/pg_config
[ "$("$staged" --pkglibdir)" = "$stage$("$pg_config" --pkglibdir)" ] ||
    { echo "stage-postgres: $staged does not relocate to $stage" >&2; exit 1; }
mkdir -p "$stage/pgrx"
printf '[configs]\npg%s = "%s"\n' "$major" "$staged" >"$stage/pgrx/config.toml"
