#!/usr/bin/env bash
# Checks the artifacts of `make package`: META.json against the PGXN Meta Spec (pgxn_meta, the
# PGXN project's validator), the tarball, the .deb at the Debian/PGDG paths of its major (and,
# for Debian's PostgreSQL, that dpkg would install it here), and their checksums in SHA256SUMS.
# Then unpacks the .deb into the test suites' copy of PostgreSQL (tools/stage-postgres.sh), so
# that the server tests which follow in `make test` run on exactly what a DBA would install.
# Also checks that the randflake crate packages for crates.io and builds from its package alone.
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

# PGXN's metadata is valid by the spec it names, and names the same release.
PGXN_META=$(command -v pgxn_meta || echo "${CARGO_HOME:-$HOME/.cargo}/bin/pgxn_meta")
[ -x "$PGXN_META" ] || fail "pgxn_meta (crates.io) is missing; make deps installs it"
"$PGXN_META" META.json >/dev/null || fail "META.json does not validate against the PGXN Meta Spec: $("$PGXN_META" META.json 2>&1)"
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

# The .deb puts the same files where Debian's and PGDG's postgresql-N look for them, whichever
# installation it was built against.
DEB_LIBDIR=usr/lib/postgresql/$PG_MAJOR/lib
DEB_EXTDIR=usr/share/postgresql/$PG_MAJOR/extension
deb=$(ls "$OUT"/postgresql-"$PG_MAJOR"-randflake-pg_"$VERSION"-1_*.deb) || fail "no .deb for $VERSION"
deb_files=$(dpkg-deb --contents "$deb" | awk '{print $NF}' | sed 's|^\./||')
for file in "${expected[@]}"; do
    case "$file" in
    "${LIBDIR#/}"/*) in_deb=$DEB_LIBDIR/${file#"${LIBDIR#/}"/} ;;
    *) in_deb=$DEB_EXTDIR/${file#"${EXTDIR#/}"/} ;;
    esac
    grep -qx "$in_deb" <<<"$deb_files" || fail "$deb lacks $in_deb"
done
[ "$(dpkg-deb --field "$deb" Package)" = "postgresql-$PG_MAJOR-randflake-pg" ] || fail "$deb has the wrong name"
[ "$(dpkg-deb --field "$deb" Version)" = "$VERSION-1" ] || fail "$deb has the wrong version"
dpkg-deb --field "$deb" Depends | grep -q "^postgresql-$PG_MAJOR," || fail "$deb does not depend on postgresql-$PG_MAJOR"
! grep -v -e "^$DEB_LIBDIR/" -e "^$DEB_EXTDIR/" -e "^usr/share/doc/postgresql-$PG_MAJOR-randflake-pg/" -e '/$' -e '^$' <<<"$deb_files" ||
    fail "$deb holds files outside its package's directories"

# Every artifact is listed in SHA256SUMS, and the list matches the files.
for artifact in "$tarball" "$deb"; do
    grep -q "  $(basename "$artifact")\$" "$OUT/SHA256SUMS" 2>/dev/null || fail "SHA256SUMS does not list $(basename "$artifact")"
done
(cd "$OUT" && sha256sum --quiet -c SHA256SUMS) || fail "an artifact does not match its checksum in SHA256SUMS"

unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
dpkg-deb -x "$deb" "$unpacked"
if [ "$ROOT" = / ]; then
    # The dependencies resolve on this machine; the files go to the stage, never under a running server.
    as_root dpkg --dry-run -i "$deb" >/dev/null || fail "dpkg would not install $deb"
else
    # postgresql-N is not a package of this Debian: the stage stands in for its directories.
    mkdir -p "$STAGE$ROOT$EXTDIR"
fi
cp -a "$unpacked/$DEB_LIBDIR"/. "$STAGE$ROOT$LIBDIR/"
cp -a "$unpacked/$DEB_EXTDIR"/. "$STAGE$ROOT$EXTDIR/"
installed="$(basename "$tarball") and $(basename "$deb") hold ${#expected[@]} files each"
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
