#!/usr/bin/env python3
"""Decode Randflake IDs that randflake_pg made, with the Python reference port.

    RANDFLAKE_SECRET_FILE=/etc/postgresql/15/main/randflake.key python decode_ids.py ID [ID ...]
    RANDFLAKE_SECRET=<32 hex digits> python decode_ids.py --string STRING [STRING ...]

An application holding the servers' secret can read any ID back into the second it was made in,
the node that made it and its sequence number in that second, without asking the database.

Input: IDs as signed decimal 64-bit integers (what a `bigint` column holds; about half of all IDs
are negative), or with --string their canonical base32hex form (what randflake_to_string()
returns). The secret comes from exactly one of RANDFLAKE_SECRET (32 hex digits) or
RANDFLAKE_SECRET_FILE (a file holding them, readable by its owner only, like the server's key
file).

Output: one line per ID, in the order given:

    <id> <string> <unix_seconds> <node> <sequence>

the same values as `randflake_to_string(id)` and `randflake_decode(id)` in SQL. Any bad input
prints nothing on stdout, one message on stderr, and exits with status 2. No message ever
contains the secret or a part of it.

Decoding does not authenticate: every 64-bit value decodes to some (second, node, sequence).
A result is meaningful only for IDs that one of your servers (or generators) really issued.

Needs `pip install randflake==2.1.0` (module `randflake.v2`). To make IDs outside the database
with the same secret, see make_ids.py next to this file.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
from typing import Callable

from randflake.v2 import RANDFLAKE_EPOCH_OFFSET, Config, Generator, Lease, RandflakeError, decode_string, encode_string

SECRET_ENV = "RANDFLAKE_SECRET"
SECRET_FILE_ENV = "RANDFLAKE_SECRET_FILE"
SECRET_HEX_DIGITS = 32
# A key file is 32 digits and a newline; anything much larger is the wrong file.
KEY_FILE_MAX_BYTES = 4096

_HEX_DIGIT = re.compile(r"[0-9a-fA-F]")
_DECIMAL = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class InputError(Exception):
    """Bad input. Messages describe the input's shape, never the secret."""


def _shown(text: str) -> str:
    """An argument quoted in a message, cut short: no ID is longer than 20 characters, and a
    secret pasted by mistake where an ID belongs (32 digits) is never echoed whole."""
    return repr(text if len(text) <= 20 else text[:20] + "…")


def parse_secret(text: str, origin: str) -> bytes:
    """Exactly 32 hex digits, either case. Errors name positions, never characters."""
    if len(text) != SECRET_HEX_DIGITS:
        raise InputError(f"{origin} has {len(text)} characters; it must be exactly {SECRET_HEX_DIGITS} hex digits")
    for position, character in enumerate(text):
        if not _HEX_DIGIT.fullmatch(character):
            raise InputError(f"{origin} has a character that is not a hex digit at position {position}")
    return bytes.fromhex(text)


def read_key_file(path: str) -> bytes:
    """A key file: 32 hex digits, white space around them allowed; refused if its group or
    others may access it (the rule the server applies to randflake.secret_file)."""
    origin = f"the key file named by {SECRET_FILE_ENV}"
    try:
        with open(path, "rb") as key_file:
            info = os.fstat(key_file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"{origin} is not a regular file")
            if info.st_mode & 0o077:
                raise InputError(
                    f"{origin} has permissions {stat.S_IMODE(info.st_mode):04o}; "
                    "it must not be accessible to group or others (chmod 600)"
                )
            content = key_file.read(KEY_FILE_MAX_BYTES + 1)
    except OSError as error:
        raise InputError(f"{origin} cannot be read: {error.strerror}") from None
    if len(content) > KEY_FILE_MAX_BYTES:
        raise InputError(f"{origin} is far larger than a key file")
    try:
        text = content.decode("ascii")
    except UnicodeDecodeError:
        raise InputError(f"{origin} holds something other than hex digits") from None
    return parse_secret(text.strip(), origin)


def load_secret(environ=os.environ) -> bytes:
    """The 16-byte secret from RANDFLAKE_SECRET or the file named by RANDFLAKE_SECRET_FILE."""
    value, path = environ.get(SECRET_ENV), environ.get(SECRET_FILE_ENV)
    if value is not None and path is not None:
        raise InputError(f"both {SECRET_ENV} and {SECRET_FILE_ENV} are set; set only one")
    if value is not None:
        return parse_secret(value, SECRET_ENV)
    if path:
        return read_key_file(path)
    raise InputError(f"no secret: set {SECRET_ENV} (32 hex digits) or {SECRET_FILE_ENV} (a key file)")


def parse_id(text: str, as_string: bool) -> int:
    if as_string:
        try:
            return decode_string(text)
        except RandflakeError:
            raise InputError(
                f"{_shown(text)} is not an ID string: canonical base32hex is 1 to 13 characters of "
                "0-9 and a-v (lower case), with no leading zero, padding or sign, at most 64 bits"
            ) from None
    if not _DECIMAL.fullmatch(text):
        raise InputError(f"{_shown(text)} is not a decimal ID (pass --string for base32hex strings)")
    value = int(text)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InputError(f"{_shown(text)} is outside the signed 64-bit range of IDs")
    return value


def decoder(secret: bytes) -> Generator:
    """A reference Generator used only to inspect. Config requires a lease; this one (node 0,
    the first second of the epoch) is never used, because this program generates nothing."""
    lease = Lease(node_id=0, start=RANDFLAKE_EPOCH_OFFSET, end_exclusive=RANDFLAKE_EPOCH_OFFSET + 1)
    return Generator(Config(lease=lease, secret=secret))


def describe(generator: Generator, id_: int) -> str:
    """`<id> <string> <unix_seconds> <node> <sequence>` for one ID."""
    parts = generator.inspect(id_)
    return f"{id_} {encode_string(id_)} {parts.timestamp} {parts.node_id} {parts.sequence}"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are InputErrors: exit status 2 like any bad input."""

    def error(self, message):
        raise InputError(message)


def report(prog: str, work: Callable[[], tuple[Generator, list[int]]]) -> int:
    """Runs `work`, then prints a line per ID it returns (exit 0), or its error (exit 2)."""
    try:
        generator, ids = work()
    except (InputError, RandflakeError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    print("\n".join(describe(generator, id_) for id_ in ids))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        prog="decode_ids.py",
        allow_abbrev=False,
        description="Decode Randflake IDs: prints <id> <string> <unix_seconds> <node> <sequence> per ID.",
        epilog=f"The secret comes from {SECRET_ENV} or {SECRET_FILE_ENV}.",
    )
    parser.add_argument("--string", action="store_true", help="the IDs are base32hex strings, not decimal")
    parser.add_argument("ids", nargs="+", metavar="ID", help="signed decimal 64-bit IDs (or strings with --string)")

    def work():
        arguments = parser.parse_args(argv)
        ids = [parse_id(text, arguments.string) for text in arguments.ids]
        return decoder(load_secret()), ids

    return report("decode_ids", work)


if __name__ == "__main__":
    sys.exit(main())
