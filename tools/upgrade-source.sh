#!/usr/bin/env bash
# The PostgreSQL 15 that the pg_upgrade test upgrades from, with randflake_pg installed from a
# staged 15 (tools/stage-postgres.sh, after `make install-package`); prints its pg_config.
#
# It is Debian 12's 15.18, unpacked into target/postgres/pg15-upgrade-source/, not the 15.20 of
# Debian's security archive that the other suites use: 15.20 gives every column an option
# (pg_attver) that PostgreSQL 18.6, the newest 18 on PyPI, predates and refuses, so pg_upgrade
# from 15.20 to 18.6 fails for any table, with or without this extension.
# Usage: tools/upgrade-source.sh <staged 15 directory>
set -euo pipefail

stage=${1:?usage: upgrade-source.sh <staged 15 directory>}
version=15.18-0+deb12u1
root=$(cd "$(dirname "$0")/.." && pwd)/target/postgres/pg15-upgrade-source
pg_config=$root/usr/lib/postgresql/15/bin/pg_config

if ! "$pg_config" --version 2>/dev/null | grep -q '^PostgreSQL 15\.18'; then
    rm -rf "$root" && mkdir -p "$root/download"
    # apt-get download runs as the _apt user where it can; a directory it may write to.
    chmod 777 "$root/download"
    (cd "$root/download" && apt-get download -q "postgresql-15=$version" "postgresql-client-15=$version" >&2)
    for deb in "$root"/download/*.deb; do dpkg-deb -x "$deb" "$root"; done
    rm -rf "$root/download"
fi

staged_config=$stage/usr/lib/postgresql/15/bin/pg_config
[ -x "$staged_config" ] || { echo "upgrade-source: $stage holds no staged PostgreSQL 15" >&2; exit 1; }
cp "$("$staged_config" --pkglibdir)"/randflake_pg.so "$("$pg_config" --pkglibdir)/"
cp "$("$staged_config" --sharedir)"/extension/randflake_pg* "$("$pg_config" --sharedir)/extension/"
echo "$pg_config"
