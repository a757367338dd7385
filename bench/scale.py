#!/usr/bin/env python3
"""`make bench-scale`: insert throughput as the table outgrows shared_buffers, and what a DBA can
do about it.

One cluster of its own (tests/scratch-cluster.sh) with deliberately small shared_buffers. One
table per key (identity bigint, randflake_next(), randflake_next_key() in a randflake_key column,
a uniformly random bigint, gen_random_uuid(), and uuidv7() on PostgreSQL 18) is grown in steps, all to the same row count, until the indexes of both random keys
(randflake_next() and gen_random_uuid()) are at least --steps' largest multiple of
shared_buffers. At each step every key gets a measured interval of single-row INSERTs from
pgbench, the keys taking turns in an order that rotates from step to step and round to round, so
that noise on the machine spreads over all of them:

  warm-up    pg_prewarm() of the index, then --warmup-rows of the same INSERTs, unmeasured;
  CHECKPOINT so that no checkpoint started by another key lands in this key's interval;
  interval   --interval-rows INSERTs; no checkpoint can start inside it (checkpoint_timeout 1h,
             max_wal_size 16GB; the checkpoint counters are checked).

Intervals are counted in rows, not seconds, so that every key adds the same rows at every step
and the tables stay the same size: a timed interval at 60,000 rows a second would add more rows
than a small step holds.

Every interval therefore starts a checkpoint cycle, as on a production server, and pays what the
cycle costs: the first change to a page after a checkpoint writes a full-page image into the WAL,
and random keys change a different leaf page with nearly every row. That is part of the real
cost of random keys, so full_page_writes stays on; the WAL bytes and full-page images per row are
reported with the throughput. A longer interval stands for a longer checkpoint cycle, over which a
leaf page's image is shared by more rows: at the default 400,000 rows, a cycle far shorter than a
production server's, the images weigh more here than they would there.

Then, at the largest size: point lookups by primary key (keys sampled uniformly from the whole
table, and from the newest rows); a count of the rows made in one window of time, by what each
key offers for it; the remedies on the grown tables (wal_compression, more
shared_buffers, a batch as generated and sorted by key); the bulk-load recipes on fresh tables of the same row count (plain, in key
order, index built after the load); and fillfactor on an index built after a load.

Everything measured is saved to <out>/scale.json after each measurement: run it again with the
same --out and it carries on where it stopped (the cluster is kept until the run completes).
Writes scale.txt (the report), scale.csv, scale.json and scale.png into --out.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import pathlib
import platform
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stdout
from dataclasses import dataclass

import psycopg

from bench import ScratchCluster, fmt_spread, pgbench_run, rotated, summary, wait_for_lease

MB = 2**20


@dataclass(frozen=True)
class Key:
    name: str
    slug: str
    type: str
    default: str | None  # None for the identity column

    def columns(self, primary_key: bool = True) -> str:
        constraint = " PRIMARY KEY" if primary_key else ""
        if self.default is None:
            return f"id bigint GENERATED ALWAYS AS IDENTITY{constraint}, payload int"
        return f"id {self.type}{constraint} DEFAULT {self.default}, payload int"


IDENTITY = Key("identity bigint", "identity", "bigint", None)
RANDFLAKE = Key("randflake_next()", "randflake", "bigint", "randflake_next()")
# The ordered key: the plain value on disk, the encrypted ID at the edge (docs/ordered-keys.md).
RANDFLAKE_KEY = Key("randflake_next_key()", "randflake_key", "randflake_key", "randflake_next_key()")
# The physical limit of any unpredictable 8-byte key stored as itself: 64 uniformly random bits
# (two draws of 32, as random() has 52 bits; << wraps into the sign bit), which randflake_next()
# as bigint should match.
RANDOM_BIGINT = Key("random bigint", "random", "bigint",
                    "(floor(random() * 2^32)::bigint << 32) | floor(random() * 2^32)::bigint")
UUID4 = Key("gen_random_uuid()", "uuid4", "uuid", "gen_random_uuid()")
UUID7 = Key("uuidv7()", "uuid7", "uuid", "uuidv7()")
KEYS = [IDENTITY, RANDFLAKE, RANDFLAKE_KEY, RANDOM_BIGINT, UUID4, UUID7]

# A first guess of index bytes per row, before a table has rows to measure: generous, so that the
# first growth falls short and the measured figure steers the rest.
FIRST_GUESS_BYTES_PER_ROW = {"bigint": 40, "uuid": 56}
LOOKUP_PATTERNS = ["uniform", "recent"]
# Issue 38's limits for randflake_key against identity at every step, both keys inserted by
# --clients (8) sessions at once: the INSERT rate, and the index bytes those INSERTs add per row.
ORDERED_TPS_LIMIT = 0.95
ORDERED_ADDED_LIMIT = 1.10
# In this order: the ones before "bulk" use the grown tables, which "bulk" drops.
PHASES = ["scale", "lookups", "timerange", "wal_compression", "shared_buffers", "batch", "bulk", "fillfactor"]


def table(key: Key, prefix: str = "t") -> str:
    return f"scale.{prefix}_{key.slug}"


def index(key: Key, prefix: str = "t") -> str:
    return f"scale.{prefix}_{key.slug}_pkey"


def parse_size(text: str) -> int:
    found = re.fullmatch(r"\s*([0-9.]+)\s*(kB|MB|GB|TB)?\s*", text)
    if not found:
        raise ValueError(f"not a size: {text}")
    unit = {"kB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40, None: 8192}[found.group(2)]
    return int(float(found.group(1)) * unit)


def size_text(size: int) -> str:
    return f"{size // MB}MB"


class Server(ScratchCluster):
    """The benchmark's cluster, kept between runs so that an interrupted run can carry on."""

    def ensure(self, settings: list[str]) -> None:
        if not pathlib.Path(self.directory, "PG_VERSION").exists():
            self.script("init", str(self.port), *settings)
        if not self.accepts():
            self.script("start")

    def accepts(self) -> bool:
        try:
            with self.connect():
                return True
        except psycopg.OperationalError:
            return False

    def restart(self) -> None:
        self.script("stop")
        self.script("start")


class State:
    """Everything measured so far, written after every measurement."""

    def __init__(self, path: pathlib.Path, fresh: bool):
        self.path = path
        self.data: dict = json.loads(path.read_text()) if path.exists() and not fresh else {}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(self.data, indent=1))
        temporary.replace(self.path)


class Scale:
    def __init__(self, args, state: State):
        self.args = args
        self.state = state
        self.data = state.data
        self.server = Server(args.dir, args.port, [])
        self.scripts = pathlib.Path(tempfile.mkdtemp(prefix="randflake_scale_"))
        self.rows: dict[str, int] = {}

    # -- the cluster -----------------------------------------------------------------------

    def base_settings(self) -> list[str]:
        settings = [f"shared_buffers = '{self.args.shared_buffers}'", "jit = off", "max_wal_size = '16GB'",
                    "checkpoint_timeout = '1h'", "log_checkpoints = on", "wal_compression = off"]
        if self.args.fsync:
            settings += ["fsync = on", "synchronous_commit = on"]
        return settings

    def connect(self) -> psycopg.Connection:
        return self.server.connect()

    def start(self) -> None:
        self.server.ensure(self.base_settings())
        with self.connect() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS randflake_pg")
            conn.execute("CREATE SCHEMA IF NOT EXISTS scale")
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
                self.prewarm = True
            except psycopg.Error:
                self.prewarm = False
            wait_for_lease(conn)
            self.version = conn.info.server_version
            self.keys = [key for key in KEYS if key.slug in self.args.keys and (key != UUID7 or self.version >= 180000)]
            self.shared_buffers = parse_size(conn.execute("SHOW shared_buffers").fetchone()[0])
            self.describe(conn)

    def describe(self, conn: psycopg.Connection) -> None:
        server = self.data.setdefault("server", {})
        server["machine"] = f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores"
        cpu = pathlib.Path("/proc/cpuinfo")
        if cpu.exists():
            model = re.search(r"model name\s*:\s*(.*)", cpu.read_text())
            server["cpu"] = model.group(1) if model else "unknown"
        memory = pathlib.Path("/proc/meminfo")
        if memory.exists():
            server["memory"] = re.search(r"MemTotal:\s*(.*)", memory.read_text()).group(1)
        server["postgres"] = conn.execute("SELECT version()").fetchone()[0]
        for name in ["shared_buffers", "fsync", "synchronous_commit", "full_page_writes", "wal_compression",
                     "max_wal_size", "checkpoint_timeout", "jit"]:
            server[name] = conn.execute(f"SHOW {name}").fetchone()[0]

    def set_system(self, conn: psycopg.Connection, name: str, value: str | None) -> None:
        """ALTER SYSTEM and a reload, waiting until new sessions see the value."""
        conn.execute(f"ALTER SYSTEM RESET {name}" if value is None else f"ALTER SYSTEM SET {name} = '{value}'")
        conn.execute("SELECT pg_reload_conf()")
        expected = value or conn.execute(f"SELECT boot_val FROM pg_settings WHERE name = '{name}'").fetchone()[0]
        deadline = time.monotonic() + 10
        while True:
            with self.connect() as fresh:
                if fresh.execute(f"SHOW {name}").fetchone()[0] == expected:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not become {expected}")
            time.sleep(0.1)

    # -- tables ----------------------------------------------------------------------------

    def create(self, conn: psycopg.Connection, key: Key, prefix: str = "t", primary_key: bool = True) -> None:
        conn.execute(f"DROP TABLE IF EXISTS {table(key, prefix)}")
        conn.execute(f"CREATE TABLE {table(key, prefix)} ({key.columns(primary_key)}) "
                     "WITH (autovacuum_enabled = off)")

    def count_rows(self, conn: psycopg.Connection) -> None:
        """Rows of each table: counted once at start-up, then kept up to date."""
        for key in self.keys:
            exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [table(key)]).fetchone()[0]
            if not exists:
                self.create(conn, key)
                self.rows[key.slug] = 0
            else:
                self.rows[key.slug] = conn.execute(f"SELECT count(*) FROM {table(key)}").fetchone()[0]

    def index_bytes(self, conn: psycopg.Connection, key: Key, prefix: str = "t") -> int:
        return conn.execute("SELECT pg_relation_size(%s)", [index(key, prefix)]).fetchone()[0]

    def grow(self, conn: psycopg.Connection, key: Key, target_rows: int) -> None:
        """INSERT ... SELECT in chunks, each key generating its own values as in the measured
        INSERTs, so that the index takes the shape those would give it."""
        while self.rows[key.slug] < target_rows:
            start = self.rows[key.slug]
            count = min(self.args.fill_chunk, target_rows - start)
            conn.execute(f"INSERT INTO {table(key)} (payload) SELECT g FROM generate_series({start + 1}, "
                         f"{start + count}) g")
            self.rows[key.slug] = start + count

    def grow_all(self, target_rows: int) -> None:
        """Every table grown at once, each by a connection of its own: the growth is not measured,
        and each index still takes the shape one inserting session gives it."""
        def grow(key: Key) -> None:
            with self.connect() as conn:
                self.grow(conn, key, target_rows)

        with ThreadPoolExecutor(len(self.keys)) as pool:
            list(pool.map(grow, self.keys))

    def rows_for(self, conn: psycopg.Connection, target_bytes: int) -> int:
        """Rows every table needs for the random keys' indexes to reach target_bytes, estimated
        from each index's bytes per row so far; 0 once both have (with neither in --keys, every
        key's index sets the size). Every table holds the same
        rows; the append-only keys' smaller indexes do not set the size, as only their rightmost
        leaf is written and it stays in the buffers whatever the index's size."""
        needed = 0
        for key in [key for key in (RANDFLAKE, UUID4) if key in self.keys] or self.keys:
            size = self.index_bytes(conn, key)
            if size >= target_bytes:
                continue
            rows = self.rows[key.slug]
            per_row = size / rows if rows >= 50_000 else FIRST_GUESS_BYTES_PER_ROW[key.type]
            needed = max(needed, rows + math.ceil((target_bytes - size) / per_row * 1.01) + 1000)
        return needed

    # -- one measured interval -------------------------------------------------------------

    def script(self, name: str, text: str) -> pathlib.Path:
        path = self.scripts / f"{name}.sql"
        path.write_text(text)
        return path

    def insert_script(self, key: Key, prefix: str = "t") -> pathlib.Path:
        return self.script(f"insert_{prefix}_{key.slug}", f"INSERT INTO {table(key, prefix)} (payload) VALUES (0);\n")

    def wal_counters(self, conn: psycopg.Connection) -> dict:
        # Backends flush their WAL statistics when they exit: wait for pgbench's to be gone.
        deadline = time.monotonic() + 30
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'").fetchone()[0]:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        lsn, records, fpi = conn.execute(
            "SELECT pg_current_wal_lsn()::text, wal_records, wal_fpi FROM pg_stat_wal").fetchone()
        checkpoints = conn.execute(
            "SELECT num_timed + num_requested FROM pg_stat_checkpointer" if self.version >= 170000 else
            "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter").fetchone()[0]
        return {"lsn": lsn, "records": records, "fpi": fpi, "checkpoints": checkpoints}

    def warm(self, conn: psycopg.Connection, key: Key, script: pathlib.Path, prefix: str = "t") -> int:
        """The index read into shared buffers as far as they hold it, then unmeasured INSERTs
        until the buffers hold what this key's inserts keep touching; returns the rows added."""
        if self.prewarm:
            conn.execute("SELECT pg_prewarm(%s)", [index(key, prefix)])
        return self.pgbench_rows(script, self.args.warmup_rows)["transactions"] if self.args.warmup_rows else 0

    def pgbench_rows(self, script: pathlib.Path, rows: int) -> dict:
        """The script run `rows` times in all, split over the clients."""
        return self.pgbench(script, 0, "-t", str(max(1, rows // self.args.clients)))

    def pgbench(self, script: pathlib.Path, seconds: int, *options: str) -> dict:
        run = pgbench_run(self.args.dir, self.args.port, script, self.args.clients, seconds, *options)
        if run["exit"] != 0 or run["failed"] or run["aborted_clients"]:
            raise RuntimeError(f"pgbench {script.name} failed: {run['errors']}")
        return run

    def insert_interval(self, conn: psycopg.Connection, key: Key, prefix: str = "t") -> dict:
        """One measured interval of single-row INSERTs: warm-up, CHECKPOINT, then --interval-rows."""
        script = self.insert_script(key, prefix)
        index_before = self.index_bytes(conn, key, prefix)
        added = self.warm(conn, key, script, prefix)
        conn.execute("CHECKPOINT")
        before = self.wal_counters(conn)
        run = self.pgbench_rows(script, self.args.interval_rows)
        after = self.wal_counters(conn)
        rows = run["transactions"]
        index_after = self.index_bytes(conn, key, prefix)
        wal_bytes = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)::bigint", [after["lsn"], before["lsn"]]).fetchone()[0]
        total_rows = None
        if prefix == "t":
            # Every pgbench transaction inserted one row, or pgbench() raised.
            self.rows[key.slug] += added + rows
            total_rows = self.rows[key.slug]
        measured = {
            "tps": run["tps"], "rows_inserted": rows, "wal_bytes_per_row": wal_bytes / rows,
            "fpi_per_row": (after["fpi"] - before["fpi"]) / rows, "wal_records_per_row": (after["records"] - before["records"]) / rows,
            "checkpoints_inside": after["checkpoints"] - before["checkpoints"],
            "index_bytes": index_after, "table_rows": total_rows,
            # What the single-row INSERTs (warm-up and interval) added to the index: the layout
            # the measured workload gives, apart from the growth's (one session's INSERT ...
            # SELECT, which spreads a randflake_key's second over several nodes).
            "index_bytes_added": index_after - index_before, "rows_added": added + rows,
            # The machine may be shared: its 1-minute load average as the interval ends.
            "load_average": os.getloadavg()[0],
        }
        if measured["checkpoints_inside"]:
            print(f"   warning: {measured['checkpoints_inside']} checkpoint(s) inside {key.name}'s interval", flush=True)
        return measured

    # -- phase 1: the tables grow ----------------------------------------------------------

    def scale(self, conn: psycopg.Connection) -> None:
        steps = self.data.setdefault("steps", [])
        for number, multiple in enumerate(self.args.steps):
            if number < len(steps) and self.step_done(steps[number]):
                continue
            if number == len(steps):
                steps.append({"multiple": multiple, "runs": {}})
            step = steps[number]
            started = time.monotonic()
            target_bytes = int(multiple * self.shared_buffers)
            # Every table starts the step with as many rows as the fullest: the intervals before
            # added what each key's tps allowed, and an interrupted growth may have stopped midway.
            level = max(step.get("rows", 0), *self.rows.values())
            self.grow_all(level)
            while needed := self.rows_for(conn, target_bytes):
                needed = max(needed, *self.rows.values())
                print(f"-- step {number + 1}/{len(self.args.steps)}: growing every table to {needed:,} rows "
                      f"(the random keys' indexes >= {multiple}x shared_buffers = {target_bytes / MB:,.0f} MB)", flush=True)
                self.grow_all(needed)
            step["rows"] = max(self.rows.values())
            step["index_bytes_before"] = {key.name: self.index_bytes(conn, key) for key in self.keys}
            step.setdefault("fill_seconds", time.monotonic() - started)
            self.state.save()
            for round_number in range(self.args.rounds):
                for key in rotated(self.keys, number * self.args.rounds + round_number):
                    runs = step["runs"].setdefault(key.name, [])
                    if len(runs) > round_number:
                        continue
                    print(f"   {key.name}: round {round_number + 1}/{self.args.rounds}", flush=True)
                    runs.append(self.insert_interval(conn, key))
                    self.state.save()
            step["seconds"] = time.monotonic() - started
            self.state.save()

    def step_done(self, step: dict) -> bool:
        return "seconds" in step and all(len(step["runs"].get(key.name, [])) >= self.args.rounds for key in self.keys)

    def each_round(self, section: dict, variants: list[str], label, measure, applies=lambda key, variant: True,
                   keys_first: bool = False) -> None:
        """--remedy-rounds rounds of every variant for every key it applies to, the keys taking
        turns in an order that rotates from round to round (with keys_first, each key's variants
        together, so that a run cut short has whole keys); measure(key, variant) returns one run,
        saved at once, and runs a resumed run already has are kept."""
        if section.get("done"):
            return
        for round_number in range(self.args.remedy_rounds):
            keys = rotated(self.keys, round_number)
            pairs = ([(key, variant) for key in keys for variant in variants] if keys_first else
                     [(key, variant) for variant in variants for key in keys])
            for key, variant in pairs:
                if not applies(key, variant):
                    continue
                runs = section["runs"].setdefault(variant, {}).setdefault(key.name, [])
                if len(runs) > round_number:
                    continue
                print(f"-- {label(variant)}, {key.name}: round {round_number + 1}", flush=True)
                runs.append(measure(key, variant))
                self.state.save()
        section["done"] = True
        self.state.save()

    # -- phase 2: point lookups at the largest size ----------------------------------------

    def lookups(self, conn: psycopg.Connection) -> None:
        section = self.data.setdefault("lookups", {"runs": {}})
        if section.get("done"):
            return
        section["keys"] = self.args.lookup_keys
        section["recent_fraction"] = self.args.recent_fraction
        scripts = {}
        for key in self.keys:
            # What autovacuum would have done by now: hint bits set, the visibility map, statistics.
            conn.execute(f"VACUUM ANALYZE {table(key)}")
            for pattern in LOOKUP_PATTERNS:
                sample = f"scale.sample_{key.slug}_{pattern}"
                if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", [sample]).fetchone()[0]:
                    conn.execute(f"CREATE TABLE {sample} AS SELECT row_number() OVER () AS n, id FROM "
                                 f"({self.sample_query(conn, key, pattern)}) s")
                    conn.execute(f"ALTER TABLE {sample} ADD PRIMARY KEY (n)")
                    conn.execute(f"ANALYZE {sample}")
                keys = conn.execute(f"SELECT count(*) FROM {sample}").fetchone()[0]
                scripts[(key.name, pattern)] = self.script(
                    f"lookup_{key.slug}_{pattern}",
                    f"\\set n random(1, {keys})\n"
                    f"SELECT payload FROM {table(key)} WHERE id = (SELECT id FROM {sample} WHERE n = :n);\n")
            plan = "\n".join(row[0] for row in conn.execute(
                f"EXPLAIN SELECT payload FROM {table(key)} WHERE id = (SELECT id FROM scale.sample_{key.slug}_uniform "
                "WHERE n = 1)").fetchall())
            section.setdefault("plans", {})[key.name] = plan
        section["rows"] = {key.name: self.rows[key.slug] for key in self.keys}
        self.state.save()
        for round_number in range(self.args.lookup_rounds):
            for pattern in LOOKUP_PATTERNS:
                for key in rotated(self.keys, round_number):
                    runs = section["runs"].setdefault(pattern, {}).setdefault(key.name, [])
                    if len(runs) > round_number:
                        continue
                    print(f"-- lookups, {pattern} keys, {key.name}: round {round_number + 1}/{self.args.lookup_rounds}",
                          flush=True)
                    if self.prewarm:
                        conn.execute("SELECT pg_prewarm(%s)", [index(key)])
                    if self.args.lookup_warmup:
                        self.pgbench(scripts[(key.name, pattern)], self.args.lookup_warmup)
                    run = self.pgbench(scripts[(key.name, pattern)], self.args.lookup_seconds)
                    runs.append({"tps": run["tps"], "latency_ms": run["latency_ms"]})
                    self.state.save()
        section["done"] = True
        self.state.save()

    def sample_query(self, conn: psycopg.Connection, key: Key, pattern: str) -> str:
        """Keys to look up: a uniform sample of the whole table (Bernoulli, every row equally
        likely), or of the rows in the newest heap pages, the last --recent-fraction of the
        table: rows are only ever appended, so those are the newest rows, whatever the key."""
        rows = max(1, self.rows[key.slug])
        wanted = self.args.lookup_keys
        if pattern == "uniform":
            percent = min(100.0, 100.0 * wanted * 1.2 / rows)
            # Shuffled before the limit: a sample scan returns rows in heap order, oldest first.
            return (f"SELECT id FROM (SELECT id FROM {table(key)} TABLESAMPLE BERNOULLI ({percent})) sampled "
                    f"ORDER BY random() LIMIT {wanted}")
        pages = conn.execute("SELECT pg_relation_size(%s) / current_setting('block_size')::int",
                             [table(key)]).fetchone()[0]
        first_page = int(pages * (1 - self.args.recent_fraction))
        return (f"SELECT id FROM {table(key)} WHERE ctid >= '({first_page},0)'::tid "
                f"ORDER BY random() LIMIT {wanted}")

    # -- phase 3: a time-range count at the largest size ------------------------------------

    def timerange(self, conn: psycopg.Connection) -> None:
        """The rows made in one window of time, counted on each grown table by what its key
        offers: randflake_key and uuidv7() bound the window in the index (an index range scan),
        bigint randflake_next() only by decoding every ID (a full scan, and EXECUTE on the
        decoder); identity, random bigint and gen_random_uuid() keys hold no time at all. The
        window is --timerange-minutes, or 1/24 of the randflake_key table's span if shorter (an
        hour of a table made over a day), centred on the second of its middle row, inside the
        span: the tables grow in bursts at different moments, so the middle of the span may hold
        none of its rows. Each key's table counts the rows it received in that window."""
        section = self.data.setdefault("timerange", {"runs": {}})
        if section.get("done"):
            return
        if RANDFLAKE_KEY not in self.keys:
            print("-- timerange: skipped, randflake_key is not among --keys", flush=True)
            return
        if "window" not in section:
            # The index's two ends, and its middle.
            first, middle, last = (conn.execute(
                f"SELECT extract(epoch FROM randflake_key_timestamp(id))::bigint FROM {table(RANDFLAKE_KEY)} "
                f"ORDER BY id {order} LIMIT 1").fetchone()[0]
                for order in ("ASC", f"OFFSET {self.rows[RANDFLAKE_KEY.slug] // 2}", "DESC"))
            span = last + 1 - first
            # An hour of a table made over a day is 1/24 of its span: the window takes no more
            # of this table's, which was made in minutes.
            length = max(1, min(self.args.timerange_minutes * 60, span // 24))
            start = min(max(first, middle - length // 2), max(first, last + 1 - length))
            section["window"] = {"start": start, "end": min(start + length, last + 1), "table_span_seconds": span}
            self.state.save()
        window = section["window"]
        queries = {key.name: query for key in self.keys if (query := self.timerange_query(key, window))}
        section["no_time"] = [key.name for key in self.keys if key.name not in queries]
        for key in self.keys:
            if key.name in queries:
                # As the lookups: what autovacuum would have done (the visibility map above all).
                conn.execute(f"VACUUM ANALYZE {table(key)}")
                section.setdefault("plans", {})[key.name] = "\n".join(
                    row[0] for row in conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {queries[key.name]}").fetchall())
                section.setdefault("queries", {})[key.name] = queries[key.name]
        section["rows"] = {key.name: self.rows[key.slug] for key in self.keys}
        self.state.save()
        names = list(queries)
        for round_number in range(self.args.timerange_rounds):
            for name in rotated(names, round_number):
                runs = section["runs"].setdefault(name, [])
                if len(runs) > round_number:
                    continue
                print(f"-- timerange, {name}: round {round_number + 1}/{self.args.timerange_rounds}", flush=True)
                started = time.monotonic()
                counted = conn.execute(queries[name]).fetchone()[0]
                runs.append({"seconds": time.monotonic() - started, "rows_counted": counted})
                self.state.save()
        section["done"] = True
        self.state.save()

    @staticmethod
    def timerange_query(key: Key, window: dict) -> str | None:
        """The count of the rows made in the window, as the key allows it; None if it holds no time."""
        start, end = (f"to_timestamp({window[edge]})" for edge in ("start", "end"))
        if key == RANDFLAKE_KEY:
            condition = f"id >= randflake_key_lowest({start}) AND id < randflake_key_lowest({end})"
        elif key == UUID7:
            # The lowest uuidv7 of a millisecond: its 48-bit Unix time in milliseconds, then zeros.
            def lowest(edge: str) -> str:
                return f"'{window[edge] * 1000:012x}{0:020x}'::uuid"

            condition = f"id >= {lowest('start')} AND id < {lowest('end')}"
        elif key == RANDFLAKE:
            condition = f"randflake_timestamp(id) >= {start} AND randflake_timestamp(id) < {end}"
        else:
            return None
        return f"SELECT count(*) FROM {table(key)} WHERE {condition}"

    # -- phase 4: remedies on the grown tables ---------------------------------------------

    def wal_compression_method(self, conn: psycopg.Connection) -> str:
        for method in ["lz4", "zstd", "pglz"]:
            try:
                conn.execute(f"SET wal_compression = '{method}'")
                conn.execute("RESET wal_compression")
                return method
            except psycopg.Error:
                continue
        return "on"

    def wal_compression(self, conn: psycopg.Connection) -> None:
        section = self.data.setdefault("wal_compression", {"runs": {}})
        method = section.setdefault("method", self.wal_compression_method(conn))

        def measure(key: Key, setting: str) -> dict:
            self.set_system(conn, "wal_compression", setting)
            return self.insert_interval(conn, key)

        self.each_round(section, ["off", method], lambda setting: f"wal_compression = {setting}", measure)
        self.set_system(conn, "wal_compression", None)

    def batch(self, conn: psycopg.Connection) -> None:
        """A batch of --batch-fraction of the rows added to each grown table in one INSERT ...
        SELECT, as generated and sorted by key first: sorted, the batch visits the leaf pages in
        index order, each once, instead of at random."""
        section = self.data.setdefault("batch", {"runs": {}})
        rows = section.setdefault("rows", int(self.data["steps"][-1]["rows"] * self.args.batch_fraction))

        def measure(key: Key, recipe: str) -> dict:
            conn.execute(f"SET work_mem = '{self.args.load_work_mem}'")
            if self.prewarm:
                conn.execute("SELECT pg_prewarm(%s)", [index(key)])
            conn.execute("CHECKPOINT")
            before = self.wal_counters(conn)
            started = time.monotonic()
            conn.execute(self.load_statement(key, recipe, table(key), rows))
            seconds = time.monotonic() - started
            after = self.wal_counters(conn)
            conn.execute("RESET work_mem")
            self.rows[key.slug] += rows
            wal_bytes = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)::bigint", [after["lsn"], before["lsn"]]).fetchone()[0]
            return {"seconds": seconds, "wal_bytes": wal_bytes, "fpi": after["fpi"] - before["fpi"],
                    "table_rows": self.rows[key.slug]}

        self.each_round(section, ["plain", "key order"], lambda recipe: f"batch of {rows:,} rows, {recipe}", measure,
                        lambda key, recipe: recipe in self.recipes(key))

    @staticmethod
    def load_statement(key: Key, recipe: str, target: str, rows: int) -> str:
        if recipe == "key order":
            return (f"INSERT INTO {target} (id, payload) SELECT {key.default}, g FROM generate_series(1, {rows}) g "
                    "ORDER BY 1")
        return f"INSERT INTO {target} (payload) SELECT g FROM generate_series(1, {rows}) g"

    def larger_shared_buffers(self) -> str:
        """Enough to hold the largest index with room to spare: a power of two in MB, at most
        half the machine's memory."""
        if self.args.large_shared_buffers != "auto":
            return self.args.large_shared_buffers
        largest = max(run["index_bytes"] for step in self.data["steps"] for runs in step["runs"].values() for run in runs)
        wanted = 2 ** math.ceil(math.log2(largest * 1.5 / MB))
        memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MB
        return f"{min(wanted, memory_mb // 2)}MB"

    def restart_with(self, conn: psycopg.Connection, shared_buffers: str | None) -> psycopg.Connection:
        conn.execute("ALTER SYSTEM RESET shared_buffers" if shared_buffers is None else
                     f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
        conn.close()
        self.server.restart()
        conn = self.connect()
        wait_for_lease(conn)
        return conn

    def shared_buffers_remedy(self, conn: psycopg.Connection) -> psycopg.Connection:
        """The same INSERTs with the cluster's small shared_buffers and with the larger size,
        restarting between them, so that each round measures both sizes minutes apart."""
        section = self.data.setdefault("shared_buffers", {"runs": {}})
        if section.get("done"):
            return conn
        large = section.setdefault("size", self.larger_shared_buffers())
        sizes = {"small": None, "large": large}
        current = "small"
        for round_number in range(self.args.remedy_rounds):
            for label in rotated(list(sizes), round_number):
                if all(len(section["runs"].get(label, {}).get(key.name, [])) > round_number for key in self.keys):
                    continue
                if label != current:
                    conn = self.restart_with(conn, sizes[label])
                    current = label
                print(f"-- shared_buffers = {conn.execute('SHOW shared_buffers').fetchone()[0]}: round "
                      f"{round_number + 1}", flush=True)
                for key in rotated(self.keys, round_number):
                    runs = section["runs"].setdefault(label, {}).setdefault(key.name, [])
                    if len(runs) > round_number:
                        continue
                    runs.append(self.insert_interval(conn, key))
                    self.state.save()
        conn = self.restart_with(conn, None)
        section["done"] = True
        self.state.save()
        return conn

    # -- phase 5: bulk loads on fresh tables -----------------------------------------------

    def recipes(self, key: Key) -> list[str]:
        # Identity values already arrive in key order: its plain load is the ordered one.
        names = ["plain", "key order", "index after load"]
        return [name for name in names if not (name == "key order" and key.default is None)]

    def bulk(self, conn: psycopg.Connection) -> None:
        section = self.data.setdefault("bulk", {"runs": {}})
        if section.get("done"):
            return
        rows = section.setdefault("rows", self.args.remedy_rows or self.data["steps"][-1]["rows"])
        if not section.get("scale_tables_dropped"):
            # The grown tables have served; their space goes to the loads.
            for key in self.keys:
                conn.execute(f"DROP TABLE IF EXISTS {table(key)}")
            section["scale_tables_dropped"] = True
            self.state.save()
        self.each_round(section, ["plain", "key order", "index after load"],
                        lambda recipe: f"bulk load of {rows:,} rows, {recipe}",
                        lambda key, recipe: self.load(conn, key, recipe, rows),
                        lambda key, recipe: recipe in self.recipes(key) and key.slug in self.args.load_keys,
                        keys_first=True)

    def load(self, conn: psycopg.Connection, key: Key, recipe: str, rows: int) -> dict:
        """One bulk load of `rows` rows into a fresh table by one recipe: seconds, WAL, index."""
        # The index-after-load table stays for the fillfactor phase; the others are dropped.
        prefix = "f" if recipe == "index after load" else "b"
        self.create(conn, key, prefix, primary_key=recipe != "index after load")
        conn.execute(f"SET work_mem = '{self.args.load_work_mem}'")
        conn.execute(f"SET maintenance_work_mem = '{self.args.load_maintenance_work_mem}'")
        conn.execute("CHECKPOINT")
        before = self.wal_counters(conn)
        started = time.monotonic()
        conn.execute(self.load_statement(key, recipe, table(key, prefix), rows))
        loaded = time.monotonic()
        if recipe == "index after load":
            conn.execute(f"ALTER TABLE {table(key, prefix)} ADD PRIMARY KEY (id)")
        finished = time.monotonic()
        after = self.wal_counters(conn)
        conn.execute("RESET work_mem")
        conn.execute("RESET maintenance_work_mem")
        wal_bytes = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)::bigint", [after["lsn"], before["lsn"]]).fetchone()[0]
        result = {"seconds": finished - started, "load_seconds": loaded - started, "index_seconds": finished - loaded,
                  "wal_bytes": wal_bytes, "index_bytes": self.index_bytes(conn, key, prefix),
                  "table_bytes": conn.execute("SELECT pg_relation_size(%s)", [table(key, prefix)]).fetchone()[0]}
        if prefix == "b":
            conn.execute(f"DROP TABLE {table(key, prefix)}")
        return result

    # -- phase 6: fillfactor of an index built after a load -----------------------------------

    def fillfactor(self, conn: psycopg.Connection) -> None:
        """The tables of the index-after-load recipe, the index rebuilt at each fillfactor, then
        grown by --fillfactor-growth of their rows in one INSERT ... SELECT (a batch, so that the
        growth past the first splits takes seconds, not the hour that single-row INSERTs of a
        large table's 15% would). A leaf built full takes a few more random keys and then splits:
        at fillfactor 90 a bigint leaf has room for about 11% more entries, so the growth covers
        the wave of splits that follows a build; at 70 it has room for about 43%."""
        section = self.data.setdefault("fillfactor", {"runs": {}})
        if section.get("done"):
            return
        rows = self.data["bulk"]["rows"]
        inserted = max(1, int(rows * self.args.fillfactor_growth))
        section["rows"], section["inserted"] = rows, inserted
        self.each_round(section, [str(fillfactor) for fillfactor in self.args.fillfactors],
                        lambda fillfactor: f"fillfactor {fillfactor}",
                        lambda key, fillfactor: self.grow_after_build(conn, key, int(fillfactor), inserted),
                        lambda key, fillfactor: key.slug in self.args.load_keys)

    def grow_after_build(self, conn: psycopg.Connection, key: Key, fillfactor: int, rows: int) -> dict:
        # Rows added by an earlier fillfactor's growth go, so that each starts from the load.
        conn.execute(f"DELETE FROM {table(key, 'f')} WHERE payload = 0")
        conn.execute(f"VACUUM {table(key, 'f')}")
        conn.execute(f"ALTER INDEX {index(key, 'f')} SET (fillfactor = {fillfactor})")
        conn.execute(f"SET maintenance_work_mem = '{self.args.load_maintenance_work_mem}'")
        started = time.monotonic()
        conn.execute(f"REINDEX INDEX {index(key, 'f')}")
        rebuilt = {"reindex_seconds": time.monotonic() - started, "index_bytes_built": self.index_bytes(conn, key, "f")}
        conn.execute("RESET maintenance_work_mem")
        if self.prewarm:
            conn.execute("SELECT pg_prewarm(%s)", [index(key, "f")])
        conn.execute("CHECKPOINT")
        before = self.wal_counters(conn)
        started = time.monotonic()
        conn.execute(f"INSERT INTO {table(key, 'f')} (payload) SELECT 0 FROM generate_series(1, {rows})")
        seconds = time.monotonic() - started
        after = self.wal_counters(conn)
        wal_bytes = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)::bigint", [after["lsn"], before["lsn"]]).fetchone()[0]
        return {**rebuilt, "rows_per_second": rows / seconds, "rows_inserted": rows, "wal_bytes_per_row": wal_bytes / rows,
                "fpi_per_row": (after["fpi"] - before["fpi"]) / rows,
                "checkpoints_inside": after["checkpoints"] - before["checkpoints"],
                "index_bytes": self.index_bytes(conn, key, "f")}

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> None:
        self.data.setdefault("settings", {})
        self.data["settings"].update({name: value for name, value in vars(self.args).items()
                                      if name not in ("out", "fresh", "report_only", "keep_cluster")})
        self.start()
        conn = self.connect()
        phases = self.args.phases
        elapsed = self.data.setdefault("elapsed", {})
        if not self.data.get("bulk", {}).get("scale_tables_dropped"):
            self.count_rows(conn)
        for phase in PHASES:
            if phase not in phases:
                continue
            started = time.monotonic()
            if phase == "scale":
                self.scale(conn)
            elif phase == "lookups":
                self.lookups(conn)
            elif phase == "timerange":
                self.timerange(conn)
            elif phase == "wal_compression":
                self.wal_compression(conn)
            elif phase == "shared_buffers":
                conn = self.shared_buffers_remedy(conn)
            elif phase == "batch":
                self.batch(conn)
            elif phase == "bulk":
                self.bulk(conn)
            elif phase == "fillfactor":
                self.fillfactor(conn)
            elapsed[phase] = elapsed.get(phase, 0) + time.monotonic() - started
            self.state.save()
        conn.close()
        self.data["complete"] = True
        self.state.save()


# -- the report ----------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float], digits: int = 0, scale: float = 1.0) -> str:
    return fmt_spread(summary([value * scale for value in values]), digits=digits)


def paired_ratios(numerator: list[dict], denominator: list[dict], metric: str) -> list[float]:
    """Per-round ratios: both measured in the same round, minutes apart at most."""
    return [a[metric] / b[metric] for a, b in zip(numerator, denominator)]


def ratio_text(values: list[float]) -> str:
    return f"{median(values):.2f} [{min(values):.2f}..{max(values):.2f}]"


def key_names(data: dict) -> list[str]:
    present = set(data["steps"][0]["runs"]) if data.get("steps") else set()
    return [key.name for key in KEYS if key.name in present]


def report(data: dict) -> list[tuple[str, bool, str]]:
    """Prints the tables; returns (target, met, figures) for each target."""
    settings, server = data["settings"], data.get("server", {})
    sb = parse_size(server.get("shared_buffers", settings["shared_buffers"]))
    print("== Machine and server")
    for name, value in server.items():
        print(f"  {name:20} {value}")
    print(f"  {'clients':20} {settings['clients']}, interval {settings['interval_rows']:,} rows after a warm-up of "
          f"{settings['warmup_rows']:,} rows and a CHECKPOINT, {settings['rounds']} round(s) per step")
    for phase, seconds in data.get("elapsed", {}).items():
        print(f"  {'time, ' + phase:20} {seconds / 60:.1f} min")
    targets = []
    steps = [step for step in data.get("steps", []) if step.get("runs")]
    names = key_names(data)
    if steps:
        print(f"\n== Single-row INSERTs as the tables grow: pgbench -M prepared, {settings['clients']} clients; "
              "tps median [min..max]; ratios are per-round paired medians; shared_buffers "
              f"{sb / MB:,.0f} MB")
        print(f"  {'rows':>12} {'key':20} {'index MB':>9} {'x sb':>6} {'B/row':>6} {'added':>6} {'tps':>24} "
              f"{'x identity':>18} {'WAL B/row':>10} {'FPI/row':>8}")
        for step in steps:
            runs = step["runs"]
            for name in names:
                if name not in runs:
                    continue
                entries = runs[name]
                index_mb = entries[-1]["index_bytes"] / MB
                added = f"{median([added_per_row(e) for e in entries]):>6.1f}" if "index_bytes_added" in entries[-1] else f"{'':>6}"
                print(f"  {step['rows']:>12,} {name:20} {index_mb:>9,.0f} {entries[-1]['index_bytes'] / sb:>6.1f} "
                      f"{bytes_per_row(entries[-1]):>6.1f} {added} "
                      f"{spread([e['tps'] for e in entries]):>24} "
                      f"{ratio_text(paired_ratios(entries, runs[IDENTITY.name], 'tps')):>18} "
                      f"{median([e['wal_bytes_per_row'] for e in entries]):>10,.0f} "
                      f"{median([e['fpi_per_row'] for e in entries]):>8.2f}")
        print("  B/row: the index's bytes per table row; added: the bytes the single-row INSERTs of the key's "
              "intervals (warm-up included) added to it, per row inserted")
        inside = sum(run["checkpoints_inside"] for step in steps for runs in step["runs"].values() for run in runs)
        print(f"  checkpoints that started inside a measured interval: {inside}")
        loads = [run["load_average"] for step in steps for runs in step["runs"].values() for run in runs
                 if "load_average" in run]
        if loads:
            print(f"  the machine's 1-minute load average at the end of the intervals: {spread(loads, 1)}")
        targets += scale_targets(steps, names)
        if UUID7.name in names:
            largest = steps[-1]["runs"]
            print(f"  randflake_next() against uuidv7() at the largest size: "
                  f"{ratio_text(paired_ratios(largest[RANDFLAKE.name], largest[UUID7.name], 'tps'))}x the tps, "
                  f"{largest[RANDFLAKE.name][-1]['index_bytes'] / largest[UUID7.name][-1]['index_bytes']:.2f}x the index. "
                  "uuidv7() keys arrive in time order and append, as identity does; they also carry their creation "
                  "time in clear.")
    lookups = data.get("lookups", {})
    if lookups.get("runs"):
        print(f"\n== Point lookups by primary key at the largest size: pgbench -M prepared, {settings['clients']} "
              f"clients, {settings['lookup_seconds']} s per round; keys drawn at random from a sample of "
              f"{lookups['keys']:,}: 'uniform' sampled from the whole table (TABLESAMPLE BERNOULLI), 'recent' from the "
              f"newest {lookups['recent_fraction']:.0%} of the heap")
        print(f"  {'key':20} {'rows':>12} " + " ".join(f"{pattern + ' tps':>24} {'x identity':>18}" for pattern in LOOKUP_PATTERNS))
        for name in names:
            cells = []
            for pattern in LOOKUP_PATTERNS:
                runs = lookups["runs"].get(pattern, {})
                if name in runs:
                    cells.append(f"{spread([r['tps'] for r in runs[name]]):>24} "
                                 f"{ratio_text(paired_ratios(runs[name], runs[IDENTITY.name], 'tps')):>18}")
            print(f"  {name:20} {lookups['rows'].get(name, 0):>12,} " + " ".join(cells))
    report_timerange(data.get("timerange", {}), names)
    targets += report_remedies(data, names, sb)
    print("\n== Targets")
    for name, met, figures in targets:
        print(f"  [{'met' if met else 'MISSED'}] {name}: {figures}")
    return targets


def report_timerange(section: dict, names: list[str]) -> None:
    if not section.get("runs"):
        return
    window = section["window"]
    start, end = (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(window[edge])) for edge in ("start", "end"))
    print(f"\n== Time-range count at the largest size: the rows made from {start} to before {end} "
          f"({(window['end'] - window['start']) / 60:.1f} min of the randflake_key table's "
          f"{window['table_span_seconds'] / 60:.1f}), one connection, warm OS cache; seconds median [min..max]")
    print(f"  {'key':20} {'table rows':>12} {'rows counted':>13} {'seconds':>22} {'x randflake_key':>16}  plan")
    base = section["runs"].get(RANDFLAKE_KEY.name)
    for name in names:
        if name in section.get("no_time", []):
            print(f"  {name:20} {section['rows'][name]:>12,} {'':>13} {'':>22} {'':>16}  none: the key holds no time")
            continue
        runs = section["runs"].get(name)
        if not runs:
            continue
        plan = section["plans"][name].splitlines()
        node = next((line.strip().split("  (")[0].lstrip("-> ") for line in plan
                     if "Scan" in line and "Gather" not in line), plan[0])
        ratio = ratio_text(paired_ratios(runs, base, "seconds")) if base else ""
        print(f"  {name:20} {section['rows'][name]:>12,} {runs[-1]['rows_counted']:>13,} "
              f"{spread([r['seconds'] for r in runs], 3):>22} {ratio:>16}  {node}")
    for name, plan in section.get("plans", {}).items():
        print(f"\n  {name}: {section['queries'][name]}")
        print("\n".join("    " + line for line in plan.splitlines()))


def scale_targets(steps: list[dict], names: list[str]) -> list[tuple[str, bool, str]]:
    targets = []
    targets += ordered_key_targets(steps, names)
    if RANDFLAKE.name in names and UUID4.name in names:
        speed = [(step["rows"], paired_ratios(step["runs"][RANDFLAKE.name], step["runs"][UUID4.name], "tps"))
                 for step in steps]
        worst_rows, worst = min(speed, key=lambda item: median(item[1]))
        targets.append(("randflake_next() >= 1.3x the INSERT tps of gen_random_uuid() at every size",
                        all(median(ratios) >= 1.3 for _, ratios in speed),
                        f"lowest at {worst_rows:,} rows: {ratio_text(worst)}; every step: "
                        + ", ".join(f"{median(ratios):.2f}" for _, ratios in speed)))
        # Rows differ a little between keys (each interval adds what its tps allows): bytes per row.
        sizes = []
        for step in steps:
            mine, theirs = step["runs"][RANDFLAKE.name][-1], step["runs"][UUID4.name][-1]
            sizes.append((mine["index_bytes"] / mine["table_rows"]) / (theirs["index_bytes"] / theirs["table_rows"]))
        targets.append(("randflake_next()'s index <= 0.75x gen_random_uuid()'s at every size (bytes per row)",
                        max(sizes) <= 0.75, "every step: " + ", ".join(f"{value:.2f}" for value in sizes)))
    largest = steps[-1]["runs"]
    if RANDFLAKE.name in largest:
        tps = paired_ratios(largest[RANDFLAKE.name], largest[IDENTITY.name], "tps")
        mine, base = largest[RANDFLAKE.name][-1], largest[IDENTITY.name][-1]
        wal = median([e["wal_bytes_per_row"] for e in largest[RANDFLAKE.name]]) / median(
            [e["wal_bytes_per_row"] for e in largest[IDENTITY.name]])
        print(f"\n  At the largest size ({steps[-1]['rows']:,} rows), randflake_next() against identity: "
              f"{ratio_text(tps)}x the tps, {mine['index_bytes'] / base['index_bytes']:.2f}x the index, "
              f"{wal:.1f}x the WAL per row")
    return targets


def bytes_per_row(run: dict) -> float:
    return run["index_bytes"] / run["table_rows"]


def added_per_row(run: dict) -> float:
    return run["index_bytes_added"] / run["rows_added"]


def ordered_key_targets(steps: list[dict], names: list[str]) -> list[tuple[str, bool, str]]:
    """The targets for randflake_key (issue 38's INSERT rate and index bytes the single-row
    INSERTs added, issue 29's WAL and index as grown), and for randflake_next() against a random
    bigint."""
    targets = []

    def every_step(label: str, values: list[float], met) -> None:
        targets.append((label, all(met(value) for value in values),
                        "every step: " + ", ".join(f"{value:.2f}" for value in values)))

    def tps(name: str, base: str) -> list[float]:
        return [median(paired_ratios(step["runs"][name], step["runs"][base], "tps")) for step in steps]

    def index(name: str, base: str) -> list[float]:
        return [bytes_per_row(step["runs"][name][-1]) / bytes_per_row(step["runs"][base][-1]) for step in steps]

    def added(name: str, base: str) -> list[float]:
        return [median([added_per_row(r) for r in step["runs"][name]]) / median([added_per_row(r) for r in step["runs"][base]])
                for step in steps]

    if RANDFLAKE_KEY.name in names:
        every_step(f"randflake_key INSERT tps >= {ORDERED_TPS_LIMIT:.2f}x identity's at every size",
                   tps(RANDFLAKE_KEY.name, IDENTITY.name), lambda value: value >= ORDERED_TPS_LIMIT)
        every_step("randflake_key WAL per row <= 1.3x identity's at every size",
                   [median([r["wal_bytes_per_row"] for r in step["runs"][RANDFLAKE_KEY.name]])
                    / median([r["wal_bytes_per_row"] for r in step["runs"][IDENTITY.name]]) for step in steps],
                   lambda value: value <= 1.3)
        every_step("randflake_key index <= 1.35x identity's at every size (bytes per row, as grown)",
                   index(RANDFLAKE_KEY.name, IDENTITY.name), lambda value: value <= 1.35)
        # Runs before the measure was added lack it.
        measured_added = all("index_bytes_added" in step["runs"][RANDFLAKE_KEY.name][-1] for step in steps)
        if measured_added:
            every_step(f"randflake_key index <= {ORDERED_ADDED_LIMIT:.2f}x identity's at every size (bytes the single-row "
                       "INSERTs added per row)", added(RANDFLAKE_KEY.name, IDENTITY.name),
                       lambda value: value <= ORDERED_ADDED_LIMIT)
        if UUID7.name in names:
            every_step("randflake_key index <= 0.7x uuidv7()'s at every size (bytes per row, as grown)",
                       index(RANDFLAKE_KEY.name, UUID7.name), lambda value: value <= 0.7)
            if measured_added:
                every_step("randflake_key index <= 0.7x uuidv7()'s at every size (bytes the single-row INSERTs added per row)",
                           added(RANDFLAKE_KEY.name, UUID7.name), lambda value: value <= 0.7)
    if RANDFLAKE.name in names and RANDOM_BIGINT.name in names:
        every_step("randflake_next() INSERT tps against random bigint's at every size, within 10%",
                   tps(RANDFLAKE.name, RANDOM_BIGINT.name), lambda value: 0.9 <= value <= 1.1)
    return targets


def loads(runs: dict, names: list[str], recipes: list[str]):
    """(key, recipe, its runs, x the key's plain load, x identity's plain load) for each load that
    ran, by median seconds."""
    def seconds(name: str, recipe: str) -> float:
        return median([r["seconds"] for r in runs[recipe][name]])

    for name in names:
        for recipe in recipes:
            if name in runs.get(recipe, {}):
                yield (name, recipe, runs[recipe][name], seconds(name, recipe) / seconds(name, "plain"),
                       seconds(name, recipe) / seconds(IDENTITY.name, "plain"))


def report_remedies(data: dict, names: list[str], sb: int) -> list[tuple[str, bool, str]]:
    targets = []
    settings = data["settings"]
    compression = data.get("wal_compression", {})
    if compression.get("runs"):
        method = compression["method"]
        off, on = compression["runs"]["off"], compression["runs"].get(method, {})
        print(f"\n== Remedy: wal_compression = {method}, on the grown tables (single-row INSERTs as above)")
        print(f"  {'key':20} {'tps off':>22} {'tps ' + method:>22} {'x off':>18} {'x identity, ' + method:>20} "
              f"{'WAL B/row off':>14} {'WAL B/row ' + method:>14}")
        for name in names:
            if name not in on:
                continue
            print(f"  {name:20} {spread([r['tps'] for r in off[name]]):>22} {spread([r['tps'] for r in on[name]]):>22} "
                  f"{ratio_text(paired_ratios(on[name], off[name], 'tps')):>18} "
                  f"{ratio_text(paired_ratios(on[name], on[IDENTITY.name], 'tps')):>20} "
                  f"{median([r['wal_bytes_per_row'] for r in off[name]]):>14,.0f} "
                  f"{median([r['wal_bytes_per_row'] for r in on[name]]):>14,.0f}")
    larger = data.get("shared_buffers", {})
    if larger.get("runs", {}).get("large"):
        small, large = larger["runs"]["small"], larger["runs"]["large"]
        print(f"\n== Remedy: shared_buffers = {larger['size']} against {sb / MB:,.0f} MB, on the grown tables, "
              "the index prewarmed (as far as it fits) before each interval, both sizes in each round")
        print(f"  {'key':20} {'tps small':>22} {'tps large':>22} {'large / small':>18} {'x identity, large':>18} "
              f"{'WAL B/row small':>16} {'WAL B/row large':>16}")
        for name in names:
            if name not in large:
                continue
            print(f"  {name:20} {spread([r['tps'] for r in small[name]]):>22} {spread([r['tps'] for r in large[name]]):>22} "
                  f"{ratio_text(paired_ratios(large[name], small[name], 'tps')):>18} "
                  f"{ratio_text(paired_ratios(large[name], large[IDENTITY.name], 'tps')):>18} "
                  f"{median([r['wal_bytes_per_row'] for r in small[name]]):>16,.0f} "
                  f"{median([r['wal_bytes_per_row'] for r in large[name]]):>16,.0f}")
    batch = data.get("batch", {})
    if batch.get("runs"):
        runs = batch["runs"]
        print(f"\n== Remedy: a batch of {batch['rows']:,} rows added to each grown table in one INSERT ... SELECT, "
              "as generated or sorted by key (ORDER BY id)")
        print(f"  {'key':20} {'recipe':10} {'seconds':>22} {'x its plain':>12} {'x identity':>11} {'WAL MB':>8} "
              f"{'FPI/row':>8}")
        for name, recipe, entries, own, identity in loads(runs, names, ["plain", "key order"]):
            print(f"  {name:20} {recipe:10} {spread([r['seconds'] for r in entries], 1):>22} {own:>12.2f} "
                  f"{identity:>11.2f} {median([r['wal_bytes'] for r in entries]) / MB:>8,.0f} "
                  f"{median([r['fpi'] for r in entries]) / batch['rows']:>8.2f}")
    bulk = data.get("bulk", {})
    if bulk.get("runs"):
        runs = bulk["runs"]
        print(f"\n== Remedy: bulk loads of {bulk['rows']:,} rows into a fresh table (one INSERT ... SELECT; "
              "the index-after-load time includes ALTER TABLE ... ADD PRIMARY KEY)")
        print(f"  {'key':20} {'recipe':17} {'seconds':>22} {'x its plain':>12} {'x identity plain':>17} "
              f"{'index MB':>9} {'WAL MB':>8}")
        recipes = []
        for name, recipe, entries, own, identity in loads(runs, names, ["plain", "key order", "index after load"]):
            print(f"  {name:20} {recipe:17} {spread([r['seconds'] for r in entries], 1):>22} {own:>12.2f} "
                  f"{identity:>17.2f} {median([r['index_bytes'] for r in entries]) / MB:>9,.0f} "
                  f"{median([r['wal_bytes'] for r in entries]) / MB:>8,.0f}")
            if name == RANDFLAKE.name and recipe != "plain":
                recipes.append((identity, recipe, median([r["seconds"] for r in entries])))
        if recipes:
            identity, recipe, seconds = min(recipes)
            targets.append(("a bulk-load recipe for randflake_next() keys within 2x of identity's time at the largest size",
                            identity <= 2.0, f"{recipe}: {seconds:.1f} s, {identity:.2f}x identity's plain load"))
    fill = data.get("fillfactor", {})
    if fill.get("runs"):
        factors = list(fill["runs"])
        print(f"\n== Remedy: fillfactor of an index built after a bulk load of {fill['rows']:,} rows (REINDEX at that "
              f"fillfactor), then {fill['inserted']:,} rows added in one INSERT ... SELECT from a CHECKPOINT on; "
              "ratios are per round")
        print(f"  {'key':20} {'fillfactor':>10} {'index MB built':>15} {'index MB after':>15} {'rows/s':>22} "
              f"{'x fillfactor ' + factors[0]:>17} {'x identity':>18} {'WAL B/row':>10} {'FPI/row':>8}")
        for name in names:
            for fillfactor, by_key in fill["runs"].items():
                if name not in by_key:
                    continue
                entries = by_key[name]
                print(f"  {name:20} {fillfactor:>10} {median([r['index_bytes_built'] for r in entries]) / MB:>15,.0f} "
                      f"{median([r['index_bytes'] for r in entries]) / MB:>15,.0f} "
                      f"{spread([r['rows_per_second'] for r in entries]):>22} "
                      f"{ratio_text(paired_ratios(entries, fill['runs'][factors[0]][name], 'rows_per_second')):>17} "
                      f"{ratio_text(paired_ratios(entries, by_key[IDENTITY.name], 'rows_per_second')):>18} "
                      f"{median([r['wal_bytes_per_row'] for r in entries]):>10,.0f} "
                      f"{median([r['fpi_per_row'] for r in entries]):>8.2f}")
    return targets


def write_outputs(data: dict, directory: pathlib.Path) -> list[tuple[str, bool, str]]:
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        targets = report(data)
    text = buffer.getvalue()
    print(text, end="")
    (directory / "scale.txt").write_text(text)
    with open(directory / "scale.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["phase", "rows", "variant", "key", "metric", "median", "min", "max"])

        def row(phase: str, rows: int | str, variant: str, name: str, metric: str, values: list[float]) -> None:
            writer.writerow([phase, rows, variant, name, metric, median(values), min(values), max(values)])

        for step in data.get("steps", []):
            for name, runs in step["runs"].items():
                for metric in ["tps", "wal_bytes_per_row", "fpi_per_row", "index_bytes"]:
                    row("insert", step["rows"], f"{step['multiple']}x shared_buffers", name, metric, [r[metric] for r in runs])
        for pattern, by_key in data.get("lookups", {}).get("runs", {}).items():
            for name, runs in by_key.items():
                row("lookup", data["lookups"]["rows"].get(name, ""), pattern, name, "tps", [r["tps"] for r in runs])
        timerange = data.get("timerange", {})
        for name, runs in timerange.get("runs", {}).items():
            window = timerange["window"]
            row("timerange", timerange["rows"][name], f"{window['start']}..{window['end']}", name, "seconds",
                [r["seconds"] for r in runs])
        for setting, by_key in data.get("wal_compression", {}).get("runs", {}).items():
            for name, runs in by_key.items():
                for metric in ["tps", "wal_bytes_per_row"]:
                    row("wal_compression", "", setting, name, metric, [r[metric] for r in runs])
        for label, by_key in data.get("shared_buffers", {}).get("runs", {}).items():
            size = data["shared_buffers"]["size"] if label == "large" else data["server"]["shared_buffers"]
            for name, runs in by_key.items():
                for metric in ["tps", "wal_bytes_per_row"]:
                    row("shared_buffers", "", size, name, metric, [r[metric] for r in runs])
        for recipe, by_key in data.get("batch", {}).get("runs", {}).items():
            for name, runs in by_key.items():
                for metric in ["seconds", "wal_bytes"]:
                    row("batch", data["batch"]["rows"], recipe, name, metric, [r[metric] for r in runs])
        for recipe, by_key in data.get("bulk", {}).get("runs", {}).items():
            for name, runs in by_key.items():
                for metric in ["seconds", "index_bytes", "wal_bytes"]:
                    row("bulk", data["bulk"]["rows"], recipe, name, metric, [r[metric] for r in runs])
        for fillfactor, by_key in data.get("fillfactor", {}).get("runs", {}).items():
            for name, runs in by_key.items():
                for metric in ["rows_per_second", "wal_bytes_per_row", "index_bytes_built", "index_bytes"]:
                    row("fillfactor", "", fillfactor, name, metric, [r[metric] for r in runs])
    if data.get("steps"):
        plot(data, directory / "scale.png")
    return targets


def plot(data: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [step for step in data["steps"] if step.get("runs")]
    names = key_names(data)
    sb = parse_size(data["server"]["shared_buffers"])
    figure, axes = plt.subplots(2, 2, figsize=(15, 10))
    (throughput, wal), (sizes, loads) = axes
    for name in names:
        present = [step for step in steps if name in step["runs"]]
        rows = [step["rows"] / 1e6 for step in present]
        width = 3 if name == RANDFLAKE.name else 1.4
        throughput.plot(rows, [median([r["tps"] for r in step["runs"][name]]) for step in present], marker="o",
                        label=name, linewidth=width)
        wal.plot(rows, [median([r["wal_bytes_per_row"] for r in step["runs"][name]]) for step in present], marker="o",
                 label=name, linewidth=width)
        sizes.plot(rows, [step["runs"][name][-1]["index_bytes"] / sb for step in present], marker="o", label=name,
                   linewidth=width)
    throughput.set_title(f"single-row INSERT, {data['settings']['clients']} clients")
    throughput.set_ylabel("transactions per second (median)")
    wal.set_title("WAL per row, interval starting at a checkpoint")
    wal.set_ylabel("bytes per row (median)")
    wal.set_yscale("log")
    sizes.set_title("primary-key index size")
    sizes.set_ylabel(f"multiples of shared_buffers ({sb / MB:,.0f} MB)")
    for axis in (throughput, wal, sizes):
        axis.set_xlabel("rows in the table (millions)")
        axis.set_xscale("log")
        axis.legend(fontsize=8)
        axis.grid(True, alpha=0.3)
    bulk = data.get("bulk", {}).get("runs", {})
    if bulk:
        recipes = ["plain", "key order", "index after load"]
        for offset, name in enumerate(names):
            values = [median([r["seconds"] for r in bulk[recipe][name]]) if name in bulk.get(recipe, {}) else 0
                      for recipe in recipes]
            loads.bar([i + offset * 0.8 / len(names) for i in range(len(recipes))], values, width=0.8 / len(names),
                      label=name)
        loads.set_xticks([i + 0.4 - 0.4 / len(names) for i in range(len(recipes))], recipes)
        loads.set_ylabel("seconds (median)")
        loads.set_title(f"bulk load of {data['bulk']['rows']:,} rows")
        loads.legend(fontsize=8)
    else:
        loads.axis("off")
    figure.suptitle(f"randflake_pg bench-scale: {data['server'].get('postgres', '').split(' on ')[0]}, "
                    f"shared_buffers {sb / MB:,.0f} MB, {data['server'].get('cpu', '')}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True, help="data directory of the benchmark's own cluster")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results/scale-0.6.0"))
    parser.add_argument("--fresh", action="store_true", help="forget an earlier run in --out and its cluster")
    parser.add_argument("--report-only", action="store_true", help="print and write the report of --out's run")
    parser.add_argument("--keep-cluster", action="store_true", help="keep the cluster after a complete run")
    parser.add_argument("--shared-buffers", default="128MB")
    parser.add_argument("--fsync", action="store_true", help="fsync = on (the scratch cluster has it off)")
    parser.add_argument("--steps", type=float, nargs="+", default=[0.5, 1, 2, 4, 8],
                        help="multiples of shared_buffers that the random keys' indexes reach, one step each")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--interval-rows", type=int, default=400_000, help="rows of each measured interval")
    parser.add_argument("--warmup-rows", type=int, default=80_000, help="unmeasured INSERTs before each interval")
    parser.add_argument("--rounds", type=int, default=2, help="measured intervals per key and step")
    parser.add_argument("--fill-chunk", type=int, default=1_000_000, help="rows per INSERT ... SELECT when growing")
    parser.add_argument("--lookup-keys", type=int, default=100_000)
    parser.add_argument("--recent-fraction", type=float, default=0.01)
    parser.add_argument("--lookup-seconds", type=int, default=15)
    parser.add_argument("--lookup-warmup", type=int, default=3, help="unmeasured seconds of lookups before each")
    parser.add_argument("--lookup-rounds", type=int, default=2)
    parser.add_argument("--timerange-minutes", type=int, default=60,
                        help="the window of the time-range count, at most 1/24 of the table's span")
    parser.add_argument("--timerange-rounds", type=int, default=3)
    parser.add_argument("--remedy-rounds", type=int, default=1)
    parser.add_argument("--remedy-rows", type=int, default=0, help="rows of the bulk loads (default: the largest step's)")
    parser.add_argument("--large-shared-buffers", default="auto",
                        help="the larger shared_buffers remedy (auto: 1.5x the largest index, rounded up to a power of two)")
    parser.add_argument("--load-work-mem", default="256MB", help="work_mem of the key-order load's sort")
    parser.add_argument("--load-maintenance-work-mem", default="1GB", help="maintenance_work_mem of index builds")
    parser.add_argument("--load-keys", nargs="+", default=["identity", "randflake", "randflake_key", "random", "uuid4",
                                                           "uuid7"],
                        help="the keys of the bulk-load and fillfactor phases (each load takes minutes at 8x)")
    parser.add_argument("--fillfactors", type=int, nargs="+", default=[90, 70])
    parser.add_argument("--fillfactor-growth", type=float, default=0.15,
                        help="rows inserted after each rebuild, as a fraction of the loaded rows")
    parser.add_argument("--batch-fraction", type=float, default=0.05,
                        help="rows of the batch added to each grown table, as a fraction of its rows")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=PHASES)
    parser.add_argument("--keys", nargs="+", choices=[key.slug for key in KEYS], default=[key.slug for key in KEYS],
                        help="the contenders (identity, the ratios' base, is always among them; uuid7 needs 18)")
    args = parser.parse_args()
    if IDENTITY.slug not in args.keys:
        args.keys.insert(0, IDENTITY.slug)

    state = State(args.out / "scale.json", args.fresh)
    if args.report_only:
        write_outputs(state.data, args.out)
        return
    if not state.data:
        # Tables left by a run whose record is gone would be measured at the wrong sizes.
        Server(args.dir, args.port, []).script("destroy")
    previous = state.data.get("settings", {})
    changed = [name for name in ["shared_buffers", "steps", "clients", "interval_rows", "warmup_rows", "fsync"]
               if name in previous and previous[name] != vars(args)[name]]
    if changed:
        sys.exit(f"{args.out}/scale.json was measured with other {', '.join(changed)}: use the same, or --fresh")
    scale = Scale(args, state)
    scale.run()
    write_outputs(state.data, args.out)
    if not args.keep_cluster:
        scale.server.script("destroy")
    print(f"\nWrote {args.out}/scale.txt, scale.json, scale.csv and scale.png")


if __name__ == "__main__":
    main()
