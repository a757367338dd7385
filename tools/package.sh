#!/usr/bin/env bash
# Builds the installable artifacts for one PostgreSQL major version into target/dist/:
#   randflake_pg-<version>-pg<major>-<arch>.tar.gz   the `cargo pgrx package` tree: for Debian's
#       PostgreSQL, unpacked over /; for a relocatable installation (the other majors, see
#       tools/postgres-major.sh), unpacked into its root, the parent of `pg_config --bindir`
#   postgresql-<major>-randflake-pg_<version>-1_<arch>.deb   the same files, built with dpkg-deb,
#       at the paths of Debian's and the PostgreSQL project's (PGDG) packages of that major,
#       /usr/lib/postgresql/<major>/lib and /usr/share/postgresql/<major>/extension, whichever
#       installation it was built against; it depends on their server package, postgresql-<major>
#   SHA256SUMS   the checksums of every artifact in target/dist/, whichever majors made them
# Usage: tools/package.sh <pg_config> <pg major>
set -euo pipefail

PG_CONFIG=$1
PG_MAJOR=$2
OUT=target/dist
VERSION=$(tools/version.sh)
ARCH=$(dpkg --print-architecture)
# Each major builds in a directory of its own and replaces only its own artifacts.
WORK=$OUT/work-pg$PG_MAJOR
TREE=$WORK/root

rm -rf "$WORK" "$OUT"/randflake_pg-*-pg"$PG_MAJOR"-*.tar.gz "$OUT"/postgresql-"$PG_MAJOR"-randflake-pg_*.deb
mkdir -p "$WORK"
cargo pgrx package --pg-config "$PG_CONFIG" --features "pg$PG_MAJOR" --no-default-features --out-dir "$TREE"

# Debian ships libraries without their debugging symbols; so do both artifacts.
find "$TREE" -name '*.so' -exec strip --strip-unneeded {} +

PREFIX=$(tools/postgres-major.sh root "$PG_MAJOR" "$PG_CONFIG")
if [ "$PREFIX" = / ]; then
    DOC=$TREE/usr/share/doc/postgresql-$PG_MAJOR-randflake-pg
else
    # Paths relative to the installation's root, wherever it was unpacked.
    mv "$TREE" "$WORK/absolute"
    mv "$WORK/absolute$PREFIX" "$TREE"
    rm -rf "$WORK/absolute"
    DOC=$TREE/share/doc/randflake_pg
fi
# Documentation travels with the artifacts, in Debian's place for it.
mkdir -p "$DOC"
cp README.md LICENSE "$DOC/"
cp -r docs "$DOC/"

TARBALL=$OUT/randflake_pg-$VERSION-pg$PG_MAJOR-$ARCH.tar.gz
tar --owner=0 --group=0 --sort=name -czf "$TARBALL" -C "$TREE" .
echo "package: $TARBALL"

DEB_NAME=postgresql-$PG_MAJOR-randflake-pg
DEB_TREE=$WORK/deb
DEB_DOC=$DEB_TREE/usr/share/doc/$DEB_NAME
if [ "$PREFIX" = / ]; then
    cp -a "$TREE" "$DEB_TREE"
else
    # Built against a relocatable installation, whose files sit at its own relative paths; a
    # server of the same major from Debian or PGDG loads the library as it is (one major, one
    # ABI), from the fixed directories every package of that major uses.
    LIBDIR=$("$PG_CONFIG" --pkglibdir)
    EXTDIR=$("$PG_CONFIG" --sharedir)/extension
    mkdir -p "$DEB_TREE/usr/lib/postgresql/$PG_MAJOR/lib" "$DEB_TREE/usr/share/postgresql/$PG_MAJOR/extension" "$DEB_DOC"
    cp -a "$TREE/${LIBDIR#"$PREFIX"/}"/randflake_pg* "$DEB_TREE/usr/lib/postgresql/$PG_MAJOR/lib/"
    cp -a "$TREE/${EXTDIR#"$PREFIX"/}"/randflake_pg* "$DEB_TREE/usr/share/postgresql/$PG_MAJOR/extension/"
    cp -a "$DOC"/. "$DEB_DOC/"
fi
mkdir -p "$DEB_TREE/DEBIAN"
# Debian wants the copyright file under that name; the .so's shared-library needs come from
# dpkg-shlibdeps when it is available, and libc6 otherwise.
mv "$DEB_DOC/LICENSE" "$DEB_DOC/copyright"
SHLIBS=libc6
if command -v dpkg-shlibdeps >/dev/null; then
    mkdir -p "$WORK/shlibs/debian" && touch "$WORK/shlibs/debian/control"
    SO=$(find "$DEB_TREE" -name 'randflake_pg.so' -printf '%P\n')
    SHLIBS=$(cd "$WORK/shlibs" && dpkg-shlibdeps -O "../deb/$SO" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
fi
cat >"$DEB_TREE/DEBIAN/control" <<EOF
Package: $DEB_NAME
Version: $VERSION-1
Architecture: $ARCH
Maintainer: The randflake_pg developers
Depends: postgresql-$PG_MAJOR, $SHLIBS
Section: database
Priority: optional
Installed-Size: $(du -sk "$DEB_TREE/usr" | cut -f1)
Description: Randflake IDs for PostgreSQL $PG_MAJOR
 unique, unpredictable 64-bit row IDs generated in the database:
 id bigint PRIMARY KEY DEFAULT randflake_next(). IDs are unique across a
 fleet of servers through leased node ranges and decodable only with the
 16-byte secret. Must be listed in shared_preload_libraries.
EOF
DEB=$OUT/${DEB_NAME}_$VERSION-1_$ARCH.deb
dpkg-deb --root-owner-group --build "$DEB_TREE" "$DEB" >/dev/null
rm -rf "$WORK"
echo "package: $DEB"

# One list for everything in target/dist, rewritten whenever any major's artifacts change, so
# that a release directory that gathers several majors' builds is checked with one command:
# sha256sum -c SHA256SUMS.
(
    cd "$OUT"
    find . -maxdepth 1 -type f \( -name '*.tar.gz' -o -name '*.deb' \) -printf '%f\n' | LC_ALL=C sort |
        xargs -r -d '\n' sha256sum -- >SHA256SUMS.new
    mv SHA256SUMS.new SHA256SUMS
)
echo "package: $OUT/SHA256SUMS"
