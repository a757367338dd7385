"""The DBA guide's set-up procedures, run exactly as the pages write them.

Each test follows one procedure step by step with the blocks the page marks (dba_guide.py says
how they are marked, extracted and run), on servers that start bare: initialised, but neither
preloading randflake_pg nor holding a secret, so that whatever the page leaves out, the test
misses too. Each test's placeholder table, `{text in the page: value in the test}`, is its only
change to a block; what a step says in prose (restart, copy the secret, let a role in through
pg_hba.conf) the test does itself, and says so. Then it proves the procedure worked:

* a fleet (installing's secret, a coordinator, two members): both members active on disjoint
  blocks, IDs flowing on each, every ID from its member's block;
* a standby with its own range, made from a primary set up per installing.md: it streams, issues
  nothing, is promoted as the page says and then issues from its own range;
* a fleet whose coordinator is a pg_auto_failover formation (PostgreSQL 15 only, where Debian
  packages pg_auto_failover): a member leases a block from the primary and issues IDs;
* last, an application pool on a server set up per installing.md: the pool configured, the grants
  made, and a lease acquired as the granted role, as the page shows.
"""

from __future__ import annotations

import shutil

from lib.cluster import Cluster, needs_postgres_fdw, status, wait_for, write_server_file
from lib.dba_guide import append_config, block, run_shell, run_sql, start_daemon
from lib.formation import SMALL_SERVER, Formation, needs_pg_auto_failover

INSTALLING = "installing.md"
FLEETS = "fleets-and-replicas.md"
APP_LEASES = "application-leases.md"
# The path of the secret file in installing.md and the fleet set-up.
KEY_PATH = "/etc/postgresql/15/main/randflake.key"
# The members' role's password, for the page's '...'.
FLEET_PASSWORD = "fleet-password-for-the-test"


def bare_server(make_cluster) -> Cluster:
    """An initialised, stopped cluster (port, socket, log as every test server's) that neither
    preloads randflake_pg nor has a secret: the state of a server before installing.md step 2."""
    server = make_cluster()
    config = server.dir / "postgresql.conf"
    kept = [line for line in config.read_text().splitlines(keepends=True)
            if not line.startswith(("shared_preload_libraries", "randflake.secret_file"))]
    config.write_text("".join(kept))
    (server.dir / "randflake.key").unlink()
    return server


def psql_on(server: Cluster) -> dict:
    return {"host": str(server.dir), "port": server.port}


def restart(server: Cluster) -> None:
    """The pages' "restart": a fast stop if it runs, then a start."""
    if (server.dir / "postmaster.pid").exists():
        server.stop()
    server.start()


def install(server: Cluster) -> dict[str, str]:
    """installing.md steps 2 to 5 on a bare server; returns the placeholders used."""
    placeholders = {KEY_PATH: str(server.dir / "randflake.key")}
    run_shell(block(INSTALLING, "install-secret"), placeholders)
    append_config(block(INSTALLING, "install-config"), placeholders, server.dir / "postgresql.conf")
    restart(server)
    run_sql(block(INSTALLING, "install-extension"), placeholders, **psql_on(server))
    return placeholders


def active_status(server: Cluster, timeout: float = 30) -> dict:
    """randflake_status() once the server's keeper holds a lease it may issue from."""
    with server.connect() as conn:
        return wait_for(lambda: (lambda s: s if s["state"] == "active" else None)(status(conn)), timeout,
                        f"{server.dir} to be active")


def issued_nodes(server: Cluster, count: int = 2000) -> tuple[list[int], set[int]]:
    """`count` IDs made on `server`, and the nodes they decode to."""
    with server.connect() as conn:
        ids = [row[0] for row in conn.execute("SELECT randflake_next() FROM generate_series(1, %s)", (count,))]
        nodes = {row[0] for row in conn.execute("SELECT (randflake_decode(id)).node_id FROM unnest(%s::bigint[]) id",
                                                (ids,))}
    return ids, nodes


def fleet_placeholders(server: Cluster, coordinator_ports: str) -> dict[str, str]:
    return {
        KEY_PATH: str(server.dir / "randflake.key"),
        "coordinator.example": "127.0.0.1",
        "5432": coordinator_ports,
        "PASSWORD '...'": f"PASSWORD '{FLEET_PASSWORD}'",
        "password '...'": f"password '{FLEET_PASSWORD}'",
    }


def let_members_in(pg_hba) -> None:
    """The pages' "a pg_hba.conf line for their role": before the test servers' trust lines, so
    that the members' password is checked."""
    pg_hba.write_text(f"host all randflake_fleet 127.0.0.1/32 scram-sha-256\n{pg_hba.read_text()}")


def configure_member(member: Cluster, placeholders: dict[str, str]) -> None:
    """Fleet set-up step 4: the member's postgresql.conf, and a restart."""
    append_config(block(FLEETS, "fleet-member-config"), placeholders, member.dir / "postgresql.conf")
    restart(member)


def assert_members_issue_from_disjoint_blocks(members: list[Cluster]) -> None:
    blocks = []
    all_ids: list[int] = []
    for member in members:
        lease = active_status(member)
        ids, nodes = issued_nodes(member)
        assert nodes <= set(range(lease["first_node"], lease["last_node"] + 1)), (nodes, lease)
        blocks.append(range(lease["first_node"], lease["last_node"] + 1))
        all_ids += ids
    for index, one in enumerate(blocks):
        for other in blocks[index + 1:]:
            assert not set(one) & set(other), f"blocks overlap: {blocks}"
    assert len(set(all_ids)) == len(all_ids)


@needs_postgres_fdw
def test_a_fleet_set_up_as_the_page_says_issues_on_disjoint_blocks(make_cluster):
    coordinator, *members = (bare_server(make_cluster) for _ in range(3))
    coordinator_placeholders = fleet_placeholders(coordinator, str(coordinator.port))

    # 1. The fleet's secret, on the coordinator; copied to every member.
    run_shell(block(FLEETS, "fleet-secret"), coordinator_placeholders)
    for member in members:
        write_server_file(member.dir / "randflake.key", coordinator.key_hex)
    # 2. The coordinator's configuration, a restart, and the members let in.
    append_config(block(FLEETS, "fleet-coordinator-config"), coordinator_placeholders,
                  coordinator.dir / "postgresql.conf")
    let_members_in(coordinator.dir / "pg_hba.conf")
    restart(coordinator)
    # 3. The extension and the members' role.
    run_sql(block(FLEETS, "fleet-coordinator-extension"), coordinator_placeholders, **psql_on(coordinator))
    run_sql(block(FLEETS, "fleet-members-role"), coordinator_placeholders, **psql_on(coordinator))
    for member in members:
        placeholders = fleet_placeholders(member, str(coordinator.port))
        # 4. and 5.
        configure_member(member, placeholders)
        run_sql(block(FLEETS, "fleet-member-server"), placeholders, **psql_on(member))
        run_sql(block(FLEETS, "fleet-member-join"), placeholders, **psql_on(member))

    assert_members_issue_from_disjoint_blocks(members)
    with coordinator.connect() as conn:
        holders = conn.execute("SELECT count(DISTINCT holder) FROM randflake.node_leases").fetchone()[0]
    assert holders == len(members)


def test_a_standby_set_up_as_the_page_says_streams_and_is_promoted(make_cluster):
    primary = bare_server(make_cluster)
    install(primary)
    primary_ids, primary_nodes = issued_nodes(primary)
    assert primary_nodes <= set(range(0, 4))

    standby = make_cluster()  # its port, directory and clean-up; pg_basebackup fills the directory
    shutil.rmtree(standby.dir)
    # 1. The copy, into an empty data directory, and the standby's own range.
    run_shell(block(FLEETS, "replica-basebackup"), {
        "primary.example": "127.0.0.1", "5432": str(primary.port), "/var/lib/postgresql/15/main": str(standby.dir),
    })
    write_server_file(standby.dir / "server.log", "")  # the primary's came along
    # What the page leaves to the machine: the standby's own port and socket, and its copy of the
    # secret (pg_basebackup brought it, in the data directory).
    standby.configure(f"port = {standby.port}", f"unix_socket_directories = '{standby.dir}'",
                      f"randflake.secret_file = '{standby.dir / 'randflake.key'}'")
    append_config(block(FLEETS, "replica-config"), {}, standby.dir / "postgresql.conf")
    # 2. It streams and issues nothing.
    standby.start()
    with primary.connect() as conn:
        wait_for(lambda: conn.execute("SELECT 1 FROM pg_stat_replication WHERE state = 'streaming'").fetchone(), 30,
                 "the standby to stream")
    with standby.connect() as conn:
        assert status(conn)["state"] == "standby"

    # 3. Promoted as the page says, it issues from its own range while the old primary still runs.
    run_sql(block(FLEETS, "replica-promote"), {}, **psql_on(standby))
    lease = active_status(standby, timeout=15)
    assert (lease["first_node"], lease["last_node"]) == (4, 7)
    promoted_ids, promoted_nodes = issued_nodes(standby)
    assert promoted_nodes <= set(range(4, 8))
    assert not set(primary_ids) & set(promoted_ids)


@needs_postgres_fdw
@needs_pg_auto_failover
def test_a_fleet_with_a_pg_auto_failover_coordinator_set_up_as_the_page_says(make_cluster, request):
    formation = Formation(f"dba-guide-{request.node.name[:20]}")
    formation.destroy()
    formation.prepare()
    monitor, (first, second) = formation.monitor, formation.nodes
    first.name, second.name = "coord1", "coord2"
    # pg_auto_failover's authentication and TLS are its own business (the page says so): on
    # loopback, trust and no TLS, as formation.py.
    autoctl = {"--auth scram-sha-256 --ssl-self-signed": "--auth trust --no-ssl", "sslmode=require": "sslmode=disable"}
    run = {"env": formation.env(), "cwd": formation.root}
    member = bare_server(make_cluster)
    try:
        # 1. The monitor (and a small server's memory settings, for the test machine).
        run_shell(block(FLEETS, "ha-monitor-create"), {
            **autoctl, "/var/lib/postgresql/15/monitor": str(monitor.pgdata), "5432": str(monitor.port),
            "monitor.example": "127.0.0.1"}, **run)
        formation.configure(monitor, *SMALL_SERVER)
        monitor.process = start_daemon(block(FLEETS, "ha-monitor-run"),
                                       {"/var/lib/postgresql/15/monitor": str(monitor.pgdata)}, monitor.log, **run)
        wait_for(lambda: Formation._ping(monitor, user="autoctl_node", dbname="pg_auto_failover"), 60, "the monitor")

        def node_placeholders(node) -> dict[str, str]:
            return {**autoctl, "/var/lib/postgresql/15/coord": str(node.pgdata),
                    "--pgport 5432": f"--pgport {node.port}", "-p 5432": f"-p {node.port}",
                    "monitor.example:5432": f"127.0.0.1:{monitor.port}", "coord1.example": "127.0.0.1",
                    "--name coord1": f"--name {node.name}",
                    "/etc/postgresql/15/randflake.key": str(formation.secret_file)}

        # 2. The first data node: created, randflake_pg's lines, run, the extension and the role.
        run_shell(block(FLEETS, "ha-node-create"), node_placeholders(first), **run)
        append_config(block(FLEETS, "ha-node-config"), node_placeholders(first), first.pgdata / "postgresql.conf")
        formation.configure(first, *SMALL_SERVER)
        # 4. (before the standby copies pg_hba.conf) the members' role let in.
        let_members_in(first.pgdata / "pg_hba.conf")
        first.process = start_daemon(block(FLEETS, "ha-node-run"), node_placeholders(first), first.log, **run)
        formation.wait_for_states({first.name: "single"}, 60)
        wait_for(lambda: Formation._ping(first), 60, "the first data node")
        run_shell(block(FLEETS, "ha-node-extension"), node_placeholders(first), **run)
        run_sql(block(FLEETS, "fleet-members-role"), {"PASSWORD '...'": f"PASSWORD '{FLEET_PASSWORD}'"},
                host="127.0.0.1", port=first.port)
        # 3. The second data node, the same commands with its own name.
        run_shell(block(FLEETS, "ha-node-create"), node_placeholders(second), **run)
        second.process = start_daemon(block(FLEETS, "ha-node-run"), node_placeholders(second), second.log, **run)
        primary, _ = formation.wait_healthy(120)
        with primary.connect() as conn:
            assert conn.execute("SHOW synchronous_standby_names").fetchone()[0] != ""

        # 5. A member: the fleet's secret, steps 4 and 5 of the fleet set-up with the page's server.
        write_server_file(member.dir / "randflake.key", formation.secret_file.read_text())
        placeholders = {**fleet_placeholders(member, ""), "coord1.example,coord2.example": formation.hosts,
                        "5432,5432": formation.ports}
        configure_member(member, placeholders)
        run_sql(block(FLEETS, "ha-member-server"), placeholders, **psql_on(member))
        run_sql(block(FLEETS, "fleet-member-join"), placeholders, **psql_on(member))
        assert_members_issue_from_disjoint_blocks([member])
        with primary.connect() as conn:
            assert conn.execute("SELECT count(*) FROM randflake.node_leases").fetchone()[0] == 1
    except BaseException:
        print(formation.logs())
        raise
    finally:
        formation.destroy()


# Last: another change may replace the acquire call in the page; the steps before it stand alone.
def test_an_application_pool_set_up_as_the_page_says_leases_a_node(make_cluster):
    server = bare_server(make_cluster)
    placeholders = install(server)
    append_config(block(APP_LEASES, "app-pool-config"), placeholders, server.dir / "postgresql.conf")
    restart(server)
    run_sql(block(APP_LEASES, "app-grants"), placeholders, **psql_on(server))
    run_sql(block(APP_LEASES, "app-acquire"), placeholders, **psql_on(server))
    with server.connect() as conn:
        pool_first, pool_last = conn.execute(
            "SELECT current_setting('randflake.app_node_id_min')::int,"
            "       current_setting('randflake.app_node_id_max')::int"
        ).fetchone()
        leases = conn.execute(
            "SELECT first_node, last_node FROM randflake.node_leases"
            " WHERE holder = 'app/orders_api/orders-api@host7:4121'"
        ).fetchall()
    assert len(leases) == 1, leases
    first_node, last_node = leases[0]
    assert first_node == last_node and pool_first <= first_node <= pool_last
    assert active_status(server)["first_node"] == 0  # the server's own range still issues
