"""randflake_sql, the SQL edition (sql-edition/), as a managed server's customer uses it: a
cluster WITHOUT randflake_pg preloaded, a database owner who is not a superuser installing the
script with psql and loading the secret with COPY ... FROM STDIN; IDs checked byte for byte
against the published vectors, the Python reference port and the native extension."""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import threading

import psycopg
import pytest
from psycopg.errors import InsufficientPrivilege, ObjectNotInPrerequisiteState
from randflake.sparx64 import Sparx64
from randflake.v2 import Config, Generator, Lease, decode_string, encode_string

from lib.cluster import ROOT, Cluster, ports, as_owner, pg_config, wait_for, write_server_file
from lib.fake_clock import FakeClock, start_under_fake_clock

SCRIPT = ROOT / "sql-edition" / "randflake_sql--0.6.0.sql"
VECTORS = json.loads((ROOT / "randflake" / "tests" / "data" / "reference_vectors.json").read_text())
EPOCH, LAST_SECOND = 1730000000, 2803741823
OWNER, DATABASE = "app_owner", "app"
# Settings of a managed server: no randflake_pg, statements logged, pg_stat_statements loaded.
MANAGED = ("shared_preload_libraries = 'pg_stat_statements'", "log_statement = 'all'")


def psql(cluster: Cluster, dbname: str, user: str, *args: str, stdin: str | None = None) -> str:
    command = [f"{pg_config('--bindir')}/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(cluster.dir),
               "-p", str(cluster.port), "-U", user, "-d", dbname, *args]
    return subprocess.run(command, check=True, capture_output=True, text=True, input=stdin).stdout


def copy_secret(conn: psycopg.Connection, secret_hex: str) -> None:
    """The one documented way: COPY ... FROM STDIN, whose data no statement text holds."""
    with conn.cursor() as cursor, cursor.copy("COPY randflake.secret (secret_hex) FROM STDIN") as copy:
        copy.write_row((secret_hex,))


def load_secret(conn: psycopg.Connection, secret_hex: str) -> None:
    copy_secret(conn, secret_hex)
    assert conn.execute("SELECT randflake.check_secret()").fetchone() == ("the secret is loaded",)


def install(cluster: Cluster, dbname: str, secret_hex: str | None, nodes: tuple[int, int],
            app_pool: tuple[int, int] | None = None) -> None:
    """CREATE DATABASE owned by OWNER, then everything else as OWNER, who is no superuser."""
    with cluster.connect() as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (OWNER,)).fetchone():
            conn.execute(f"CREATE ROLE {OWNER} LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB")
        conn.execute(f"CREATE DATABASE {dbname} OWNER {OWNER}")
    psql(cluster, dbname, OWNER, "-1", "-o", "/dev/null", "-f", str(SCRIPT))
    with cluster.connect(dbname, OWNER) as conn:
        if secret_hex:
            load_secret(conn, secret_hex)
        conn.execute("SELECT randflake.configure(%s, %s, %s, %s)", (*nodes, *(app_pool or (None, None))))


def edition_cluster(cluster: Cluster, load: bool = True) -> str:
    """Installs the edition in DATABASE of a started cluster: nodes 0..63, application pool
    100..199; returns the secret, loaded unless `load` is false."""
    secret_hex = os.urandom(16).hex()
    install(cluster, DATABASE, secret_hex if load else None, (0, 63), (100, 199))
    with cluster.connect(DATABASE) as conn:
        conn.execute("CREATE ROLE writer LOGIN")
        conn.execute("CREATE ROLE svc LOGIN")
        conn.execute("GRANT ALL ON SCHEMA public TO writer")
    return secret_hex


@pytest.fixture(scope="module")
def edition(request):
    """One managed-like cluster with the edition installed, shared by the tests that leave it as
    they found it (their own tables, roles and databases)."""
    cluster = Cluster(f"{request.node.name[:30]}-edition", MANAGED)
    cluster.start()
    secret_hex = edition_cluster(cluster)
    yield cluster, secret_hex
    cluster.destroy()


@pytest.fixture(scope="module")
def native(request):
    """A cluster running the native extension, nodes 1024..2047 of the same ID space."""
    cluster = Cluster(f"{request.node.name[:30]}-native", ("randflake.node_id_min = 1024", "randflake.node_id_max = 2047"))
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE EXTENSION randflake_pg")
        wait_for(lambda: conn.execute("SELECT state = 'active' FROM randflake_status()").fetchone()[0], 30,
                 "the native keeper's lease")
    yield cluster
    cluster.destroy()


def signed(value: int) -> int:
    """An unsigned 64-bit value as the bigint of the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def raw_of(second: int, node: int, sequence: int) -> int:
    return signed((second - EPOCH) << 34 | node << 17 | sequence)


def test_installs_as_a_database_owner_without_superuser(edition):
    cluster, _ = edition
    with cluster.connect() as conn:
        assert "randflake_pg" not in conn.execute("SHOW shared_preload_libraries").fetchone()[0]
    with cluster.connect(DATABASE, OWNER) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
        objects = conn.execute(
            """SELECT p.oid::regprocedure::text, p.prosecdef, p.proconfig, obj_description(p.oid, 'pg_proc'),
                      has_function_privilege('public', p.oid, 'EXECUTE'), pg_get_userbyid(p.proowner)
                 FROM pg_proc p WHERE p.pronamespace = 'randflake'::regnamespace
                    OR (p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'randflake\\_%')"""
        ).fetchall()
        granted = {name for name, _, _, _, public, _ in objects if public}
        assert granted == {"randflake_next()", "randflake_to_string(bigint)", "randflake_from_string(text)"}
        for name, definer, config, comment, _, owner in objects:
            assert comment, f"{name} has no comment"
            assert owner == OWNER
            if definer:
                assert config == ["search_path=pg_catalog, pg_temp"], name
        tables = conn.execute(
            """SELECT c.relname, obj_description(c.oid, 'pg_class') FROM pg_class c
                WHERE c.relnamespace = 'randflake'::regnamespace AND c.relkind = 'r'"""
        ).fetchall()
        assert {name for name, _ in tables} == {"secret", "settings", "node_leases", "node_rollover"}
        assert all(comment for _, comment in tables)
    with cluster.connect(DATABASE, "writer") as conn:
        assert isinstance(conn.execute("SELECT randflake_next()").fetchone()[0], int)
        for statement in ("SELECT * FROM randflake.secret", "SELECT randflake_decode(1)", "SELECT randflake_node_id(1)",
                          "SELECT randflake.subkeys()", "SELECT nextval('randflake.node_0')",
                          "CALL randflake_lease_acquire('x', 10, NULL, NULL, NULL)"):
            with pytest.raises(InsufficientPrivilege):
                conn.execute(statement)


def test_every_published_vector(edition):
    cluster, _ = edition
    sparx = VECTORS["sparx64_128"][0]
    with cluster.connect(DATABASE, OWNER) as conn:
        # The paper's vector: its plaintext words are the bytes of a little-endian raw ID.
        plain = int.from_bytes(bytes.fromhex(sparx["plaintext"]), "little", signed=True)
        cipher = int.from_bytes(bytes.fromhex(sparx["ciphertext"]), "little", signed=True)
        assert conn.execute("SELECT randflake.sparx_encrypt(randflake.sparx_expand_key(%s), %s)",
                            (sparx["key"], plain)).fetchone() == (cipher,)
        for vector in VECTORS["randflake"]:
            row = conn.execute(
                """SELECT randflake.sparx_encrypt(k, %(raw)s), randflake.sparx_decrypt(k, %(id)s),
                          randflake_to_string(%(id)s), randflake_from_string(%(text)s)
                     FROM randflake.sparx_expand_key(%(secret)s) k""",
                {"raw": signed(int(vector["raw_id"])), "id": int(vector["encrypted_id"]), "text": vector["encoded_id"],
                 "secret": vector["secret"]},
            ).fetchone()
            assert row == (int(vector["encrypted_id"]), signed(int(vector["raw_id"])), vector["encoded_id"],
                           int(vector["encrypted_id"])), vector


def random_cases(rng: random.Random, count: int) -> list[tuple[int, int, int]]:
    return [(rng.randint(EPOCH, LAST_SECOND), rng.randrange(1 << 17), rng.randrange(1 << 17)) for _ in range(count)]


def edition_batch(cluster: Cluster, secrets: list[str], key_of: list[int], raws: list[int],
                  both_ways: bool, into: list) -> None:
    """Case n encrypted under secrets[key_of[n] - 1] by the edition: (n, ID, its decryption when
    `both_ways`, its string form, that string parsed when `both_ways`) into `into`. OFFSET 0
    keeps each function to one call per case."""
    back = "randflake.sparx_decrypt(e.subkeys, e.id)" if both_ways else "NULL::bigint"
    parsed = "randflake_from_string(e.text)" if both_ways else "NULL::bigint"
    with cluster.connect(DATABASE, OWNER) as conn:
        into += conn.execute(
            f"""SELECT e.n, e.id, {back}, e.text, {parsed}
                  FROM (SELECT i.n, i.subkeys, i.id, randflake_to_string(i.id) AS text
                          FROM (SELECT c.n, k.subkeys, randflake.sparx_encrypt(k.subkeys, c.raw) AS id
                                  FROM unnest(%s::text[]) WITH ORDINALITY AS s(secret, key_n),
                                       LATERAL (SELECT randflake.sparx_expand_key(s.secret) AS subkeys OFFSET 0) k,
                                       unnest(%s::bigint[], %s::bigint[]) WITH ORDINALITY AS c(key_n, raw, n)
                                 WHERE c.key_n = s.key_n OFFSET 0) i OFFSET 0) e
                 ORDER BY e.n""",
            (secrets, key_of, raws)).fetchall()


def test_random_cases_match_the_reference_port_and_the_native_extension(edition, native):
    """100,000 random (second, node, sequence, secret) cases against the Python reference port,
    and 100,000 under the native server's secret against the native extension: encryption,
    decryption and the string form both ways. The two batches run at once, one per core."""
    cluster, _ = edition
    rng = random.Random(31)
    secrets = [rng.randbytes(16) for _ in range(1000)]
    cases = random_cases(rng, 100_000)
    raws = [raw_of(*case) for case in cases]
    key_of = [i // 100 + 1 for i in range(len(cases))]
    native_cases = random_cases(rng, 100_000)
    native_raws = [raw_of(*case) for case in native_cases]
    rows: list = []
    made: list = []
    batches = [
        threading.Thread(target=edition_batch, args=(cluster, [s.hex() for s in secrets], key_of, raws, True, rows)),
        threading.Thread(target=edition_batch,
                         args=(cluster, [native.key_hex], [1] * len(native_raws), native_raws, False, made)),
    ]
    for batch in batches:
        batch.start()
    for batch in batches:
        batch.join()
    assert len(rows) == len(made) == 100_000

    ciphers = [Sparx64(secret) for secret in secrets]
    out = bytearray(8)
    for (n, id_, back, text, value), raw, key in zip(rows, raws, key_of):
        ciphers[key - 1].encrypt(out, (raw % (1 << 64)).to_bytes(8, "little"))
        assert id_ == int.from_bytes(out, "little", signed=True), (n, raw)
        assert back == raw
        assert text == encode_string(id_) and value == decode_string(text) == id_

    ids = [id_ for _, id_, _, _, _ in made]
    with native.connect() as conn:
        decoded = conn.execute(
            """SELECT extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence, randflake_to_string(u.id),
                      randflake_from_string((%s::text[])[u.n])
                 FROM unnest(%s::bigint[]) WITH ORDINALITY u(id, n), randflake_decode(u.id) d ORDER BY u.n""",
            ([text for _, _, _, text, _ in made], ids),
        ).fetchall()
        native_ids = [id_ for (id_,) in conn.execute("SELECT randflake_next() FROM generate_series(1, 5000)")]
        native_parts = conn.execute(
            """SELECT extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
                 FROM unnest(%s::bigint[]) WITH ORDINALITY u(id, n), randflake_decode(u.id) d ORDER BY u.n""",
            (native_ids,)).fetchall()
    for case, (_, id_, _, text, _), (second, node, sequence, native_text, native_value) in zip(native_cases, made,
                                                                                              decoded):
        assert (second, node, sequence) == case
        assert native_text == text and native_value == id_
    # And back: the native extension's own IDs, decrypted by the edition under the same secret.
    with cluster.connect(DATABASE, OWNER) as conn:
        edition_parts = conn.execute(
            """SELECT (r >> 34) + 1730000000, ((r >> 17) & 131071)::int, (r & 131071)::int
                 FROM randflake.sparx_expand_key(%s) k, unnest(%s::bigint[]) WITH ORDINALITY u(id, n),
                      LATERAL randflake.sparx_decrypt(k, u.id) r ORDER BY u.n""",
            (native.key_hex, native_ids)).fetchall()
    assert edition_parts == native_parts


def generate(cluster: Cluster, dbname: str, user: str, rounds: int, per_round: int) -> list[int]:
    made = []
    with cluster.connect(dbname, user) as conn:
        for _ in range(rounds):
            made += [id_ for (id_,) in conn.execute("SELECT randflake_next() FROM generate_series(1, %s)", (per_round,))]
    return made


def test_sixteen_concurrent_sessions_make_no_duplicate(edition):
    cluster, _ = edition
    results: list[list[int]] = [[] for _ in range(16)]
    errors = []

    def session(index: int) -> None:
        try:
            results[index] = generate(cluster, DATABASE, "writer", 20, 100)
        except Exception as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=session, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    made = [id_ for ids in results for id_ in ids]
    assert len(made) == 16 * 2000 and len(set(made)) == len(made)
    with cluster.connect(DATABASE, OWNER) as conn:
        assert nodes_of(conn, made) <= set(range(64))


def test_more_sessions_than_nodes_share_them(edition):
    """Sessions hold no node: 24 sessions, coming and going, make IDs on a range of 4 nodes with
    no refusal (before, a fifth session was refused with 53400) and no ID twice, and the status
    counts the nodes that made IDs in the last two seconds."""
    cluster, secret_hex = edition
    install(cluster, "shared_nodes", secret_hex, (200, 203))
    sessions = [cluster.connect("shared_nodes", "writer") for _ in range(24)]
    made: list[int] = []
    failures: list[Exception] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        try:
            for round_ in range(8):
                batch = generate_in(sessions[index], 25)
                if round_ % 3 == index % 3:  # a new connection, whose first call finds no hint
                    sessions[index].close()
                    sessions[index] = cluster.connect("shared_nodes", "writer")
                with lock:
                    made.extend(batch)
        except Exception as error:  # reported below, in the test's thread
            failures.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(24)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for conn in sessions:
            conn.close()
    assert not failures
    assert len(made) == 24 * 8 * 25 and len(set(made)) == len(made)
    with cluster.connect("shared_nodes", OWNER) as conn:
        assert nodes_of(conn, made) <= {200, 201, 202, 203}
        conn.execute("SELECT randflake_next()")
        in_use, free, this_second, last_second = conn.execute(
            "SELECT nodes_in_use, nodes_free, nodes_used_this_second, nodes_used_last_second FROM randflake_status()"
        ).fetchone()
        assert in_use >= 1 and in_use + free == 4 and this_second <= in_use and last_second is None


def test_configure_moves_live_sessions_to_the_new_range(edition):
    """randflake_next() checks each call's node against the range as constants that configure()
    redefines, folded into the plans the session has cached: a session that holds a node of the
    old range takes a node of the new one at its next call, without reconnecting."""
    cluster, secret_hex = edition
    install(cluster, "reconfigured", secret_hex, (300, 303))
    with cluster.connect("reconfigured", "writer") as conn, cluster.connect("reconfigured", OWNER) as owner:
        def nodes_of(ids: list[int]) -> set[int]:
            return {n for (n,) in owner.execute(
                "SELECT DISTINCT randflake_node_id(id) FROM unnest(%s::bigint[]) id", (ids,))}

        def twenty() -> list[int]:
            return [id_ for (id_,) in conn.execute("SELECT randflake_next() FROM generate_series(1, 20)")]

        made = twenty()
        assert len(nodes_of(made)) == 1 and nodes_of(made) <= {300, 301, 302, 303}
        owner.execute("SELECT randflake.configure(310, 313)")
        moved = twenty()
        assert len(nodes_of(moved)) == 1 and nodes_of(moved) <= {310, 311, 312, 313}
        assert len(set(made + moved)) == 40


def test_a_forged_node_hint_only_says_where_to_start(edition):
    """randflake_sql.node is a setting any role may set, and any node of the range is one every
    session may use: naming another session's node, the forger takes IDs of that node beside
    it; naming a node outside the range, or garbage, it is ignored for the range's first node.
    No ID repeats and none leaves the range."""
    cluster, _ = edition
    with cluster.connect(DATABASE, "writer") as holder, cluster.connect(DATABASE, "writer") as forger, \
            cluster.connect(DATABASE, OWNER) as owner:
        made = generate_in(holder, 20)
        (held,) = nodes_of(owner, made)
        forger.execute("SELECT set_config('randflake_sql.node', %s, false)", (str(held),))
        for _ in range(5):
            batch = generate_in(forger, 20) + generate_in(holder, 20)
            assert nodes_of(owner, batch) == {held}
            made += batch
        for forged in ("150", "64", "-1", "1/2/3", "x", "9999999"):
            forger.execute("SELECT set_config('randflake_sql.node', %s, false)", (forged,))
            batch = generate_in(forger, 20)
            assert nodes_of(owner, batch) == {0}, forged
            made += batch
        assert len(set(made)) == len(made)


def test_a_rolled_back_id_is_never_issued_again(edition):
    """The per-node record is a sequence, which no rollback undoes."""
    cluster, _ = edition
    with cluster.connect(DATABASE, "writer") as conn:
        seen = set()
        for _ in range(200):
            conn.execute("BEGIN")
            seen.add(conn.execute("SELECT randflake_next()").fetchone()[0])
            conn.execute("ROLLBACK")
            seen.add(conn.execute("SELECT randflake_next()").fetchone()[0])
        assert len(seen) == 400



def test_clock_stepped_back_is_refused_and_exhaustion_moves_node(make_cluster, fake_clock_preload):
    cluster = make_cluster(*MANAGED)
    clock = FakeClock(cluster, fake_clock_preload)
    start_under_fake_clock(cluster, clock)
    edition_cluster(cluster)
    with cluster.connect(DATABASE, "writer") as conn, cluster.connect(DATABASE, OWNER) as owner:
        first = conn.execute("SELECT randflake_next()").fetchone()[0]
        node = owner.execute("SELECT randflake_node_id(%s)", (first,)).fetchone()[0]
        clock.set(-30)
        with pytest.raises(ObjectNotInPrerequisiteState, match=r"clock is \d+ s behind second \d+, which"):
            conn.execute("SELECT randflake_next()")
        # A new session, which would find a node never used in the later second, refuses too:
        # the database's high-water second, as the native extension refuses any second behind
        # the latest its server used.
        with cluster.connect(DATABASE, "writer") as fresh:
            with pytest.raises(ObjectNotInPrerequisiteState, match=r"which this database has already used"):
                fresh.execute("SELECT randflake_next()")
        clock.set(0)
        again = conn.execute("SELECT randflake_next()").fetchone()[0]
        assert owner.execute("SELECT randflake_node_id(%s)", (again,)).fetchone() == (node,)

        # A node whose second is used up: the next ID comes from another node, in the same second.
        with clock.frozen():
            first = conn.execute("SELECT randflake_next()").fetchone()[0]
            second = owner.execute("SELECT extract(epoch FROM randflake_timestamp(%s))::bigint", (first,)).fetchone()[0]
            owner.execute("SELECT setval(randflake.node_record(%s), (%s::bigint - 1730000000) << 33 | 131070)",
                          (node, second))
            ids = [id_ for (id_,) in conn.execute("SELECT randflake_next() FROM generate_series(1, 3)")]
            parts = owner.execute(
                """SELECT extract(epoch FROM d.timestamp)::bigint, d.node_id, d.sequence
                     FROM unnest(%s::bigint[]) WITH ORDINALITY u(id, n), randflake_decode(u.id) d ORDER BY u.n""",
                (ids,)).fetchall()
        assert parts[0] == (second, node, 131071)
        assert {p[0] for p in parts} == {second}
        assert parts[1][1] != node and parts[1][2] == 0 and parts[2][1:] == (parts[1][1], 1)

        # A node whose row is locked is being moved to a new second by another caller: a call
        # that finds it so leaves it to that caller and begins the second on the next node
        # (without the lock, two callers would both take the new second's sequence 0).
        moving = parts[2][1]
        owner.execute("BEGIN")
        owner.execute("SELECT FROM randflake.node_rollover WHERE node = %s FOR NO KEY UPDATE", (moving,))
        clock.set(5)
        (later,) = generate_in(conn, 1)
        owner.execute("COMMIT")
        assert owner.execute("SELECT d.node_id, d.sequence FROM randflake_decode(%s) d", (later,)).fetchone() \
            == (moving + 1, 0)


def pgbouncer(cluster: Cluster, port: int) -> subprocess.Popen:
    """PgBouncer in transaction mode in front of DATABASE, four server connections for all clients."""
    ini = cluster.dir / "pgbouncer.ini"
    write_server_file(ini, f"""[databases]
{DATABASE} = host={cluster.dir} port={cluster.port} dbname={DATABASE} user=writer
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 4
max_client_conn = 100
logfile = {cluster.dir}/pgbouncer.log
pidfile = {cluster.dir}/pgbouncer.pid
""", 0o644)
    process = subprocess.Popen(as_owner(["/usr/sbin/pgbouncer", str(ini)]))
    wait_for(lambda: _accepts(port), 20, "pgbouncer to accept connections")
    return process


def _accepts(port: int) -> bool:
    try:
        psycopg.connect(host="127.0.0.1", port=port, dbname=DATABASE, user="writer", autocommit=True).close()
        return True
    except psycopg.OperationalError:
        return False


def test_behind_pgbouncer_in_transaction_mode(edition):
    """Clients share four server connections, and the server connections share the range's
    nodes: clients interleaving on them still get unique IDs."""
    cluster, _ = edition
    port = next(ports)
    process = pgbouncer(cluster, port)
    try:
        with cluster.connect(DATABASE, "writer") as conn:
            conn.execute("CREATE TABLE pooled (id bigint PRIMARY KEY DEFAULT randflake_next(), client int)")
        errors = []

        def client(index: int) -> None:
            try:
                with psycopg.connect(host="127.0.0.1", port=port, dbname=DATABASE, user="writer",
                                     autocommit=True, prepare_threshold=None) as conn:
                    for round_ in range(40):
                        if round_ % 2:
                            conn.execute("INSERT INTO pooled (client) VALUES (%s)", (index,))
                        else:
                            with conn.transaction():
                                conn.execute("INSERT INTO pooled (client) SELECT %s FROM generate_series(1, 5)", (index,))
            except Exception as error:  # reported below, in the test's thread
                errors.append(error)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        with cluster.connect(DATABASE) as conn:
            count, nodes = conn.execute(
                "SELECT count(*), count(DISTINCT randflake_node_id(id)) FROM pooled").fetchone()
        assert count == 16 * (20 + 20 * 5)
        assert 1 <= nodes <= 4  # the server connections', not the 16 clients'
    finally:
        process.terminate()
        process.wait(10)


ACQUIRE = "CALL randflake_lease_acquire(%s, %s, NULL, NULL, NULL)"
EXTEND = "CALL randflake_lease_extend(%s, %s, %s, NULL, NULL, NULL)"
RELEASE = "CALL randflake_lease_release(%s, %s, NULL)"


def test_application_leases_with_the_reference_port(edition):
    """The native procedures' API: CALL in autocommit mode, the window straight into the
    reference port's Lease; a second release of one lease fails with 55000."""
    cluster, secret_hex = edition
    with cluster.connect(DATABASE, OWNER) as conn:
        conn.execute("SELECT randflake.grant_application_leases('svc')")
    with cluster.connect(DATABASE, "svc") as conn:
        node, start, end = conn.execute(ACQUIRE, ("api@host:1", 30)).fetchone()
        assert 100 <= node <= 199 and end == start + 30
        generator = Generator(Config(lease=Lease(node, start, end), secret=bytes.fromhex(secret_hex)))
        made = [generator.generate() for _ in range(500)]
        row = conn.execute(EXTEND, ("api@host:1", node, 600)).fetchone()
        assert row[:2] == (node, start) and row[2] >= end
        generator.extend_lease(Lease(*row))
        other = conn.execute(ACQUIRE, ("api@host:2", 30)).fetchone()
        assert other[0] != node
        assert conn.execute(RELEASE, ("api@host:1", node)).fetchone() == (True,)
        with pytest.raises(ObjectNotInPrerequisiteState):
            conn.execute(EXTEND, ("api@host:1", node, 600))
        with pytest.raises(ObjectNotInPrerequisiteState, match="holds no lease"):
            conn.execute(RELEASE, ("api@host:1", node))
        conn.execute(RELEASE, ("api@host:2", other[0]))
    with cluster.connect(DATABASE, OWNER) as conn:
        decoded = conn.execute(
            "SELECT DISTINCT randflake_node_id(id) FROM unnest(%s::bigint[]) id", (made,)).fetchall()
        assert decoded == [(node,)]
        assert conn.execute("SELECT holder FROM randflake.node_leases WHERE first_node = %s", (node,)).fetchone() == (
            "released/svc/api@host:1",)


def test_lease_procedures_refuse_a_transaction_they_do_not_own(edition):
    """A lease is returned only once the procedure committed it itself: after the writes of a
    pipeline's earlier statements (25001, as native), inside BEGIN and in a query string of
    several statements, which PostgreSQL runs atomically (2D000, its own refusal of the
    procedure's first COMMIT), nothing is leased or committed.
    A pipeline whose CALL opens the transaction gets a lease that a later error in the same
    pipeline does not take back."""
    cluster, _ = edition
    with cluster.connect(DATABASE, OWNER) as conn:
        conn.execute("SELECT randflake.grant_application_leases('svc')")
        conn.execute("CREATE TABLE IF NOT EXISTS lease_pipeline_log (note text)")
        conn.execute("GRANT INSERT, SELECT ON lease_pipeline_log TO svc")

    def leases_of(holder: str) -> int:
        with cluster.connect(DATABASE, OWNER) as owner:
            return owner.execute("SELECT count(*) FROM randflake.node_leases WHERE holder = %s",
                                 (f"app/svc/{holder}",)).fetchone()[0]

    with cluster.connect(DATABASE, "svc") as conn:
        with pytest.raises(psycopg.errors.InvalidTransactionTermination):
            with conn.transaction():
                conn.execute(ACQUIRE, ("in-block", 30))
        with pytest.raises(psycopg.errors.ActiveSqlTransaction, match="would commit what the statements before"):
            with conn.pipeline():
                conn.execute("INSERT INTO lease_pipeline_log VALUES ('before')")
                conn.execute(ACQUIRE, ("in-pipeline", 30))
        with pytest.raises(psycopg.errors.InvalidTransactionTermination):
            conn.execute(f"{ACQUIRE % (repr('multi'), 30)}; SELECT 1", prepare=False)
        assert [leases_of(h) for h in ("in-block", "in-pipeline", "multi")] == [0, 0, 0]
        assert conn.execute("SELECT count(*) FROM lease_pipeline_log").fetchone() == (0,)

        with pytest.raises(psycopg.errors.DivisionByZero):
            with conn.pipeline():
                leased = conn.execute(ACQUIRE, ("first-in-pipeline", 30))
                conn.execute("INSERT INTO lease_pipeline_log VALUES ('after')")
                conn.execute("SELECT 1 / 0")
        node = leased.fetchone()[0]
        assert leases_of("first-in-pipeline") == 1
        assert conn.execute("SELECT count(*) FROM lease_pipeline_log").fetchone() == (0,)
        assert conn.execute(RELEASE, ("first-in-pipeline", node)).fetchone() == (True,)


# Every way a server may write what its statements hold: statement texts, parameters, the plans
# of nested statements (auto_explain, debug_print_plan) and the statement an error came from.
LOGGED_EVERYWHERE = (
    "shared_preload_libraries = 'pg_stat_statements,auto_explain'", "log_statement = 'all'",
    "pg_stat_statements.track = 'all'", "auto_explain.log_min_duration = 0", "auto_explain.log_analyze = on",
    "auto_explain.log_verbose = on", "auto_explain.log_nested_statements = on",
    "auto_explain.log_parameter_max_length = -1", "debug_print_plan = on", "log_min_error_statement = 'error'",
    "log_parameter_max_length = -1", "log_parameter_max_length_on_error = -1", "log_error_verbosity = 'verbose'",
)


def test_the_secret_is_never_in_statements_activity_or_the_log(make_cluster):
    """Installed, loaded (badly, then well, then twice), checked, used and failing, with every
    statement and every nested statement's plan logged: neither the secret nor any of its
    subkeys is in pg_stat_statements, pg_stat_activity or the log (before, check_secret()'s
    UPDATE was planned with the secret and the subkeys as constants)."""
    cluster = make_cluster(*LOGGED_EVERYWHERE)
    cluster.start()
    with cluster.connect() as conn:
        conn.execute("CREATE DATABASE stats")
    with cluster.connect("stats") as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    secret_hex = edition_cluster(cluster, load=False)
    with cluster.connect(DATABASE, OWNER) as conn:
        with pytest.raises(ObjectNotInPrerequisiteState, match="no Randflake secret is loaded"):
            conn.execute("SELECT randflake_next()")
        # A malformed secret, then the right one loaded twice: refused, with errors in the log.
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            load_secret(conn, secret_hex[:-1] + "x")
        conn.execute("DELETE FROM randflake.secret")
        load_secret(conn, secret_hex)
        with pytest.raises(psycopg.errors.CardinalityViolation):
            load_secret(conn, secret_hex)
        conn.execute("DELETE FROM randflake.secret WHERE subkeys IS NULL")
        for _ in range(7):  # past the custom plans PL/pgSQL makes of a statement's first runs
            assert conn.execute("SELECT randflake.check_secret()").fetchone() == ("the secret is loaded",)
            conn.execute("SELECT randflake_decode(randflake_next()), randflake_timestamp(randflake_next()), "
                         "randflake_node_id(randflake_next()), randflake_sequence(randflake_next())")
        conn.execute("SELECT randflake_next() FROM generate_series(1, 5)")
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            conn.execute("SELECT randflake_decode(randflake_from_string('zz'))")
    with cluster.connect(DATABASE, "writer") as conn:
        conn.execute("SELECT randflake_next() FROM generate_series(1, 5)")
        with pytest.raises(InsufficientPrivilege):
            conn.execute("SELECT randflake_decode(1)")
    with cluster.connect("stats") as conn:
        statements = " ".join(q for (q,) in conn.execute("SELECT query FROM pg_stat_statements"))
        activity = " ".join(q or "" for (q,) in conn.execute("SELECT query FROM pg_stat_activity"))
    log = cluster.log()
    with cluster.connect(DATABASE, OWNER) as conn:
        subkeys = [str(k) for (k,) in conn.execute("SELECT unnest(subkeys) FROM randflake.secret")]
    assert "COPY randflake.secret" in statements and "COPY randflake.secret" in log
    assert "randflake.sparx_expand_key" in log  # the plans were logged
    for route in (statements, activity, log):
        assert secret_hex not in route and secret_hex[:-1] not in route and secret_hex.upper() not in route
        assert [k for k in subkeys if len(k) >= 6 and k in route] == []


def test_dump_and_restore(edition):
    """pg_dump as the owner, leaving the secret's row out; restored, the secret loaded again, the
    records of used seconds come back with it, and IDs go on unique."""
    cluster, secret_hex = edition
    install(cluster, "dumped", secret_hex, (300, 303))
    with cluster.connect("dumped", OWNER) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT randflake_next(), note text)")
        conn.execute("INSERT INTO orders (note) SELECT 'before' FROM generate_series(1, 500)")
    with cluster.connect("dumped", OWNER) as conn:
        records = conn.execute("SELECT n, pg_sequence_last_value(randflake.node_record(n)) "
                               "FROM generate_series(300, 303) n ORDER BY n").fetchall()
    dump = cluster.dir.parent / f"{cluster.dir.name}-dumped.dump"
    bindir = pg_config("--bindir")
    connection = ["-h", str(cluster.dir), "-p", str(cluster.port), "-U", OWNER]
    subprocess.run([f"{bindir}/pg_dump", *connection, "-Fc", "--exclude-table-data=randflake.secret", "-f", str(dump),
                    "dumped"], check=True)
    try:
        with cluster.connect() as conn:
            conn.execute("DROP DATABASE dumped")
            conn.execute(f"CREATE DATABASE dumped OWNER {OWNER}")
        subprocess.run([f"{bindir}/pg_restore", *connection, "-d", "dumped", "--exit-on-error", str(dump)], check=True)
    finally:
        dump.unlink()
    with cluster.connect("dumped", OWNER) as conn:
        with pytest.raises(ObjectNotInPrerequisiteState, match="no Randflake secret is loaded"):
            conn.execute("SELECT randflake_next()")
        load_secret(conn, secret_hex)
        assert conn.execute("SELECT n, pg_sequence_last_value(randflake.node_record(n)) "
                            "FROM generate_series(300, 303) n ORDER BY n").fetchall() == records
    with cluster.connect("dumped", OWNER) as conn:
        conn.execute("INSERT INTO orders (note) SELECT 'after' FROM generate_series(1, 500)")
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (1000,)


def test_one_id_space_with_native_servers(edition, native):
    """A fleet of both: the edition's database on nodes 0..63 and a native server on 1024..2047, one
    secret; each decodes the other's IDs, the lease tables have one shape, and a table moved from
    the edition to the native server goes on taking unique IDs there."""
    cluster, _ = edition
    install(cluster, "mixed", native.key_hex, (0, 63))
    with cluster.connect("mixed", OWNER) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT randflake_next(), made_by text)")
        conn.execute("INSERT INTO orders (made_by) SELECT 'edition' FROM generate_series(1, 3000)")
        edition_ids = [id_ for (id_,) in conn.execute("SELECT id FROM orders")]
    bindir = pg_config("--bindir")
    dump = subprocess.run([f"{bindir}/pg_dump", "-h", str(cluster.dir), "-p", str(cluster.port), "-U", OWNER,
                           "-t", "orders", "--no-owner", "mixed"], check=True, capture_output=True, text=True).stdout
    with native.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS orders")
    subprocess.run([f"{bindir}/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(native.dir), "-p",
                    str(native.port), "-U", "postgres", "-d", "postgres"], input=dump, check=True, text=True,
                   capture_output=True)
    with native.connect() as conn:
        conn.execute("ALTER TABLE orders ALTER id SET DEFAULT randflake_next()")
        conn.execute("INSERT INTO orders (made_by) SELECT 'native' FROM generate_series(1, 3000)")
        assert conn.execute("SELECT count(*), count(DISTINCT id) FROM orders").fetchone() == (6000, 6000)
        by_maker = dict(conn.execute(
            """SELECT made_by, array_agg(DISTINCT d.node_id ORDER BY d.node_id) FROM orders, randflake_decode(id) d
                GROUP BY made_by""").fetchall())
        native_ids = [id_ for (id_,) in conn.execute("SELECT id FROM orders WHERE made_by = 'native'")]
        native_shape = conn.execute(
            """SELECT column_name, data_type, is_nullable FROM information_schema.columns
                WHERE table_schema = 'randflake' AND table_name = 'node_leases' ORDER BY ordinal_position""").fetchall()
    assert all(0 <= n <= 63 for n in by_maker["edition"]) and all(1024 <= n <= 2047 for n in by_maker["native"])
    with cluster.connect("mixed", OWNER) as conn:
        nodes = {n for (n,) in conn.execute("SELECT DISTINCT randflake_node_id(id) FROM unnest(%s::bigint[]) id",
                                            (native_ids,))}
        shape = conn.execute(
            """SELECT column_name, data_type, is_nullable FROM information_schema.columns
                WHERE table_schema = 'randflake' AND table_name = 'node_leases' ORDER BY ordinal_position""").fetchall()
    assert nodes <= set(range(1024, 2048)) and shape == native_shape
    assert not set(edition_ids) & set(native_ids)


def test_the_pg_tle_package_carries_the_script_unchanged(edition):
    """pg_tle cannot be installed here: PostgreSQL's own parser reads the arguments that
    tools/sql-edition-pgtle.sh passes to pgtle.install_extension(), and the script among them is
    byte for byte the one the other tests install."""
    cluster, _ = edition
    wrapper = subprocess.run([ROOT / "tools" / "sql-edition-pgtle.sh"], check=True, capture_output=True,
                             text=True).stdout
    assert wrapper.startswith("SELECT pgtle.install_extension(\n") and wrapper.endswith("\n);\n")
    arguments = "SELECT ARRAY[" + wrapper.removeprefix("SELECT pgtle.install_extension(").removesuffix(");\n") + "]"
    with cluster.connect() as conn:
        name, version, _, script = conn.execute(arguments).fetchone()[0]
    assert (name, version) == ("randflake_sql", "0.6.0")
    assert script.strip("\n") == SCRIPT.read_text().strip("\n")


def nodes_of(conn: psycopg.Connection, ids: list[int]) -> set[int]:
    """The nodes that made `ids`, decoded by the owner's connection `conn`."""
    return {n for (n,) in conn.execute("SELECT DISTINCT randflake_node_id(id) FROM unnest(%s::bigint[]) id", (ids,))}


def test_configure_never_hands_a_node_in_use_to_the_other_side(make_cluster, fake_clock_preload):
    """A node moves between the sessions' range and the application pool only once the side it
    leaves has not used it for the margin: configure() refuses a range over a leased node
    (1,300 duplicates before, as the sessions took node 100 under a reference-port generator's
    lease) and a pool over a node sessions used (50 before), naming the node, 55000 with a HINT;
    once the margin has passed (the server's clock stepped forward) it accepts both moves, and
    no ID of sessions and live generators repeats."""
    cluster = make_cluster(*MANAGED)
    clock = FakeClock(cluster, fake_clock_preload)
    start_under_fake_clock(cluster, clock)
    secret = bytes.fromhex(edition_cluster(cluster))
    made: list[int] = []
    with cluster.connect(DATABASE, OWNER) as owner, cluster.connect(DATABASE, "writer") as writer, \
            cluster.connect(DATABASE, "svc") as svc:
        owner.execute("SELECT randflake.grant_application_leases('svc')")
        owner.execute("SELECT randflake.configure(0, 7, 100, 107)")
        made += generate_in(writer, 200)
        (session_node,) = nodes_of(owner, made)
        node, start, end = svc.execute(ACQUIRE, ("api@host:1", 600)).fetchone()
        assert node == 100
        generator = Generator(Config(lease=Lease(node, start, end), secret=secret, clock=lambda: int(clock.now())))
        made += [generator.generate() for _ in range(1300)]

        refusals = [((100, 107, None, None), r'node 100 of the range 100\.\.107 is leased to application holder '
                                             r'"app/svc/api@host:1" through'),
                    ((0, 107, None, None), r"node 100 of the range 0\.\.107 is leased"),
                    ((200, 207, 0, 7), rf"node {session_node} of the application pool 0\.\.7 was used by sessions")]
        for arguments, message in refusals:
            with pytest.raises(ObjectNotInPrerequisiteState, match=message) as refused:
                owner.execute("SELECT randflake.configure(%s, %s, %s, %s)", arguments)
            assert "once that time has passed" in refused.value.diag.message_hint
        assert owner.execute("SELECT node_id_min, node_id_max, app_node_id_min, app_node_id_max "
                             "FROM randflake.settings").fetchone() == (0, 7, 100, 107)
        made += generate_in(writer, 200) + [generator.generate() for _ in range(1300)]
        # Released, the node stays the application's for the margin past its new end.
        assert svc.execute(RELEASE, ("api@host:1", node)).fetchone() == (True,)
        with pytest.raises(ObjectNotInPrerequisiteState, match="node 100 of the range"):
            owner.execute("SELECT randflake.configure(100, 107)")

        clock.set(200)  # past the released lease's end and the sessions' last second, plus the margin
        owner.execute("SELECT randflake.configure(100, 107)")
        moved = generate_in(writer, 500)
        assert nodes_of(owner, moved) <= set(range(100, 108))
        owner.execute("SELECT randflake.configure(200, 207, 0, 7)")
        node, start, end = svc.execute(ACQUIRE, ("api@host:2", 600)).fetchone()
        assert 0 <= node <= 7
        generator = Generator(Config(lease=Lease(node, start, end), secret=secret, clock=lambda: int(clock.now())))
        made += moved + [generator.generate() for _ in range(1300)] + generate_in(writer, 500)
    assert len(set(made)) == len(made)


def generate_in(conn: psycopg.Connection, count: int) -> list[int]:
    return [id_ for (id_,) in conn.execute("SELECT randflake_next() FROM generate_series(1, %s)", (count,))]


def test_configure_waits_for_statements_issuing_from_the_old_range(edition):
    """A statement that is making IDs keeps the range it started under until its transaction
    ends, and configure() waits for it (before, a 150,000-row INSERT went on with node 7 for
    6 s after configure(200, 207, 0, 7) had committed): when configure() returns, the INSERT
    has committed, all its IDs from the old range, and the session's next call takes a node of
    the new one. A transaction left open after a call makes configure() fail once its
    lock_timeout passes, 55P03 naming the blocker's pid."""
    cluster, secret_hex = edition
    install(cluster, "moving", secret_hex, (0, 7))
    with cluster.connect("moving", "writer") as writer, cluster.connect("moving", OWNER) as owner:
        owner.execute("CREATE TABLE bulk (id bigint PRIMARY KEY DEFAULT randflake_next(), n int)")
        owner.execute("GRANT INSERT ON bulk TO writer")
        pid = writer.info.backend_pid
        failures: list[Exception] = []

        def insert() -> None:
            try:
                writer.execute("INSERT INTO bulk (n) SELECT g FROM generate_series(1, 5000) g")
            except Exception as error:  # reported below, in the test's thread
                failures.append(error)

        thread = threading.Thread(target=insert)
        thread.start()
        try:
            wait_for(lambda: owner.execute(
                """SELECT true FROM pg_locks WHERE pid = %s AND granted AND relation = 'randflake.secret'::regclass""",
                (pid,)).fetchone(), 30, "the INSERT to make its first ID")
            owner.execute("SELECT randflake.configure(200, 207)")
            assert owner.execute("SELECT count(*) FROM bulk").fetchone() == (5000,)
        finally:
            thread.join()
        assert not failures
        ids = [id_ for (id_,) in owner.execute("SELECT id FROM bulk")]
        assert len(nodes_of(owner, ids)) == 1 and nodes_of(owner, ids) <= set(range(8))
        assert nodes_of(owner, generate_in(writer, 10)) <= set(range(200, 208))

        writer.execute("BEGIN")
        generate_in(writer, 1)
        owner.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable, match=rf"pid {pid} \(writer\)") as refused:
            owner.execute("SELECT randflake.configure(300, 307)")
        assert "end the idle ones" in refused.value.diag.message_hint
        writer.execute("COMMIT")
        owner.execute("SELECT randflake.configure(300, 307)")
        assert nodes_of(owner, generate_in(writer, 10)) <= set(range(300, 308))


def test_the_last_seconds_comment_says_its_time(edition):
    """randflake.last_second()'s comment names the time it is (it once said 23:23:43)."""
    cluster, _ = edition
    with cluster.connect(DATABASE, OWNER) as conn:
        rendered, comment = conn.execute(
            """SELECT to_char(to_timestamp(randflake.last_second()) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'),
                      obj_description('randflake.last_second()'::regprocedure, 'pg_proc')""").fetchone()
    assert rendered == "2058-11-05 17:10:23"
    assert f"{rendered} UTC" in comment


def test_an_owners_default_privileges_for_pg_monitor_do_not_reach_the_secret(edition):
    """An owner whose default privileges grant SELECT on tables (and the like) to pg_monitor
    before the install: the script takes them back, pg_monitor's included (before, it spared
    pg_monitor, and its members read randflake.secret), and grants pg_monitor only the lease
    table and randflake_status()."""
    cluster, secret_hex = edition
    with cluster.connect() as conn:
        conn.execute(f"CREATE DATABASE monitored OWNER {OWNER}")
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'watcher'").fetchone():
            conn.execute("CREATE ROLE watcher LOGIN IN ROLE pg_monitor")
    with cluster.connect("monitored", OWNER) as conn:
        conn.execute("ALTER DEFAULT PRIVILEGES GRANT SELECT, UPDATE ON TABLES TO pg_monitor")
        conn.execute("ALTER DEFAULT PRIVILEGES GRANT SELECT, UPDATE ON SEQUENCES TO pg_monitor")
        conn.execute("ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON ROUTINES TO pg_monitor")
    psql(cluster, "monitored", OWNER, "-1", "-o", "/dev/null", "-f", str(SCRIPT))
    with cluster.connect("monitored", OWNER) as conn:
        load_secret(conn, secret_hex)
        conn.execute("SELECT randflake.configure(0, 3)")
    with cluster.connect("monitored", "watcher") as conn:
        for statement in ("SELECT * FROM randflake.secret", "SELECT * FROM randflake.settings",
                          "SELECT randflake.subkeys()", "SELECT randflake_decode(1)",
                          "SELECT setval('randflake.node_0', 1)", "SELECT nextval('randflake.high_water')"):
            with pytest.raises(InsufficientPrivilege):
                conn.execute(statement)
        assert conn.execute("SELECT count(*) FROM randflake.node_leases").fetchone() == (0,)
        assert conn.execute("SELECT state FROM randflake_status()").fetchone() == ("active",)


def test_a_lease_role_cannot_hold_the_lease_table_open(edition):
    """The writes behind the lease procedures run only inside them: a granted role's own
    SELECT of randflake.lease_acquire() in an open transaction is refused (25000; before, it held
    every other role's acquire and extend until their statement_timeout). A procedure of its
    own that commits first and then holds its transaction open makes the others wait no longer
    than their lock_timeout (5 s if none), and their error names it (55P03)."""
    cluster, _ = edition
    with cluster.connect(DATABASE, OWNER) as conn:
        conn.execute("SELECT randflake.grant_application_leases('svc')")
        conn.execute("SELECT randflake.grant_application_leases('writer')")
    with cluster.connect(DATABASE, "writer") as evil, cluster.connect(DATABASE, "svc") as svc, \
            cluster.connect(DATABASE) as superuser:
        for statement in ("SELECT * FROM randflake.lease_acquire('evil', 1)",
                          "SELECT * FROM randflake.lease_extend('evil', 100, 1)",
                          "SELECT * FROM randflake.lease_release('evil', 100)"):
            evil.execute("BEGIN")
            with pytest.raises(psycopg.errors.InvalidTransactionState, match=r"runs only inside CALL randflake_lease_"):
                evil.execute(statement)
            evil.execute("ROLLBACK")
        evil.execute("""CREATE PROCEDURE public.hold_the_leases() LANGUAGE plpgsql AS $$
                        BEGIN COMMIT; PERFORM randflake.lease_acquire('evil', 1); PERFORM pg_advisory_lock(4242); END
                        $$""")
        superuser.execute("SELECT pg_advisory_lock(4242)")
        pid = evil.info.backend_pid
        holding = threading.Thread(target=evil.execute, args=("CALL public.hold_the_leases()",))
        holding.start()
        try:
            waiting = "SELECT true FROM pg_locks WHERE pid = %s AND locktype = 'advisory' AND NOT granted"
            wait_for(lambda: superuser.execute(waiting, (pid,)).fetchone(), 30,
                     "the procedure to hold its lease transaction open")
            svc.execute("SET lock_timeout = '300ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable, match=rf"pid {pid} \(writer\)") as waited:
                svc.execute(ACQUIRE, ("api@host:9", 30))
            assert "Try the call again" in waited.value.diag.message_hint
        finally:
            superuser.execute("SELECT pg_advisory_unlock(4242)")
            holding.join()
        node = svc.execute(ACQUIRE, ("api@host:9", 30)).fetchone()[0]
        assert svc.execute(RELEASE, ("api@host:9", node)).fetchone() == (True,)
        evil.execute("DROP PROCEDURE public.hold_the_leases()")


def test_installed_as_an_extension_its_state_is_dumped(edition):
    """Installed by CREATE EXTENSION from a control file, as pg_tle installs it (the script run as
    the database's owner): pg_dump carries the settings, the leases, the high water and the node
    records (the first three are the extension's configuration, pg_extension_config_dump; before,
    a dump lost them) but not the secret. Restored into a new database, with the secret loaded
    again and the range put back in force, the leased node is not leased again and IDs go on
    unique."""
    cluster, secret_hex = edition
    name = f"randflake_sql_dumped_{os.getpid()}"
    extension_dir = pathlib.Path(pg_config("--sharedir")) / "extension"
    control, script = extension_dir / f"{name}.control", extension_dir / f"{name}--0.6.0.sql"
    control.write_text("default_version = '0.6.0'\nrelocatable = false\nsuperuser = false\n")
    script.write_text(SCRIPT.read_text())
    dump = cluster.dir.parent / f"{cluster.dir.name}-extension.dump"
    bindir = pg_config("--bindir")
    connection = ["-h", str(cluster.dir), "-p", str(cluster.port), "-U", OWNER]
    state = """SELECT (SELECT row(s.*)::text FROM randflake.settings s),
                      (SELECT array_agg(row(l.first_node, l.holder, l.lease_start, l.lease_end)::text
                                        ORDER BY l.first_node)
                         FROM randflake.node_leases l),
                      pg_sequence_last_value('randflake.high_water'),
                      (SELECT array_agg(pg_sequence_last_value(randflake.node_record(n)) ORDER BY n)
                         FROM generate_series(500, 503) n)"""
    try:
        with cluster.connect() as conn:
            conn.execute(f"CREATE DATABASE extended OWNER {OWNER}")
            conn.execute(f"CREATE DATABASE extended_copy OWNER {OWNER}")
        with cluster.connect("extended", OWNER) as conn:
            conn.execute(f"CREATE EXTENSION {name}")
            load_secret(conn, secret_hex)
            conn.execute("SELECT randflake.configure(500, 503, 600, 603)")
            conn.execute("SELECT randflake.grant_application_leases('svc')")
            conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT randflake_next(), note text)")
            conn.execute("INSERT INTO orders (note) SELECT 'before' FROM generate_series(1, 500)")
        with cluster.connect("extended", "svc") as conn:
            leased = conn.execute(ACQUIRE, ("api@host:1", 600)).fetchone()[0]
        with cluster.connect("extended", OWNER) as conn:
            before = conn.execute(state).fetchone()
            assert before[0] and before[1] and before[2] and any(before[3])
        subprocess.run([f"{bindir}/pg_dump", *connection, "-Fc", "-f", str(dump), "extended"], check=True)
        listing = subprocess.run([f"{bindir}/pg_restore", "-l", str(dump)], check=True, capture_output=True,
                                 text=True).stdout
        assert "TABLE DATA randflake settings" in listing and "TABLE DATA randflake secret" not in listing
        subprocess.run([f"{bindir}/pg_restore", *connection, "-d", "extended_copy", "--exit-on-error", str(dump)],
                       check=True)
        with cluster.connect("extended_copy", OWNER) as conn:
            assert conn.execute(state).fetchone() == before
            with pytest.raises(ObjectNotInPrerequisiteState, match="no Randflake secret is loaded"):
                conn.execute("SELECT randflake_next()")
            load_secret(conn, secret_hex)
            with pytest.raises(ObjectNotInPrerequisiteState, match=r"randflake.settings holds 500\.\.503"):
                conn.execute("SELECT randflake_next()")
            conn.execute("SELECT randflake.configure(500, 503, 600, 603)")
            conn.execute("INSERT INTO orders (note) SELECT 'after' FROM generate_series(1, 500)")
            assert conn.execute("SELECT count(*), count(DISTINCT id) FROM orders").fetchone() == (1000, 1000)
        with cluster.connect("extended_copy", "svc") as conn:
            assert conn.execute(ACQUIRE, ("api@host:2", 600)).fetchone()[0] != leased
    finally:
        control.unlink()
        script.unlink()
        dump.unlink(missing_ok=True)


def test_what_the_predefined_roles_can_do(edition):
    """What docs/managed-postgresql.md says of the predefined roles: pg_monitor sees the lease
    table and the status, not the secret, the settings or the records; pg_read_all_data and
    pg_write_all_data pass by privileges (which is why they must not be granted on a server with
    the edition): the first reads the secret, the second rewinds a node's record and locks the
    rows whose locks guard the records' moves to a new second."""
    cluster, secret_hex = edition
    install(cluster, "predefined", secret_hex, (700, 700))
    with cluster.connect() as conn:
        for role, member_of in (("monitor_member", "pg_monitor"), ("reader_member", "pg_read_all_data"),
                                ("writer_member", "pg_write_all_data")):
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE {member_of}")
    with cluster.connect("predefined", "writer") as conn:
        generate_in(conn, 10)
    with cluster.connect("predefined", "monitor_member") as conn:
        for statement in ("SELECT * FROM randflake.secret", "SELECT * FROM randflake.settings",
                          "SELECT last_value FROM randflake.node_700"):
            with pytest.raises(InsufficientPrivilege):
                conn.execute(statement)
        assert conn.execute("SELECT count(*) FROM randflake.node_leases").fetchone() == (0,)
        assert conn.execute("SELECT nodes_in_use + nodes_free FROM randflake_status()").fetchone() == (1,)
    with cluster.connect("predefined", "reader_member") as conn:
        assert conn.execute("SELECT secret_hex FROM randflake.secret").fetchone() == (secret_hex,)
    with cluster.connect("predefined", "writer_member") as conn:
        conn.execute("SELECT setval('randflake.node_700', 0)")
        conn.execute("BEGIN")
        assert conn.execute("UPDATE randflake.node_rollover SET node = 700").rowcount == 1  # a row lock, held
        conn.execute("ROLLBACK")


def test_the_documented_python_snippet_loads_the_secret(edition):
    """docs/managed-postgresql.md's Python way of loading the secret, run as written on a
    connection in psycopg's default (non-autocommit) mode: once the connection is closed the
    secret stays loaded (before, the snippet never committed, and closing rolled it back)."""
    cluster, secret_hex = edition
    docs = (ROOT / "docs" / "managed-postgresql.md").read_text()
    snippet = next(block for block in docs.split("```python\n")[1:] if "COPY randflake.secret" in block)
    snippet = snippet.split("```")[0]
    install(cluster, "snippet", None, (800, 801))
    with psycopg.connect(host=str(cluster.dir), port=cluster.port, user=OWNER, dbname="snippet") as conn:
        exec(snippet, {"conn": conn, "secret_hex": secret_hex})
        conn.rollback()  # what closing a connection does to a transaction left open
    with cluster.connect("snippet", OWNER) as conn:
        assert conn.execute("SELECT count(*) FROM randflake.secret WHERE subkeys IS NOT NULL").fetchone() == (1,)


def test_no_bystander_can_stop_generation(make_cluster, fake_clock_preload):
    """What a role with nothing but CONNECT (and EXECUTE on randflake_next(), as every role has)
    can do to generation, it does: it holds every advisory lock of the key space sessions once
    claimed nodes by (before, every call then failed with 53400), tries to lock the nodes' rows
    and records (refused), and in a transaction it leaves open begins a new second on every node
    of the range, naming each in randflake_sql.node (with the rows' locks held to its end, no
    node could begin a later second). Writers go on making IDs across later seconds, none
    twice; the high water moves, and a new session refuses a clock stepped back behind it."""
    cluster = make_cluster(*MANAGED)
    clock = FakeClock(cluster, fake_clock_preload)
    start_under_fake_clock(cluster, clock)
    edition_cluster(cluster)
    with cluster.connect() as conn:
        conn.execute("CREATE ROLE bystander LOGIN")
    with cluster.connect(DATABASE, "bystander") as bystander, cluster.connect(DATABASE, "writer") as writer, \
            cluster.connect(DATABASE, OWNER) as owner:
        assert bystander.execute("SELECT bool_and(pg_try_advisory_lock(1380339787, n)) "
                                 "FROM generate_series(-1, 1023) n").fetchone() == (True,)
        for statement in ("SELECT FROM randflake.node_rollover FOR NO KEY UPDATE",
                          "LOCK TABLE randflake.node_rollover", "SELECT setval('randflake.node_0', 0)",
                          "SELECT setval('randflake.high_water', 0)"):
            bystander.execute("BEGIN")
            with pytest.raises(InsufficientPrivilege):
                bystander.execute(statement)
            bystander.execute("ROLLBACK")

        def high_water() -> int:
            return owner.execute("SELECT pg_sequence_last_value('randflake.high_water')").fetchone()[0] or 0

        made = generate_in(writer, 10)
        clock.set(3)
        bystander.execute("BEGIN")
        for node in range(64):
            bystander.execute("SELECT set_config('randflake_sql.node', %s, false)", (str(node),))
            made += generate_in(bystander, 1)
        assert nodes_of(owner, made[10:]) == set(range(64))
        before = high_water()
        clock.set(5)
        failures: list[Exception] = []

        def write() -> None:
            try:
                with cluster.connect(DATABASE, "writer") as conn:
                    made.extend(generate_in(conn, 200))
            except Exception as error:  # reported below, in the test's thread
                failures.append(error)

        threads = [threading.Thread(target=write) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures
        made += generate_in(writer, 10)
        assert high_water() >= before + 2
        clock.set(-30)
        with cluster.connect(DATABASE, "writer") as fresh:
            with pytest.raises(ObjectNotInPrerequisiteState, match="which this database has already used"):
                fresh.execute("SELECT randflake_next()")
        clock.set(5)
        made += generate_in(writer, 10)
        bystander.execute("COMMIT")
    assert len(set(made)) == len(made)
