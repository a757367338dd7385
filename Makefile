# randflake_pg: build, install, demo and test. `make help` lists the targets.

# The PostgreSQL major to build and test for: 15 (default), 16, 17 or 18; tools/postgres-major.sh
# says where each comes from.
PG_MAJOR    ?= 15
SUPPORTED_MAJORS := $(shell tools/postgres-major.sh majors)
PG_CONFIG   ?= $(shell tools/postgres-major.sh pg-config $(PG_MAJOR))
VENV        ?= target/venv
# Scratch clusters live under /tmp so that the postgres user can reach them. Ports stay below
# Linux's ephemeral range (32768 up), where outgoing connections take theirs.
SCRATCH     ?= /tmp/randflake_pg-scratch
TEST_PORT   ?= 25433
DEMO_DIR    ?= /tmp/randflake_pg-demo
DEMO_PORT   ?= 25434
DEMO_FLEET_DIR  ?= /tmp/randflake_pg-demo-fleet
DEMO_FLEET_PORT ?= 25440
SENTINEL_DIR  ?= /tmp/randflake_pg-sentinel
SENTINEL_PORT ?= 25436
# The suites' own copy of the PostgreSQL installation (tools/stage-postgres.sh): every test
# server runs from it, so no test writes where running servers load their files from.
STAGE        ?= $(CURDIR)/target/stage/pg$(PG_MAJOR)
STAGE_BINDIR  = $(STAGE)$(shell $(PG_CONFIG) --bindir 2>/dev/null)
PGTEST_STAGE ?= $(CURDIR)/target/stage/pg$(PG_MAJOR)-pgtest
STAGED        = PG_CONFIG=$(STAGE_BINDIR)/pg_config PATH=$(STAGE_BINDIR):$$PATH
BENCH_DIR   ?= /tmp/randflake_pg-bench
BENCH_PORT  ?= 25435
# make bench's many-clients cluster, beside the main one.
BENCH_CLIENTS_PORT ?= 25441
# make bench-scale's cluster; it is kept when a run stops early, and the next run carries on.
BENCH_SCALE_DIR  ?= /tmp/randflake_pg-bench-scale
BENCH_SCALE_PORT ?= 25442
# Where it writes its report: each release's published run keeps a directory of its own.
BENCH_SCALE_OUT  ?= bench/results/scale-0.6.0
# Extra arguments for bench/scale.py, e.g. BENCH_SCALE_ARGS="--shared-buffers 256MB --seconds 120".
BENCH_SCALE_ARGS ?=
# Extra arguments for bench/bench.py, e.g. BENCH_ARGS="--rounds 3 --bulk-rows 2000000".
BENCH_ARGS  ?=
UNDER_LOAD_ROUNDS ?= 5
SOAK_ARGS   ?= --duration 600 --clients 32
FUZZ_SECONDS ?= 600
# The integration suites run in this many pytest-xdist workers, each with its own ports and
# directories (tests/integration/conftest.py); most tests wait on servers rather than compute, so
# more workers than cores pay off. TEST_WORKERS=0 runs them in one process, in file order.
TEST_WORKERS ?= 6

export PG_CONFIG PG_MAJOR VENV
# Builds that make runs link with mold (from `make deps`) where it is installed: the loop links
# every test executable and library, and mold links faster than the system's linker. Set for the
# host's target triple only, so that it joins, rather than replaces, the flags cargo-pgrx passes;
# RUSTFLAGS (cargo fuzz's) still overrides it. Plain cargo commands link as they always did.
ifneq ($(shell command -v mold 2>/dev/null),)
HOST_TRIPLE := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')
export CARGO_TARGET_$(HOST_TRIPLE)_RUSTFLAGS := -C link-arg=-fuse-ld=mold
endif
# psql, pg_dump and pgbench of the chosen major come first.
export PATH := $(dir $(PG_CONFIG)):$(PATH)

# The integration suites whose subject can differ between majors: shared memory, the keeper,
# leases, crashes, clock steps, replicas, upgrades, dump/restore, GUCs, replication, decoding
# (timestamps and privileges). `test-all` runs only these on the majors after the first; the rest
# (examples, interop, bad input, soak) exercises code that no major changes.
MAJOR_SENSITIVE_TESTS = $(addprefix tests/integration/test_,$(addsuffix .py, \
	lifecycle leases keeper clock nodes replica upgrade configuration secret concurrency fleet \
	durability multimaster pg_upgrade sql_reference accessors app_leases script_hijack sql_edition))

# Each target's prerequisites are stages run in the order written.
.NOTPARALLEL:
.PHONY: sentinel-start sentinel-check suites help deps build install stage package package-all install-package docs demo demo-stop demo-fleet check test test-all test-server unit loom mutants glue-unit lint pgtest server-tests test-under-load installcheck bench bench-scale sql-edition-pgtle soak fuzz clean style clippy suites-without-server

help:
	@echo "Every target works on PostgreSQL $(SUPPORTED_MAJORS); PG_MAJOR=N picks one (default 15)."
	@echo "make deps          install build and test prerequisites for PG_MAJOR (idempotent)"
	@echo "make install       build (release) and install the extension into $(PG_CONFIG)'s server"
	@echo "make package       target/dist/: a tarball and a .deb (Debian's and PGDG's postgresql-N) for PG_MAJOR, with SHA256SUMS"
	@echo "make package-all   the same for every supported major"
	@echo "make demo          throwaway cluster on port $(DEMO_PORT): tables keyed by randflake_next() and by randflake_key, filled concurrently"
	@echo "make demo-stop     stop and delete the demo cluster"
	@echo "make demo-fleet    a pg_auto_failover coordinator and two members on loopback, IDs flowing through a failover (15 only)"
	@echo "make test          formatting and lints, then every suite: unit, fuzz, #[pg_test], the package, pg_regress, integration, on a private copy of"
	@echo "                   PostgreSQL (the suites without a server beside the integration suites); a server running on the installed"
	@echo "                   library meanwhile must come through unharmed"
	@echo "make check         the fast loop (under a minute on a warm tree): formatting, the module rules, the pure crate's"
	@echo "                   tests with the fleet simulation, and the extension's tests that need no server"
	@echo "make loom          the model check of the shared-memory protocols (make test runs it)"
	@echo "make mutants       cargo-mutants over the pure crate's decision files, each file's caught/viable figure (hours; not in make test)"
	@echo "make lint          make style (cargo fmt --check, the module rules), then make clippy (-D warnings, both crates)"
	@echo "make test-under-load  the integration suites UNDER_LOAD_ROUNDS (5) times in a row beside stress-ng (4 workers a core)"
	@echo "make test-all      make test's suites on every supported major (only the major-sensitive integration"
	@echo "                   suites after the first major)"
	@echo "make docs          rewrite docs/errors.md's table from src/errors.rs and docs/sql-reference.md from the installed"
	@echo "                   extension (make check and make test check them)"
	@echo "make installcheck  the pg_regress suite against the server at PGHOST/PGPORT"
	@echo "make bench         randflake_next() against the alternatives on a scratch cluster (about 20 minutes)"
	@echo "make sql-edition-pgtle  target/sql-edition/: the SQL edition for managed servers, packaged for pg_tle"
	@echo "make bench-scale   inserts as the tables outgrow shared_buffers, lookups and remedies (hours)"
	@echo "make soak          load with kill -9, restarts and clock steps; SOAK_ARGS=\"--duration 600 --clients 32\""
	@echo "make fuzz          every cargo-fuzz target of the randflake crate for FUZZ_SECONDS (default 600) each"
	@echo "The stages of make test, in its order, each a target of its own:"
	@echo "make style         cargo fmt --check of both crates and the fuzz targets, the module rules, the holder-name table"
	@echo "make install       (above)"
	@echo "make sentinel-start  a server on the installed library, which the stages after it must leave unharmed"
	@echo "make install-package  make package, checked and unpacked into the stage the server suites run from"
	@echo "make suites        server-tests, with BESIDE_SERVER_TESTS (make test: suites-without-server; else pgtest) beside them"
	@echo "make sentinel-check  the debug build installed over the sentinel's library, the sentinel checked, the release build put back"
	@echo "What suites runs:"
	@echo "make server-tests  pg_regress and the integration suites against the stage (PYTEST_ARGS picks files)"
	@echo "make suites-without-server  clippy, unit, glue-unit, loom, pgtest and fuzz for 20 s a target, one after another"
	@echo "make clippy        clippy with warnings denied on both crates, the #[pg_test]s included"
	@echo "make unit          the pure crate's tests and the simulations, then the fault simulations with a rule off (must fail)"
	@echo "make glue-unit     the extension's tests that need no server (settings' checks, the error table)"
	@echo "make pgtest        the #[pg_test]s, in a PostgreSQL stage of their own"
	@echo "Others:"
	@echo "make test-server   install, install-package and suites: one major's server-level suites (test-all's later majors)"
	@echo "make build         the release build of the extension, without installing it"
	@echo "make stage         target/stage/pgN/: the suites' own copy of PostgreSQL PG_MAJOR"
	@echo "make clean         cargo clean, and the test, demo and scratch clusters removed"
	@echo "make help          this list"

deps:
	@tools/deps.sh

build: deps
	cargo build --release --features pg$(PG_MAJOR) --no-default-features

# The release build, installed into PG_CONFIG's server (install, and make test's last stage).
INSTALL_RELEASE = cargo pgrx install --release --pg-config $(PG_CONFIG) --features pg$(PG_MAJOR) --no-default-features

install: deps
	$(INSTALL_RELEASE)

package: deps
	@tools/package.sh $(PG_CONFIG) $(PG_MAJOR)

# Every supported major's packages into target/dist/, with one SHA256SUMS for all of them.
package-all:
	set -e; for major in $(SUPPORTED_MAJORS); do \
		$(MAKE) --no-print-directory PG_MAJOR=$$major PG_CONFIG=$$(tools/postgres-major.sh pg-config $$major) package; \
	done

stage:
	@tools/stage-postgres.sh $(PG_CONFIG) $(STAGE)

# Checks both artifacts and unpacks the .deb into the stage, so that the server tests run on it.
install-package: package stage
	@tests/check-package.sh $(PG_CONFIG) $(PG_MAJOR) $(STAGE)

demo: install
	@tools/demo.sh $(DEMO_DIR) $(DEMO_PORT)

demo-stop:
	@tests/scratch-cluster.sh destroy $(DEMO_DIR)
	@echo "demo cluster removed"

demo-fleet: install
	@tools/demo-fleet.sh $(DEMO_FLEET_DIR) $(DEMO_FLEET_PORT)

# make test is these stages, in this order, in one make (so that each runs once: the release
# build is built once, deps run once), each a target of its own that make help names:
#   style           formatting and the module rules, seconds, before any build;
#   install         the release build, installed;
#   sentinel-start  a server on the installed library, as a DBA's would be;
#   install-package the package built, checked and unpacked into the stage the suites run from;
#   suites          the server-level suites (server-tests), with the suites that need no server of
#                   the package (suites-without-server) running beside them (tools/beside.sh), so
#                   that either lane's stretches on a single core leave no core idle;
#   sentinel-check  a different build installed over the sentinel's library (the debug one pgtest
#                   built, so that it costs no build of its own), the sentinel checked (same
#                   postmaster, no crash), and the release build put back.
# A stage that fails stops the run; from suites on, a failure also removes the sentinel (a sentinel
# left by an earlier stop is removed when the next run starts one).
test: BESIDE_SERVER_TESTS = suites-without-server
test: deps style install sentinel-start install-package suites sentinel-check

sentinel-start:
	@tests/sentinel.sh start $(SENTINEL_DIR) $(SENTINEL_PORT)

sentinel-check:
	cargo pgrx install --pg-config $(PG_CONFIG) --features "pg$(PG_MAJOR) pg_test" --no-default-features || \
		{ tests/sentinel.sh destroy $(SENTINEL_DIR); exit 1; }
	@tests/sentinel.sh check $(SENTINEL_DIR)
	$(INSTALL_RELEASE)

# The suites of make test that need no server of the packaged build, one after another; the fuzz
# targets for 20 s each.
suites-without-server: FUZZ_SECONDS = 20
suites-without-server: clippy unit glue-unit loom pgtest fuzz

# The server-level suites of one major (server-tests: the package's pg_regress and integration
# suites), with BESIDE_SERVER_TESTS (make targets; #[pg_test] by default, which has a stage of its
# own) running at the same time, its output printed after theirs. A failure removes the sentinel,
# if make test started one.
BESIDE_SERVER_TESTS ?= pgtest
suites:
	@tools/beside.sh target/test-logs/beside-pg$(PG_MAJOR).log \
		"$(MAKE) --no-print-directory $(BESIDE_SERVER_TESTS)" "$(MAKE) --no-print-directory server-tests" || \
		{ tests/sentinel.sh destroy $(SENTINEL_DIR); exit 1; }

# One major's server-level suites on its package: what test-all runs on the majors after the first.
test-server: install install-package suites

# The first major gets every suite; the others what can differ between majors (the sentinel
# checks how files are installed, which no major changes), and the newest also a pg_upgrade
# from an older 15 (tools/upgrade-source.sh) with the first's packaged build. Each major's
# pg_config is named explicitly, since this make's own is exported.
test-all: test
	set -e; for major in $(filter-out $(PG_MAJOR),$(SUPPORTED_MAJORS)); do \
		config=$$(tools/postgres-major.sh pg-config $$major); \
		upgrade_from=; [ $$major != $(lastword $(SUPPORTED_MAJORS)) ] || upgrade_from=$$(tools/upgrade-source.sh $(STAGE)); \
		RANDFLAKE_UPGRADE_FROM=$$upgrade_from $(MAKE) --no-print-directory PG_MAJOR=$$major PG_CONFIG=$$config \
			PYTEST_ARGS="$(MAJOR_SENSITIVE_TESTS)" test-server; \
	done

# The fast loop: what needs neither a build of the extension for a server nor a server.
check: style unit glue-unit

# The pure crate's tests, the fleet, application lease and capacity simulations among them; then
# the fleet and application lease simulations again with their durability rules switched off, and
# the fleet simulation with the server position's clock rule switched off, where each must find a
# duplicate.
unit:
	cargo test -p randflake --features serde
	cargo test -p randflake --features fault-grant-uncertain-commits --test fleet_simulation
	cargo test -p randflake --features fault-position-rewinds --test fleet_simulation
	cargo test -p randflake --features fault-grant-uncertain-app-leases --test app_lease_simulation

# The model check of the shared-memory protocols (randflake::shared) under loom, which the dev
# profile optimises (Cargo.toml); then again with the sequence lock's reader weakened, where it
# must find a torn read, and with the server position's clock rule off, where it must find values
# handed out twice. Not in `unit`: building loom takes longer than the fast loop should
# (docs/development.md); `test` runs it.
loom:
	cargo test -p randflake --features loom --test shared_memory_model
	cargo test -p randflake --features "loom fault-seqlock-relaxed-reader" --test shared_memory_model
	cargo test -p randflake --features "loom fault-position-rewinds" --test shared_memory_model

# Mutation testing of the pure crate's decision files (tools/mutants.sh;
# MUTANTS_FILES="decisions/keeper ..." for some of them). Hours on two cores: neither make test
# nor CI runs it, and only it installs cargo-mutants.
mutants:
	@RANDFLAKE_DEPS_CARGO_MUTANTS=1 tools/deps.sh
	tools/mutants.sh $(MUTANTS_FILES)

# The extension's plain #[test]s, which need no server (the #[pg_test]s run under `make pgtest`):
# settings' checks and the error declarations against docs/errors.md. Built with pg_test, as
# `make pgtest` builds it, so that both run one build.
glue-unit:
	cargo test -p randflake_pg --lib --features "pg$(PG_MAJOR) pg_test" --no-default-features -- --skip pg_tests::

# Formatting (rustfmt.toml) of both crates and the fuzz targets, and the extension's modules
# depending on each other one way only: seconds, so make test checks them before any build.
style:
	@tools/module-deps.py >/dev/null
	@tools/unicode-invisible.py --check randflake/src/decisions/invisible.rs
	cargo fmt --all --check
	cargo fmt --manifest-path randflake/fuzz/Cargo.toml --check

# Clippy with warnings denied on both crates, the extension's #[pg_test]s included (each crate's
# lib.rs adds the unsafe lints).
clippy:
	cargo clippy -p randflake --all-targets --features serde -- -D warnings
	cargo clippy -p randflake --all-targets --all-features -- -D warnings
	cargo clippy -p randflake_pg --all-targets --features "pg$(PG_MAJOR) pg_test" --no-default-features -- -D warnings

lint: style clippy

# In a stage of its own (cargo pgrx test installs its build there), apart from the one the
# integration suites' servers run from at the same time.
pgtest:
	@tools/stage-postgres.sh $(PG_CONFIG) $(PGTEST_STAGE)
	PGRX_HOME=$(PGTEST_STAGE)/pgrx cargo pgrx test pg$(PG_MAJOR) --runas postgres --pgdata /tmp/randflake_pg-pgtest-$(PG_MAJOR)

server-tests:
	@$(STAGED) tests/scratch-cluster.sh destroy $(SCRATCH)
	@$(STAGED) tests/scratch-cluster.sh init $(SCRATCH) $(TEST_PORT)
	@$(STAGED) tests/scratch-cluster.sh start $(SCRATCH)
	@$(STAGED) psql -h $(SCRATCH) -p $(TEST_PORT) -U postgres -d postgres -qc 'CREATE EXTENSION randflake_pg'
	@$(STAGED) PGHOST=$(SCRATCH) PGPORT=$(TEST_PORT) tests/run-regress.sh || { tests/scratch-cluster.sh destroy $(SCRATCH); exit 1; }
	@$(STAGED) tests/scratch-cluster.sh destroy $(SCRATCH)
	$(STAGED) $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(or $(PYTEST_ARGS),tests/integration)

# The integration suites while stress-ng takes every core, as a busy CI machine's neighbours would
# (docs/development.md#under-load); not in make test: each round takes twice a quiet one.
test-under-load: install-package
	@tools/under-load.sh $(UNDER_LOAD_ROUNDS) target/under-load

docs: install
	RANDFLAKE_WRITE_DOCS=1 cargo test -p randflake_pg --lib --features "pg$(PG_MAJOR) pg_test" --no-default-features errors::tests
	RANDFLAKE_WRITE_SQL_REFERENCE=1 $(VENV)/bin/pytest -q tests/integration/test_sql_reference.py

installcheck:
	tests/run-regress.sh

# JIT is off so that compiling expressions does not blur per-call costs; fsync is off in every
# scratch cluster, for all contenders alike. The cluster keeps the default node range, all of the
# space, so that no per-call loop uses a second's nodes up and times the wait for the next.
bench: install
	@$(VENV)/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	@tests/scratch-cluster.sh destroy $(BENCH_DIR)
	@tests/scratch-cluster.sh init $(BENCH_DIR) $(BENCH_PORT) "shared_buffers = '2GB'" "jit = off" \
		"max_wal_size = '8GB'" "checkpoint_timeout = '30min'"
	@tests/scratch-cluster.sh start $(BENCH_DIR)
	cargo bench -p randflake
	$(VENV)/bin/python bench/bench.py --host $(BENCH_DIR) --port $(BENCH_PORT) --out bench/out \
		--many-dir $(BENCH_DIR)-clients --many-port $(BENCH_CLIENTS_PORT) $(BENCH_ARGS); \
		status=$$?; tests/scratch-cluster.sh destroy $(BENCH_DIR); exit $$status

# Insert throughput as the tables outgrow a small shared_buffers, lookups, and the remedies
# (docs/performance.md); writes $(BENCH_SCALE_OUT). Hours, not minutes: the indexes grow to 8x
# shared_buffers, and every step measures every key in turn.
bench-scale: install
	@$(VENV)/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	$(VENV)/bin/python bench/scale.py --dir $(BENCH_SCALE_DIR) --port $(BENCH_SCALE_PORT) \
		--out $(BENCH_SCALE_OUT) $(BENCH_SCALE_ARGS)

# The SQL edition packaged for pg_tle (docs/managed-postgresql.md).
sql-edition-pgtle:
	@mkdir -p target/sql-edition
	tools/sql-edition-pgtle.sh > target/sql-edition/randflake_sql--0.6.0-pgtle.sql

# Its port lies above the suites' (20000 + TEST_WORKERS * 200) and below the kernel's ephemeral ports.
soak: install
	RANDFLAKE_TEST_PORT_BASE=21900 $(VENV)/bin/python tests/integration/soak.py $(SOAK_ARGS)

fuzz:
	@tools/fuzz.sh $(FUZZ_SECONDS)

clean:
	cargo clean
	tests/scratch-cluster.sh destroy $(SCRATCH)
	tests/scratch-cluster.sh destroy $(DEMO_DIR)
