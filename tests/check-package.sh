#!/usr/bin/env bash
# Checks the artifacts of `make package`, checks that dpkg would install the .deb here (Debian's
# PostgreSQL only; the other majors get a tarball alone), and unpacks the package into the test
# suites' copy of PostgreSQL (tools/stage-postgres.sh), so that the server tests which follow in
# `make test` run on exactly what a DBA would install. Also checks
# that the randflake crate packages for crates.io and builds from its package alone.
# Usage: tests/check-package.sh <pg_config> <pg major> <stage directory>
set -euo pipefail

PG_CONFIG=$1
PG_MAJOR=$2
STAGE=$3
OUT=target/dist
fail() { echo "check-package: $*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

VERSION=$(tools/version.sh)
LIBDIR=$("$PG_CONFIG" --pkglibdir)
EXTDIR=$("$PG_CONFIG" --sharedir)/extension
# Debian's packages live at fixed paths; a relocatable installation's tarball is relative to its root.
ROOT=$(tools/postgres-major.sh root "$PG_MAJOR" "$PG_CONFIG")
ROOT=${ROOT%/}/
LIBDIR=${LIBDIR#"$ROOT"}
EXTDIR=${EXTDIR#"$ROOT"}

# Every file a server needs, at the paths this pg_config names. Upgrade scripts are whatever
# sql/ holds, so a release that forgets to ship one fails here.
expected=("${LIBDIR#/}/randflake_pg.so" "${EXTDIR#/}/randflake_pg.control" "${EXTDIR#/}/randflake_pg--$VERSION.sql")
for script in sql/randflake_pg--*--*.sql; do
    expected+=("${EXTDIR#/}/$(basename "$script")")
done

# PGXN's metadata names the same release.
python3 - "$VERSION" "$PG_MAJOR" <<'PY' || fail "META.json does not describe release $VERSION on PostgreSQL $PG_MAJOR"
import json, sys
meta = json.load(open("META.json"))
version, major = sys.argv[1:]
assert meta["version"] == version and meta["provides"]["randflake_pg"]["version"] == version
assert meta["meta-spec"]["version"] == "1.0.0"
assert major in meta["x_tested_postgresql_majors"]
for phase in ("runtime", "build"):
    assert meta["prereqs"][phase]["requires"]["PostgreSQL"] == ">= 15.0.0, < 19.0.0"
PY

tarball=$(ls "$OUT"/randflake_pg-"$VERSION"-pg"$PG_MAJOR"-*.tar.gz) || fail "no tarball for $VERSION"
tar_files=$(tar -tzf "$tarball" | sed 's|^\./||')
for file in "${expected[@]}"; do
    grep -qx "$file" <<<"$tar_files" || fail "$tarball lacks $file"
done
grep -q "^default_version = '$VERSION'" <(tar -xzOf "$tarball" "./${EXTDIR#/}/randflake_pg.control") ||
    fail "the packaged control file does not default to $VERSION"

if [ "$ROOT" = / ]; then
    deb=$(ls "$OUT"/postgresql-"$PG_MAJOR"-randflake-pg_"$VERSION"-1_*.deb) || fail "no .deb for $VERSION"
    deb_files=$(dpkg-deb --contents "$deb" | awk '{print $NF}' | sed 's|^\./||')
    for file in "${expected[@]}"; do
        grep -qx "$file" <<<"$deb_files" || fail "$deb lacks $file"
    done
    [ "$(dpkg-deb --field "$deb" Version)" = "$VERSION-1" ] || fail "$deb has the wrong version"
    dpkg-deb --field "$deb" Depends | grep -q "postgresql-$PG_MAJOR" || fail "$deb does not depend on postgresql-$PG_MAJOR"
    # The dependencies resolve on this machine; the files go to the stage, never under a running server.
    as_root dpkg --dry-run -i "$deb" >/dev/null || fail "dpkg would not install $deb"
    dpkg-deb -x "$deb" "$STAGE"
    installed="$(basename "$tarball") and $(basename "$deb") hold ${#expected[@]} files each"
else
    tar -xzf "$tarball" -C "$STAGE$ROOT"
    installed="$(basename "$tarball") holds ${#expected[@]} files"
fi
for file in "${expected[@]}"; do
    cmp -s "$STAGE$ROOT$file" <(tar -xzOf "$tarball" "./$file") || fail "$STAGE$ROOT$file differs from the tarball's"
done
# The crate: its package holds the license, the README and the vectors its tests read, not the
# fuzz crate, and `cargo package` builds it from the packaged files alone.
cmp -s LICENSE randflake/LICENSE || fail "randflake/LICENSE is not a copy of LICENSE"
crate_files=$(cargo package -p randflake --allow-dirty --list)
for file in LICENSE README.md Cargo.toml src/lib.rs tests/data/reference_vectors.json examples/decode.rs; do
    grep -qx "$file" <<<"$crate_files" || fail "the randflake crate package lacks $file"
done
! grep -q '^fuzz/' <<<"$crate_files" || fail "the randflake crate package holds fuzz/"
cargo package -p randflake --allow-dirty --quiet || fail "the randflake crate does not build from its package"

echo "check-package: $installed, unpacked into $STAGE; the randflake crate packages"
