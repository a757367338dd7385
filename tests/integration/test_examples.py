"""The application examples (examples/) read IDs exactly as the server does.

IDs made by randflake_pg are decoded by each example program and by randflake_decode() /
randflake_to_string() in SQL, and every output line must be the SQL answer. The examples share
one command-line contract: IDs as arguments (signed decimal, or base32hex with --string), the
secret from RANDFLAKE_SECRET or the key file named by RANDFLAKE_SECRET_FILE, one line
`<id> <string> <unix_seconds> <node> <sequence>` per ID, and exit status 2 with a message (and
never the secret) on bad input.

Examples checked: Python (examples/python/decode_ids.py, run with this interpreter, which has
the reference port) and Rust (`cargo run -p randflake --example decode`, built once per session).
The Go example is not run here: see examples/README.md. The lease client
(examples/python/lease_client.py) is run against a real server, which is stopped under it.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import secrets
import subprocess
import sys

import pytest

from lib.cluster import ROOT, decoded_ids, wait_for

PYTHON_EXAMPLES = ROOT / "examples" / "python"
EXAMPLES = ["python", "rust"]
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Values at the edges of the codec: zero, both signs of one, both ends of bigint.
EDGE_IDS = [0, 1, -1, INT64_MAX, INT64_MIN]
# Each sign, from IDs the server makes; half of all IDs are negative.
PER_SIGN = 150
# The application's nodes in the make_ids test: above the server's range.
SERVER_NODES = ("randflake.node_id_min = 0", "randflake.node_id_max = 1023")
APP_NODE = 130000


@pytest.fixture(scope="session")
def rust_decode() -> list[str]:
    """Builds the Rust example once and returns the command that runs its binary.

    In a target directory of its own: `make test` builds in the workspace's at the same time
    (tools/beside.sh), and cargo lets one build at a time use a directory."""
    build = subprocess.run(
        ["cargo", "build", "-q", "-p", "randflake", "--example", "decode", "--message-format=json",
         "--target-dir", str(ROOT / "target" / "examples")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, f"cargo build of the Rust example failed:\n{build.stderr[-4000:]}"
    for line in build.stdout.splitlines():
        message = json.loads(line)
        target = message.get("target", {})
        if message.get("reason") == "compiler-artifact" and target.get("name") == "decode":
            if message.get("executable"):
                return [message["executable"]]
    raise AssertionError("cargo build reported no executable for the Rust example `decode`")


@pytest.fixture(params=EXAMPLES)
def example(request) -> list[str]:
    """The command line of one decoding example, before its arguments."""
    if request.param == "python":
        return [sys.executable, str(PYTHON_EXAMPLES / "decode_ids.py")]
    return request.getfixturevalue("rust_decode")


def run(command: list[str], *arguments: str, secret: str | None = None, secret_file: pathlib.Path | None = None):
    """Runs an example with exactly the given secret settings (none inherited)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("RANDFLAKE_SECRET")}
    if secret is not None:
        env["RANDFLAKE_SECRET"] = secret
    if secret_file is not None:
        env["RANDFLAKE_SECRET_FILE"] = str(secret_file)
    return subprocess.run([*command, *arguments], env=env, capture_output=True, text=True, timeout=120)


def key_file(directory: pathlib.Path, content: str, mode: int = 0o600, name: str = "randflake.key") -> pathlib.Path:
    path = directory / name
    path.write_text(content)
    path.chmod(mode)
    return path


def assert_secret_not_shown(result: subprocess.CompletedProcess, secret_hex: str) -> None:
    """Neither the secret nor either half of it, in either case, anywhere in the output."""
    shown = (result.stdout + result.stderr).lower()
    for piece in (secret_hex, secret_hex[:16], secret_hex[16:]):
        assert piece.lower() not in shown, "the example printed (part of) the secret"


def sample_ids(conn) -> list[int]:
    """PER_SIGN negative and PER_SIGN non-negative IDs from randflake_next(), and the edge
    values, in a shuffled order so that signs alternate irregularly."""
    rows = conn.execute(
        f"""WITH made AS (SELECT randflake_next() AS id FROM generate_series(1, {8 * PER_SIGN}))
            (SELECT id FROM made WHERE id < 0 LIMIT {PER_SIGN})
            UNION ALL (SELECT id FROM made WHERE id >= 0 LIMIT {PER_SIGN})"""
    ).fetchall()
    made = [id_ for (id_,) in rows]
    assert sum(id_ < 0 for id_ in made) == PER_SIGN and sum(id_ >= 0 for id_ in made) == PER_SIGN
    ids = made + EDGE_IDS
    random.Random(20241027).shuffle(ids)
    return ids


def sql_lines(conn, ids: list[int]) -> list[str]:
    """What the examples must print for `ids`, as computed by the server."""
    strings = conn.execute(
        "SELECT randflake_to_string(s.id) FROM unnest(%s::bigint[]) WITH ORDINALITY AS s(id, n) ORDER BY s.n",
        (ids,),
    ).fetchall()
    decoded = decoded_ids(conn, ids)
    return [
        f"{id_} {text} {second} {node} {sequence}"
        for id_, (text,), (second, node, sequence) in zip(ids, strings, decoded)
    ]


def test_example_decodes_ids_like_sql(cluster, example, tmp_path):
    with cluster.connect() as conn:
        ids = sample_ids(conn)
        expected = sql_lines(conn, ids)
    secret_hex = cluster.key_hex

    decimal = run(example, *map(str, ids), secret=secret_hex)
    assert (decimal.returncode, decimal.stderr) == (0, "")
    assert decimal.stdout.splitlines() == expected

    strings = [line.split()[1] for line in expected]
    by_string = run(example, "--string", *strings, secret_file=key_file(tmp_path, secret_hex + "\n"))
    assert (by_string.returncode, by_string.stderr) == (0, "")
    assert by_string.stdout.splitlines() == expected

    # The secret in upper case is the same secret.
    upper = run(example, *map(str, ids[:5]), secret=secret_hex.upper())
    assert (upper.returncode, upper.stdout.splitlines()) == (0, expected[:5])

    for result in (decimal, by_string, upper):
        assert_secret_not_shown(result, secret_hex)


# Bad input: (name, arguments, how the secret is given). "env" passes the good secret in
# RANDFLAKE_SECRET; the other ways are set up by test_bad_input_exits_2.
BAD_INPUT = [
    ("no IDs", [], "env"),
    ("letters as decimal", ["12x"], "env"),
    ("empty decimal", [""], "env"),
    ("decimal above bigint", [str(INT64_MAX + 1)], "env"),
    ("decimal below bigint", [str(INT64_MIN - 1)], "env"),
    ("decimal with a fraction", ["1.5"], "env"),
    ("an ID string without --string", ["3vgoe12ccb8gh"], "env"),
    ("a good ID then a bad one", ["1", "nope"], "env"),
    ("empty string", ["--string", ""], "env"),
    ("upper-case string", ["--string", "3VGOE12CCB8GH"], "env"),
    ("string with a leading zero", ["--string", "01"], "env"),
    ("padded string", ["--string", "abc="], "env"),
    ("string past 64 bits", ["--string", "g000000000000"], "env"),
    ("fourteen-digit string", ["--string", "10000000000000"], "env"),
    ("string outside the alphabet", ["--string", "w"], "env"),
    ("signed string", ["--string", "-1"], "env"),
    ("no secret", ["1"], "none"),
    ("secret of 31 digits", ["1"], "short"),
    ("secret of 33 digits", ["1"], "long"),
    ("secret with a non-hex digit", ["1"], "nonhex"),
    ("missing key file", ["1"], "missing file"),
    ("key file readable by others", ["1"], "open file"),
    ("key file with 31 digits", ["1"], "short file"),
    ("empty key file", ["1"], "empty file"),
]


@pytest.mark.parametrize("case", BAD_INPUT, ids=[case[0] for case in BAD_INPUT])
def test_bad_input_exits_2(example, case, tmp_path):
    name, arguments, secret_source = case
    secret_hex = secrets.token_hex(16)
    given = {
        "env": {"secret": secret_hex},
        "none": {},
        "short": {"secret": secret_hex[:31]},
        "long": {"secret": secret_hex + "0"},
        "nonhex": {"secret": secret_hex[:20] + "g" + secret_hex[21:]},
        "missing file": {"secret_file": tmp_path / "missing.key"},
        "open file": {"secret_file": key_file(tmp_path, secret_hex + "\n", mode=0o644)},
        "short file": {"secret_file": key_file(tmp_path, secret_hex[:31] + "\n")},
        "empty file": {"secret_file": key_file(tmp_path, "")},
    }[secret_source]
    result = run(example, *arguments, **given)
    assert result.returncode == 2, f"exit {result.returncode}; stdout {result.stdout!r}; stderr {result.stderr!r}"
    assert result.stderr.strip(), "no message on stderr"
    if name != "a good ID then a bad one":  # whether the good line comes first is the example's choice
        assert result.stdout == ""
    for crash in ("Traceback", "panicked", "RUST_BACKTRACE", "goroutine "):
        assert crash not in result.stderr
    assert_secret_not_shown(result, secret_hex)


def test_ids_made_by_the_application_example_decode_in_sql(make_cluster, tmp_path):
    """make_ids.py issues IDs on an application node outside the server's node range, under the
    server's secret: the server decodes them to the same second, node and sequence."""
    cluster = make_cluster(*SERVER_NODES)
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        made = run(
            [sys.executable, str(PYTHON_EXAMPLES / "make_ids.py")],
            "--node", str(APP_NODE), "--count", "50",
            secret_file=key_file(tmp_path, cluster.key_hex),
        )
        assert (made.returncode, made.stderr) == (0, "")
        lines = made.stdout.splitlines()
        ids = [int(line.split()[0]) for line in lines]
        assert len(set(ids)) == 50
        assert lines == sql_lines(conn, ids)
        assert {int(line.split()[3]) for line in lines} == {APP_NODE}
        (server_node,) = conn.execute("SELECT node_id FROM randflake_decode(randflake_next())").fetchone()
    assert server_node <= 1023 < APP_NODE
    assert_secret_not_shown(made, cluster.key_hex)


LEASE_CLIENT = PYTHON_EXAMPLES / "lease_client.py"
APP_POOL = ("randflake.app_node_id_min = 130000", "randflake.app_node_id_max = 130003")
WINDOW = re.compile(r"(leased|extended) node (\d+): seconds \[(\d+), (\d+)\)")


def lease_client_server(make_cluster) -> tuple:
    """A server with an application pool and a role granted the lease functions; its DSN."""
    cluster = make_cluster(*SERVER_NODES, *APP_POOL)
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        conn.execute("CREATE ROLE orders_service LOGIN")
        conn.execute(
            """GRANT EXECUTE ON PROCEDURE randflake_lease_acquire(text, integer),
                   randflake_lease_extend(text, integer, integer), randflake_lease_release(text, integer)
                TO orders_service"""
        )
    return cluster, f"host={cluster.dir} port={cluster.port} dbname=postgres user=orders_service"


def start_lease_client(dsn: str, key: pathlib.Path, out: pathlib.Path, *arguments: str) -> subprocess.Popen:
    env = {name: value for name, value in os.environ.items() if not name.startswith("RANDFLAKE_SECRET")}
    env["RANDFLAKE_SECRET_FILE"] = str(key)
    return subprocess.Popen(
        [sys.executable, str(LEASE_CLIENT), "--dsn", dsn, *arguments],
        env=env,
        stdout=open(out / "ids", "w"),
        stderr=open(out / "log", "w"),
    )


def windows_in(log: str) -> list[tuple[str, int, int, int]]:
    """(event, node, start, end_exclusive) of every lease window the client reported."""
    return [(event, int(node), int(start), int(end)) for event, node, start, end in WINDOW.findall(log)]


def test_the_lease_client_leases_extends_issues_inside_its_window_and_releases(make_cluster, tmp_path):
    cluster, dsn = lease_client_server(make_cluster)
    client = start_lease_client(
        dsn, key_file(tmp_path, cluster.key_hex), tmp_path, "--holder", "orders-7", "--seconds", "3",
        "--duration", "5", "--rate", "50",
    )
    assert client.wait(30) == 0, (tmp_path / "log").read_text()
    log = (tmp_path / "log").read_text()
    windows = windows_in(log)
    assert windows[0][0] == "leased" and len(windows) >= 3, log
    node, start = windows[0][1:3]
    assert {(window[1], window[2]) for window in windows} == {(node, start)}, "an extension keeps node and start"
    end = windows[-1][3]
    assert f"released node {node}" in log
    ids = [int(line) for line in (tmp_path / "ids").read_text().split()]
    assert len(ids) > 100 and len(set(ids)) == len(ids)
    with cluster.connect() as conn:
        decoded = decoded_ids(conn, ids)
        assert {node_id for _, node_id, _ in decoded} == {node}
        assert all(start <= second < end for second, _, _ in decoded)
        row = conn.execute(
            "SELECT holder, server_name FROM randflake.node_leases WHERE first_node = %s AND lease_start = %s",
            (node, start),
        ).fetchone()
    # What a release writes in place of the holder: no application's holder can name it.
    assert row[0] in ("released", "released/orders_service/orders-7")
    assert row[1] == "released by application orders_service: orders-7"


def test_the_lease_client_stops_issuing_exactly_when_a_lease_it_cannot_extend_ends(make_cluster, tmp_path):
    """The database goes away: the client keeps issuing until its lease ends, not a second
    less, and not an ID after."""
    cluster, dsn = lease_client_server(make_cluster)
    client = start_lease_client(
        dsn, key_file(tmp_path, cluster.key_hex), tmp_path, "--holder", "orders-8", "--seconds", "4", "--rate", "50"
    )
    log = tmp_path / "log"

    def extended() -> bool:
        if "extended node" in log.read_text():
            return True
        assert client.poll() is None, log.read_text()
        return False

    wait_for(extended, 20, "the client to extend its lease", details=log.read_text)
    cluster.stop()
    try:
        client.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("the client kept running long after its lease")
    text = log.read_text()
    assert client.returncode == 3, text
    end = windows_in(text)[-1][3]
    assert "cannot extend" in text
    # It stopped at its lease's end (the next ID after it), not before: by the time on its own log
    # line, since its exit also waits for a release the stopped server cannot answer.
    stopped = [float(line.split()[0]) for line in text.splitlines() if "stopped issuing" in line]
    assert len(stopped) == 1 and end <= stopped[0] < end + 1, (end, stopped, text)
    ids = [int(line) for line in (tmp_path / "ids").read_text().split()]
    reader = decoder_for(cluster.key_bytes)
    seconds = [reader.inspect(id_).timestamp for id_ in ids]
    assert max(seconds) == end - 1, (max(seconds), end)
    assert sum(second == end - 1 for second in seconds) >= 10, "it issued through the lease's last second"
    assert len(set(ids)) == len(ids)


def decoder_for(secret: bytes):
    """The reference port, to read IDs while the server is down."""
    from randflake.v2 import RANDFLAKE_EPOCH_OFFSET, Config, Generator, Lease

    lease = Lease(node_id=0, start=RANDFLAKE_EPOCH_OFFSET, end_exclusive=RANDFLAKE_EPOCH_OFFSET + 1)
    return Generator(Config(lease=lease, secret=secret))
