#!/usr/bin/env python3
"""Make Randflake IDs in an application, outside the database, with the Python reference port.

    RANDFLAKE_SECRET_FILE=/path/to/randflake.key python make_ids.py --node 130000 [--count 5]

Prints `<id> <string> <unix_seconds> <node> <sequence>` per ID, like decode_ids.py. The IDs can go
into the same `bigint` columns as the ones randflake_next() makes, and both kinds decode with
randflake_decode() in SQL and with decode_ids.py, as long as two rules hold:

1. **The same secret** as the servers. IDs made under different secrets are unrelated random
   numbers that can collide with each other, and randflake_decode() reads garbage from them.

2. **Node IDs no server uses.** An ID is the encryption of (second, node, sequence). Each
   randflake_pg server takes its nodes from `randflake.node_id_min..randflake.node_id_max`
   (in fleet mode, from the fleet's pool) and numbers the IDs of a node's second by sequence
   from 0 upward, as the reference Generator does. If this program used a node that a server
   also uses, both could encrypt the same (second, node, sequence): the same ID twice, which is
   a primary-key violation at best and two different rows sharing one ID at worst (in tables
   without that key, or once rows are copied elsewhere). The servers cannot notice or prevent
   it, because the application never asks them. So split the 131072 nodes (0..131071) once
   and for all: for example servers 0..122879 (fifteen servers × 8192 nodes) and applications
   122880..131071. The servers' default range is *every* node (0..131071), so narrow it in
   every server's postgresql.conf before any application generates IDs of its own.

Within the application's range the same rule holds between processes: only one running
generator per node. The library keeps no state across restarts, so a generator that restarts
in a second its predecessor already issued in would repeat its sequences; this program therefore
starts its lease at the next whole second and waits for it. A real application takes its node
from its own lease table (or a fixed per-process assignment) the way the servers take theirs
from `randflake.node_leases`.
"""

from __future__ import annotations

import argparse
import sys
import time

from decode_ids import Parser, load_secret, report
from randflake.v2 import RANDFLAKE_MAX_NODE, Config, ErrResourceExhausted, Generator, Lease

LEASE_SECONDS = 3600


def _node(text: str) -> int:
    value = int(text)
    if not 0 <= value <= RANDFLAKE_MAX_NODE:
        raise argparse.ArgumentTypeError(f"a node is 0 to {RANDFLAKE_MAX_NODE}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("at least 1")
    return value


def generator_for(node: int, secret: bytes) -> Generator:
    """A generator for `node`, leased from the next whole second for an hour."""
    start = int(time.time()) + 1
    time.sleep(max(0.0, start - time.time()))
    return Generator(Config(lease=Lease(node_id=node, start=start, end_exclusive=start + LEASE_SECONDS), secret=secret))


def make(generator: Generator, count: int) -> list[int]:
    ids = []
    while len(ids) < count:
        try:
            ids.append(generator.generate())
        except ErrResourceExhausted:
            # 131072 IDs in this second on this node: wait for the next second.
            time.sleep(1 - time.time() % 1)
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="make_ids.py", allow_abbrev=False, description="Make Randflake IDs on one application node.")
    parser.add_argument(
        "--node", type=_node, required=True, help="a node in the application's range, used by no server"
    )
    parser.add_argument("--count", type=_count, default=1, help="how many IDs (default 1)")

    def work():
        arguments = parser.parse_args(argv)
        generator = generator_for(arguments.node, load_secret())
        return generator, make(generator, arguments.count)

    return report("make_ids", work)


if __name__ == "__main__":
    sys.exit(main())
