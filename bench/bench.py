#!/usr/bin/env python3
"""`make bench`: randflake_next() side by side with what users would pick instead.

Everything runs against one scratch cluster in one run. Within each round the contenders take
turns, in an order that rotates from round to round, so that drift on a shared machine spreads
over all of them; results are medians over rounds, with the spread (min..max) beside them.
Prints tables of ratios and the issue's targets, and writes results.json, results.csv and
results.png into the output directory.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import psycopg

# Per-call contenders: SQL expression for one value. pg_backend_pid() is the floor: a trivial
# built-in C function (STABLE, so the per-call method below keeps the planner from evaluating
# it once per query).
CALLS = {
    "randflake_next()": "randflake_next()",
    "nextval() CACHE 1": "nextval('bench.seq_cache1')",
    "nextval() CACHE 100": "nextval('bench.seq_cache100')",
    "gen_random_uuid()": "gen_random_uuid()",
    "pg_backend_pid()": "pg_backend_pid()",
    "PL/pgSQL next_id()": "bench.instagram_next_id()",
    "PL/pgSQL Feistel(nextval())": "bench.feistel_permute(nextval('bench.feistel_counter'))",
}
# Each row of the per-call statements evaluates one expression, the row's own value XORed with
# this many calls (`g::bigint # f()::bigint # ...`): a call that depends on nothing can then be
# neither evaluated once per query (a STABLE function in a one-time filter) nor shared between
# aggregates, whatever its volatility, and every contender is measured the same way. Each call
# is counted with its XOR, a few ns for every contender; pg_backend_pid()'s int4 result also pays
# a cast to bigint.
CALLS_PER_ROW = 10
# Decoding contenders: the aggregate over a table of IDs that each statement runs; every one
# passes the row's own id, so even STABLE functions run once per row.
DECODERS = {
    "randflake_decode(id)": "SELECT count(d.node_id) FROM bench.decoded t, randflake_decode(t.id) d",
    "randflake_timestamp(id)": "SELECT count(randflake_timestamp(id)) FROM bench.decoded",
    "randflake_node_id(id)": "SELECT count(randflake_node_id(id)) FROM bench.decoded",
    "randflake_sequence(id)": "SELECT count(randflake_sequence(id)) FROM bench.decoded",
    "randflake_to_string(id)": "SELECT count(randflake_to_string(id)) FROM bench.decoded",
}
DECODE_BASELINE = "SELECT count(id) FROM bench.decoded"
ACCESSORS = ["randflake_timestamp(id)", "randflake_node_id(id)", "randflake_sequence(id)"]
# uuid has no cast to bigint; a hash folds it, for a few ns next to its ~1 µs.
UUID_CONTENDERS = {"gen_random_uuid()", "uuidv7()"}


def as_bigint(name: str) -> str:
    if name in UUID_CONTENDERS:
        return f"uuid_hash_extended({CALLS[name]}, 0)"
    return f"{CALLS[name]}::bigint"

# Key columns of `(id ..., payload int)` for the INSERT workloads; identity is the baseline.
KEYS = {
    "identity bigint": "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    "randflake_next()": "id bigint PRIMARY KEY DEFAULT randflake_next()",
    "nextval() CACHE 1": f"id bigint PRIMARY KEY DEFAULT {CALLS['nextval() CACHE 1']}",
    "nextval() CACHE 100": f"id bigint PRIMARY KEY DEFAULT {CALLS['nextval() CACHE 100']}",
    "gen_random_uuid()": "id uuid PRIMARY KEY DEFAULT gen_random_uuid()",
    "PL/pgSQL next_id()": f"id bigint PRIMARY KEY DEFAULT {CALLS['PL/pgSQL next_id()']}",
    "PL/pgSQL Feistel(nextval())": f"id bigint PRIMARY KEY DEFAULT {CALLS['PL/pgSQL Feistel(nextval())']}",
}
# The bulk load compares the new keys with the two usual choices: randflake_next() and the ordered
# key (docs/ordered-keys.md), whose column is not among the INSERT workloads' KEYS.
ORDERED_KEY = "randflake_next_key()"
ORDERED_KEY_COLUMN = "id randflake_key PRIMARY KEY DEFAULT randflake_next_key()"
BULK = ["randflake_next()", ORDERED_KEY, "identity bigint", "gen_random_uuid()"]
# The limits: randflake_next() per call against pg_backend_pid(); the pgbench client
# counts at which SELECT randflake_next() keeps 0.95x SELECT 1's rate; the ordered key's index
# after one bulk INSERT ... SELECT against identity's.
PER_CALL_LIMIT = 1.3
HOT_PATH_CLIENTS = (2, 8)
ORDERED_BULK_INDEX_LIMIT = 1.10

SELECT_CONTENDERS = ["SELECT 1", "randflake_next()", "nextval() CACHE 1", "nextval() CACHE 100",
                     "gen_random_uuid()", "PL/pgSQL next_id()", "PL/pgSQL Feistel(nextval())"]

# The noise floor: a second, identical copy of each pgbench baseline takes its turns like any
# contender. Its ratio to the baseline would be 1.00 on a quiet machine; its spread over rounds
# is how far apart two identical workloads land here.
CONTROLS = {"SELECT": ("SELECT 1", "SELECT 1 (control)"), "INSERT": ("identity bigint", "identity bigint (control)")}

# PostgreSQL 18's built-in time-ordered UUID joins every workload on servers that have it.
UUIDV7 = "uuidv7()"

# Connections that come and go: `pgbench -C` opens a new backend for every transaction, so each
# one pays the connection (fork, authentication, catalog caches) and, for randflake_next(), the
# first call in a fresh backend: the node claim, the cipher's key schedule, the lease read and the
# exit callback. SELECT 1 is the connection alone; its second copy is the noise floor.
CONNECT_STATEMENTS = {
    "SELECT 1": "SELECT 1",
    "SELECT 1 (control)": "SELECT 1",
    "pg_backend_pid()": "SELECT pg_backend_pid()",
    "randflake_next()": "SELECT randflake_next()",
    "nextval() CACHE 1": f"SELECT {CALLS['nextval() CACHE 1']}",
}
# The first call in a fresh backend timed inside it (EXPLAIN ANALYZE's execution time, which
# leaves out the connection, parsing and planning), against the same call made once more.
FIRST_CALLS = {"pg_backend_pid()": "pg_backend_pid()", "randflake_next()": "randflake_next()",
               "nextval() CACHE 1": CALLS["nextval() CACHE 1"]}
# Many clients at once, on a cluster of their own whose node range is sized by the DBA guide's
# rule (more nodes than max_connections + max_parallel_workers) and no larger.
MANY_STATEMENTS = {"SELECT 1": "SELECT 1", "randflake_next()": "SELECT randflake_next()"}
MANY_PARALLEL_WORKERS = 8
# Wait event types that are shared locks: a backend queued behind another for a lightweight lock
# (LWLock) or a heavyweight one (Lock). randflake_next() takes nodes with atomic operations on
# the node's own slot, so none of these should come from it.
SHARED_LOCK_WAITS = ("LWLock", "Lock")
# One server's position shared by all its backends (issue 38): a range of SHARED_NODES nodes
# serves SHARED_CHURN_CLIENTS clients that open a connection for every INSERT (pgbench -C) beside
# SHARED_PERSISTENT_CLIENTS that stay connected, all inserting into one table keyed by
# randflake_next(), with no refusal; and, decoded afterwards, no second of the run spread over
# more than SHARED_MAX_NODES_PER_SECOND nodes while the server made fewer IDs in it than one node
# holds (IDS_PER_NODE_SECOND, the 17-bit sequence): the walk crosses into the next node at most
# once in such a second.
SHARED_NODES = 4
SHARED_CHURN_CLIENTS, SHARED_PERSISTENT_CLIENTS = 24, 8
SHARED_MAX_NODES_PER_SECOND = 2
IDS_PER_NODE_SECOND = 131_072
SCRATCH_CLUSTER = pathlib.Path(__file__).resolve().parent.parent / "tests" / "scratch-cluster.sh"
# The SQL edition for managed servers (sql-edition/, docs/managed-postgresql.md), in a database of
# its own on the same server (its randflake_next() would clash with the native one's), against
# the native randflake_next() and gen_random_uuid() in the bench database: database, the per-ID
# expression as a bigint, the key column of the INSERT workload.
EDITION_DB = "bench_sql_edition"
EDITION_SCRIPT = SCRATCH_CLUSTER.parent.parent / "sql-edition" / "randflake_sql--0.6.0.sql"
EDITION_CONTENDERS = {
    "randflake_sql randflake_next()": (EDITION_DB, "randflake_next()", KEYS["randflake_next()"]),
    "randflake_pg randflake_next()": ("postgres", "randflake_next()", KEYS["randflake_next()"]),
    "gen_random_uuid()": ("postgres", as_bigint("gen_random_uuid()"), KEYS["gen_random_uuid()"]),
}
EDITION_CLIENTS = 8
# Backend CPU instructions per statement (valgrind's callgrind, which counts the same whatever
# else the machine runs), each statement a transaction of its own in a single-user backend: the
# difference between EDITION_STATEMENTS_MORE and EDITION_STATEMENTS_FEWER runs of it, divided out.
EDITION_STATEMENTS = {
    "SELECT 1": "SELECT 1",
    "SELECT randflake_next()": "SELECT randflake_next()",
    "INSERT, key gen_random_uuid()": "INSERT INTO uuid_keyed DEFAULT VALUES",
    "INSERT, key randflake_next()": "INSERT INTO edition_keyed DEFAULT VALUES",
}
EDITION_STATEMENTS_FEWER, EDITION_STATEMENTS_MORE = 50, 250
# The per-call statement's instructions, counted by callgrind in a backend of a running server
# (randflake_next() needs the lease keeper, which a single-user backend lacks): the same figure
# every run, where the machine's noise moves the timed one by tens of percent. Rows of each
# statement, and the contenders, pg_backend_pid() the floor.
INSTRUCTION_ROWS = 100_000
INSTRUCTION_CALLS = ["randflake_next()", "pg_backend_pid()"]
# SELECT randflake_next()'s count for 0.6.0's edition as first written (docs/managed-postgresql.md).
EDITION_INSTRUCTIONS_0_6_0 = 339_200


def add_uuidv7() -> None:
    CALLS[UUIDV7] = "uuidv7()"
    KEYS[UUIDV7] = "id uuid PRIMARY KEY DEFAULT uuidv7()"
    BULK.append(UUIDV7)
    SELECT_CONTENDERS.append(UUIDV7)


def rotated(items: list, round_number: int) -> list:
    shift = round_number % len(items)
    return items[shift:] + items[:shift]


def timed(conn: psycopg.Connection, sql: str) -> float:
    started = time.perf_counter()
    cursor = conn.execute(sql)
    if cursor.description is not None:
        cursor.fetchall()
    return time.perf_counter() - started


def summary(samples: list[float]) -> dict:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "samples": samples}


class Bench:
    def __init__(self, args):
        self.args = args
        self.results: dict = {"settings": {}, "per_call": {}, "single_statement": {}, "decoding": {}, "bulk": {},
                              "per_call_instructions": {}, "pgbench": {}, "connections": {}, "first_call": {},
                              "many_clients": {}, "shared_nodes": {}, "sql_edition": {}, "key_edge": {}}

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(host=self.args.host, port=self.args.port, user="postgres", dbname="postgres",
                               autocommit=True)

    def describe(self, conn: psycopg.Connection) -> None:
        settings = self.results["settings"]
        settings["machine"] = f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores"
        cpu = pathlib.Path("/proc/cpuinfo")
        if cpu.exists():
            model = re.search(r"model name\s*:\s*(.*)", cpu.read_text())
            settings["cpu"] = model.group(1) if model else "unknown"
        settings["postgres"] = conn.execute("SELECT version()").fetchone()[0]
        for name in ["shared_buffers", "jit", "fsync", "synchronous_commit", "max_wal_size", "work_mem",
                     "randflake.fleet_block_size"]:
            # NULL for a setting this build does not define.
            settings[name] = conn.execute("SELECT current_setting(%s, true)", [name]).fetchone()[0]
        settings["rounds"] = self.args.rounds
        settings["pgbench_rounds"] = self.args.pgbench_rounds
        print("== Machine and server")
        for key, value in settings.items():
            print(f"  {key:20} {value}")

    @staticmethod
    def per_call_statement(calls: list[str], rows: int) -> str:
        return f"SELECT sum({' # '.join(['g::bigint', *calls])}) FROM generate_series(1, {rows}) g"

    def against_baseline(self, conn: psycopg.Connection, statements: dict[str, str],
                         baseline: str) -> dict[str, list[tuple[float, float]]]:
        """Seconds of each statement and of `baseline`, measured right before it, for every
        round; the statements take turns in an order that rotates from round to round."""
        pairs: dict[str, list[tuple[float, float]]] = {name: [] for name in statements}
        for round_number in range(self.args.rounds):
            for name in rotated(list(statements), round_number):
                without = timed(conn, baseline)
                pairs[name].append((timed(conn, statements[name]), without))
        return pairs

    def per_call(self, conn: psycopg.Connection) -> None:
        """ns per call: CALLS_PER_ROW calls per row, less the same expression without the calls."""
        n = self.args.per_call_rows
        statements = {name: self.per_call_statement([as_bigint(name)] * CALLS_PER_ROW, n) for name in CALLS}
        pairs = self.against_baseline(conn, statements, self.per_call_statement([], n))
        for name, samples in pairs.items():
            isolated = [(total - without) / (CALLS_PER_ROW * n) * 1e9 for total, without in samples]
            self.results["per_call"][name] = {"ns_per_call_isolated": summary(isolated)}

    def single_statement(self, conn: psycopg.Connection) -> None:
        """Rows per second of one statement with one call per row, randflake_next() and the C
        floor taking turns; and randflake_next()'s IDs per second at ten calls per row."""
        n = self.args.statement_ids
        rates: dict[str, list[float]] = {"randflake_next()": [], "pg_backend_pid()": []}
        rates_ten = []
        for round_number in range(self.args.rounds):
            for name in rotated(list(rates), round_number):
                rates[name].append(n / timed(conn, self.per_call_statement([as_bigint(name)], n)))
            rates_ten.append(n / timed(conn, self.per_call_statement([as_bigint("randflake_next()")] * 10, n // 10)))
        self.results["single_statement"] = {
            "ids": n,
            "rows_per_second_one_call": {name: summary(samples) for name, samples in rates.items()},
            "ids_per_second_ten_per_row": summary(rates_ten),
        }

    def decoding(self, conn: psycopg.Connection) -> None:
        """ns per row of each decoder over a table of IDs, less a plain count(id) of the same table
        measured right before it; one backend, no parallel workers, so that per row means per row."""
        n = self.args.decode_rows
        conn.execute("DROP TABLE IF EXISTS bench.decoded")
        conn.execute(f"CREATE TABLE bench.decoded AS SELECT randflake_next() AS id FROM generate_series(1, {n})")
        conn.execute("VACUUM ANALYZE bench.decoded")
        conn.execute("SET max_parallel_workers_per_gather = 0")
        pairs = self.against_baseline(conn, DECODERS, DECODE_BASELINE)
        conn.execute("RESET max_parallel_workers_per_gather")
        conn.execute("DROP TABLE bench.decoded")
        for name, samples in pairs.items():
            self.results["decoding"][name] = {
                "rows": n,
                "ns_per_row": summary([(total - without) / n * 1e9 for total, without in samples]),
                "seconds": summary([total for total, _ in samples]),
            }

    def bulk(self, conn: psycopg.Connection) -> None:
        n = self.args.bulk_rows
        seconds = {name: [] for name in BULK}
        sizes = {name: [] for name in BULK}
        for round_number in range(self.args.bulk_rounds):
            for name in rotated(BULK, round_number):
                conn.execute("DROP TABLE IF EXISTS bench.bulk")
                column = ORDERED_KEY_COLUMN if name == ORDERED_KEY else KEYS[name]
                conn.execute(f"CREATE TABLE bench.bulk ({column}, payload int)")
                conn.execute("CHECKPOINT")
                seconds[name].append(timed(conn, f"INSERT INTO bench.bulk (payload) SELECT g FROM generate_series(1, {n}) g"))
                sizes[name].append(conn.execute("SELECT pg_relation_size('bench.bulk_pkey')").fetchone()[0])
                conn.execute("DROP TABLE bench.bulk")
        for name in BULK:
            self.results["bulk"][name] = {"rows": n, "seconds": summary(seconds[name]),
                                          "index_bytes": summary([float(s) for s in sizes[name]])}

    def key_edge(self, conn: psycopg.Connection) -> None:
        """randflake_key at the edge against bigint, over the same --edge-rows IDs: ns per row of
        COPY ... TO '/dev/null' on the server (each key encrypted and printed as its string, each
        bigint as its decimal; no client, whose share would be the same for both), and pgbench point lookups by the canonical string through the primary key
        (the key parses and decrypts it by its implicit cast; the bigint column looks up
        randflake_from_string() of it, which does the same work). The strings come from a table
        by a random row number, in a subquery that both lookups share."""
        n = self.args.edge_rows
        conn.execute("DROP TABLE IF EXISTS bench.edge_key, bench.edge_bigint, bench.edge_strings")
        conn.execute(f"CREATE TABLE bench.edge_key AS SELECT randflake_next_key() AS id FROM generate_series(1, {n})")
        conn.execute("CREATE TABLE bench.edge_bigint AS SELECT id::bigint AS id FROM bench.edge_key")
        conn.execute("CREATE TABLE bench.edge_strings AS SELECT row_number() OVER () AS n, id::text AS s "
                     "FROM bench.edge_key ORDER BY random()")
        for table in ["edge_key", "edge_bigint"]:
            conn.execute(f"ALTER TABLE bench.{table} ADD PRIMARY KEY (id)")
        conn.execute("ALTER TABLE bench.edge_strings ADD PRIMARY KEY (n)")
        conn.execute("VACUUM ANALYZE bench.edge_key, bench.edge_bigint, bench.edge_strings")
        contenders = {"randflake_key": "bench.edge_key", "bigint": "bench.edge_bigint"}
        string = "(SELECT s FROM bench.edge_strings WHERE n = :n)"
        scripts = pathlib.Path(tempfile.mkdtemp(prefix="randflake_bench_edge_"))
        lookups = {"randflake_key": f"SELECT 1 FROM bench.edge_key WHERE id = {string};",
                   "bigint": f"SELECT 1 FROM bench.edge_bigint WHERE id = randflake_from_string({string});"}
        paths = {}
        for name, statement in lookups.items():
            paths[name] = scripts / f"lookup_{name}.sql"
            paths[name].write_text(f"\\set n random(1, {n})\n{statement}\n")
        copy_ns: dict[str, list[float]] = {name: [] for name in contenders}
        lookup_tps: dict[str, list[float]] = {name: [] for name in contenders}
        for round_number in range(self.args.rounds):
            for name in rotated(list(contenders), round_number):
                copy_ns[name].append(timed(conn, f"COPY {contenders[name]} TO '/dev/null'") / n * 1e9)
                lookup_tps[name].append(self.run_pgbench(paths[name], 1))
        conn.execute("DROP TABLE bench.edge_key, bench.edge_bigint, bench.edge_strings")
        for name in contenders:
            self.results["key_edge"][name] = {"rows": n, "copy_out_ns_per_row": summary(copy_ns[name]),
                                              "lookup_by_string_tps": summary(lookup_tps[name])}

    def pgbench(self, conn: psycopg.Connection) -> None:
        scripts = pathlib.Path(tempfile.mkdtemp(prefix="randflake_bench_"))
        workloads = {}
        select_calls = {name: CALLS.get(name, "1") for name in SELECT_CONTENDERS}
        select_calls[CONTROLS["SELECT"][1]] = select_calls[CONTROLS["SELECT"][0]]
        for index, (name, call) in enumerate(select_calls.items()):
            path = scripts / f"select_{index}.sql"
            path.write_text(f"SELECT {call};\n")
            workloads[("SELECT", name)] = path
        keys = dict(KEYS)
        keys[CONTROLS["INSERT"][1]] = keys[CONTROLS["INSERT"][0]]
        for index, (name, key) in enumerate(keys.items()):
            conn.execute(f"DROP TABLE IF EXISTS bench.insert_{index}")
            conn.execute(f"CREATE TABLE bench.insert_{index} ({key}, payload int)")
            path = scripts / f"insert_{index}.sql"
            path.write_text(f"INSERT INTO bench.insert_{index} DEFAULT VALUES;\n")
            workloads[("INSERT", name)] = path
        tps: dict = {}
        for round_number in range(self.args.pgbench_rounds):
            for clients in self.args.clients:
                for key in rotated(list(workloads), round_number):
                    tps.setdefault(f"{key[0]}|{key[1]}|{clients}", []).append(self.run_pgbench(workloads[key], clients))
        for key, samples in tps.items():
            workload, name, clients = key.split("|")
            self.results["pgbench"].setdefault(workload, {}).setdefault(name, {})[clients] = summary(samples)

    def run_pgbench(self, script: pathlib.Path, clients: int) -> float:
        run = pgbench_run(self.args.host, self.args.port, script, clients, self.args.pgbench_seconds)
        if run["exit"] != 0:
            raise RuntimeError(f"pgbench failed: {run['errors']}")
        return run["tps"]

    def connections(self, conn: psycopg.Connection) -> None:
        """pgbench -C: a new backend for every transaction, the statements taking turns."""
        scripts = pathlib.Path(tempfile.mkdtemp(prefix="randflake_bench_connect_"))
        paths = {}
        for index, (name, statement) in enumerate(CONNECT_STATEMENTS.items()):
            paths[name] = scripts / f"connect_{index}.sql"
            paths[name].write_text(f"{statement};\n")
        runs: dict = {}
        for round_number in range(self.args.connect_rounds):
            for clients in self.args.connect_clients:
                for name in rotated(list(paths), round_number):
                    run = pgbench_run(self.args.host, self.args.port, paths[name], clients, self.args.connect_seconds, "-C")
                    if run["exit"] != 0:
                        raise RuntimeError(f"pgbench -C {name} failed: {run['errors']}")
                    runs.setdefault(str(clients), {}).setdefault(name, []).append(run)
        for clients, by_name in runs.items():
            for name, samples in by_name.items():
                # Wall time of one transaction as its client sees it, connection included; and the
                # part after the connection is up, which holds the first call.
                self.results["connections"].setdefault(clients, {})[name] = {
                    "tps": summary([run["tps"] for run in samples]),
                    "us_per_connection": summary([int(clients) * 1e6 / run["tps"] for run in samples]),
                    "us_after_connecting": summary([(run["latency_ms"] - run["connection_ms"]) * 1e3 for run in samples]),
                }

    def sql_edition(self, conn: psycopg.Connection) -> None:
        """The SQL edition against the native function and gen_random_uuid(): ns per ID (as
        per_call measures it, on fewer rows: an edition call costs tens of microseconds), and
        single-row INSERT tps at EDITION_CLIENTS clients with each as the key's DEFAULT."""
        conn.execute(f"DROP DATABASE IF EXISTS {EDITION_DB}")
        conn.execute(f"CREATE DATABASE {EDITION_DB}")
        databases = {"postgres": conn, EDITION_DB: psycopg.connect(
            host=self.args.host, port=self.args.port, user="postgres", dbname=EDITION_DB, autocommit=True)}
        edition = databases[EDITION_DB]
        self.install_edition(edition, 130000, 130999)
        n = self.args.edition_rows
        per_id: dict[str, list[float]] = {name: [] for name in EDITION_CONTENDERS}
        for round_number in range(self.args.rounds):
            for name in rotated(list(EDITION_CONTENDERS), round_number):
                database, expression, _ = EDITION_CONTENDERS[name]
                without = timed(databases[database], self.per_call_statement([], n))
                total = timed(databases[database], self.per_call_statement([expression] * CALLS_PER_ROW, n))
                per_id[name].append((total - without) / (CALLS_PER_ROW * n) * 1e9)
        scripts = pathlib.Path(tempfile.mkdtemp(prefix="randflake_bench_edition_"))
        for index, (name, (database, _, key)) in enumerate(EDITION_CONTENDERS.items()):
            databases[database].execute(f"DROP TABLE IF EXISTS edition_insert_{index}")
            databases[database].execute(f"CREATE TABLE edition_insert_{index} ({key}, payload int)")
            (scripts / f"insert_{index}.sql").write_text(f"INSERT INTO edition_insert_{index} DEFAULT VALUES;\n")
        tps: dict[str, list[float]] = {name: [] for name in EDITION_CONTENDERS}
        for round_number in range(self.args.pgbench_rounds):
            for name in rotated(list(EDITION_CONTENDERS), round_number):
                index = list(EDITION_CONTENDERS).index(name)
                run = pgbench_run(self.args.host, self.args.port, scripts / f"insert_{index}.sql", EDITION_CLIENTS,
                                  self.args.pgbench_seconds, dbname=EDITION_CONTENDERS[name][0])
                if run["exit"] != 0:
                    raise RuntimeError(f"pgbench {name} failed: {run['errors']}")
                tps[name].append(run["tps"])
        edition.close()
        conn.execute(f"DROP DATABASE {EDITION_DB}")
        for name in EDITION_CONTENDERS:
            self.results["sql_edition"][name] = {"rows": n, "ns_per_id": summary(per_id[name]),
                                                 f"insert_tps_{EDITION_CLIENTS}_clients": summary(tps[name])}
        if shutil.which("valgrind"):
            self.results["sql_edition_instructions"] = self.edition_instructions()

    def install_edition(self, conn: psycopg.Connection, first_node: int, last_node: int) -> None:
        """The edition's script (--edition-script) in `conn`'s database, with a fresh secret and
        nodes `first_node`..`last_node`."""
        conn.execute(self.args.edition_script.read_text())
        with conn.cursor() as cursor, cursor.copy("COPY randflake.secret (secret_hex) FROM STDIN") as copy:
            copy.write_row((os.urandom(16).hex(),))
        conn.execute("SELECT randflake.check_secret(), randflake.configure(%s, %s)", (first_node, last_node))

    def edition_instructions(self) -> dict[str, float]:
        """EDITION_STATEMENTS' backend instructions per statement, on a cluster of its own (a
        single-user backend needs its cluster stopped) with the edition installed in its
        postgres database, nodes 0..1023, and randflake_pg not loaded."""
        directory = f"{self.args.many_dir}-callgrind"
        with ScratchCluster(directory, self.args.many_port, []) as cluster:
            with cluster.connect() as conn:
                self.install_edition(conn, 0, 1023)
                conn.execute(f"CREATE TABLE uuid_keyed ({KEYS['gen_random_uuid()']}, payload int)")
                conn.execute(f"CREATE TABLE edition_keyed ({KEYS['randflake_next()']}, payload int)")
            cluster.script("stop")
            counted = {}
            for name, statement in EDITION_STATEMENTS.items():
                totals = [callgrind_total(directory, statement, count)
                          for count in (EDITION_STATEMENTS_FEWER, EDITION_STATEMENTS_MORE)]
                counted[name] = (totals[1] - totals[0]) / (EDITION_STATEMENTS_MORE - EDITION_STATEMENTS_FEWER)
            return counted

    def first_call(self, conn: psycopg.Connection) -> None:
        """µs of the first and the second call in each of many fresh backends, taking turns. The
        statement is parsed and planned once first, with a constant in the call's place, so
        that only executing it is new."""
        first: dict[str, list[float]] = {name: [] for name in FIRST_CALLS}
        second: dict[str, list[float]] = {name: [] for name in FIRST_CALLS}
        for round_number in range(self.args.first_call_backends):
            for name in rotated(list(FIRST_CALLS), round_number):
                with self.connect() as fresh:
                    fresh.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) SELECT 1")
                    first[name].append(execution_us(fresh, FIRST_CALLS[name]))
                    second[name].append(execution_us(fresh, FIRST_CALLS[name]))
        for name in FIRST_CALLS:
            self.results["first_call"][name] = {"backends": self.args.first_call_backends,
                                                "us_first": summary(first[name]), "us_second": summary(second[name])}

    def per_call_instructions(self, conn: psycopg.Connection) -> None:
        """Backend instructions per call of INSTRUCTION_CALLS, as per_call measures time: the
        per-call statement with CALLS_PER_ROW calls a row, less the same without them, each
        statement run twice and its lower count kept; on a cluster of its own whose postmaster
        runs under callgrind. Valgrind hides AVX-512, so the cipher's AVX2 kernel is counted."""
        if not shutil.which("valgrind"):
            print("   skipped: no valgrind (make deps installs it)", flush=True)
            return
        n = INSTRUCTION_ROWS
        statements = {name: self.per_call_statement([as_bigint(name)] * CALLS_PER_ROW, n) for name in INSTRUCTION_CALLS}
        statements["without the calls"] = self.per_call_statement([], n)
        # The first call (the node, the start-up second) and the plans out of the counts.
        warm_up = [f"SELECT {CALLS[name]}" for name in INSTRUCTION_CALLS]
        directory = f"{self.args.many_dir}-callgrind"
        with ScratchCluster(directory, self.args.many_port, ["jit = off"]) as cluster:
            with cluster.connect() as setup:
                setup.execute("CREATE EXTENSION IF NOT EXISTS randflake_pg")
                wait_for_lease(setup)
            cluster.script("stop")
            counts = backend_instructions(cluster, [*warm_up, *list(statements.values()) * 2])
        if counts is None:
            print("   skipped: callgrind found no exec_simple_query to dump after (a server built without"
                  " symbols, as Debian's packages are)", flush=True)
            return
        counts = counts[len(warm_up):]
        lowest = {name: min(counts[index], counts[index + len(statements)]) for index, name in enumerate(statements)}
        for name in INSTRUCTION_CALLS:
            self.results["per_call_instructions"][name] = (lowest[name] - lowest["without the calls"]) / (CALLS_PER_ROW * n)

    def many_clients(self, conn: psycopg.Connection) -> None:
        """64 and 256 clients at once on a cluster whose node range is sized for them: refusals
        from randflake_status() before and after, failed transactions from pgbench, and the wait
        events of the pgbench backends sampled from pg_stat_activity while they run."""
        max_connections = max(self.args.many_clients) + 16
        nodes = max_connections + MANY_PARALLEL_WORKERS + 1
        settings = [f"max_connections = {max_connections}", f"max_parallel_workers = {MANY_PARALLEL_WORKERS}",
                    "randflake.node_id_min = 0", f"randflake.node_id_max = {nodes - 1}", "jit = off"]
        section = self.results["many_clients"]
        section["cluster"] = {"max_connections": max_connections, "max_parallel_workers": MANY_PARALLEL_WORKERS,
                              "nodes": nodes}
        scripts = pathlib.Path(tempfile.mkdtemp(prefix="randflake_bench_many_"))
        paths = {}
        for index, (name, statement) in enumerate(MANY_STATEMENTS.items()):
            paths[name] = scripts / f"many_{index}.sql"
            paths[name].write_text(f"{statement};\n")
        with ScratchCluster(self.args.many_dir, self.args.many_port, settings) as cluster:
            with cluster.connect() as watcher:
                watcher.execute("CREATE EXTENSION IF NOT EXISTS randflake_pg")
                wait_for_lease(watcher)
                for round_number in range(self.args.many_rounds):
                    for clients in self.args.many_clients:
                        for name in rotated(list(paths), round_number):
                            run = watched_pgbench(cluster, watcher, paths[name], clients, self.args.many_seconds)
                            section.setdefault("runs", {}).setdefault(str(clients), {}).setdefault(name, []).append(run)
                # Connections that come and go on the same range: each short-lived backend that
                # made an ID leaves its node used for the rest of that second.
                churn_clients = min(self.args.many_clients)
                for round_number in range(self.args.many_rounds):
                    for name in rotated(list(paths), round_number):
                        run = watched_pgbench(cluster, watcher, paths[name], churn_clients, self.args.many_seconds, "-C")
                        section.setdefault("churn", {}).setdefault(str(churn_clients), {}).setdefault(name, []).append(run)

    def shared_nodes(self, conn: psycopg.Connection) -> None:
        """SHARED_CHURN_CLIENTS clients connecting for every INSERT and SHARED_PERSISTENT_CLIENTS
        persistent ones at once, for --shared-seconds, on a cluster of its own whose range has
        SHARED_NODES nodes: pgbench's failures and randflake_status()'s refusals over the run; then
        every ID the run made decoded with randflake_decode() and counted by second, with the
        distinct nodes that made them."""
        settings = ["randflake.node_id_min = 0", f"randflake.node_id_max = {SHARED_NODES - 1}", "jit = off"]
        script = pathlib.Path(tempfile.mkdtemp(prefix="randflake_bench_shared_")) / "insert.sql"
        script.write_text("INSERT INTO shared_keyed DEFAULT VALUES;\n")
        seconds = self.args.shared_seconds
        with ScratchCluster(f"{self.args.many_dir}-shared", self.args.many_port, settings) as cluster:
            with cluster.connect() as watcher:
                watcher.execute("CREATE EXTENSION IF NOT EXISTS randflake_pg")
                watcher.execute(f"CREATE TABLE shared_keyed ({KEYS['randflake_next()']}, payload int)")
                wait_for_lease(watcher)
                before = status_counters(watcher)
                with ThreadPoolExecutor(2) as pool:
                    churn = pool.submit(pgbench_run, cluster.directory, cluster.port, script, SHARED_CHURN_CLIENTS,
                                        seconds, "-C")
                    persistent = pool.submit(pgbench_run, cluster.directory, cluster.port, script,
                                             SHARED_PERSISTENT_CLIENTS, seconds)
                    runs = {"connecting (-C)": churn.result(), "persistent": persistent.result()}
                after = status_counters(watcher)
                by_second = watcher.execute(
                    "SELECT extract(epoch FROM d.timestamp)::bigint, count(*), count(DISTINCT d.node_id) "
                    "FROM shared_keyed t, randflake_decode(t.id) d GROUP BY 1 ORDER BY 1").fetchall()
        self.results["shared_nodes"] = {
            "nodes": SHARED_NODES, "seconds": seconds, "runs": runs,
            "counters": {name: after[name] - before[name] for name in after},
            "by_second": [{"second": second, "ids": ids, "nodes": nodes} for second, ids, nodes in by_second],
        }


class ScratchCluster:
    """A throwaway cluster of tests/scratch-cluster.sh, destroyed on the way out."""

    def __init__(self, directory: str, port: int, settings: list[str]):
        self.directory, self.port, self.settings = directory, port, settings

    def __enter__(self) -> "ScratchCluster":
        self.script("destroy")
        self.script("init", str(self.port), *self.settings)
        self.script("start")
        return self

    def __exit__(self, *exc) -> None:
        self.script("destroy")

    def script(self, command: str, *arguments: str) -> None:
        subprocess.run([str(SCRATCH_CLUSTER), command, self.directory, *arguments], check=True)

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(host=self.directory, port=self.port, user="postgres", dbname="postgres", autocommit=True)


def execution_us(conn: psycopg.Connection, expression: str) -> float:
    plan = conn.execute(f"EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) SELECT {expression}").fetchone()[0]
    return plan[0]["Execution Time"] * 1e3


def wait_for_lease(conn: psycopg.Connection, timeout: float = 30.0) -> None:
    """A fresh cluster's keeper takes its lease within a second or two of CREATE EXTENSION."""
    deadline = time.monotonic() + timeout
    while conn.execute("SELECT state FROM randflake_status()").fetchone()[0] != "active":
        if time.monotonic() > deadline:
            raise RuntimeError("the lease keeper did not take a lease")
        time.sleep(0.2)


def pg_bindir() -> str:
    """The server's programs, of the PostgreSQL that PG_CONFIG (or pg_config on the PATH) names."""
    return subprocess.run([os.environ.get("PG_CONFIG", "pg_config"), "--bindir"], check=True, capture_output=True,
                          text=True).stdout.strip()


def callgrind_total(data_directory: str, statement: str, count: int) -> int:
    """Instructions callgrind counts in a single-user backend of the stopped cluster in
    `data_directory` that runs `statement` `count` times, one line (one transaction) each, with
    no library preloaded."""
    with tempfile.TemporaryDirectory(prefix="randflake_bench_callgrind_") as scratch:
        out = pathlib.Path(scratch, "callgrind.out")
        os.chmod(scratch, 0o777)
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                   f"{pg_bindir()}/postgres", "--single", "-D", data_directory, "-c", "shared_preload_libraries=",
                   "postgres"]
        if os.getuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, input=f"{statement}\n" * count, text=True, check=True, capture_output=True)
        return callgrind_summary(out)


def backend_instructions(cluster: ScratchCluster, statements: list[str]) -> list[int] | None:
    """Instructions callgrind counts for each of `statements`, run in order in one backend of the
    stopped `cluster`, started for it with its postmaster under callgrind (valgrind follows the
    forked backends) and stopped again. Each statement is a simple query of its own, after which
    callgrind dumps the backend's counts (--dump-after=exec_simple_query) before the backend
    answers, so the dumps on disk count the queries answered. None when the server's binary has
    no symbols for callgrind to find exec_simple_query by, so that nothing was dumped."""
    with tempfile.TemporaryDirectory(prefix="randflake_bench_callgrind_") as scratch:
        os.chmod(scratch, 0o777)
        as_owner = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        postmaster = subprocess.Popen(
            [*as_owner, "valgrind", "--tool=callgrind", "--dump-after=exec_simple_query",
             f"--callgrind-out-file={scratch}/callgrind.%p", f"{pg_bindir()}/postgres", "-D", cluster.directory],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            conn = connect_when_up(cluster, postmaster, timeout=300)
            wait_for_lease(conn, timeout=120)
            pid = int(simple_query(conn, "SELECT pg_backend_pid()").get_value(0, 0))
            # The backend's dumps so far: its start, the wait for the lease and the query above.
            dumped = len(list(pathlib.Path(scratch).glob(f"callgrind.{pid}.*")))
            for statement in statements:
                simple_query(conn, statement)
            conn.close()
        finally:
            subprocess.run([*as_owner, f"{pg_bindir()}/pg_ctl", "-D", cluster.directory, "-m", "fast", "-w", "-t",
                            "300", "stop"], capture_output=True)
            postmaster.wait(timeout=300)
        dumps = [pathlib.Path(scratch, f"callgrind.{pid}.{dumped + number}") for number in range(1, len(statements) + 1)]
        if not all(dump.exists() for dump in dumps):
            return None
        return [callgrind_summary(dump) for dump in dumps]


def connect_when_up(cluster: ScratchCluster, postmaster: subprocess.Popen, timeout: float) -> psycopg.Connection:
    """A connection to `cluster` once its postmaster (a slow one, under valgrind) accepts it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return cluster.connect()
        except psycopg.OperationalError:
            if postmaster.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the postmaster under callgrind did not accept connections ({cluster.directory})")
            time.sleep(0.5)


def simple_query(conn: psycopg.Connection, statement: str) -> psycopg.pq.abc.PGresult:
    """`statement` sent as a simple query, as psql sends one (psycopg's execute() sends extended
    ones): each ends in exec_simple_query, which a callgrind run can dump after."""
    result = conn.pgconn.exec_(statement.encode())
    if result.status not in (psycopg.pq.ExecStatus.TUPLES_OK, psycopg.pq.ExecStatus.COMMAND_OK):
        raise RuntimeError(f"{statement}: {result.error_message.decode()}")
    return result


def callgrind_summary(path: pathlib.Path) -> int:
    """The total instructions of one callgrind output file."""
    return next(int(line.split()[1]) for line in path.read_text().splitlines() if line.startswith("summary:"))


def pgbench_run(host: str, port: int, script: pathlib.Path, clients: int, seconds: int, *options: str,
                dbname: str = "postgres") -> dict:
    """One pgbench run (-M prepared unless -C asks for a new connection per transaction), for
    `seconds`, or as long as options such as -t say when seconds is 0: throughput, latency,
    failures, and the exit status rather than an exception, so that callers decide whether
    failures are the result or a broken run."""
    mode = [] if "-C" in options else ["-M", "prepared"]
    completed = subprocess.run(
        ["pgbench", "-h", host, "-p", str(port), "-U", "postgres", "-n", *mode, *options,
         "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1)), *(["-T", str(seconds)] if seconds else []),
         "-f", str(script), dbname],
        capture_output=True, text=True,
    )
    output = completed.stdout

    def number(pattern: str) -> float:
        found = re.search(pattern, output)
        return float(found.group(1)) if found else 0.0

    return {
        "exit": completed.returncode,
        "tps": number(r"tps = ([0-9.]+)"),
        "transactions": int(number(r"number of transactions actually processed: ([0-9]+)")),
        "failed": int(number(r"number of failed transactions: ([0-9]+)")),
        "latency_ms": number(r"latency average = ([0-9.]+) ms"),
        "connection_ms": number(r"average connection time = ([0-9.]+) ms"),
        "aborted_clients": completed.stderr.count("aborted in command"),
        "errors": sorted({line for line in completed.stderr.splitlines() if "ERROR" in line or "error" in line})[:5],
    }


STATUS_COUNTERS = ["node_switches", "clock_refusals", "lease_refusals"]


def status_counters(conn: psycopg.Connection) -> dict[str, int]:
    """randflake_status()'s counters (STATUS_COUNTERS) as they stand."""
    values = conn.execute(f"SELECT {', '.join(STATUS_COUNTERS)} FROM randflake_status()").fetchone()
    return dict(zip(STATUS_COUNTERS, values))


def watched_pgbench(cluster: ScratchCluster, watcher: psycopg.Connection, script: pathlib.Path, clients: int,
                    seconds: int, *options: str) -> dict:
    """pgbench with randflake_status()'s counters read before and after, and pg_stat_activity
    sampled from another connection while it runs: the wait events of active pgbench backends,
    and the most nodes in use at once."""
    before = status_counters(watcher)
    waits: dict[str, int] = {}
    peak_nodes = [0]
    done = threading.Event()

    def sample() -> None:
        with cluster.connect() as sampler:
            while not done.is_set():
                for wait_type, wait_event, count in sampler.execute(
                        "SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, 'running'), count(*) "
                        "FROM pg_stat_activity WHERE backend_type = 'client backend' "
                        "AND application_name = 'pgbench' AND state = 'active' GROUP BY 1, 2").fetchall():
                    key = f"{wait_type}:{wait_event}"
                    waits[key] = waits.get(key, 0) + count
                peak_nodes[0] = max(peak_nodes[0], sampler.execute("SELECT nodes_in_use FROM randflake_status()").fetchone()[0] or 0)
                time.sleep(0.05)

    sampler_thread = threading.Thread(target=sample, daemon=True)
    sampler_thread.start()
    try:
        run = pgbench_run(cluster.directory, cluster.port, script, clients, seconds, *options)
    finally:
        done.set()
        sampler_thread.join()
    after = status_counters(watcher)
    run.update({name: after[name] - before[name] for name in STATUS_COUNTERS})
    run.update({"peak_nodes_in_use": peak_nodes[0], "wait_samples": waits})
    return run


def failures(run: dict) -> int:
    """A pgbench run's failed transactions and aborted clients, and one more if it exited non-zero."""
    return run["failed"] + run["aborted_clients"] + (run["exit"] != 0)

def paired(numerator: dict, denominator: dict) -> list[float]:
    """Per-round ratios: both were measured in the same round, minutes apart at most, so drift on
    a shared machine cancels out better than in a ratio of medians."""
    return [a / b for a, b in zip(numerator["samples"], denominator["samples"])]


def ratio(numerator: dict, denominator: dict) -> float:
    return statistics.median(paired(numerator, denominator))


def fmt_ratio(numerator: dict, denominator: dict) -> str:
    ratios = paired(numerator, denominator)
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}..{max(ratios):.2f}]"


def fmt_spread(entry: dict, scale: float = 1.0, digits: int = 0) -> str:
    return f"{entry['median'] * scale:,.{digits}f} [{entry['min'] * scale:,.{digits}f}..{entry['max'] * scale:,.{digits}f}]"


def merged_waits(runs: list[dict]) -> dict[str, int]:
    total: dict[str, int] = {}
    for run in runs:
        for key, count in run["wait_samples"].items():
            total[key] = total.get(key, 0) + count
    return total


def shared_lock_share(waits: dict[str, int]) -> float:
    """The fraction of active-backend samples spent queued for a shared lock."""
    locked = sum(count for key, count in waits.items() if key.split(":")[0] in SHARED_LOCK_WAITS)
    return locked / max(1, sum(waits.values()))


def top_waits(waits: dict[str, int], limit: int = 4) -> str:
    total = max(1, sum(waits.values()))
    ranked = sorted(waits.items(), key=lambda item: -item[1])[:limit]
    return ", ".join(f"{key} {count / total:.0%}" for key, count in ranked)


def report_connections(results: dict) -> list[tuple[str, bool, str]]:
    """The -C tables and their target; returns the targets."""
    targets = []
    section = results["connections"]
    if not section:
        return targets
    print("\n== pgbench -C, a new connection for every transaction: tps median [min..max]; the cost of a "
          "transaction as clients x 1e6 / tps; cost ratio to SELECT 1 = per-round tps(SELECT 1) / tps(f)")
    worst = None
    for clients, table in section.items():
        baseline = table["SELECT 1"]
        print(f"  {clients} client(s)")
        print(f"    {'statement':22} {'tps':>26} {'us per connection':>20} {'us after connecting':>21} {'cost x SELECT 1':>20}")
        for name, entry in table.items():
            print(f"    {name:22} {fmt_spread(entry['tps']):>26} {entry['us_per_connection']['median']:>20,.0f} "
                  f"{entry['us_after_connecting']['median']:>21,.0f} {fmt_ratio(baseline['tps'], entry['tps']):>20}")
        mine = table["randflake_next()"]
        extra = [a - b for a, b in zip(mine["us_per_connection"]["samples"], baseline["us_per_connection"]["samples"])]
        extra_after = [a - b for a, b in zip(mine["us_after_connecting"]["samples"],
                                             baseline["us_after_connecting"]["samples"])]
        print(f"    first randflake_next() in a new backend: {statistics.median(extra):+,.0f} us per connection "
              f"[{min(extra):+,.0f}..{max(extra):+,.0f}] against SELECT 1, {statistics.median(extra_after):+,.0f} us "
              f"[{min(extra_after):+,.0f}..{max(extra_after):+,.0f}] once connected; noise floor "
              f"{fmt_ratio(baseline['tps'], table['SELECT 1 (control)']['tps'])}")
        rate = ratio(mine["tps"], baseline["tps"])
        if worst is None or rate < worst[1]:
            worst = (clients, rate, fmt_ratio(mine["tps"], baseline["tps"]),
                     fmt_ratio(table["SELECT 1 (control)"]["tps"], baseline["tps"]), statistics.median(extra))
    clients, rate, figures, floor, extra = worst
    targets.append(("pgbench -C, the first randflake_next() of each new backend: >= 0.95x SELECT 1's connections/s",
                    rate >= 0.95, f"worst at {clients} client(s): {figures}, {extra:+,.0f} us per connection; "
                                  f"noise floor there {floor}"))
    first = results["first_call"]
    if first:
        # The connection's own cost: one client's SELECT 1 under -C, where nothing else runs.
        connection_us = section[min(section, key=int)]["SELECT 1"]["us_per_connection"]["median"]
        print(f"\n== The first call in a fresh backend, timed inside it (EXPLAIN ANALYZE execution time), "
              f"{next(iter(first.values()))['backends']} backends each: us, median [min..max]")
        print(f"  {'call':20} {'first call':>24} {'the next call':>20} {'first, share of a connection':>30}")
        for name, entry in first.items():
            print(f"  {name:20} {fmt_spread(entry['us_first'], digits=1):>24} {fmt_spread(entry['us_second'], digits=1):>20} "
                  f"{entry['us_first']['median'] / connection_us:>30.1%}")
        mine = first["randflake_next()"]["us_first"]["median"]
        targets.append(("the first randflake_next() in a new backend, timed inside it, <= 5% of a SELECT 1 connection",
                        mine <= 0.05 * connection_us,
                        f"{mine:.0f} us against {connection_us:,.0f} us per connection: {mine / connection_us:.1%}"))
    return targets


def report_many_clients(results: dict) -> list[tuple[str, bool, str]]:
    """The many-clients table, the churn note and their targets; returns the targets."""
    section = results["many_clients"]
    if not section:
        return []
    cluster = section["cluster"]
    print(f"\n== Many clients at once, pgbench -M prepared, on a cluster with max_connections = "
          f"{cluster['max_connections']}, max_parallel_workers = {cluster['max_parallel_workers']} and a node range "
          f"of {cluster['nodes']} nodes (the DBA guide's rule: more than the two together). Wait events: share of "
          "active pgbench backends' samples in pg_stat_activity")
    print(f"  {'clients':>7} {'statement':18} {'tps':>26} {'failed':>7} {'refused':>8} {'peak nodes':>10} "
          f"{'shared-lock waits':>18}  most seen")
    refusals_ok, locks_ok, lock_figures = True, True, []
    for clients, table in section["runs"].items():
        for name, runs in table.items():
            waits = merged_waits(runs)
            failed = sum(failures(run) for run in runs)
            refused = sum(run["clock_refusals"] + run["lease_refusals"] for run in runs)
            print(f"  {clients:>7} {name:18} {fmt_spread(summary([run['tps'] for run in runs])):>26} {failed:>7} "
                  f"{refused:>8} {max(run['peak_nodes_in_use'] for run in runs):>10} "
                  f"{shared_lock_share(waits):>18.1%}  {top_waits(waits)}")
            if name == "randflake_next()":
                refusals_ok = refusals_ok and failed == 0 and refused == 0
        mine, baseline = merged_waits(table["randflake_next()"]), merged_waits(table["SELECT 1"])
        # A shared-lock wait is randflake's if SELECT 1, the same clients without the call, never
        # waits on it, or waits on it clearly less often (one percentage point of samples).
        own = [key for key in mine if key.split(":")[0] in SHARED_LOCK_WAITS and key not in baseline]
        extra_share = shared_lock_share(mine) - shared_lock_share(baseline)
        locks_ok = locks_ok and not own and extra_share <= 0.01
        lock_figures.append(f"{clients} clients: {shared_lock_share(mine):.1%} against SELECT 1's "
                            f"{shared_lock_share(baseline):.1%}" + (f", only in randflake's: {', '.join(own)}" if own else ""))
    targets = [
        (f"{' and '.join(section['runs'])} clients on a {cluster['nodes']}-node range: no refusals, no failed transactions",
         refusals_ok, "randflake_status() clock and lease refusals, pgbench failed transactions and aborted clients: "
                      + ("none" if refusals_ok else "see the table")),
        ("no shared-lock (LWLock, Lock) waits attributable to randflake_next()", locks_ok, "; ".join(lock_figures)),
    ]
    for clients, table in section.get("churn", {}).items():
        rates = {name: summary([run["tps"] for run in runs]) for name, runs in table.items()}
        waits = merged_waits(table["randflake_next()"])
        print(f"  pgbench -C at {clients} clients on the same range: SELECT 1 {fmt_spread(rates['SELECT 1'])} "
              f"connections/s, SELECT randflake_next() {fmt_spread(rates['randflake_next()'])} "
              f"({fmt_ratio(rates['randflake_next()'], rates['SELECT 1'])} of it); randflake's backends: {top_waits(waits)}")
        print(f"  Note: a backend that made an ID leaves its node used for the rest of that second, so a range of "
              f"{cluster['nodes']} nodes serves about {cluster['nodes']} new ID-making connections a second; "
              "beyond that, new connections wait for the next second (wait event Extension), never fail.")
    return targets


# The sections report_core() reads; a run of some --steps only skips it.


def report(results: dict) -> list[tuple[str, bool, str]]:
    """Prints the tables; returns (target, met, figures) for each target."""
    # Each step's table and targets, printed when the step ran.
    core = {"per_call": report_per_call, "single_statement": report_single_statement, "decoding": report_decoding,
            "bulk": report_bulk, "pgbench": report_pgbench}
    targets = [target for section, reporter in core.items() if results[section] for target in reporter(results)]
    report_per_call_instructions(results)
    targets += report_connections(results)
    targets += report_many_clients(results)
    targets += report_shared_nodes(results)
    targets += report_sql_edition(results)
    targets += report_key_edge(results)
    print("\n== Targets")
    for name, met, figures in targets:
        print(f"  [{'met' if met else 'MISSED'}] {name}: {figures}")
    return targets


def report_per_call_instructions(results: dict) -> None:
    """The per-call statement's backend instructions per call, beside the timed per-call table."""
    counts = results["per_call_instructions"]
    if not counts:
        return
    floor = counts["pg_backend_pid()"]
    print(f"\n== Per call, backend instructions (callgrind, a running server's backend, the per-call statement over "
          f"{INSTRUCTION_ROWS:,} rows less the same without the calls; the cipher's AVX2 kernel, as valgrind hides "
          "AVX-512)")
    for name, count in counts.items():
        print(f"  {name:20} {count:>8.1f}  {count / floor:.2f}x pg_backend_pid()")


def report_shared_nodes(results: dict) -> list[tuple[str, bool, str]]:
    """The shared position's run and its IDs by second; returns its two targets."""
    section = results["shared_nodes"]
    if not section:
        return []
    runs, counters, seconds = section["runs"], section["counters"], section["by_second"]
    print(f"\n== A {section['nodes']}-node range, {SHARED_CHURN_CLIENTS} clients connecting for every INSERT "
          f"(pgbench -C) and {SHARED_PERSISTENT_CLIENTS} persistent (-M prepared) at once for {section['seconds']} s, "
          "one table keyed by randflake_next(); its IDs decoded with randflake_decode() afterwards")
    print(f"  {'clients':18} {'tps':>10} {'transactions':>13} {'failed':>7}  errors")
    for name, run in runs.items():
        # The server's own words first: pgbench's "Run was aborted" says less.
        errors = sorted(run["errors"], key=lambda line: "ERROR:" not in line)
        print(f"  {name:18} {run['tps']:>10,.0f} {run['transactions']:>13,} {failures(run):>7}  {'; '.join(errors[:1])}")
    refusals = counters["clock_refusals"] + counters["lease_refusals"]
    print(f"  randflake_status() over the run: {counters['clock_refusals']} clock and {counters['lease_refusals']} "
          f"lease refusals, {counters['node_switches']} node switches")
    failed = sum(failures(run) for run in runs.values())
    targets = [(f"{section['nodes']}-node range, {SHARED_CHURN_CLIENTS} clients with pgbench -C and "
                f"{SHARED_PERSISTENT_CLIENTS} persistent: no refusals, no failed transactions",
                refusals == 0 and failed == 0, f"{refusals} refusals, {failed} failed transactions or aborted clients")]
    label = (f"at most {SHARED_MAX_NODES_PER_SECOND} distinct nodes in any second of fewer than "
             f"{IDS_PER_NODE_SECOND:,} IDs (decoded, by second)")
    below = [entry for entry in seconds if entry["ids"] < IDS_PER_NODE_SECOND]
    if not below:
        return [*targets, (label, False, f"no such second: {len(seconds)} second(s) with IDs")]
    spread = Counter(entry["nodes"] for entry in below)
    widest = max(below, key=lambda entry: (entry["nodes"], entry["ids"]))
    print(f"  {len(seconds)} seconds with IDs, {min(e['ids'] for e in seconds):,}..{max(e['ids'] for e in seconds):,} "
          f"IDs a second; of the {len(below)} below {IDS_PER_NODE_SECOND:,}, by distinct nodes: "
          + ", ".join(f"{nodes} node(s) {count} s" for nodes, count in sorted(spread.items())))
    return [*targets, (label, widest["nodes"] <= SHARED_MAX_NODES_PER_SECOND,
                       f"most {widest['nodes']} node(s), in a second of {widest['ids']:,} IDs; "
                       f"{len(below)} of {len(seconds)} seconds below {IDS_PER_NODE_SECOND:,}")]


def report_key_edge(results: dict) -> list[tuple[str, bool, str]]:
    edge = results["key_edge"]
    if not edge:
        return []
    key, bigint = edge["randflake_key"], edge["bigint"]
    print(f"\n== randflake_key at the edge against bigint, {key['rows']:,} IDs: COPY ... TO '/dev/null' per row, and "
          "point lookups by the canonical string (pgbench -M prepared, 1 client)")
    print(f"  {'column':15} {'COPY ns/row':>22} {'lookups tps':>26}")
    for name, entry in edge.items():
        print(f"  {name:15} {fmt_spread(entry['copy_out_ns_per_row'], digits=1):>22} "
              f"{fmt_spread(entry['lookup_by_string_tps']):>26}")
    copy = ratio(key["copy_out_ns_per_row"], bigint["copy_out_ns_per_row"])
    # Time per lookup is the inverse of tps: bigint's tps over the key's.
    lookup = ratio(bigint["lookup_by_string_tps"], key["lookup_by_string_tps"])
    return [("randflake_key's COPY ... TO per row <= 1.5x bigint's", copy <= 1.5,
             f"{fmt_ratio(key['copy_out_ns_per_row'], bigint['copy_out_ns_per_row'])}x"),
            ("randflake_key's point lookup by string <= 1.5x bigint's time", lookup <= 1.5,
             f"{fmt_ratio(bigint['lookup_by_string_tps'], key['lookup_by_string_tps'])}x")]


def report_sql_edition(results: dict) -> list[tuple[str, bool, str]]:
    """The SQL edition's table; returns its target."""
    edition = results["sql_edition"]
    if not edition:
        return []
    uuid = edition["gen_random_uuid()"]
    tps = f"insert_tps_{EDITION_CLIENTS}_clients"
    print(f"\n== SQL edition (sql-edition/): ns per ID over {next(iter(edition.values()))['rows']:,} rows x "
          f"{CALLS_PER_ROW} calls, and single-row INSERT tps at {EDITION_CLIENTS} clients with it as the key's DEFAULT")
    print(f"  {'contender':32} {'ns/ID':>26} {'INSERT tps':>26} {'x uuid tps':>20}")
    for name, entry in edition.items():
        print(f"  {name:32} {fmt_spread(entry['ns_per_id'], digits=0):>26} {fmt_spread(entry[tps]):>26} "
              f"{fmt_ratio(entry[tps], uuid[tps]):>20}")
    instructions = results.get("sql_edition_instructions", {})
    if instructions:
        print(f"  backend instructions per statement (callgrind, single-user backend, each statement a transaction; "
              f"{EDITION_STATEMENTS_MORE} minus {EDITION_STATEMENTS_FEWER} statements):")
        for name, count in instructions.items():
            print(f"    {name:40} {count:>12,.0f}")
    share = ratio(edition["randflake_sql randflake_next()"][tps], uuid[tps])
    # What the edition's hardening may not cost: 0.6.0's rate, measured quiet, and its
    # instructions per call, counted the same way (docs/managed-postgresql.md#performance). The
    # edition's own goal, 0.6x, is out of PL/pgSQL's reach (same page).
    targets = [(f"SQL edition INSERT tps >= 0.39x gen_random_uuid() at {EDITION_CLIENTS} clients (0.6.0's, quiet)",
                share >= 0.39, f"{share:.2f}x")]
    if instructions:
        count = instructions["SELECT randflake_next()"]
        targets.append((f"SQL edition SELECT randflake_next() <= {EDITION_INSTRUCTIONS_0_6_0:,} backend instructions "
                        "(0.6.0 as first written)", count <= EDITION_INSTRUCTIONS_0_6_0, f"{count:,.0f}"))
    return targets


def report_per_call(results: dict) -> list[tuple[str, bool, str]]:
    """The per-call table; returns its targets."""
    per_call = {name: entry["ns_per_call_isolated"] for name, entry in results["per_call"].items()}
    floor = per_call["pg_backend_pid()"]
    mine = per_call["randflake_next()"]
    print(f"\n== Per call: SELECT sum(g::bigint # f()::bigint # ... x {CALLS_PER_ROW}) FROM generate_series(1, N) g, "
          "less the same without the calls, per call; ratios are per-round medians [min..max]")
    print(f"  {'contender':30} {'ns/call':>26} {'x pg_backend_pid':>22} {'x randflake':>22}")
    for name, isolated in per_call.items():
        print(f"  {name:30} {fmt_spread(isolated, digits=1):>26} {fmt_ratio(isolated, floor):>22} "
              f"{fmt_ratio(isolated, mine):>22}")
    per_call_ratio = ratio(mine, floor)
    cheaper = ratio(per_call["nextval() CACHE 1"], mine)
    return [
        (f"randflake_next() per call <= {PER_CALL_LIMIT}x pg_backend_pid()", per_call_ratio <= PER_CALL_LIMIT,
         f"{mine['median']:.1f} ns vs {floor['median']:.1f} ns: {fmt_ratio(mine, floor)}x"),
        (">= 10x cheaper than nextval() CACHE 1 per call", cheaper >= 10,
         f"{per_call['nextval() CACHE 1']['median']:.1f} ns vs {mine['median']:.1f} ns: "
         f"{fmt_ratio(per_call['nextval() CACHE 1'], mine)}x"),
    ]


def report_single_statement(results: dict) -> list[tuple[str, bool, str]]:
    """The one-statement rates; returns their targets."""
    statement = results["single_statement"]
    rows = statement["rows_per_second_one_call"]
    print(f"\n== One backend, one statement, {statement['ids']:,} rows, one call per row: "
          "SELECT sum(g::bigint # f()::bigint) FROM generate_series(1, N) g")
    for name, entry in rows.items():
        print(f"  {name:20} {fmt_spread(entry, 1e-6, 2)} million rows/s")
    print(f"  randflake_next() / pg_backend_pid(): {fmt_ratio(rows['randflake_next()'], rows['pg_backend_pid()'])}")
    print(f"  10 calls per row: {fmt_spread(statement['ids_per_second_ten_per_row'], 1e-6, 2)} million IDs/s")
    rows_ratio = ratio(rows["randflake_next()"], rows["pg_backend_pid()"])
    return [
        ("one statement, one call per row: >= 0.95x the rows/s of pg_backend_pid()", rows_ratio >= 0.95,
         f"{fmt_ratio(rows['randflake_next()'], rows['pg_backend_pid()'])}x"),
        (">= 5 million IDs/s in one statement", rows["randflake_next()"]["median"] >= 5e6,
         f"{rows['randflake_next()']['median'] / 1e6:.2f} M/s at 1 call per row, "
         f"{statement['ids_per_second_ten_per_row']['median'] / 1e6:.2f} M/s at 10"),
    ]


def report_decoding(results: dict) -> list[tuple[str, bool, str]]:
    """The decoding table; returns its targets."""
    decoding = results["decoding"]
    decode = decoding["randflake_decode(id)"]["ns_per_row"]
    print(f"\n== Decoding {next(iter(decoding.values()))['rows']:,} stored IDs, one backend, no parallel workers: "
          "SELECT count(f(id)) FROM t, less SELECT count(id) FROM t, per row")
    print(f"  {'decoder':26} {'statement s':>22} {'ns/row':>26} {'x faster than decode':>24}")
    for name, entry in decoding.items():
        print(f"  {name:26} {fmt_spread(entry['seconds'], digits=3):>22} {fmt_spread(entry['ns_per_row'], digits=1):>26} "
              f"{fmt_ratio(decode, entry['ns_per_row']):>24}")
    return [(f"{name} >= 5x faster per row than randflake_decode(id)",
             ratio(decode, decoding[name]["ns_per_row"]) >= 5,
             f"{decoding[name]['ns_per_row']['median']:.1f} ns vs {decode['median']:.1f} ns: "
             f"{fmt_ratio(decode, decoding[name]['ns_per_row'])}x") for name in ACCESSORS]


def report_bulk(results: dict) -> list[tuple[str, bool, str]]:
    """The bulk-insert table; returns its targets."""
    bulk = results["bulk"]
    uuid = bulk["gen_random_uuid()"]
    print(f"\n== Bulk: INSERT {next(iter(bulk.values()))['rows']:,} rows (id ..., payload int) in one statement")
    print(f"  {'key':20} {'seconds':>26} {'x uuid':>8} {'index MB':>10} {'x uuid':>8}")
    for name, entry in bulk.items():
        print(f"  {name:20} {fmt_spread(entry['seconds'], digits=2):>26} "
              f"{ratio(entry['seconds'], uuid['seconds']):>8.2f} "
              f"{entry['index_bytes']['median'] / 2**20:>10.1f} "
              f"{ratio(entry['index_bytes'], uuid['index_bytes']):>8.2f}")
    if UUIDV7 in bulk:
        mine_v7 = bulk["randflake_next()"]
        print(f"  randflake_next() against uuidv7(): {ratio(mine_v7['seconds'], bulk[UUIDV7]['seconds']):.2f}x the time, "
              f"{ratio(mine_v7['index_bytes'], bulk[UUIDV7]['index_bytes']):.2f}x the index. uuidv7() keys arrive in "
              "time order, so inserts fill the rightmost index page and it packs tighter; they also carry their "
              "creation time in clear. randflake keys land anywhere in the index, take 8 bytes, and reveal nothing "
              "without the secret.")
    bulk_time = ratio(bulk["randflake_next()"]["seconds"], uuid["seconds"])
    bulk_index = ratio(bulk["randflake_next()"]["index_bytes"], uuid["index_bytes"])
    targets = [
        ("bulk insert time <= 0.8x gen_random_uuid()", bulk_time <= 0.8, f"{bulk_time:.2f}x"),
        ("bulk index size <= 0.8x gen_random_uuid()", bulk_index <= 0.8, f"{bulk_index:.2f}x"),
    ]
    if ORDERED_KEY in bulk:
        ordered, identity = bulk[ORDERED_KEY]["index_bytes"], bulk["identity bigint"]["index_bytes"]
        targets.append((f"one INSERT ... SELECT of {bulk[ORDERED_KEY]['rows']:,} rows keyed by {ORDERED_KEY}: index "
                        f"<= {ORDERED_BULK_INDEX_LIMIT:.2f}x identity's", ratio(ordered, identity) <= ORDERED_BULK_INDEX_LIMIT,
                        f"{ordered['median'] / 2**20:,.1f} MB vs {identity['median'] / 2**20:,.1f} MB: "
                        f"{fmt_ratio(ordered, identity)}x"))
    return targets


def report_pgbench(results: dict) -> list[tuple[str, bool, str]]:
    """The pgbench tables; returns their target."""
    targets = []
    statements = {"SELECT": "SELECT f()", "INSERT": "INSERT INTO t DEFAULT VALUES, t.id DEFAULT f()"}
    for workload, (baseline, control) in CONTROLS.items():
        if workload not in results["pgbench"]:
            continue
        table = results["pgbench"][workload]
        clients = list(table[baseline])
        print(f"\n== pgbench -M prepared, {statements[workload]}: tps, median [min..max] (paired ratio to {baseline})")
        print(f"  {'contender':30} " + " ".join(f"{c + ' clients':>30}" for c in clients))
        for name, by_clients in table.items():
            cells = [f"{fmt_spread(by_clients[c])} ({ratio(by_clients[c], table[baseline][c]):.2f})" for c in clients]
            print(f"  {name:30} " + " ".join(f"{cell:>30}" for cell in cells))
        print(f"  noise floor, {control} / {baseline}, per-round ratios: "
              + "; ".join(f"{c} clients {fmt_ratio(table[control][c], table[baseline][c])}" for c in clients))
        if workload == "SELECT":
            print("  randflake_next() / SELECT 1, per-round ratios: "
                  + "; ".join(f"{c} clients {fmt_ratio(table['randflake_next()'][c], table[baseline][c])}" for c in clients))
            print("  A ratio whose [min..max] overlaps the noise floor's cannot be told apart from an identical "
                  "workload on this machine; only a difference larger than the control's spread is measured.")
            # The client counts, as far as --clients ran them.
            judged = [c for c in clients if int(c) in HOT_PATH_CLIENTS] or clients
            worst = min(judged, key=lambda c: ratio(table["randflake_next()"][c], table[baseline][c]))
            targets.append((f"pgbench SELECT randflake_next() >= 0.95x SELECT 1's tps at {' and '.join(judged)} clients",
                            ratio(table["randflake_next()"][worst], table[baseline][worst]) >= 0.95,
                            f"worst at {worst} clients: {fmt_ratio(table['randflake_next()'][worst], table[baseline][worst])}, "
                            f"noise floor there {fmt_ratio(table[control][worst], table[baseline][worst])}"))
    return targets


def write_outputs(results: dict, directory: pathlib.Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "results.json").write_text(json.dumps(results, indent=2))
    with open(directory / "results.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["section", "contender", "metric", "median", "min", "max"])
        for name, entry in results["per_call"].items():
            value = entry["ns_per_call_isolated"]
            writer.writerow(["per_call", name, "ns_per_call_isolated", value["median"], value["min"], value["max"]])
        for name, count in results["per_call_instructions"].items():
            writer.writerow(["per_call", name, "backend_instructions_per_call", count, count, count])
        for name, value in results["single_statement"].get("rows_per_second_one_call", {}).items():
            writer.writerow(["single_statement", name, "rows_per_second_one_call", value["median"], value["min"], value["max"]])
        if results["single_statement"]:
            value = results["single_statement"]["ids_per_second_ten_per_row"]
            writer.writerow(["single_statement", "randflake_next()", "ids_per_second_ten_per_row",
                             value["median"], value["min"], value["max"]])
        for name, entry in results["decoding"].items():
            for metric in ["ns_per_row", "seconds"]:
                writer.writerow(["decoding", name, metric, entry[metric]["median"], entry[metric]["min"], entry[metric]["max"]])
        for name, entry in results["bulk"].items():
            for metric in ["seconds", "index_bytes"]:
                writer.writerow(["bulk", name, metric, entry[metric]["median"], entry[metric]["min"], entry[metric]["max"]])
        for workload, table in results["pgbench"].items():
            for name, by_clients in table.items():
                for clients, value in by_clients.items():
                    writer.writerow([f"pgbench_{workload}", name, f"tps_{clients}_clients",
                                     value["median"], value["min"], value["max"]])
        for clients, table in results["connections"].items():
            for name, entry in table.items():
                for metric in ["tps", "us_per_connection", "us_after_connecting"]:
                    writer.writerow(["pgbench_connect", name, f"{metric}_{clients}_clients",
                                     entry[metric]["median"], entry[metric]["min"], entry[metric]["max"]])
        for name, entry in results["first_call"].items():
            for metric in ["us_first", "us_second"]:
                writer.writerow(["first_call", name, metric, entry[metric]["median"], entry[metric]["min"], entry[metric]["max"]])
        for part in ["runs", "churn"]:
            for clients, table in results["many_clients"].get(part, {}).items():
                for name, runs in table.items():
                    tps = summary([run["tps"] for run in runs])
                    writer.writerow([f"many_clients_{part}", name, f"tps_{clients}_clients", tps["median"], tps["min"], tps["max"]])
                    share = shared_lock_share(merged_waits(runs))
                    writer.writerow([f"many_clients_{part}", name, f"shared_lock_wait_share_{clients}_clients",
                                     share, share, share])
        shared = results["shared_nodes"]
        for name, run in shared.get("runs", {}).items():
            writer.writerow(["shared_nodes", name, "tps", run["tps"], run["tps"], run["tps"]])
            writer.writerow(["shared_nodes", name, "failures", failures(run), failures(run), failures(run)])
        for name, count in shared.get("counters", {}).items():
            writer.writerow(["shared_nodes", "randflake_status()", name, count, count, count])
        if shared.get("by_second"):
            most = max(entry["nodes"] for entry in shared["by_second"])
            writer.writerow(["shared_nodes", "randflake_next()", "most_distinct_nodes_in_a_second", most, most, most])
        for name, entry in results["key_edge"].items():
            for metric in ["copy_out_ns_per_row", "lookup_by_string_tps"]:
                writer.writerow(["key_edge", name, metric, entry[metric]["median"], entry[metric]["min"],
                                 entry[metric]["max"]])
        for name, entry in results["sql_edition"].items():
            for metric in ["ns_per_id", f"insert_tps_{EDITION_CLIENTS}_clients"]:
                writer.writerow(["sql_edition", name, metric, entry[metric]["median"], entry[metric]["min"],
                                 entry[metric]["max"]])
        for name, count in results.get("sql_edition_instructions", {}).items():
            writer.writerow(["sql_edition", name, "backend_instructions_per_statement", count, count, count])
    if results["per_call"] and results["pgbench"]:
        plot(results, directory / "results.png")


def plot(results: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (calls, select, insert) = plt.subplots(1, 3, figsize=(18, 5.5))
    names = list(results["per_call"])
    values = [results["per_call"][name]["ns_per_call_isolated"]["median"] for name in names]
    colours = ["tab:green" if name == "randflake_next()" else "tab:gray" for name in names]
    calls.barh(names, values, color=colours)
    calls.set_xscale("log")
    calls.set_xlabel("ns per call (isolated, median, log scale)")
    calls.set_title("Cost of one call")
    for axis, workload in [(select, "SELECT"), (insert, "INSERT")]:
        for name, by_clients in results["pgbench"][workload].items():
            clients = [int(c) for c in by_clients]
            axis.plot(clients, [by_clients[str(c)]["median"] for c in clients], marker="o", label=name,
                      linewidth=3 if name == "randflake_next()" else 1.2)
        axis.set_xscale("log", base=2)
        axis.set_xlabel("pgbench clients")
        axis.set_ylabel("transactions per second (median)")
        axis.set_title(f"pgbench: {workload}")
        axis.legend(fontsize=8)
    figure.suptitle(f"randflake_pg benchmark: {results['settings'].get('cpu', '')}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", required=True, help="server socket directory or host")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/out"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-call-rows", type=int, default=1_000_000)
    parser.add_argument("--statement-ids", type=int, default=10_000_000)
    parser.add_argument("--decode-rows", type=int, default=1_000_000)
    parser.add_argument("--bulk-rows", type=int, default=10_000_000)
    parser.add_argument("--bulk-rounds", type=int, default=2)
    parser.add_argument("--edge-rows", type=int, default=1_000_000,
                        help="randflake_key and bigint IDs of the key_edge step (COPY out, lookups by string)")
    parser.add_argument("--pgbench-seconds", type=int, default=3)
    parser.add_argument("--pgbench-rounds", type=int, default=5,
                        help="rounds of every pgbench point; more rounds narrow the reported spread")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 8, 32])
    parser.add_argument("--connect-seconds", type=int, default=5, help="each pgbench -C run")
    parser.add_argument("--connect-rounds", type=int, default=5)
    parser.add_argument("--connect-clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--first-call-backends", type=int, default=200,
                        help="fresh backends per contender in which the first call is timed")
    parser.add_argument("--many-clients", type=int, nargs="+", default=[64, 256],
                        help="client counts run on a cluster of their own, sized for the largest")
    parser.add_argument("--many-seconds", type=int, default=10)
    parser.add_argument("--many-rounds", type=int, default=3)
    parser.add_argument("--many-dir", default="/tmp/randflake_pg-bench-clients",
                        help="data directory of that cluster (created and destroyed here)")
    parser.add_argument("--many-port", type=int, default=25441)
    parser.add_argument("--shared-seconds", type=int, default=20,
                        help="the shared_nodes run: its connecting and persistent clients insert this long")
    parser.add_argument("--edition-script", type=pathlib.Path, default=EDITION_SCRIPT,
                        help="the SQL edition's script to measure (another version's, to compare)")
    parser.add_argument("--edition-rows", type=int, default=20_000,
                        help="rows of the SQL edition's per-ID statement (each row makes 10 IDs)")
    parser.add_argument("--steps", nargs="+", default=None,
                        help="run only these steps (per_call per_call_instructions single_statement decoding bulk "
                             "pgbench connections "
                             "first_call many_clients shared_nodes sql_edition key_edge); the report shows what ran")
    args = parser.parse_args()

    bench = Bench(args)
    with bench.connect() as conn:
        if conn.info.server_version >= 180000:
            add_uuidv7()
        conn.execute((pathlib.Path(__file__).parent / "contenders.sql").read_text())
        bench.describe(conn)
        conn.execute("SELECT randflake_next()")  # the node and the start-up second, out of the timings
        steps = [bench.per_call, bench.per_call_instructions, bench.single_statement, bench.decoding, bench.bulk,
                 bench.pgbench, bench.connections, bench.first_call, bench.many_clients, bench.shared_nodes,
                 bench.sql_edition, bench.key_edge]
        for step in steps:
            if args.steps and step.__name__ not in args.steps:
                continue
            print(f"-- {step.__name__} ...", flush=True)
            step(conn)
    report(bench.results)
    write_outputs(bench.results, args.out)
    print(f"\nWrote {args.out}/results.json, results.csv and results.png")


if __name__ == "__main__":
    main()
