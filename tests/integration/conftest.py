"""The integration suites' fixtures and scheduling: clusters made for a test or a module, the fake
clock's preload, and the order pytest-xdist runs the files in. What tests do with clusters is in
lib/ (lib/cluster.py first)."""

from __future__ import annotations

import sys
from typing import Iterator

import pytest
from _pytest.fixtures import getfixturemarker  # how pytest itself reads @pytest.fixture

from lib.cluster import WORKER, Cluster
from lib.fake_clock import preload_for_tests


def _print_log_tail(cluster: Cluster) -> None:
    print(f"--- end of {cluster.dir}/server.log ---\n{cluster.log()[-6000:]}")


def _failed(request) -> bool:
    report = getattr(request.node, "rep_call", None)
    return report is not None and report.failed


@pytest.fixture
def make_cluster(request):
    """Factory: make_cluster(*settings) -> an initialised, not yet started Cluster."""
    made: list[Cluster] = []

    def make(*settings: str, **options) -> Cluster:
        cluster = Cluster(f"{request.node.name[:40]}-{len(made)}", settings, **options)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        if _failed(request):
            _print_log_tail(cluster)
        cluster.destroy()


def _started_with_extension(cluster: Cluster) -> Cluster:
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
    return cluster


@pytest.fixture
def cluster(make_cluster) -> Cluster:
    """A started cluster with the extension created in database `postgres`."""
    return _started_with_extension(make_cluster())


@pytest.fixture(scope="module")
def _module_cluster(request) -> Iterator[Cluster]:
    cluster = Cluster(f"{request.node.name[:40]}-shared")
    yield _started_with_extension(cluster)
    cluster.destroy()


@pytest.fixture
def shared_cluster(request, _module_cluster: Cluster) -> Iterator[Cluster]:
    """The `cluster` of a whole module, made once for the module's tests that take it. Only for
    tests that leave the server as they found it (no settings, secret, restart, crash, lease or
    keeper of their own) and name their tables and roles apart, so that no test can see another's
    doing; a failed test's report ends with the server's log, like make_cluster's."""
    yield _module_cluster
    if _failed(request):
        _print_log_tail(_module_cluster)


@pytest.fixture(scope="session")
def fake_clock_preload() -> Iterator[str]:
    """LD_PRELOAD for servers whose clock a test steps or stops (fake_clock.py): the
    select()/poll() shim, built once per run (per worker), then libfaketime."""

    yield from preload_for_tests("faked")


# Seconds each file took in a serial run on the 2-core machine, servers included (rounded; only
# their order matters). Under pytest-xdist the longest start first, so that no worker is left
# running a long file after the others are done; a file not listed here counts as the longest.
SERIAL_SECONDS = {
    "test_fleet_failover.py": 100, "test_keeper.py": 90, "test_durability.py": 66, "test_app_lease_load.py": 66,
    "test_leases.py": 63, "test_replica.py": 57, "test_fleet.py": 55, "test_soak.py": 55, "test_nodes.py": 53,
    "test_clock.py": 40, "test_monitoring.py": 35, "test_multimaster_pglogical.py": 28, "test_app_leases.py": 26,
    "test_script_hijack.py": 37, "test_upgrade.py": 24, "test_accessors.py": 21, "test_configuration.py": 18, "test_secret.py": 15,
    "test_concurrency.py": 11, "test_sql_edition.py": 110, "test_migration.py": 9, "test_examples.py": 8, "test_lifecycle.py": 5,
    "test_clients.py": 5, "test_bad_input.py": 4, "test_interop.py": 4, "test_sql_reference.py": 1,
    "test_multimaster.py": 1, "test_pg_upgrade.py": 1,
    "test_dba_guide.py": 60,
    "test_resolution.py": 4,
    "test_order_oracle.py": 30,
}


def _lasting_fixtures(module) -> set[str]:
    """The fixtures `module` defines that outlive one test (module or session scope)."""
    markers = {name: getfixturemarker(value) for name, value in vars(module).items()}
    return {marker.name or name for name, marker in markers.items() if marker and marker.scope != "function"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`--dist loadgroup --no-loadscope-reorder`): the longest files first,
    and each test goes to whichever worker is free, except that a module defining a fixture that
    outlives one test (a server or formation for the module, files put into the installation, a
    build), or using this file's shared_cluster, runs in one worker, which makes that fixture
    once. Before xdist reads the groups, hence tryfirst."""
    if not WORKER:
        return
    shared_here = _lasting_fixtures(sys.modules[__name__])
    for item in items:
        if _lasting_fixtures(item.module) or shared_here & set(item.fixturenames):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    # Stable: each file's tests keep their order.
    items.sort(key=lambda item: SERIAL_SECONDS.get(item.path.name, float("inf")), reverse=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report


