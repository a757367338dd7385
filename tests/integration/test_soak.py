"""The short soak of `make test`: a dozen clients, connection churn, parallel workers, and every
kind of fault (kill -9, immediate restart, clock step back) at least once. The long one is
`make soak`."""

from __future__ import annotations

from soak import soak


def test_a_short_soak_under_faults_loses_and_repeats_nothing():
    summary = soak(duration=36, clients=12, fault_every=5, name="soak-short")
    print(summary)
    assert summary["duplicate_ids"] == 0
    assert summary["duplicate_triples"] == 0
    assert summary["lost_committed_rows"] == 0
    assert summary["ids_in_table"] > 50_000
    # A batch may commit just before its connection is killed: in the table, never confirmed.
    assert summary["ids_in_table"] >= summary["ids_confirmed_to_clients"]
    assert summary["ids_in_parallel_workers"] > 0
    assert summary["clock_faked"], "libfaketime is missing: make deps installs it"
    assert set(summary["faults"]) == {"kill -9 backend", "immediate restart", "clock step back"}
    # The faults were felt: lost connections, and refusals while the clock was behind.
    assert summary["errors_by_sqlstate"].get("55000", 0) > 0
    assert set(summary["errors_by_sqlstate"]) <= {"connection lost", "55000", "57P01", "57P02", "57P03", "08006"}
