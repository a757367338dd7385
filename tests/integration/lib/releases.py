"""The earlier releases of the extension, whose install scripts as released are kept in
tests/upgrade/, put where a server that ran them has them."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from lib.cluster import ROOT, pg_config

# Every earlier release, whose install script as released is kept in tests/upgrade/.
RELEASES = ["0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0"]
# The release before leases: its keeper's database has no lease table.
BEFORE_LEASES = "0.1.0"
CURRENT = subprocess.run([ROOT / "tools" / "version.sh"], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module", autouse=True)
def release_scripts():
    """Puts the earlier releases' install scripts beside the installed extension, as a server
    that ran those releases has them, so that CREATE EXTENSION ... VERSION can install them.
    Each is renamed into place whole, and left there: test_script_hijack.py uses them too,
    perhaps in another worker at the same time."""
    for release in RELEASES:
        script = ROOT / "tests" / "upgrade" / f"randflake_pg--{release}.sql"
        target = pathlib.Path(pg_config("--sharedir")) / "extension" / script.name
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        shutil.copyfile(script, partial)
        partial.replace(target)
