#!/usr/bin/env bash
# Prints the extension's version, as Cargo (and so pgrx, the control file and the packages)
# reads it from Cargo.toml. The one place scripts take it from.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "randflake_pg"))'
