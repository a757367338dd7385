"""The DBA guide's marked code blocks, and how test_dba_guide.py runs them exactly as written.

A block the suite runs is marked in its page by an HTML comment on the line before its fence,
which Markdown renders as nothing:

    <!-- dba-guide: NAME [as=ROLE] [db=DATABASE] [daemon] -->
    ```sql
    CREATE EXTENSION randflake_pg;
    ```

The fence's language says what the block is: `sql` runs through psql, as ROLE (default
`postgres`) in DATABASE (default `postgres`); `sh` runs in bash, as root, or as the server's
user with `as=postgres`, in the background with `daemon` (`pg_autoctl run`), with the staged
PostgreSQL's programs first on PATH; no language is
`postgresql.conf` lines, appended to the server's file. A block in a list item may be indented;
the indentation goes.

What a page cannot know (host names, ports, paths, passwords) is written there as a DBA would
write it, and each test substitutes those texts by its own values from one table of
placeholders, `{text in the page: value in the test}` (the longest text first), printed with the
block on failure. No other rewriting is done. After substitution, no placeholder-looking text may be left
(PLACEHOLDER_PATTERNS), so that a page which gains a host, a port or a path the test does not
know fails loudly instead of running against the wrong server.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
from typing import Mapping

from lib.cluster import ROOT, owner_ids, pg_config

DOCS = ROOT / "docs"

_MARKED_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)<!-- dba-guide: (?P<name>[\w-]+)(?P<options>(?: [\w=.-]+)*) -->\n"
    r"(?P=indent)```(?P<language>\w*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_MARKER = re.compile(r"<!-- dba-guide:")
LANGUAGES = {"sql", "sh", ""}
OPTIONS = {"as", "db", "daemon"}

# Texts that are placeholders wherever they appear: a host of the example.com kind, PostgreSQL's
# default port, an elided password, a Debian path of the server's files.
PLACEHOLDER_PATTERNS = (
    re.compile(r"\b[\w-]+\.example\b"),
    re.compile(r"\b5432\b"),
    re.compile(r"'\.\.\.'"),
    re.compile(r"/etc/postgresql/"),
    re.compile(r"/var/lib/postgresql/"),
)


@dataclasses.dataclass(frozen=True)
class Block:
    page: str
    name: str
    language: str
    text: str
    options: Mapping[str, str]

    @property
    def role(self) -> str:
        """Who runs it: a database role for SQL; `root` (the default) or `postgres` for a shell."""
        return self.options.get("as", "postgres" if self.language == "sql" else "root")

    @property
    def database(self) -> str:
        return self.options.get("db", "postgres")

    @property
    def daemon(self) -> bool:
        return "daemon" in self.options

    def substituted(self, placeholders: Mapping[str, str]) -> str:
        """The block's text with every placeholder replaced; fails if one is left."""
        text = self.text
        # Longest first, so that `5432,5432` is replaced whole before `5432` could be.
        for placeholder in sorted(placeholders, key=len, reverse=True):
            text = text.replace(placeholder, placeholders[placeholder])
        left = [match.group() for pattern in PLACEHOLDER_PATTERNS for match in pattern.finditer(text)]
        assert not left, (f"{self}: placeholders {left} have no test value in {dict(placeholders)}; "
                          f"after substitution:\n{text}")
        return text

    def __str__(self) -> str:
        return f"docs/{self.page} block {self.name!r}"


def _parse_options(text: str) -> dict[str, str]:
    options = {}
    for word in text.split():
        key, _, value = word.partition("=")
        assert key in OPTIONS, f"unknown dba-guide option {word!r}"
        options[key] = value
    return options


def blocks(page: str) -> dict[str, Block]:
    """Every marked block of docs/`page`, by name; fails on a marker not followed by a fenced
    block, on a name used twice and on a language the suite cannot run."""
    source = (DOCS / page).read_text()
    found: dict[str, Block] = {}
    for match in _MARKED_BLOCK.finditer(source):
        indent = match["indent"]
        lines = match["body"].splitlines()
        assert all(line.startswith(indent) or not line.strip() for line in lines), \
            f"{page}: {match['name']} is not indented as its fence"
        block = Block(page, match["name"], match["language"], "\n".join(line[len(indent):] for line in lines) + "\n",
                      _parse_options(match["options"]))
        assert block.name not in found, f"{page}: two blocks named {block.name}"
        assert block.language in LANGUAGES, f"{block}: cannot run a {block.language!r} block"
        found[block.name] = block
    markers = len(_MARKER.findall(source))
    assert markers == len(found), f"{page}: {markers} dba-guide markers, but only {len(found)} mark a fenced block"
    return found


def block(page: str, name: str) -> Block:
    found = blocks(page)
    assert name in found, f"docs/{page} has no block marked {name!r}: it has {sorted(found)}"
    return found[name]


def bindir() -> str:
    return pg_config("--bindir")


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    """The staged PostgreSQL's programs first on PATH, as on a server where they are installed."""
    return {**os.environ, "PATH": f"{bindir()}:{os.environ.get('PATH', '/usr/bin:/bin')}", **(extra or {})}


def run_sql(block: Block, placeholders: Mapping[str, str], host: str, port: int) -> str:
    """Runs an `sql` block through psql, stopping at the first error, as the block's role in its
    database; returns psql's output."""
    assert block.language == "sql", f"{block} is not SQL"
    command = [f"{bindir()}/psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", host, "-p", str(port), "-U", block.role,
               "-d", block.database]
    result = subprocess.run(command, input=block.substituted(placeholders), capture_output=True, text=True,
                            env=_env(None))
    assert result.returncode == 0, f"{block} failed:\n{block.substituted(placeholders)}\n{result.stdout}{result.stderr}"
    return result.stdout


def _shell(block: Block, placeholders: Mapping[str, str]) -> list[str]:
    assert block.language == "sh", f"{block} is not a shell block"
    assert block.role in ("root", "postgres"), f"{block}: a shell block runs as root or as postgres"
    return ["bash", "-euo", "pipefail", "-c", block.substituted(placeholders)]


def _user(block: Block) -> dict:
    """subprocess's arguments that run `block` as the server's user (the tests may run as root)."""
    if block.role != "postgres" or os.getuid() != 0:
        return {}
    uid, gid = owner_ids()
    return {"user": uid, "group": gid, "extra_groups": []}


def run_shell(block: Block, placeholders: Mapping[str, str], env: Mapping[str, str] | None = None,
              cwd: pathlib.Path | None = None) -> str:
    """Runs an `sh` block to its end; returns its output."""
    assert not block.daemon, f"{block} runs in the background: start_daemon()"
    result = subprocess.run(_shell(block, placeholders), capture_output=True, text=True, env=_env(env), cwd=cwd,
                            **_user(block))
    assert result.returncode == 0, f"{block} failed:\n{block.substituted(placeholders)}\n{result.stdout}{result.stderr}"
    return result.stdout


def start_daemon(block: Block, placeholders: Mapping[str, str], log: pathlib.Path,
                 env: Mapping[str, str] | None = None, cwd: pathlib.Path | None = None) -> subprocess.Popen:
    """Starts a `daemon` block in a process group of its own, its output going to `log`."""
    assert block.daemon, f"{block} is not marked daemon"
    with open(log, "a") as output:
        return subprocess.Popen(_shell(block, placeholders), env=_env(env), cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=output, stderr=subprocess.STDOUT, start_new_session=True, **_user(block))


def append_config(block: Block, placeholders: Mapping[str, str], config: pathlib.Path) -> None:
    """Appends a `postgresql.conf` block to `config`."""
    assert block.language == "", f"{block} is not postgresql.conf lines"
    with open(config, "a") as conf:
        conf.write(f"# {block}\n{block.substituted(placeholders)}")
