"""randflake_status() as Prometheus sees it, through monitoring/postgres_exporter/randflake.yaml.

A real exporter (Debian's prometheus-postgres-exporter) runs against a scratch server on
loopback, connected as a role whose one right is membership of pg_monitor, and is scraped over
HTTP while the server goes through what the alerts are for:
* no lease yet (the keeper waits for its lease table): margin and nodes NaN, not issuing;
* within one second (the clock stopped) in which sessions and a bulk generator shared the
  lease's nodes and used up its first: two nodes used, one switch;
* active, after calls were refused for a clock stepped back and for a lapsed lease;
* lease lapsed (the keeper locked out of the lease table): margin negative, not issuing;
* keeper gone (its database dropped): keeper_up 0;
* on a lease of one node, a second after a statement used up the one before and waited for it.
At every scrape each series equals randflake_status() read just before and just after it:
labels and counters exactly, the margin to within the moment the exporter read it.

The alert rules of monitoring/prometheus/ are checked by promtool and by their unit tests.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request

import psycopg

from lib.cluster import ROOT, Cluster, ports, sql_error, wait_for
from lib.fake_clock import FakeClock, start_under_fake_clock

QUERIES = ROOT / "monitoring" / "postgres_exporter" / "randflake.yaml"
RULES = ROOT / "monitoring" / "prometheus" / "randflake-alerts.yml"
RULE_TESTS = ROOT / "monitoring" / "prometheus" / "randflake-alerts.test.yml"
# tools/deps.sh unpacks Debian's binaries here rather than installing their services.
TOOLS = ROOT / "target" / "tools" / "usr" / "bin"


def tool(name: str) -> str | None:
    return str(TOOLS / name) if (TOOLS / name).exists() else shutil.which(name)


EXPORTER = tool("prometheus-postgres-exporter")
MONITOR_ROLE = "randflake_monitor"
# Fields of randflake_status() and the series that show them.
GAUGES = {
    "nodes_in_use": "randflake_nodes_in_use",
    "nodes_free": "randflake_nodes_free",
    "nodes_used_this_second": "randflake_nodes_used_this_second",
    "nodes_used_last_second": "randflake_nodes_used_last_second",
}
COUNTERS = {
    "node_switches": "randflake_node_switches_total",
    "waits_for_next_second": "randflake_waits_for_next_second_total",
    "clock_refusals": "randflake_clock_refusals_total",
    "lease_refusals": "randflake_lease_refusals_total",
}
SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')



class Exporter:
    """prometheus-postgres-exporter on a loopback port of its own, reading the project's queries
    file, connected to one database of `cluster` over TCP as `role`. The system's service and its
    /etc/default file are left alone: everything is on the command line and in the environment."""

    def __init__(self, cluster: Cluster, role: str, dbname: str):
        assert EXPORTER, "no prometheus-postgres-exporter; make deps unpacks it into target/tools"
        self.port = next(ports)
        # In the data directory, so that it goes with the cluster.
        self.log = cluster.dir / "exporter.log"
        environment = dict(
            os.environ,
            DATA_SOURCE_NAME=f"postgresql://{role}@127.0.0.1:{cluster.port}/{dbname}?sslmode=disable",
        )
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [EXPORTER, f"--web.listen-address=127.0.0.1:{self.port}", f"--extend.query-path={QUERIES}"],
                env=environment, stdout=log, stderr=subprocess.STDOUT,
            )
        wait_for(self._answers, 15, "the exporter to answer on its port", interval=0.1)

    def _answers(self) -> bool:
        assert self.process.poll() is None, f"the exporter exited: {self.log.read_text()}"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=2).read()
            return True
        except OSError:
            return False

    def scrape(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Every sample of one scrape of /metrics: name -> [(labels, value)]."""
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30).read().decode()
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                match = SAMPLE.match(line)
                assert match, f"unparsable line in the exposition: {line!r}"
                labels = dict(LABEL.findall(match.group(2) or ""))
                samples.setdefault(match.group(1), []).append((labels, float(match.group(3))))
        return samples

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=15)


def status_now(conn: psycopg.Connection) -> dict:
    """randflake_status(), timestamps as Unix seconds, with the server's clock at that moment."""
    cursor = conn.execute(
        "SELECT *, extract(epoch FROM clock_timestamp())::float8 AS server_now FROM randflake_status()"
    )
    row = cursor.fetchone()
    values = {column.name: value for column, value in zip(cursor.description, row)}
    return {name: (value.timestamp() if hasattr(value, "timestamp") else value) for name, value in values.items()}


def one(samples: dict, name: str) -> tuple[dict[str, str], float]:
    assert len(samples.get(name, [])) == 1, f"{name}: {samples.get(name)}"
    return samples[name][0]


def same(scraped: float, expected: float | None) -> bool:
    return math.isnan(scraped) if expected is None else scraped == expected


def scrape_and_check(exporter: Exporter, conn: psycopg.Connection, cluster: Cluster) -> tuple[dict, dict]:
    """Scrapes once between two reads of randflake_status() and checks every randflake series
    against them; returns (the scrape's samples, the status read after it)."""
    before = status_now(conn)
    samples = exporter.scrape()
    after = status_now(conn)
    assert one(samples, "pg_up")[1] == 1
    assert one(samples, "pg_exporter_last_scrape_error")[1] == 0, exporter.log.read_text()[-3000:]
    expected_labels = {"server": f"127.0.0.1:{cluster.port}", "node_source": after["node_source"]}
    series = ["randflake_margin_seconds", "randflake_issuing", "randflake_lease_seconds", "randflake_keeper_up",
              *GAUGES.values(), *COUNTERS.values()]
    for name in series:
        assert one(samples, name)[0] == expected_labels, name

    state_labels, info = one(samples, "randflake_state_info")
    assert info == 1
    assert state_labels["state"] in {s["state"].split(":")[0] for s in (before, after)}, (state_labels, before, after)
    for field, name in {**GAUGES, **COUNTERS}.items():
        value = one(samples, name)[1]
        assert any(same(value, s[field]) for s in (before, after)), (name, value, before[field], after[field])
    keeper_up = one(samples, "randflake_keeper_up")[1]
    assert keeper_up in {float(s["keeper_pid"] is not None) for s in (before, after)}
    issuing = one(samples, "randflake_issuing")[1]
    assert issuing in {
        float(s["state"] == "active" or s["state"].startswith("renewal failing")) for s in (before, after)
    }
    assert one(samples, "randflake_lease_seconds")[1] == 600

    # The exporter read the margin at some moment between the two reads, by the server's clock,
    # so issuable_through - margin falls between their clocks.
    margin = one(samples, "randflake_margin_seconds")[1]
    if before["issuable_through"] is None and after["issuable_through"] is None:
        assert math.isnan(margin)
    else:
        assert any(
            s["issuable_through"] is not None
            and before["server_now"] - 0.001 <= s["issuable_through"] - margin <= after["server_now"] + 0.001
            for s in (before, after)
        ), (margin, before, after)
    return samples, after


def node_use(status: dict) -> tuple:
    """(nodes_used_this_second, nodes_used_last_second, nodes_in_use, nodes_free, node_switches)."""
    fields = ("nodes_used_this_second", "nodes_used_last_second", "nodes_in_use", "nodes_free", "node_switches")
    return tuple(status[field] for field in fields)


def test_the_exporter_shows_what_randflake_status_reports(make_cluster, fake_clock_preload):
    cluster = make_cluster(
        "randflake.database = 'leases'", "randflake.node_id_min = 100", "randflake.node_id_max = 163"
    )
    clock = FakeClock(cluster, fake_clock_preload)
    start_under_fake_clock(cluster, clock)
    conn = cluster.connect()
    conn.execute("CREATE EXTENSION randflake_pg")
    conn.execute(f"CREATE ROLE {MONITOR_ROLE} LOGIN")
    conn.execute(f"GRANT pg_monitor TO {MONITOR_ROLE}")
    conn.execute("CREATE DATABASE leases")
    # The role can do nothing but what pg_monitor grants.
    role = conn.execute(
        """SELECT r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication OR r.rolbypassrls,
                  array(SELECT g.rolname::text FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
                         WHERE m.member = r.oid)
             FROM pg_roles r WHERE r.rolname = %s""",
        (MONITOR_ROLE,),
    ).fetchone()
    assert role == (False, ["pg_monitor"])

    exporter = Exporter(cluster, MONITOR_ROLE, "postgres")
    holders: list[psycopg.Connection] = []
    try:
        # No lease yet: the keeper waits for the extension in its own database.
        wait_for(lambda: status_now(conn)["state"] == "waiting for the lease table", 15, "the keeper to wait")
        samples, seen = scrape_and_check(exporter, conn, cluster)
        assert one(samples, "randflake_state_info")[0]["state"] == "waiting for the lease table"
        assert not [name for name in samples if name.startswith("randflake_app_lease")], "series without a pool"
        assert math.isnan(one(samples, "randflake_margin_seconds")[1]) and one(samples, "randflake_issuing")[1] == 0
        assert conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (MONITOR_ROLE,)
        ).fetchone()[0] >= 1, "the exporter is not connected as the monitoring role"

        with cluster.connect("leases") as leases:
            leases.execute("CREATE EXTENSION randflake_pg")
        wait_for(lambda: status_now(conn)["state"] == "active", 15, "an active lease")
        holders.extend(cluster.connect() for _ in range(3))
        # One second, on a stopped clock (however slow the machine, or a debug build under the
        # fake clock, makes the calls): three sessions take their IDs from the lease's first node
        # together (a node each would show 3 in use), then a bulk generator uses up its 131072
        # and goes on to the next, once. Node use is (this second, last second, in use, free,
        # switches); no ID was made before this second.
        with cluster.connect() as bulk, clock.frozen():
            for holder in holders:
                holder.execute("SELECT randflake_next()")
            assert node_use(status_now(conn)) == (1, 0, 1, 63, 0)
            bulk.execute("SET max_parallel_workers_per_gather = 0")
            bulk.execute("SELECT count(randflake_next()) FROM generate_series(1, 200000)")
            samples, seen = scrape_and_check(exporter, conn, cluster)
            assert node_use(seen) == (2, 0, 2, 62, 1) and seen["waits_for_next_second"] == 0, seen

        # The clock stepped back 30 s: every call is refused until it is put right.
        clock.set(-30)
        for _ in range(2):
            assert sql_error(holders[0], "SELECT randflake_next()").sqlstate == "55000"
        clock.set(0)
        wait_for(lambda: status_now(conn)["state"] == "active", 15, "the lease to be active again")

        # The keeper locked out of its lease table until the lease lapses: calls are refused.
        with cluster.connect("leases") as locker:
            locker.execute("BEGIN")
            locker.execute("LOCK TABLE randflake.node_leases IN ACCESS EXCLUSIVE MODE")
            wait_for(lambda: status_now(conn)["state"].startswith("lease lapsed"), 20, "the lease to lapse", 0.2)
            for _ in range(3):
                error = sql_error(holders[1], "SELECT randflake_next()")
                assert error.sqlstate == "55000" and "covers IDs only through" in str(error), error
            samples, seen = scrape_and_check(exporter, conn, cluster)
            assert one(samples, "randflake_state_info")[0]["state"] == "lease lapsed"
            assert one(samples, "randflake_margin_seconds")[1] < 0
            assert one(samples, "randflake_issuing")[1] == 0 and one(samples, "randflake_keeper_up")[1] == 1
            locker.execute("COMMIT")
        wait_for(lambda: status_now(conn)["state"] == "active", 15, "the keeper to renew")

        samples, seen = scrape_and_check(exporter, conn, cluster)
        assert one(samples, "randflake_state_info")[0]["state"] == "active"
        assert one(samples, "randflake_issuing")[1] == 1 and one(samples, "randflake_keeper_up")[1] == 1
        assert 0 < one(samples, "randflake_margin_seconds")[1] <= 11
        # Not 0 = 0: what the test did is what the counters say (different counts, so that
        # series swapped in the queries file would show).
        assert (seen["clock_refusals"], seen["lease_refusals"]) == (2, 3), seen
        # No ID was made since the bulk generator's second, long past: no node in use.
        assert node_use(seen) == (0, 0, 0, 64, 1) and seen["waits_for_next_second"] == 0, seen

        # The keeper's database dropped: no keeper, and the server says why.
        conn.execute("DROP DATABASE leases WITH (FORCE)")
        # The keeper stops at once; the launcher says why at its next look for the database.
        wait_for(
            lambda: (lambda status: status["keeper_pid"] is None and "waiting for its database" in status["state"])(
                status_now(conn)
            ),
            15,
            "the keeper to stop and the launcher to wait for its database",
        )
        samples, seen = scrape_and_check(exporter, conn, cluster)
        assert one(samples, "randflake_keeper_up")[1] == 0
        assert "waiting for its database" in seen["state"], seen
    finally:
        for holder in holders:
            holder.close()
        exporter.stop()
        conn.close()


def test_a_lease_used_up_within_a_second_makes_calls_wait(make_cluster, fake_clock_preload):
    """A lease of one node carries 131072 IDs a second: a statement of 200000 uses its second up,
    waits for the next (counted in waits_for_next_second) and finishes there, with no node to
    switch to. On a stopped clock, second F then F + 1, so that the wait is seen while it lasts
    and the scrape after it reads one second: a node used in it and one in the second before."""
    cluster = make_cluster("randflake.node_id_min = 5", "randflake.node_id_max = 5")
    clock = FakeClock(cluster, fake_clock_preload)
    start_under_fake_clock(cluster, clock)
    conn = cluster.connect()
    conn.execute("CREATE EXTENSION randflake_pg")
    conn.execute(f"CREATE ROLE {MONITOR_ROLE} LOGIN IN ROLE pg_monitor")
    exporter = Exporter(cluster, MONITOR_ROLE, "postgres")
    bulk = cluster.connect()
    made: list[int] = []
    generator = threading.Thread(target=lambda: made.append(bulk.execute(
        "SELECT count(DISTINCT randflake_next()) FROM generate_series(1, 200000)").fetchone()[0]))
    frozen = None
    try:
        wait_for(lambda: status_now(conn)["state"] == "active", 15, "an active lease")
        bulk.execute("SET max_parallel_workers_per_gather = 0")
        frozen = clock.freeze()
        generator.start()
        wait_for(lambda: status_now(conn)["waits_for_next_second"] >= 1, 30, "the statement to wait")
        waiting = status_now(conn)
        assert generator.is_alive() and node_use(waiting) == (1, 0, 1, 0, 0), waiting

        frozen = clock.freeze(frozen + 1)
        generator.join(30)
        assert not generator.is_alive() and made == [200_000]
        samples, seen = scrape_and_check(exporter, conn, cluster)
        assert node_use(seen) == (1, 1, 1, 0, 0), seen
        assert seen["waits_for_next_second"] >= waiting["waits_for_next_second"] >= 1, seen
    finally:
        if frozen is not None:
            # Running again only once real time has passed the stopped second: never back.
            time.sleep(max(0.0, frozen + 0.05 - clock.now()))
            clock.set(clock.offset)
        if generator.ident is not None:
            generator.join(30)
        bulk.close()
        exporter.stop()
        conn.close()


def test_the_alert_rules_load_and_pass_their_unit_tests():
    promtool = tool("promtool")
    assert promtool, "no promtool (Debian package prometheus); make deps unpacks it into target/tools"
    checked = subprocess.run([promtool, "check", "rules", RULES], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", RULE_TESTS], capture_output=True, text=True, cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def app_leases_now(conn: psycopg.Connection) -> dict:
    cursor = conn.execute(
        "SELECT *, extract(epoch FROM soonest_end - clock_timestamp())::float8 AS soonest_in FROM randflake_app_leases()"
    )
    return dict(zip((column.name for column in cursor.description), cursor.fetchone()))


def test_the_exporter_shows_the_application_pool(make_cluster):
    """randflake_app_lease_* equal randflake_app_leases() around each scrape: with no lease, with
    leases held by two services and one released; none of them without a pool."""
    cluster = make_cluster(
        "randflake.node_id_min = 0", "randflake.node_id_max = 63",
        "randflake.app_node_id_min = 1000", "randflake.app_node_id_max = 1009",
    )
    cluster.start()
    conn = cluster.connect()
    conn.execute("CREATE EXTENSION randflake_pg")
    conn.execute(f"CREATE ROLE {MONITOR_ROLE} LOGIN IN ROLE pg_monitor")
    conn.execute("CREATE ROLE service_a LOGIN")
    conn.execute("CREATE ROLE service_b LOGIN")
    conn.execute("GRANT EXECUTE ON PROCEDURE randflake_lease_acquire(text, integer), "
                 "randflake_lease_release(text, integer) TO service_a, service_b")
    exporter = Exporter(cluster, MONITOR_ROLE, "postgres")

    def check(expected_held: int) -> dict:
        before = app_leases_now(conn)
        samples = exporter.scrape()
        after = app_leases_now(conn)
        assert one(samples, "pg_exporter_last_scrape_error")[1] == 0, exporter.log.read_text()[-3000:]
        assert before["leases_held"] == after["leases_held"] == expected_held, (before, after)
        assert one(samples, "randflake_app_lease_pool_nodes")[1] == 10
        assert one(samples, "randflake_app_lease_held")[1] == expected_held
        assert one(samples, "randflake_app_lease_nodes_free")[1] in {before["nodes_free"], after["nodes_free"]}
        soonest = one(samples, "randflake_app_lease_soonest_end_seconds")[1]
        if after["soonest_end"] is None:
            assert math.isnan(soonest)
        else:
            assert after["soonest_in"] - 0.001 <= soonest <= before["soonest_in"] + 0.001, (soonest, before, after)
        return samples

    try:
        check(0)
        windows = []
        for role, holder, seconds in (("service_a", "a1", 300), ("service_a", "a2", 120), ("service_b", "b1", 600)):
            with cluster.connect(user=role) as service:
                windows.append(service.execute(
                    "CALL randflake_lease_acquire(%s, %s, NULL, NULL, NULL)", (holder, seconds)).fetchone())
        samples = check(3)
        assert one(samples, "randflake_app_lease_nodes_free")[1] == 7
        assert 110 < one(samples, "randflake_app_lease_soonest_end_seconds")[1] <= 120
        with cluster.connect(user="service_a") as service:
            assert service.execute("CALL randflake_lease_release('a2', %s, NULL)", (windows[1][0],)).fetchone()[0]
        samples = check(2)
        # A released node stays unavailable for the minute an application's clock may run ahead.
        assert one(samples, "randflake_app_lease_nodes_free")[1] == 7
        assert 290 < one(samples, "randflake_app_lease_soonest_end_seconds")[1] <= 300
    finally:
        exporter.stop()
        conn.close()


def test_a_server_without_a_usable_secret_says_it_cannot_issue(make_cluster):
    """Preloaded without a secret, a server starts (a reload can give it one), and its keeper
    leases as usual: but every randflake_next() fails, so it says so: a WARNING at start-up, the
    state "cannot issue" with its cause, the exporter's state label and issuing 0 (which the
    alert RandflakeCannotIssue reads). Two secrets are as unusable as none. Given one secret by a
    reload, it issues at once."""
    cluster = make_cluster("randflake.secret_file = ''")
    cluster.start()
    assert "WARNING:  randflake_pg cannot issue IDs on this server: randflake_pg has no secret configured" in cluster.log()
    conn = cluster.connect()
    conn.execute("CREATE EXTENSION randflake_pg")
    conn.execute(f"CREATE ROLE {MONITOR_ROLE} LOGIN IN ROLE pg_monitor")
    exporter = Exporter(cluster, MONITOR_ROLE, "postgres")
    try:
        wait_for(lambda: status_now(conn)["issuable_through"] is not None, 15, "the keeper to take a lease")
        assert status_now(conn)["state"] == "cannot issue: randflake_pg has no secret configured"
        assert sql_error(conn, "SELECT randflake_next()").sqlstate == "55000"
        samples, _ = scrape_and_check(exporter, conn, cluster)
        assert one(samples, "randflake_state_info")[0]["state"] == "cannot issue"
        assert one(samples, "randflake_issuing")[1] == 0 and one(samples, "randflake_margin_seconds")[1] > 0

        cluster.configure(f"randflake.secret = '{'0' * 31}1'", "randflake.secret_file = 'randflake.key'")
        cluster.reload()
        wait_for(lambda: status_now(conn)["state"].startswith("cannot issue: both"), 10, "two secrets refused")
        cluster.configure("randflake.secret = ''")
        cluster.reload()
        wait_for(lambda: status_now(conn)["state"] == "active", 10, "the server to issue with its one secret")
        assert conn.execute("SELECT randflake_next() IS NOT NULL").fetchone() == (True,)
        samples, _ = scrape_and_check(exporter, conn, cluster)
        assert one(samples, "randflake_issuing")[1] == 1
    finally:
        exporter.stop()
        conn.close()
