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
import statistics
import subprocess
import tempfile
import time

import psycopg

# Per-call contenders: SQL expression for one value. pg_backend_pid() is the floor: a trivial
# built-in C function. It is STABLE, so repeated calls in one row are folded and it has no
# 10-calls-per-row figure; every other contender is VOLATILE.
CALLS = {
    "randflake_next()": "randflake_next()",
    "nextval() CACHE 1": "nextval('bench.seq_cache1')",
    "nextval() CACHE 100": "nextval('bench.seq_cache100')",
    "gen_random_uuid()": "gen_random_uuid()",
    "pg_backend_pid()": "pg_backend_pid()",
    "PL/pgSQL next_id()": "bench.instagram_next_id()",
    "PL/pgSQL Feistel(nextval())": "bench.feistel_permute(nextval('bench.feistel_counter'))",
}
FOLDED = {"pg_backend_pid()"}

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
# The bulk load compares the new key with the two usual choices.
BULK = ["randflake_next()", "identity bigint", "gen_random_uuid()"]

SELECT_CONTENDERS = ["SELECT 1", "randflake_next()", "nextval() CACHE 1", "nextval() CACHE 100",
                     "gen_random_uuid()", "PL/pgSQL next_id()", "PL/pgSQL Feistel(nextval())"]

# PostgreSQL 18's built-in time-ordered UUID joins every workload on servers that have it.
UUIDV7 = "uuidv7()"


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
        self.results: dict = {"settings": {}, "per_call": {}, "single_statement": {}, "bulk": {}, "pgbench": {}}

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
        for name in ["shared_buffers", "jit", "fsync", "synchronous_commit", "max_wal_size", "work_mem"]:
            settings[name] = conn.execute(f"SHOW {name}").fetchone()[0]
        settings["rounds"] = self.args.rounds
        print("== Machine and server")
        for key, value in settings.items():
            print(f"  {key:20} {value}")

    def per_call(self, conn: psycopg.Connection) -> None:
        n = self.args.per_call_rows
        one = {name: [] for name in CALLS}
        ten = {name: [] for name in CALLS if name not in FOLDED}
        for round_number in range(self.args.rounds):
            for name in rotated(list(CALLS), round_number):
                expression = CALLS[name]
                t1 = timed(conn, f"SELECT count({expression}) FROM generate_series(1, {n})")
                one[name].append(t1 / n * 1e9)
                if name in ten:
                    columns = ", ".join([f"count({expression})"] * 10)
                    t10 = timed(conn, f"SELECT {columns} FROM generate_series(1, {n})")
                    ten[name].append((t10 - t1) / (9 * n) * 1e9)
        for name in CALLS:
            self.results["per_call"][name] = {
                "ns_per_row_one_call": summary(one[name]),
                "ns_per_call_isolated": summary(ten[name]) if name in ten else None,
            }

    def single_statement(self, conn: psycopg.Connection) -> None:
        n = self.args.statement_ids
        rates_one, rates_ten = [], []
        for _ in range(self.args.rounds):
            rates_one.append(n / timed(conn, f"SELECT count(randflake_next()) FROM generate_series(1, {n})"))
            columns = ", ".join(["count(randflake_next())"] * 10)
            rates_ten.append(n / timed(conn, f"SELECT {columns} FROM generate_series(1, {n // 10})"))
        self.results["single_statement"] = {
            "ids": n,
            "ids_per_second_one_per_row": summary(rates_one),
            "ids_per_second_ten_per_row": summary(rates_ten),
        }

    def bulk(self, conn: psycopg.Connection) -> None:
        n = self.args.bulk_rows
        seconds = {name: [] for name in BULK}
        sizes = {name: [] for name in BULK}
        for round_number in range(self.args.bulk_rounds):
            for name in rotated(BULK, round_number):
                conn.execute("DROP TABLE IF EXISTS bench.bulk")
                conn.execute(f"CREATE TABLE bench.bulk ({KEYS[name]}, payload int)")
                conn.execute("CHECKPOINT")
                seconds[name].append(timed(conn, f"INSERT INTO bench.bulk (payload) SELECT g FROM generate_series(1, {n}) g"))
                sizes[name].append(conn.execute("SELECT pg_relation_size('bench.bulk_pkey')").fetchone()[0])
                conn.execute("DROP TABLE bench.bulk")
        for name in BULK:
            self.results["bulk"][name] = {"rows": n, "seconds": summary(seconds[name]),
                                          "index_bytes": summary([float(s) for s in sizes[name]])}

    def pgbench(self, conn: psycopg.Connection) -> None:
        scripts = pathlib.Path(tempfile.mkdtemp(prefix="randflake_bench_"))
        workloads = {}
        for index, name in enumerate(SELECT_CONTENDERS):
            path = scripts / f"select_{index}.sql"
            path.write_text(f"SELECT {CALLS.get(name, '1')};\n")
            workloads[("SELECT", name)] = path
        for index, name in enumerate(KEYS):
            conn.execute(f"DROP TABLE IF EXISTS bench.insert_{index}")
            conn.execute(f"CREATE TABLE bench.insert_{index} ({KEYS[name]}, payload int)")
            path = scripts / f"insert_{index}.sql"
            path.write_text(f"INSERT INTO bench.insert_{index} DEFAULT VALUES;\n")
            workloads[("INSERT", name)] = path
        tps: dict = {}
        for round_number in range(self.args.rounds):
            for clients in self.args.clients:
                for key in rotated(list(workloads), round_number):
                    tps.setdefault(f"{key[0]}|{key[1]}|{clients}", []).append(self.run_pgbench(workloads[key], clients))
        for key, samples in tps.items():
            workload, name, clients = key.split("|")
            self.results["pgbench"].setdefault(workload, {}).setdefault(name, {})[clients] = summary(samples)

    def run_pgbench(self, script: pathlib.Path, clients: int) -> float:
        output = subprocess.run(
            ["pgbench", "-h", self.args.host, "-p", str(self.args.port), "-U", "postgres", "-n", "-M", "prepared",
             "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1)), "-T", str(self.args.pgbench_seconds),
             "-f", str(script), "postgres"],
            check=True, capture_output=True, text=True,
        ).stdout
        return float(re.search(r"tps = ([0-9.]+)", output).group(1))


def ratio(numerator: dict, denominator: dict) -> float:
    """Median of the per-round ratios: both were measured in the same round, minutes apart at
    most, so drift on a shared machine cancels out better than in a ratio of medians."""
    return statistics.median(a / b for a, b in zip(numerator["samples"], denominator["samples"]))


def fmt_spread(entry: dict, scale: float = 1.0, digits: int = 0) -> str:
    return f"{entry['median'] * scale:,.{digits}f} [{entry['min'] * scale:,.{digits}f}..{entry['max'] * scale:,.{digits}f}]"


def report(results: dict) -> list[tuple[str, bool, str]]:
    """Prints the tables; returns (target, met, figures) for each target."""
    per_call = results["per_call"]
    floor = per_call["pg_backend_pid()"]["ns_per_row_one_call"]
    mine = per_call["randflake_next()"]
    print("\n== Per call: SELECT count(f()) FROM generate_series(1, N); isolated = 10 calls per row minus 1, per extra call")
    print(f"  {'contender':30} {'ns/row, 1 call':>28} {'x pg_backend_pid':>17} {'ns/call isolated':>26} {'x randflake':>12}")
    for name, entry in per_call.items():
        one = entry["ns_per_row_one_call"]
        isolated = entry["ns_per_call_isolated"]
        to_mine = ratio(isolated, mine["ns_per_call_isolated"]) if isolated else None
        print(f"  {name:30} {fmt_spread(one):>28} {ratio(one, floor):>17.2f} "
              f"{fmt_spread(isolated, digits=1) if isolated else 'folded (STABLE)':>26} "
              f"{f'{to_mine:.2f}' if to_mine else '-':>12}")

    statement = results["single_statement"]
    print(f"\n== One backend, one statement, {statement['ids']:,} IDs")
    print(f"  1 call per row:   {fmt_spread(statement['ids_per_second_one_per_row'], 1e-6, 2)} million IDs/s")
    print(f"  10 calls per row: {fmt_spread(statement['ids_per_second_ten_per_row'], 1e-6, 2)} million IDs/s")

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

    targets = []
    statements = {"SELECT": "SELECT f()", "INSERT": "INSERT INTO t DEFAULT VALUES, t.id DEFAULT f()"}
    for workload, baseline in [("SELECT", "SELECT 1"), ("INSERT", "identity bigint")]:
        table = results["pgbench"][workload]
        clients = list(table[baseline])
        print(f"\n== pgbench -M prepared, {statements[workload]}: tps, median [min..max] (paired ratio to {baseline})")
        print(f"  {'contender':30} " + " ".join(f"{c + ' clients':>30}" for c in clients))
        for name, by_clients in table.items():
            cells = [f"{fmt_spread(by_clients[c])} ({ratio(by_clients[c], table[baseline][c]):.2f})" for c in clients]
            print(f"  {name:30} " + " ".join(f"{cell:>30}" for cell in cells))
        if workload == "SELECT":
            worst = min(ratio(table["randflake_next()"][c], table[baseline][c]) for c in clients)
            targets.append(("pgbench SELECT randflake_next() within 5% of SELECT 1 at every client count",
                            worst >= 0.95, f"worst ratio {worst:.3f}"))

    per_row = ratio(mine["ns_per_row_one_call"], floor)
    cheaper = ratio(per_call["nextval() CACHE 1"]["ns_per_call_isolated"], mine["ns_per_call_isolated"])
    bulk_time = ratio(bulk["randflake_next()"]["seconds"], uuid["seconds"])
    bulk_index = ratio(bulk["randflake_next()"]["index_bytes"], uuid["index_bytes"])
    targets[:0] = [
        ("randflake_next() per call <= 2x pg_backend_pid()", per_row <= 2, f"{per_row:.2f}x per row"),
        (">= 5x cheaper than nextval() CACHE 1 per call", cheaper >= 5,
         f"{per_call['nextval() CACHE 1']['ns_per_call_isolated']['median']:.0f} ns vs "
         f"{mine['ns_per_call_isolated']['median']:.1f} ns: {cheaper:.2f}x"),
        (">= 5 million IDs/s in one statement", statement["ids_per_second_one_per_row"]["median"] >= 5e6,
         f"{statement['ids_per_second_one_per_row']['median'] / 1e6:.2f} M/s at 1 call per row, "
         f"{statement['ids_per_second_ten_per_row']['median'] / 1e6:.2f} M/s at 10"),
        ("bulk insert time <= 0.8x gen_random_uuid()", bulk_time <= 0.8, f"{bulk_time:.2f}x"),
        ("bulk index size <= 0.8x gen_random_uuid()", bulk_index <= 0.8, f"{bulk_index:.2f}x"),
    ]
    print("\n== Targets")
    for name, met, figures in targets:
        print(f"  [{'met' if met else 'MISSED'}] {name}: {figures}")
    return targets


def write_outputs(results: dict, directory: pathlib.Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "results.json").write_text(json.dumps(results, indent=2))
    with open(directory / "results.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["section", "contender", "metric", "median", "min", "max"])
        for name, entry in results["per_call"].items():
            for metric, value in entry.items():
                if value:
                    writer.writerow(["per_call", name, metric, value["median"], value["min"], value["max"]])
        for metric in ["ids_per_second_one_per_row", "ids_per_second_ten_per_row"]:
            value = results["single_statement"][metric]
            writer.writerow(["single_statement", "randflake_next()", metric, value["median"], value["min"], value["max"]])
        for name, entry in results["bulk"].items():
            for metric in ["seconds", "index_bytes"]:
                writer.writerow(["bulk", name, metric, entry[metric]["median"], entry[metric]["min"], entry[metric]["max"]])
        for workload, table in results["pgbench"].items():
            for name, by_clients in table.items():
                for clients, value in by_clients.items():
                    writer.writerow([f"pgbench_{workload}", name, f"tps_{clients}_clients",
                                     value["median"], value["min"], value["max"]])
    plot(results, directory / "results.png")


def plot(results: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (calls, select, insert) = plt.subplots(1, 3, figsize=(18, 5.5))
    names = [name for name, entry in results["per_call"].items() if entry["ns_per_call_isolated"]]
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
    parser.add_argument("--bulk-rows", type=int, default=10_000_000)
    parser.add_argument("--bulk-rounds", type=int, default=2)
    parser.add_argument("--pgbench-seconds", type=int, default=5)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 8, 32])
    args = parser.parse_args()

    bench = Bench(args)
    with bench.connect() as conn:
        if conn.info.server_version >= 180000:
            add_uuidv7()
        conn.execute((pathlib.Path(__file__).parent / "contenders.sql").read_text())
        bench.describe(conn)
        conn.execute("SELECT randflake_next()")  # the node and the start-up second, out of the timings
        for step in [bench.per_call, bench.single_statement, bench.bulk, bench.pgbench]:
            print(f"-- {step.__name__} ...", flush=True)
            step(conn)
    report(bench.results)
    write_outputs(bench.results, args.out)
    print(f"\nWrote {args.out}/results.json, results.csv and results.png")


if __name__ == "__main__":
    main()
