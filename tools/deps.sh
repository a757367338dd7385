#!/usr/bin/env bash
# Installs what building and testing randflake_pg needs, on Debian 12. Idempotent: each step
# checks first, so a second run takes seconds.
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
PGRX_VERSION=0.18.1
VENV=${VENV:-target/venv}

sudo_if_needed() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v cargo >/dev/null; then
    echo "deps: no Rust toolchain found; install one with rustup (https://rustup.rs), then run this again" >&2
    exit 1
fi

# faketime (libfaketime) steps the clock of test servers; postgres_fdw comes with postgresql.
packages=(postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR libclang-dev clang pkg-config sudo python3-venv faketime)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}"
    sudo_if_needed apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}

if ! cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
    echo "deps: installing cargo-pgrx $PGRX_VERSION (takes a few minutes)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
fi

if ! grep -q "^pg$PG_MAJOR = \"$PG_CONFIG\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
    echo "deps: pointing pgrx at $PG_CONFIG"
    cargo pgrx init --pg$PG_MAJOR "$PG_CONFIG" >/dev/null
fi

if [ ! -x "$VENV/bin/pytest" ]; then
    echo "deps: creating the Python test environment in $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r tests/integration/requirements.txt
fi
