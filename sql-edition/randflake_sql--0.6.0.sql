-- randflake_sql 0.6.0: the SQL edition of randflake_pg, for servers where no native library may be
-- installed (managed PostgreSQL). Plain SQL and PL/pgSQL; run by the role that owns the database,
-- which need not be a superuser: psql -1 -v ON_ERROR_STOP=1 -q -o /dev/null -f randflake_sql--0.6.0.sql
-- The same file is the pg_tle extension's script (tools/sql-edition-pgtle.sh wraps it), so it holds
-- no transaction control. docs/managed-postgresql.md describes it; IDs are byte-identical to the
-- native extension's (SPARX-64/128 over the same layout).
--
-- Hardening: everything below is resolved with search_path = pg_catalog, pg_temp, so that no
-- object planted in another schema can stand in for a built-in. Every PL/pgSQL function the
-- script creates pins the same search_path, under which operators come from pg_catalog alone
-- (operators are never looked up in pg_temp), and calls functions schema-qualified besides
-- (NULLIF, GREATEST and LEAST are syntax, not functions, and cannot be planted); the two that
-- run for every ID (the cipher) go without the SET clause and qualify every operator instead,
-- and SQL-standard bodies (RETURN ...) are resolved once, here. CREATE (never CREATE OR
-- REPLACE) fails on a planted object of the same name instead of adopting it.

SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE SCHEMA randflake;
COMMENT ON SCHEMA randflake IS
'randflake_sql (the SQL edition of randflake_pg): its secret, settings, per-node records and lease table. Only the owner reads or writes them; the functions in schema public are the way in.';
REVOKE ALL ON SCHEMA randflake FROM PUBLIC;

-- The format's constants, as in randflake/src/layout.rs. Functions with a SQL-standard body (RETURN
-- ...) are parsed once, here, under the pinned search_path; they go without a SET clause of their
-- own so that the planner can inline them.
CREATE FUNCTION randflake.epoch_second() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN 1730000000;
COMMENT ON FUNCTION randflake.epoch_second() IS 'The Randflake epoch: Unix second 1730000000 is second 0 of an ID.';

CREATE FUNCTION randflake.last_second() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN 2803741823;
COMMENT ON FUNCTION randflake.last_second() IS 'The last Unix second an ID can hold (30 bits of seconds from the epoch): 2058-11-05 17:10:23 UTC.';

REVOKE ALL ON FUNCTION randflake.epoch_second(), randflake.last_second() FROM PUBLIC;

----------------------------------------------------------------------------------------------------
-- SPARX-64/128 (randflake/src/sparx.rs): four 16-bit words, 8 steps of 3 ARX rounds per branch.
--
-- The cipher keeps the four 16-bit words a, b, c, d of a block two to a bigint, x = a:c and
-- y = b:d (bits 32..47 and 0..15, the bits between them zero), so that each operation works on
-- both branches at once: 281470681808895 masks the two lanes, a carry or a rotation's spill
-- lands between or above them, and a lane's subtraction borrows from the 2^16 added above it.
-- A raw ID is written little-endian into 8 bytes, which the cipher reads as four big-endian
-- words; the result is read back the same way.

CREATE FUNCTION randflake.sparx_words_ac(block bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ((block & 255) << 40) | ((block & 65280) << 24) | ((block >> 24) & 65280) | ((block >> 40) & 255);
COMMENT ON FUNCTION randflake.sparx_words_ac(bigint) IS
'Words a and c of a 64-bit SPARX block (a raw ID as a bigint, its little-endian bytes read as four big-endian words), at bits 32..47 and 0..15.';

CREATE FUNCTION randflake.sparx_words_bd(block bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ((block & 16711680) << 24) | ((block & 4278190080) << 8) | ((block >> 40) & 65280) | ((block >> 56) & 255);
COMMENT ON FUNCTION randflake.sparx_words_bd(bigint) IS
'Words b and d of a 64-bit SPARX block, at bits 32..47 and 0..15: see randflake.sparx_words_ac().';

CREATE FUNCTION randflake.sparx_block(ac bigint, bd bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ((ac >> 40) & 255) | ((ac >> 24) & 65280) | ((bd >> 24) & 16711680) | ((bd >> 8) & 4278190080)
       | ((ac & 65280) << 24) | ((ac & 255) << 40) | ((bd & 65280) << 40) | (bd << 56);
COMMENT ON FUNCTION randflake.sparx_block(bigint, bigint) IS
'The 64-bit block (a raw ID as a bigint) of words a:c and b:d: the inverse of randflake.sparx_words_ac() and sparx_words_bd().';

CREATE FUNCTION randflake.sparx_expand_key(secret_hex text) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    key bytea := pg_catalog.decode(secret_hex, 'hex');
    s bigint[] := ARRAY[0, 0, 0, 0, 0, 0, 0, 0];
    subkeys bigint[] := '{}';
    packed bigint[] := '{}';
    l integer;
    r integer;
    o integer;
    left_keys bigint;
    right_keys bigint;
BEGIN
    FOR word IN 1..8 LOOP
        s[word] := (pg_catalog.get_byte(key, 2 * word - 2) << 8) | pg_catalog.get_byte(key, 2 * word - 1);
    END LOOP;
    -- The 17 subkeys of six 16-bit words each, as randflake/src/sparx.rs expands them.
    FOR counter IN 1..17 LOOP
        subkeys := subkeys || s[1:6];
        l := ((((s[1] << 9) | (s[1] >> 7)) & 65535) + s[2]) & 65535;
        r := (((s[2] << 2) | (s[2] >> 14)) & 65535) # l;
        s[1] := l;
        s[2] := r;
        s[3] := (s[3] + l) & 65535;
        s[4] := (s[4] + r) & 65535;
        s[8] := (s[8] + counter) & 65535;
        s := s[7:8] || s[1:6];
    END LOOP;
    -- Packed for two branches at once (see randflake.sparx_encrypt), three to a round: the
    -- keys of words a:c rotated left by 9 (rotl9(x xor k) = rotl9(x) xor rotl9(k)), the keys of
    -- words b:d, and the same rotated left by 2; last the whitening keys, as the block they
    -- are xored into.
    FOR step IN 0..7 LOOP
        FOR round IN 0..2 LOOP
            o := step * 12 + round * 2;
            left_keys := (subkeys[o + 1]::bigint << 32) | subkeys[o + 7];
            right_keys := (subkeys[o + 2]::bigint << 32) | subkeys[o + 8];
            packed := packed || ARRAY[((left_keys << 9) | (left_keys >> 7)) & 281470681808895, right_keys,
                                      ((right_keys << 2) | (right_keys >> 14)) & 281470681808895];
        END LOOP;
    END LOOP;
    RETURN packed || randflake.sparx_block((subkeys[97]::bigint << 32) | subkeys[99], (subkeys[98]::bigint << 32) | subkeys[100]);
END
$$;
COMMENT ON FUNCTION randflake.sparx_expand_key(text) IS
'SPARX-64/128 key schedule of a 128-bit key given as 32 hexadecimal digits: its round keys packed two 16-bit words to a bigint, three per round, and the whitening keys (73 bigints), as randflake.sparx_encrypt() and sparx_decrypt() take them. Computed once, when the secret is checked.';

-- The two functions below run for every ID (encryption) or decoded ID: no SET clause (which
-- would cost a search_path switch per call), every operator schema-qualified instead, and
-- EXECUTE is the owner's alone. What an ID costs is mostly PL/pgSQL's work per statement run
-- and per expression set up in each transaction (docs/managed-postgresql.md#performance):
-- two statements per round, the round's keys indexed from the loop variable.

CREATE FUNCTION randflake.sparx_encrypt(keys bigint[], raw bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    x bigint := randflake.sparx_words_ac(raw);
    y bigint := randflake.sparx_words_bd(raw);
    mix bigint;
BEGIN
    FOR step IN 0..7 LOOP
        FOR round IN step OPERATOR(pg_catalog.*) 3..step OPERATOR(pg_catalog.*) 3 OPERATOR(pg_catalog.+) 2 LOOP
            -- ARX: left := rotl9(left xor k) + (right xor k'); right := rotl2(right xor k') xor left.
            x := (((((x OPERATOR(pg_catalog.<<) 9) OPERATOR(pg_catalog.|) (x OPERATOR(pg_catalog.>>) 7)) OPERATOR(pg_catalog.&) 281470681808895)
                   OPERATOR(pg_catalog.#) keys[round OPERATOR(pg_catalog.*) 3 OPERATOR(pg_catalog.+) 1])
                  OPERATOR(pg_catalog.+) (y OPERATOR(pg_catalog.#) keys[round OPERATOR(pg_catalog.*) 3 OPERATOR(pg_catalog.+) 2]))
                 OPERATOR(pg_catalog.&) 281470681808895;
            y := ((((y OPERATOR(pg_catalog.<<) 2) OPERATOR(pg_catalog.|) (y OPERATOR(pg_catalog.>>) 14)) OPERATOR(pg_catalog.&) 281470681808895)
                  OPERATOR(pg_catalog.#) keys[round OPERATOR(pg_catalog.*) 3 OPERATOR(pg_catalog.+) 3]) OPERATOR(pg_catalog.#) x;
        END LOOP;
        -- The linear layer: mix := rotl8(a xor b); (a, b, c, d) := (c^a^mix, d^b^mix, a, b).
        mix := (((x OPERATOR(pg_catalog.#) y) OPERATOR(pg_catalog.>>) 24) OPERATOR(pg_catalog.|) ((x OPERATOR(pg_catalog.#) y) OPERATOR(pg_catalog.>>) 40)) OPERATOR(pg_catalog.&) 65535;
        x := ((((x OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.#) (x OPERATOR(pg_catalog.&) 65535) OPERATOR(pg_catalog.#) mix) OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) (x OPERATOR(pg_catalog.>>) 32));
        y := ((((y OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.#) (y OPERATOR(pg_catalog.&) 65535) OPERATOR(pg_catalog.#) mix) OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) (y OPERATOR(pg_catalog.>>) 32));
    END LOOP;
    RETURN randflake.sparx_block(x, y) OPERATOR(pg_catalog.#) keys[73];
END
$$;
COMMENT ON FUNCTION randflake.sparx_encrypt(bigint[], bigint) IS
'SPARX-64/128 encryption of a raw Randflake ID (the 64-bit layout as a bigint) under packed round keys: byte for byte what the native extension and the reference ports compute.';

CREATE FUNCTION randflake.sparx_decrypt(keys bigint[], id bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    x bigint := randflake.sparx_words_ac(id OPERATOR(pg_catalog.#) keys[73]);
    y bigint := randflake.sparx_words_bd(id OPERATOR(pg_catalog.#) keys[73]);
    mix bigint;
BEGIN
    FOR step IN REVERSE 7..0 LOOP
        -- The linear layer inverted: mix := rotl8(c xor d); (a, b, c, d) := (c, d, a^c^mix, b^d^mix).
        mix := ((((x OPERATOR(pg_catalog.#) y) OPERATOR(pg_catalog.&) 65535) OPERATOR(pg_catalog.<<) 8) OPERATOR(pg_catalog.|) (((x OPERATOR(pg_catalog.#) y) OPERATOR(pg_catalog.&) 65535) OPERATOR(pg_catalog.>>) 8)) OPERATOR(pg_catalog.&) 65535;
        x := ((x OPERATOR(pg_catalog.&) 65535) OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) ((x OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.#) (x OPERATOR(pg_catalog.&) 65535) OPERATOR(pg_catalog.#) mix);
        y := ((y OPERATOR(pg_catalog.&) 65535) OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) ((y OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.#) (y OPERATOR(pg_catalog.&) 65535) OPERATOR(pg_catalog.#) mix);
        FOR round IN REVERSE step OPERATOR(pg_catalog.*) 3 OPERATOR(pg_catalog.+) 2..step OPERATOR(pg_catalog.*) 3 LOOP
            -- ARX inverted: right := rotl14(right xor left), which is right xor k';
            -- left := rotl7((left - right) xor rotl9(k)); right := right xor k'.
            y := (((y OPERATOR(pg_catalog.#) x) OPERATOR(pg_catalog.<<) 14) OPERATOR(pg_catalog.|) ((y OPERATOR(pg_catalog.#) x) OPERATOR(pg_catalog.>>) 2)) OPERATOR(pg_catalog.&) 281470681808895;
            x := (((x OPERATOR(pg_catalog.+) 281474976776192) OPERATOR(pg_catalog.-) y) OPERATOR(pg_catalog.&) 281470681808895)
                 OPERATOR(pg_catalog.#) keys[round OPERATOR(pg_catalog.*) 3 OPERATOR(pg_catalog.+) 1];
            x := ((x OPERATOR(pg_catalog.<<) 7) OPERATOR(pg_catalog.|) (x OPERATOR(pg_catalog.>>) 9)) OPERATOR(pg_catalog.&) 281470681808895;
            y := y OPERATOR(pg_catalog.#) keys[round OPERATOR(pg_catalog.*) 3 OPERATOR(pg_catalog.+) 2];
        END LOOP;
    END LOOP;
    RETURN randflake.sparx_block(x, y);
END
$$;
COMMENT ON FUNCTION randflake.sparx_decrypt(bigint[], bigint) IS
'SPARX-64/128 decryption of a Randflake ID under packed round keys: the raw 64-bit layout back.';

REVOKE ALL ON FUNCTION randflake.sparx_words_ac(bigint), randflake.sparx_words_bd(bigint),
    randflake.sparx_block(bigint, bigint), randflake.sparx_expand_key(text), randflake.sparx_encrypt(bigint[], bigint),
    randflake.sparx_decrypt(bigint[], bigint) FROM PUBLIC;

----------------------------------------------------------------------------------------------------
-- The secret: one row, readable by the owner alone, loaded with COPY ... FROM STDIN so that it
-- appears in no statement text (docs/managed-postgresql.md#the-secret). The table has no
-- constraint, index or trigger: COPY adds the line it was reading to the CONTEXT of any error
-- raised while it runs, so nothing may fail during the COPY itself. randflake.check_secret(),
-- run next, checks the row and computes its subkeys, and its errors never quote the secret.

CREATE TABLE randflake.secret (
    secret_hex text,
    subkeys    bigint[]
);
REVOKE ALL ON TABLE randflake.secret FROM PUBLIC;
COMMENT ON TABLE randflake.secret IS
'The Randflake secret (32 hexadecimal digits) and its SPARX subkeys, in one row that only the owner can read. Load it with COPY randflake.secret (secret_hex) FROM STDIN, then SELECT randflake.check_secret(); it must never change once IDs were made with it.';
COMMENT ON COLUMN randflake.secret.secret_hex IS 'The 128-bit secret as 32 hexadecimal digits, the content of the native extension''s randflake.secret_file.';
COMMENT ON COLUMN randflake.secret.subkeys IS 'SPARX-64/128 subkeys of the secret, filled in by randflake.check_secret().';

CREATE FUNCTION randflake.check_secret() RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rows integer;
    checked text;
BEGIN
    SELECT pg_catalog.count(*), pg_catalog.min(s.secret_hex) INTO rows, checked FROM randflake.secret AS s;
    IF rows <> 1 THEN
        RAISE EXCEPTION 'randflake.secret holds % rows, not one', rows
            USING ERRCODE = 'cardinality_violation',
                  HINT = 'Keep the row of the secret IDs were made with, DELETE the others (by a condition that does not quote them), and run this again.';
    END IF;
    checked := pg_catalog.lower(pg_catalog.btrim(checked));
    IF checked IS NULL OR checked !~ '^[0-9a-f]{32}$' THEN
        RAISE EXCEPTION 'the Randflake secret must be 32 hexadecimal digits'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Load the content of the native extension''s key file, e.g. from openssl rand -hex 16.';
    END IF;
    -- The UPDATE names no variable: a PL/pgSQL variable in a statement becomes a constant of its
    -- plan, which auto_explain, debug_print_plan and the like print. It recomputes from the row.
    UPDATE randflake.secret AS s SET secret_hex = pg_catalog.lower(pg_catalog.btrim(s.secret_hex)),
           subkeys = randflake.sparx_expand_key(pg_catalog.lower(pg_catalog.btrim(s.secret_hex)));
    RETURN 'the secret is loaded';
END
$$;
COMMENT ON FUNCTION randflake.check_secret() IS
'Run by the owner after loading the secret with COPY: checks that randflake.secret holds one row of 32 hexadecimal digits, without ever quoting it, and computes its subkeys.';
REVOKE ALL ON FUNCTION randflake.check_secret() FROM PUBLIC;

CREATE FUNCTION randflake.subkeys() RETURNS bigint[]
LANGUAGE plpgsql STABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_subkeys bigint[];
BEGIN
    SELECT s.subkeys INTO found_subkeys FROM randflake.secret AS s WHERE s.subkeys IS NOT NULL;
    IF found_subkeys IS NULL THEN
        RAISE EXCEPTION 'no Randflake secret is loaded'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'As the owner of schema randflake: COPY randflake.secret (secret_hex) FROM STDIN (psql: \copy), never in a statement''s text; then SELECT randflake.check_secret().';
    END IF;
    RETURN found_subkeys;
END
$$;
COMMENT ON FUNCTION randflake.subkeys() IS 'The loaded secret''s subkeys, or an error saying how to load it.';
REVOKE ALL ON FUNCTION randflake.subkeys() FROM PUBLIC;

----------------------------------------------------------------------------------------------------
-- Settings and the per-node records.

CREATE TABLE randflake.settings (
    node_id_min     integer NOT NULL,
    node_id_max     integer NOT NULL,
    app_node_id_min integer,
    app_node_id_max integer,
    max_nodes_per_call integer NOT NULL DEFAULT 128,
    CONSTRAINT node_range_is_nodes CHECK (node_id_min BETWEEN 0 AND node_id_max AND node_id_max <= 131071),
    CONSTRAINT node_range_size CHECK (node_id_max - node_id_min < 4096),
    CONSTRAINT app_pool_is_nodes CHECK ((app_node_id_min IS NULL) = (app_node_id_max IS NULL)
        AND app_node_id_min BETWEEN 0 AND app_node_id_max AND app_node_id_max <= 131071),
    CONSTRAINT app_pool_apart CHECK (app_node_id_max < node_id_min OR app_node_id_min > node_id_max),
    CONSTRAINT max_nodes_per_call_positive CHECK (max_nodes_per_call >= 1)
);
CREATE UNIQUE INDEX settings_have_one_row ON randflake.settings ((true));
REVOKE ALL ON TABLE randflake.settings FROM PUBLIC;
COMMENT ON TABLE randflake.settings IS
'This database''s node range and application pool: the edition''s postgresql.conf. Set only through randflake.configure(), which creates each node''s record and redefines randflake.node_id_min() and node_id_max(), the constants randflake_next() checks nodes against.';
COMMENT ON COLUMN randflake.settings.node_id_min IS 'Lowest node this database''s sessions use (randflake.node_id_min of the native extension).';
COMMENT ON COLUMN randflake.settings.node_id_max IS 'Highest node this database''s sessions use; at most 4096 nodes.';
COMMENT ON COLUMN randflake.settings.app_node_id_min IS 'Lowest node randflake_lease_acquire() leases to applications; NULL: no pool.';
COMMENT ON COLUMN randflake.settings.app_node_id_max IS 'Highest node randflake_lease_acquire() leases to applications; NULL: no pool.';
COMMENT ON COLUMN randflake.settings.max_nodes_per_call IS 'Most nodes one randflake_next() call moves through when their second is used up, before it fails instead of waiting.';

CREATE SEQUENCE randflake.high_water AS bigint MINVALUE 0 START 0 NO CYCLE;
REVOKE ALL ON SEQUENCE randflake.high_water FROM PUBLIC;
COMMENT ON SEQUENCE randflake.high_water IS
'The latest second (second - epoch) any node of this database has made IDs in: randflake_next() refuses earlier seconds, as the native extension refuses seconds behind the latest one its server used. Moved forward at most once a second per node.';

CREATE FUNCTION randflake.node_record(node integer) RETURNS regclass
LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN ('randflake.node_' OPERATOR(pg_catalog.||) node)::regclass;
COMMENT ON FUNCTION randflake.node_record(integer) IS
'The sequence that records what node has used: its value is (second - epoch) << 33 | count, the count being the sequence of the last ID taken while below 131072, so nextval() hands out each (second, sequence) once, whatever rolls back or crashes.';
REVOKE ALL ON FUNCTION randflake.node_record(integer) FROM PUBLIC;

-- A node's record moves to a new second only under the lock of the node's row here. Sessions
-- share the nodes of the range (an ID is a nextval() of the record, which no two callers get
-- alike), so the one step that needs a single writer is that move: two callers moving it at once
-- would both hand out the new second's sequence 0. A row lock is one that only roles allowed to
-- update this table can take, that is the owner (and members of pg_write_all_data), where an
-- advisory lock could be held by any role that may connect.
CREATE TABLE randflake.node_rollover (
    node integer PRIMARY KEY CONSTRAINT node_is_a_node CHECK (node BETWEEN 0 AND 131071)
);
REVOKE ALL ON TABLE randflake.node_rollover FROM PUBLIC;
COMMENT ON TABLE randflake.node_rollover IS
'One row per node of the range, created by randflake.configure(): randflake_next() locks a node''s row (FOR NO KEY UPDATE SKIP LOCKED, for as long as the move takes) to move the node''s record to a new second, so that one caller alone hands out that second''s first ID.';
COMMENT ON COLUMN randflake.node_rollover.node IS 'The node whose record the row''s lock guards.';

-- The node range as constants: randflake_next() checks every call's node against them, and a
-- SQL function with a constant body is folded into the caller's cached plan (a table would be one
-- more relation in every call's query). configure() redefines them with the settings' row; the
-- plans that folded them are invalidated by the redefinition and planned again in each session.
CREATE FUNCTION randflake.node_id_min() RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
RETURN NULL::integer;
COMMENT ON FUNCTION randflake.node_id_min() IS
'Lowest node of this database''s sessions, as randflake.settings holds it: a constant that randflake.configure() redefines, NULL before it ran.';

CREATE FUNCTION randflake.node_id_max() RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
RETURN NULL::integer;
COMMENT ON FUNCTION randflake.node_id_max() IS
'Highest node of this database''s sessions, as randflake.settings holds it: a constant that randflake.configure() redefines, NULL before it ran.';
REVOKE ALL ON FUNCTION randflake.node_id_min(), randflake.node_id_max() FROM PUBLIC;

CREATE FUNCTION randflake.reuse_margin() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN 60;
COMMENT ON FUNCTION randflake.reuse_margin() IS
'Seconds a node must have gone unused by one side (sessions, or an application lease''s window) before configure() hands it to the other: the same minute release allows for an application clock ahead of the server''s.';
REVOKE ALL ON FUNCTION randflake.reuse_margin() FROM PUBLIC;

CREATE FUNCTION randflake.configure(node_id_min integer, node_id_max integer,
                                    app_node_id_min integer DEFAULT NULL, app_node_id_max integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller_lock_timeout text := pg_catalog.current_setting('lock_timeout');
    now_second bigint;
    lease record;
    used record;
    blockers text;
BEGIN
    -- Every randflake_next() reads randflake.secret, so each transaction that made an ID holds
    -- its ACCESS SHARE lock to its end, with the range it checked its node against. Taking the
    -- table's ACCESS EXCLUSIVE lock waits for those transactions to end and holds back new ones
    -- until this one commits: no statement issues an ID from a node of the old range after the
    -- new one is in force, and the first call of every later transaction takes the lock anew,
    -- which makes it see the redefined node_id_min() and node_id_max(). The wait is bounded,
    -- since the calls queue behind it: by the caller's lock_timeout, or 10 s if it has none.
    IF caller_lock_timeout = '0' THEN
        PERFORM pg_catalog.set_config('lock_timeout', '10s', true);
    END IF;
    BEGIN
        LOCK TABLE randflake.secret IN ACCESS EXCLUSIVE MODE;
        -- Lease calls write under this table's locks: none runs while the range and pool move.
        LOCK TABLE randflake.node_leases IN EXCLUSIVE MODE;
    EXCEPTION WHEN lock_not_available THEN
        SELECT pg_catalog.string_agg(DISTINCT pg_catalog.format('pid %s (%s)', l.pid, a.usename), ', ')
          INTO blockers
          FROM pg_catalog.pg_locks AS l LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
         WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
           AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
           AND l.relation IN ('randflake.secret'::regclass, 'randflake.node_leases'::regclass);
        RAISE EXCEPTION 'randflake.configure() waited % for transactions that made IDs or lease nodes to end: %',
            pg_catalog.current_setting('lock_timeout'), COALESCE(blockers, 'they ended meanwhile')
            USING ERRCODE = 'lock_not_available',
                  HINT = 'A transaction that called randflake_next() keeps the node range it checked until it ends. Let those transactions finish (or end the idle ones) and run configure() again.';
    END;
    PERFORM pg_catalog.set_config('lock_timeout', caller_lock_timeout, true);
    now_second := randflake.clock_second();
    -- No node moves from one side to the other while the side it leaves may still issue with it,
    -- or did within the margin: an application lease's window (to its end, or its release) and
    -- a session's record of its last second. Both are read under the locks above.
    SELECT l.first_node, l.holder, l.used_through INTO lease
      FROM randflake.node_leases AS l
     WHERE l.used_through >= now_second - randflake.reuse_margin()
       AND l.last_node >= configure.node_id_min AND l.first_node <= configure.node_id_max
     ORDER BY l.first_node LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'node % of the range %..% is leased to application holder "%" through %',
            lease.first_node, configure.node_id_min, configure.node_id_max, pg_catalog.left(lease.holder, 60),
            pg_catalog.to_timestamp(lease.used_through)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = pg_catalog.format('Sessions may take a node only %s s after its last lease ended: choose a range without it, or have the holder release it (CALL randflake_lease_release) and run configure() again once that time has passed.', randflake.reuse_margin());
    END IF;
    IF configure.app_node_id_min IS NOT NULL THEN
        SELECT r.node, r.last_second INTO used
          FROM (SELECT pg_catalog.substr(c.relname, 6)::integer AS node,
                       (COALESCE(pg_catalog.pg_sequence_last_value(c.oid), 0) >> 33) + randflake.epoch_second() AS last_second
                  FROM pg_catalog.pg_class AS c
                 WHERE c.relnamespace = 'randflake'::regnamespace AND c.relkind = 'S' AND c.relname ~ '^node_[0-9]{1,6}$') AS r
         WHERE r.node BETWEEN configure.app_node_id_min AND configure.app_node_id_max
           AND r.last_second >= now_second - randflake.reuse_margin()
         ORDER BY r.node LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'node % of the application pool %..% was used by sessions of this database at %',
                used.node, configure.app_node_id_min, configure.app_node_id_max, pg_catalog.to_timestamp(used.last_second)
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = pg_catalog.format('Applications may lease a node only %s s after sessions last used it: first move the sessions'' range off it with configure(), then give the pool the node once that time has passed.', randflake.reuse_margin());
        END IF;
    END IF;
    INSERT INTO randflake.settings AS s (node_id_min, node_id_max, app_node_id_min, app_node_id_max)
        VALUES (configure.node_id_min, configure.node_id_max, configure.app_node_id_min, configure.app_node_id_max)
        ON CONFLICT ((true)) DO UPDATE
        SET node_id_min = EXCLUDED.node_id_min, node_id_max = EXCLUDED.node_id_max,
            app_node_id_min = EXCLUDED.app_node_id_min, app_node_id_max = EXCLUDED.app_node_id_max;
    EXECUTE pg_catalog.format('CREATE OR REPLACE FUNCTION randflake.node_id_min() RETURNS integer '
        'LANGUAGE sql STABLE PARALLEL SAFE RETURN %s', configure.node_id_min);
    EXECUTE pg_catalog.format('CREATE OR REPLACE FUNCTION randflake.node_id_max() RETURNS integer '
        'LANGUAGE sql STABLE PARALLEL SAFE RETURN %s', configure.node_id_max);
    -- A node's record is never dropped: a node used once keeps refusing the seconds it used.
    FOR node IN configure.node_id_min..configure.node_id_max LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('randflake.node_%s', node)) IS NULL THEN
            EXECUTE pg_catalog.format('CREATE SEQUENCE randflake.node_%s AS bigint MINVALUE 0 START 0 NO CYCLE', node);
            EXECUTE pg_catalog.format('REVOKE ALL ON SEQUENCE randflake.node_%s FROM PUBLIC', node);
            EXECUTE pg_catalog.format(
                'COMMENT ON SEQUENCE randflake.node_%s IS %L', node,
                pg_catalog.format('Node %s''s record of used seconds: (second - epoch) << 33 | count of values taken in it.', node));
        END IF;
    END LOOP;
    INSERT INTO randflake.node_rollover (node)
        SELECT n FROM pg_catalog.generate_series(configure.node_id_min, configure.node_id_max) AS n
        ON CONFLICT DO NOTHING;
    PERFORM randflake.revoke_default_privileges(only_sequences => true);
END
$$;
COMMENT ON FUNCTION randflake.configure(integer, integer, integer, integer) IS
'Sets this database''s node range (at most 4096 nodes, disjoint from every other server''s) and, optionally, the application pool; creates the record of each node not yet recorded. Refuses (55000) a range that takes in a node leased to an application, or a pool that takes in a node sessions used, within randflake.reuse_margin() seconds; waits (the caller''s lock_timeout, 10 s if none; then 55P03 naming them) for the transactions that made IDs under the old range to end. Run as the owner.';
REVOKE ALL ON FUNCTION randflake.configure(integer, integer, integer, integer) FROM PUBLIC;

CREATE FUNCTION randflake.clock_second() RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    second bigint := pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()))::bigint;
BEGIN
    IF second < randflake.epoch_second() OR second > randflake.last_second() THEN
        RAISE EXCEPTION 'the clock reads Unix second %, outside the Randflake range %..%',
            second, randflake.epoch_second(), randflake.last_second()
            USING ERRCODE = 'datetime_field_overflow',
                  HINT = 'Randflake IDs hold seconds from 2024-10-27 to 2058-11-05; check the server clock.';
    END IF;
    RETURN second;
END
$$;
COMMENT ON FUNCTION randflake.clock_second() IS 'The server clock''s current Unix second, checked against the range an ID can hold.';
REVOKE ALL ON FUNCTION randflake.clock_second() FROM PUBLIC;


CREATE FUNCTION randflake.raise_high_water(now_offset bigint) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Only forward, and under no lock: any role may take any advisory lock, and one that held
    -- the lock this once took froze the high water. Two sessions moving it at once may write in
    -- either order, so each reads it again after writing and writes again while it is below its
    -- own second (at most three times); it settles at the later one, and nobody waits.
    FOR attempt IN 1..3 LOOP
        EXIT WHEN COALESCE(pg_catalog.pg_sequence_last_value('randflake.high_water'), 0) >= now_offset;
        PERFORM pg_catalog.setval('randflake.high_water', now_offset, true);
    END LOOP;
END
$$;
COMMENT ON FUNCTION randflake.raise_high_water(bigint) IS
'Moves randflake.high_water forward to second now_offset (second - epoch), never back: run by randflake_next() at the first ID of a second on a node.';
REVOKE ALL ON FUNCTION randflake.raise_high_water(bigint) FROM PUBLIC;

CREATE FUNCTION randflake.begin_second(node integer, now_offset bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    moved boolean := false;
BEGIN
    -- The row's lock is taken in a subtransaction that is always rolled back, which lets it go at
    -- once: held to the end of the caller's transaction, it would keep everyone else from moving
    -- the node to later seconds, and a transaction left open after naming node after node in
    -- randflake_sql.node could hold them all. The sequences' changes are not undone by the
    -- rollback, and the variable keeps its value.
    BEGIN
        -- Whoever holds the lock is moving the record now: the caller looks at the record again,
        -- or goes on to another node, rather than wait.
        PERFORM FROM randflake.node_rollover AS r WHERE r.node = begin_second.node FOR NO KEY UPDATE SKIP LOCKED;
        -- Read under the lock: another caller may have moved the record since this one's
        -- nextval(), and moving it again would hand out that second's first values twice.
        -- Callers that take a value meanwhile without the lock take one of the earlier second,
        -- which sends them here.
        IF FOUND AND COALESCE(pg_catalog.pg_sequence_last_value(randflake.node_record(node)), 0) >> 33 < now_offset THEN
            -- The database's high water goes first, so that it is never behind a second a node used.
            PERFORM randflake.raise_high_water(now_offset);
            PERFORM pg_catalog.setval(randflake.node_record(node), now_offset << 33, true);
            moved := true;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'RF000';
    EXCEPTION WHEN SQLSTATE 'RF000' THEN
        -- The lock is let go.
    END;
    RETURN moved;
END
$$;
COMMENT ON FUNCTION randflake.begin_second(integer, bigint) IS
'Moves a node''s record to (second now_offset, 0) under the lock of its row in randflake.node_rollover, taken without waiting and let go before it returns; true if this caller moved it and so owns that second''s first ID, false if the row was locked or the record already moved.';
REVOKE ALL ON FUNCTION randflake.begin_second(integer, bigint) FROM PUBLIC;

----------------------------------------------------------------------------------------------------
-- Generation.

CREATE FUNCTION public.randflake_next() RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- What a call costs is mostly PL/pgSQL setting up each expression anew in every transaction
    -- and running each statement, and the executor of each query
    -- (docs/managed-postgresql.md#performance): one query, few expressions, few operators.
    subkeys bigint[];
    -- Where this session looks first: the node it last used, kept between calls in the setting
    -- randflake_sql.node. Any role may set that setting, and a rollback or DISCARD undoes it: it
    -- is only a hint, and any node of the range is one every session may use (below).
    hint text := pg_catalog.current_setting('randflake_sql.node', true);
    node integer := CASE WHEN hint ~ '^[0-9]{1,6}$' THEN hint::integer END;
    high_water bigint;
    now_offset bigint;
    used bigint;
    moves integer := 0;
    retried boolean;  -- NULL until this call takes a node's next value again, once per node
BEGIN
    -- First: this read takes randflake.secret's lock, which configure() waits on, so the range
    -- checked below stays in force until the transaction ends (docs/managed-postgresql.md).
    SELECT s.subkeys INTO subkeys FROM randflake.secret AS s WHERE s.subkeys IS NOT NULL;
    -- The clock is read after the high water, which was set from readings made before it, and
    -- both after any wait for that lock.
    high_water := COALESCE(pg_catalog.pg_sequence_last_value('randflake.high_water'), 0);
    now_offset := pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()))::bigint - 1730000000;
    IF NOT FOUND OR randflake.node_id_max() IS NULL THEN
        PERFORM randflake.subkeys();  -- says which is missing, the secret ...
        -- ... or the range: never configured, or restored from a dump of the extension, which
        -- holds randflake.settings (its configuration) but not the redefined constants.
        RAISE EXCEPTION 'randflake_sql has no node range in force%', (
                SELECT pg_catalog.format(' (randflake.settings holds %s..%s, restored from a dump?)', c.node_id_min, c.node_id_max)
                  FROM randflake.settings AS c)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'As the owner: SELECT randflake.configure(node_id_min, node_id_max), disjoint from every other server''s range; after a restore, with the range and pool randflake.settings holds.';
    END IF;
    IF now_offset < high_water OR now_offset > 1073741823 THEN
        PERFORM randflake.clock_second();  -- says why, if the clock is outside the format's range
        RAISE EXCEPTION 'the system clock is % s behind second %, which this database has already used for IDs',
            high_water - now_offset, high_water + randflake.epoch_second()
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'The clock was stepped backwards. Generation resumes by itself once the clock passes that second; check the time synchronisation (NTP) of this machine.';
    END IF;
    IF node IS NULL OR node < randflake.node_id_min() OR node > randflake.node_id_max() THEN
        node := randflake.node_id_min();
    END IF;
    -- The sessions share the range's nodes, one at a time: a node's record is a sequence, and
    -- nextval() hands each value to one caller, so any number of sessions may take IDs of the
    -- same node in the same second. Its value is (second - epoch) << 33 | count: the count goes
    -- on past 131071 when the second's IDs are used up (those values are no IDs, they send the
    -- caller to the next node), and the 2^33 - 131072 values left before the next second cannot
    -- all be taken within one. The node's record is looked up by name in schema randflake, which
    -- only the owner writes.
    LOOP
        used := pg_catalog.nextval(randflake.node_record(node));
        IF used >> 33 > now_offset THEN
            -- Another session began a later second on the node after this call read the clock.
            now_offset := pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()))::bigint - 1730000000;
        END IF;
        IF used >> 33 = now_offset THEN
            IF (used & 8589934591) < 131072 THEN
                RETURN randflake.sparx_encrypt(subkeys, (now_offset << 34) | (node::bigint << 17) | (used & 8589934591));
            END IF;
            -- The node's 131072 IDs of this second are used up: on to the next node.
        ELSIF used >> 33 > now_offset THEN
            RAISE EXCEPTION 'the system clock is % s behind second %, which node % has already used for IDs',
                (used >> 33) - now_offset, (used >> 33) + randflake.epoch_second(), node
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'The clock was stepped backwards. Generation resumes by itself once the clock passes that second; check the time synchronisation (NTP) of this machine.';
        ELSIF randflake.begin_second(node, now_offset) THEN
            -- The first ID of this second on the node.
            RETURN randflake.sparx_encrypt(subkeys, (now_offset << 34) | (node::bigint << 17));
        ELSIF retried IS NULL
              AND COALESCE(pg_catalog.pg_sequence_last_value(randflake.node_record(node)), 0) >> 33 >= now_offset THEN
            -- Another caller moved the record to this second meanwhile: take the next value.
            retried := true;
            CONTINUE;
        END IF;
        -- Used up, or being moved to this second by another caller at this very moment: the
        -- next node, rather than wait.
        retried := NULL;
        IF node = randflake.node_id_max() THEN
            node := randflake.node_id_min();
        ELSE
            node := node + 1;
        END IF;
        PERFORM pg_catalog.set_config('randflake_sql.node', node::text, false);
        moves := moves + 1;
        IF moves >= (SELECT c.max_nodes_per_call FROM randflake.settings AS c) THEN
            RAISE EXCEPTION 'this call found % nodes used up in this second', moves
                USING ERRCODE = 'configuration_limit_exceeded',
                      HINT = 'randflake.settings.max_nodes_per_call bounds the nodes one call moves through: more IDs were asked for in one second than they hold (131072 each). Generation resumes in the next second.';
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION public.randflake_next() IS
'Returns a new Randflake ID: a bigint unique across every server that shares the secret and uses a disjoint node range, and unpredictable without the secret. Use as: id bigint PRIMARY KEY DEFAULT randflake_next(). (randflake_sql, the SQL edition.)';
GRANT EXECUTE ON FUNCTION public.randflake_next() TO PUBLIC;

----------------------------------------------------------------------------------------------------
-- Decoding: EXECUTE granted to no one, as in the native extension.

CREATE FUNCTION public.randflake_decode(id bigint)
RETURNS TABLE ("timestamp" timestamp with time zone, node_id integer, sequence integer)
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    raw bigint := randflake.sparx_decrypt(randflake.subkeys(), id);
BEGIN
    "timestamp" := pg_catalog.to_timestamp(((raw >> 34) & 1073741823) + randflake.epoch_second());
    node_id := ((raw >> 17) & 131071)::integer;
    sequence := (raw & 131071)::integer;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION public.randflake_decode(bigint) IS
'Decrypts a Randflake ID into the second it was made in, the node that made it and its sequence within that node and second. Requires the secret; EXECUTE is granted to no one by default.';

CREATE FUNCTION public.randflake_timestamp(id bigint) RETURNS timestamp with time zone
LANGUAGE sql STABLE STRICT PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
RETURN pg_catalog.to_timestamp(((randflake.sparx_decrypt(randflake.subkeys(), id) >> 34) & 1073741823)
                               + randflake.epoch_second());
COMMENT ON FUNCTION public.randflake_timestamp(bigint) IS
'The second a Randflake ID was made in: randflake_decode(id).timestamp. Requires the secret; EXECUTE is granted to no one by default.';

CREATE FUNCTION public.randflake_node_id(id bigint) RETURNS integer
LANGUAGE sql STABLE STRICT PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
RETURN ((randflake.sparx_decrypt(randflake.subkeys(), id) >> 17) & 131071)::integer;
COMMENT ON FUNCTION public.randflake_node_id(bigint) IS
'The node that made a Randflake ID: randflake_decode(id).node_id. Requires the secret; EXECUTE is granted to no one by default.';

CREATE FUNCTION public.randflake_sequence(id bigint) RETURNS integer
LANGUAGE sql STABLE STRICT PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
RETURN (randflake.sparx_decrypt(randflake.subkeys(), id) & 131071)::integer;
COMMENT ON FUNCTION public.randflake_sequence(bigint) IS
'The sequence of a Randflake ID within its node and second: randflake_decode(id).sequence. Requires the secret; EXECUTE is granted to no one by default.';

REVOKE ALL ON FUNCTION public.randflake_decode(bigint), public.randflake_timestamp(bigint),
    public.randflake_node_id(bigint), public.randflake_sequence(bigint) FROM PUBLIC;

----------------------------------------------------------------------------------------------------
-- The string form (randflake/src/codec.rs): base32hex of the unsigned 64-bit value.

CREATE FUNCTION public.randflake_to_string(id bigint) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    digits text := '';
    rest bigint := id;
    digit integer;
BEGIN
    -- The top digit holds the sign bit: shift the rest right as unsigned, 5 bits at a time.
    FOR position IN 0..12 LOOP
        digit := (rest & 31)::integer;
        digits := pg_catalog.substr('0123456789abcdefghijklmnopqrstuv', digit + 1, 1) || digits;
        rest := (rest >> 5) & 576460752303423487;  -- (1 << 59) - 1: no sign bits shifted in
        EXIT WHEN rest = 0;
    END LOOP;
    RETURN digits;
END
$$;
COMMENT ON FUNCTION public.randflake_to_string(bigint) IS
'Canonical string form of a Randflake ID: 1 to 13 lower-case base32hex digits (0-9, a-v) of the unsigned 64-bit value, as in the Go, Python and TypeScript ports.';
GRANT EXECUTE ON FUNCTION public.randflake_to_string(bigint) TO PUBLIC;

CREATE FUNCTION public.randflake_from_string(s text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    length integer := pg_catalog.char_length(s);
    value bigint := 0;
    character text;
    digit integer;
    reason text;
BEGIN
    IF length = 0 THEN
        reason := 'the string is empty';
    ELSIF length > 13 THEN
        reason := pg_catalog.format('the string has %s characters, more than the 13 an ID can need', length);
    ELSE
        FOR position IN 1..length LOOP
            character := pg_catalog.substr(s, position, 1);
            digit := pg_catalog.strpos('0123456789abcdefghijklmnopqrstuv', character) - 1;
            IF digit < 0 THEN
                reason := pg_catalog.format(
                    CASE WHEN character ~ '^[A-Z]$' THEN 'upper-case character %s at position %s'
                         ELSE 'character %s at position %s is not a base32hex digit' END,
                    pg_catalog.quote_literal(character), position - 1);
                EXIT;
            END IF;
            -- 13 digits carry 65 bits: the first of 13 must be at most f.
            IF length = 13 AND position = 1 AND digit > 15 THEN
                reason := 'the value does not fit in 64 bits';
                EXIT;
            END IF;
            value := (value << 5) | digit;
        END LOOP;
        IF reason IS NULL AND length > 1 AND pg_catalog.left(s, 1) = '0' THEN
            reason := 'the string has a leading zero';
        END IF;
    END IF;
    IF reason IS NOT NULL THEN
        RAISE EXCEPTION 'invalid Randflake ID string "%": %', pg_catalog.left(s, 40), reason
            USING ERRCODE = 'invalid_text_representation',
                  HINT = 'A Randflake ID string is 1 to 13 lower-case base32hex digits (0-9, a-v), without padding or leading zeros.';
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION public.randflake_from_string(text) IS
'Parses the canonical string form of a Randflake ID back into the bigint. Rejects upper case, padding, leading zeros, white space and values over 64 bits.';
GRANT EXECUTE ON FUNCTION public.randflake_from_string(text) TO PUBLIC;

----------------------------------------------------------------------------------------------------
-- Status.

CREATE FUNCTION public.randflake_status()
RETURNS TABLE (node_source text, state text, first_node integer, last_node integer,
               lease_start timestamp with time zone, lease_end timestamp with time zone,
               issuable_through timestamp with time zone, renewed_at timestamp with time zone,
               nodes_in_use integer, nodes_free integer, nodes_used_this_second integer,
               nodes_used_last_second integer, node_switches bigint, waits_for_next_second bigint,
               clock_refusals bigint, lease_refusals bigint, keeper_pid integer, keeper_ticks bigint)
LANGUAGE plpgsql VOLATILE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now_offset bigint;  -- the clock, read once rather than for each node
BEGIN
    -- The columns of the native randflake_status(); what the edition has no counterpart for
    -- (leases, a keeper, counters in shared memory) is NULL.
    node_source := 'sql';
    SELECT c.node_id_min, c.node_id_max INTO first_node, last_node FROM randflake.settings AS c;
    IF NOT EXISTS (SELECT FROM randflake.secret AS s WHERE s.subkeys IS NOT NULL) THEN
        state := 'no secret loaded';
    ELSIF first_node IS NULL THEN
        state := 'no node range configured';
    ELSE
        state := 'active';
        -- Sessions hold no node: the nodes in use are those that made IDs in this second or the
        -- one before, by their records.
        now_offset := randflake.clock_second() - randflake.epoch_second();
        -- A record keeps only its node's latest second, so how many nodes the last second used
        -- is not known (NULL): a node used then and in this second shows only this second.
        SELECT pg_catalog.count(*) FILTER (WHERE r.second >= now_offset - 1)::integer,
               pg_catalog.count(*) FILTER (WHERE r.second = now_offset)::integer
          INTO nodes_in_use, nodes_used_this_second
          FROM pg_catalog.generate_series(first_node, last_node) AS n,
               LATERAL (SELECT COALESCE(pg_catalog.pg_sequence_last_value(randflake.node_record(n)), 0) >> 33) AS r (second);
        nodes_free := last_node - first_node + 1 - nodes_in_use;
    END IF;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION public.randflake_status() IS
'One row describing this database''s ID generation by randflake_sql, in the columns of the native randflake_status(): node_source sql, state (active, no secret loaded, no node range configured), the node range, the nodes that made IDs in this second or the one before and the others, the nodes that made IDs in this second; the nodes used in the last second (a node''s record keeps only its latest second) and the columns about leases, the keeper and counters are NULL. For the owner and pg_monitor.';
REVOKE ALL ON FUNCTION public.randflake_status() FROM PUBLIC;

----------------------------------------------------------------------------------------------------
-- Application leases, in a table of the native randflake.node_leases' shape.

CREATE TABLE randflake.node_leases (
    first_node   integer NOT NULL CONSTRAINT first_node_is_a_node CHECK (first_node BETWEEN 0 AND 131071),
    last_node    integer NOT NULL CONSTRAINT last_node_ends_the_block CHECK (last_node BETWEEN first_node AND 131071),
    holder       text    NOT NULL,
    server_name  text    NOT NULL,
    lease_start  bigint  NOT NULL CONSTRAINT lease_start_fits_an_id CHECK (lease_start BETWEEN 1730000000 AND 2803741823),
    lease_end    bigint  NOT NULL CONSTRAINT lease_end_fits_an_id CHECK (lease_end BETWEEN lease_start AND 2803741823),
    used_through bigint  NOT NULL,
    renewed_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (first_node, lease_start),
    CONSTRAINT used_through_within_lease CHECK (used_through BETWEEN lease_start - 1 AND lease_end),
    CONSTRAINT node_leases_do_not_overlap EXCLUDE USING gist (
        pg_catalog.int4range(first_node, last_node, '[]') WITH OPERATOR(pg_catalog.&&),
        pg_catalog.int8range(lease_start, lease_end, '[]') WITH OPERATOR(pg_catalog.&&)
    )
);
REVOKE ALL ON TABLE randflake.node_leases FROM PUBLIC;
COMMENT ON TABLE randflake.node_leases IS
'Application leases of randflake_sql, in the shape of the native randflake.node_leases: a process may issue IDs with node first_node only in seconds lease_start..lease_end (Unix time). Written only by the randflake_lease_* functions.';
COMMENT ON COLUMN randflake.node_leases.first_node IS 'The leased node.';
COMMENT ON COLUMN randflake.node_leases.last_node IS 'The leased node again: application leases are of one node.';
COMMENT ON COLUMN randflake.node_leases.holder IS 'app/<role>/<holder> while held, released/<role>/<holder> once given back.';
COMMENT ON COLUMN randflake.node_leases.server_name IS 'The database that granted the lease.';
COMMENT ON COLUMN randflake.node_leases.lease_start IS 'First second (Unix time) of the lease.';
COMMENT ON COLUMN randflake.node_leases.lease_end IS 'Last second (Unix time) of the lease, inclusive.';
COMMENT ON COLUMN randflake.node_leases.used_through IS 'The last second the holder may have used: the lease''s end.';
COMMENT ON COLUMN randflake.node_leases.renewed_at IS 'When the lease was last written.';

CREATE FUNCTION randflake.refuse_unless_own_transaction(procedure text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The procedure returns a lease only once it committed it itself, and its COMMIT must not
    -- commit what other statements wrote: after the writes of earlier statements of a pipeline
    -- (the extended protocol runs them in one transaction until a Sync) it refuses, before it
    -- changes anything. Inside BEGIN ... COMMIT, in a query string of several statements or
    -- from a function, PostgreSQL runs the CALL atomically: the COMMIT that follows this check
    -- fails there (2D000), before the procedure writes anything. No SQL function can tell those
    -- apart from autocommit beforehand (statement_timestamp() moves with each protocol message).
    IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'CALL %() would commit what the statements before it wrote in this transaction', procedure
            USING ERRCODE = 'active_sql_transaction',
                  HINT = 'Send the CALL as a statement of its own in autocommit mode; in a pipeline, end the statements before it with a Sync (psycopg: pipeline.sync()), so that the CALL starts a transaction of its own.';
    END IF;
END
$$;
COMMENT ON FUNCTION randflake.refuse_unless_own_transaction(text) IS
'Raises 25001 if the transaction has written: what the randflake_lease_* procedures check before their first COMMIT, which must not commit other statements'' writes.';
REVOKE ALL ON FUNCTION randflake.refuse_unless_own_transaction(text) FROM PUBLIC;

CREATE FUNCTION randflake.lease_call(holder text, seconds integer, OUT pool_first integer,
                                     OUT pool_last integer, OUT stored_holder text, OUT now_second bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- FOR SHARE: the pool as configure() last committed it (in READ COMMITTED the latest version
    -- of the row; under a snapshot older than that commit a serialization failure, 40001).
    SELECT c.app_node_id_min, c.app_node_id_max INTO pool_first, pool_last FROM randflake.settings AS c FOR SHARE;
    IF pool_first IS NULL THEN
        RAISE EXCEPTION 'no application pool is configured'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'As the owner: SELECT randflake.configure(node_id_min, node_id_max, app_node_id_min, app_node_id_max).';
    END IF;
    IF holder IS NULL OR seconds IS NULL THEN
        RAISE EXCEPTION 'the holder and seconds of a lease must not be NULL'
            USING ERRCODE = 'null_value_not_allowed', HINT = 'Name the process, e.g. service@host:pid.';
    END IF;
    IF pg_catalog.octet_length(holder) NOT BETWEEN 1 AND 200 OR holder ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'invalid lease holder: it must be 1 to 200 bytes without control characters'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Name the process, e.g. service@host:pid.';
    END IF;
    now_second := randflake.clock_second();
    IF seconds < 1 OR seconds > randflake.last_second() - now_second + 1 THEN
        RAISE EXCEPTION 'invalid lease length % s: it must be at least 1 and end by the format''s last second', seconds
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Leases of a few minutes, extended ahead of their end, are usual.';
    END IF;
    stored_holder := session_user || '/' || holder;
END
$$;
COMMENT ON FUNCTION randflake.lease_call(text, integer) IS
'What every application lease call checks first: a configured pool, a valid holder and length; returns the pool, the holder as stored (under the session''s role) and the server''s second.';
REVOKE ALL ON FUNCTION randflake.lease_call(text, integer) FROM PUBLIC;

CREATE FUNCTION randflake.lease_blockers() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT COALESCE(pg_catalog.string_agg(DISTINCT pg_catalog.format('pid %s (%s)', l.pid, a.usename), ', '),
                    'none left')
      FROM pg_catalog.pg_locks AS l LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid OPERATOR(pg_catalog.=) l.pid
     WHERE l.locktype OPERATOR(pg_catalog.=) 'relation' AND l.granted
       AND l.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
       AND l.relation OPERATOR(pg_catalog.=) 'randflake.node_leases'::regclass
$$;
COMMENT ON FUNCTION randflake.lease_blockers() IS
'The sessions (pid and role) holding locks on randflake.node_leases, for the error of a lease call that waited too long.';
REVOKE ALL ON FUNCTION randflake.lease_blockers() FROM PUBLIC;

CREATE FUNCTION randflake.lease_write_begin(procedure text, mode text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Only inside the procedure, after its first COMMIT: the transaction it started there began
    -- after the CALL did (PostgreSQL stamps a transaction begun inside a procedure anew), where a
    -- caller's own SELECT of this function runs in a transaction no later than its statement.
    -- That keeps a caller from holding the lease table's locks open in a transaction of its own.
    IF pg_catalog.transaction_timestamp() <= pg_catalog.statement_timestamp() THEN
        RAISE EXCEPTION 'randflake.%() runs only inside CALL %()', procedure, 'randflake_' || procedure
            USING ERRCODE = 'invalid_transaction_state',
                  HINT = pg_catalog.format('CALL randflake_%s(...) as a statement of its own in autocommit mode.', procedure);
    END IF;
    -- Every wait for another lease call is bounded: by the caller's lock_timeout, or 5 s if it
    -- has none. The procedure's COMMIT ends the setting with the transaction.
    IF pg_catalog.current_setting('lock_timeout') = '0' THEN
        PERFORM pg_catalog.set_config('lock_timeout', '5s', true);
    END IF;
    BEGIN
        IF mode = 'acquire' THEN
            -- One acquirer at a time, so that two never pick the same node.
            LOCK TABLE randflake.node_leases IN SHARE ROW EXCLUSIVE MODE;
        ELSE
            LOCK TABLE randflake.node_leases IN ROW EXCLUSIVE MODE;
        END IF;
    EXCEPTION WHEN lock_not_available THEN
        PERFORM randflake.raise_lease_wait(procedure);
    END;
END
$$;
COMMENT ON FUNCTION randflake.lease_write_begin(text, text) IS
'What the writes of the randflake_lease_* procedures do first: refuse to run outside the procedure (25000), bound every wait (the caller''s lock_timeout, 5 s if none), and take the lease table''s lock (acquire: one acquirer at a time).';
REVOKE ALL ON FUNCTION randflake.lease_write_begin(text, text) FROM PUBLIC;

CREATE FUNCTION randflake.raise_lease_wait(procedure text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'CALL randflake_%() waited % for other lease calls to end: %', procedure,
        pg_catalog.current_setting('lock_timeout'), randflake.lease_blockers()
        USING ERRCODE = 'lock_not_available',
              HINT = 'A transaction of those sessions holds the lease table; it ends when they commit or roll back. Try the call again.';
END
$$;
COMMENT ON FUNCTION randflake.raise_lease_wait(text) IS
'The error (55P03) of a lease call whose wait for the lease table or a lease''s row passed its lock_timeout: it names the sessions holding the table.';
REVOKE ALL ON FUNCTION randflake.raise_lease_wait(text) FROM PUBLIC;

-- The writes, as SECURITY DEFINER functions of the owner (only they write randflake.node_leases).
-- The public procedures below call them and commit: a procedure that is SECURITY DEFINER or has a
-- SET clause may not commit, so the procedures run as their caller, resolve nothing through the
-- caller's search_path (every name is qualified) and do nothing else.

CREATE FUNCTION randflake.lease_acquire(holder text, seconds integer,
                                        OUT node_id integer, OUT lease_start bigint, OUT lease_end_exclusive bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    call record;
BEGIN
    -- The lock first (the procedure's commit releases it before the lease is returned), then the
    -- pool, as configure() takes its own before it writes the pool: neither waits on the other
    -- midway.
    PERFORM randflake.lease_write_begin('lease_acquire', 'acquire');
    SELECT * INTO call FROM randflake.lease_call(holder, seconds);
    SELECT n INTO node_id
      FROM pg_catalog.generate_series(call.pool_first, call.pool_last) AS n
     WHERE NOT EXISTS (SELECT FROM randflake.node_leases AS l
                        WHERE l.first_node <= n AND l.last_node >= n AND l.lease_end >= call.now_second)
     ORDER BY n LIMIT 1;
    IF node_id IS NULL THEN
        RAISE EXCEPTION 'no free node in the application pool: all % nodes of %..% are leased',
            call.pool_last - call.pool_first + 1, call.pool_first, call.pool_last
            USING ERRCODE = 'configuration_limit_exceeded',
                  HINT = 'Release leases no longer used, lease for fewer seconds, or widen the pool with randflake.configure().';
    END IF;
    lease_start := call.now_second;
    lease_end_exclusive := call.now_second + seconds;
    INSERT INTO randflake.node_leases AS l
           (first_node, last_node, holder, server_name, lease_start, lease_end, used_through)
    VALUES (node_id, node_id, 'app/' || call.stored_holder, pg_catalog.current_database(),
            lease_start, lease_end_exclusive - 1, lease_end_exclusive - 1);
END
$$;
COMMENT ON FUNCTION randflake.lease_acquire(text, integer) IS
'The write of CALL randflake_lease_acquire(): leases a free node of the application pool, uncommitted.';

CREATE FUNCTION randflake.lease_extend(holder text, node integer, seconds integer,
                                       OUT node_id integer, OUT lease_start bigint, OUT lease_end_exclusive bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    call record;
BEGIN
    PERFORM randflake.lease_write_begin('lease_extend', 'write');  -- before the pool: see lease_acquire()
    SELECT * INTO call FROM randflake.lease_call(holder, seconds);
    UPDATE randflake.node_leases AS l
       SET lease_end = GREATEST(l.lease_end, call.now_second + seconds - 1),
           used_through = GREATEST(l.lease_end, call.now_second + seconds - 1),
           renewed_at = pg_catalog.now()
     WHERE l.first_node = node AND l.holder = 'app/' || call.stored_holder AND l.lease_end >= call.now_second
       AND node BETWEEN call.pool_first AND call.pool_last
    RETURNING l.first_node, l.lease_start, l.lease_end + 1 INTO node_id, lease_start, lease_end_exclusive;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'holder "%" holds no live lease of node %', pg_catalog.left(holder, 40), node
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'The lease ended or was never this holder''s under this role: stop issuing IDs with that node and acquire a new lease.';
    END IF;
END
$$;
COMMENT ON FUNCTION randflake.lease_extend(text, integer, integer) IS
'The write of CALL randflake_lease_extend(): moves the end of the holder''s live lease, uncommitted.';

CREATE FUNCTION randflake.lease_release(holder text, node integer, OUT released boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    call record;
BEGIN
    PERFORM randflake.lease_write_begin('lease_release', 'write');  -- before the pool: see lease_acquire()
    SELECT * INTO call FROM randflake.lease_call(holder, 1);
    -- The node is leased again only after the seconds its holder may have used, with a minute's
    -- allowance for an application clock ahead of the server's.
    UPDATE randflake.node_leases AS l
       SET holder = 'released/' || call.stored_holder,
           lease_end = LEAST(l.lease_end, GREATEST(l.lease_start, call.now_second + 60)),
           used_through = LEAST(l.lease_end, GREATEST(l.lease_start, call.now_second + 60)),
           renewed_at = pg_catalog.now()
     WHERE l.first_node = node AND l.holder = 'app/' || call.stored_holder AND l.lease_end >= call.now_second;
    released := FOUND;
    IF NOT released AND NOT EXISTS (SELECT FROM randflake.node_leases AS l
                                     WHERE l.first_node = node AND l.holder = 'app/' || call.stored_holder) THEN
        RAISE EXCEPTION 'holder "%" holds no lease of node %', pg_catalog.left(holder, 40), node
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'A holder extends or releases only what randflake_lease_acquire() gave it, under the same role; acquire a new lease.';
    END IF;
END
$$;
COMMENT ON FUNCTION randflake.lease_release(text, integer) IS
'The write of CALL randflake_lease_release(): gives the holder''s lease back, uncommitted; false if it had already ended.';

REVOKE ALL ON FUNCTION randflake.lease_acquire(text, integer), randflake.lease_extend(text, integer, integer),
    randflake.lease_release(text, integer) FROM PUBLIC;

CREATE PROCEDURE public.randflake_lease_acquire(holder text, seconds integer,
    OUT node_id integer, OUT lease_start bigint, OUT lease_end_exclusive bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM randflake.refuse_unless_own_transaction('randflake_lease_acquire');
    COMMIT;
    SELECT l.node_id, l.lease_start, l.lease_end_exclusive INTO node_id, lease_start, lease_end_exclusive
      FROM randflake.lease_acquire(holder, seconds) AS l;
    CALL randflake.commit_durably();
END
$$;
COMMENT ON PROCEDURE public.randflake_lease_acquire(text, integer) IS
'CALL randflake_lease_acquire(holder, seconds, NULL, NULL, NULL): leases a free node of the application pool to holder for seconds from now (at least 1) and returns node_id, lease_start and lease_end_exclusive in Unix seconds, the window to pass to a Randflake port''s Lease(node_id, start, end_exclusive), once it committed it with synchronous_commit at least on. The holder is kept under the session''s role. It must be a statement of its own in autocommit mode. EXECUTE is granted to no one by default: randflake.grant_application_leases(role).';

-- Its second argument is unnamed: PL/pgSQL refuses an argument and an OUT parameter of one name.
CREATE PROCEDURE public.randflake_lease_extend(holder text, integer, seconds integer,
    OUT node_id integer, OUT lease_start bigint, OUT lease_end_exclusive bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM randflake.refuse_unless_own_transaction('randflake_lease_extend');
    COMMIT;
    SELECT l.node_id, l.lease_start, l.lease_end_exclusive INTO node_id, lease_start, lease_end_exclusive
      FROM randflake.lease_extend(holder, $2, seconds) AS l;
    CALL randflake.commit_durably();
END
$$;
COMMENT ON PROCEDURE public.randflake_lease_extend(text, integer, integer) IS
'CALL randflake_lease_extend(holder, node_id, seconds, NULL, NULL, NULL): moves the end of holder''s live lease of node_id to seconds from now (never earlier), keeping its node and start (the ports'' extend_lease), and returns the window once committed. Fails once the lease has ended; the application must then stop issuing with that node. It must be a statement of its own in autocommit mode. EXECUTE is granted to no one by default.';

CREATE PROCEDURE public.randflake_lease_release(holder text, node_id integer, OUT released boolean)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM randflake.refuse_unless_own_transaction('randflake_lease_release');
    COMMIT;
    released := randflake.lease_release(holder, node_id);
    CALL randflake.commit_durably();
END
$$;
COMMENT ON PROCEDURE public.randflake_lease_release(text, integer) IS
'CALL randflake_lease_release(holder, node_id, NULL): gives holder''s lease of node_id back (the node is leased again only after the seconds its holder may have used, plus a minute for an application clock ahead of the server''s); released is false if the lease had already ended. It must be a statement of its own in autocommit mode. EXECUTE is granted to no one by default.';

CREATE PROCEDURE randflake.commit_durably()
LANGUAGE plpgsql
AS $$
BEGIN
    -- At least synchronous_commit = on (remote_flush where synchronous standbys are named), whatever
    -- the session, role or database set: off, local and remote_write are raised to it.
    IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=) ANY ('{off,local,remote_write}'::text[]) THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
    COMMIT;
END
$$;
COMMENT ON PROCEDURE randflake.commit_durably() IS
'Commits the application lease procedures'' transaction with synchronous_commit at least on. It runs as its caller and resolves nothing through the search_path.';
REVOKE ALL ON PROCEDURE public.randflake_lease_acquire(text, integer), public.randflake_lease_extend(text, integer, integer),
    public.randflake_lease_release(text, integer), randflake.commit_durably() FROM PUBLIC;

CREATE FUNCTION randflake.grant_application_leases(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The procedures run as their caller, who therefore needs the writes and the commit too.
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA randflake TO %I', grantee);
    EXECUTE pg_catalog.format('GRANT EXECUTE ON PROCEDURE public.randflake_lease_acquire(text, integer), '
        'public.randflake_lease_extend(text, integer, integer), public.randflake_lease_release(text, integer), '
        'randflake.commit_durably() TO %I', grantee);
    EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION randflake.refuse_unless_own_transaction(text), randflake.lease_acquire(text, integer), '
        'randflake.lease_extend(text, integer, integer), randflake.lease_release(text, integer) TO %I', grantee);
END
$$;
COMMENT ON FUNCTION randflake.grant_application_leases(regrole) IS
'Lets a role lease nodes to its processes: EXECUTE on the three randflake_lease_* procedures and on what they call as that role. Run as the owner.';
REVOKE ALL ON FUNCTION randflake.grant_application_leases(regrole) FROM PUBLIC;

----------------------------------------------------------------------------------------------------
-- Last: take back whatever the owner's ALTER DEFAULT PRIVILEGES granted on the objects above, so
-- that the secret, the records and decoding stay the owner's alone.

CREATE FUNCTION randflake.revoke_default_privileges(only_sequences boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    object record;
    privilege record;
BEGIN
    FOR object IN
        SELECT pg_catalog.format('%s %s', CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, c.oid::regclass) AS name,
               c.relacl AS acl, c.relowner AS owner
          FROM pg_catalog.pg_class AS c
         WHERE c.relnamespace = 'randflake'::regnamespace AND c.relkind IN ('r', 'S')
           AND (c.relkind = 'S' OR NOT only_sequences)
        UNION ALL
        SELECT pg_catalog.format('ROUTINE %s', p.oid::regprocedure), p.proacl, p.proowner
          FROM pg_catalog.pg_proc AS p
         WHERE (p.pronamespace = 'randflake'::regnamespace
                OR (p.pronamespace = 'public'::regnamespace AND p.proname ~~ 'randflake\_%'))
           AND NOT only_sequences
    LOOP
        FOR privilege IN
            SELECT DISTINCT a.grantee FROM pg_catalog.aclexplode(object.acl) AS a
             WHERE a.grantee <> object.owner AND a.grantee <> 0
        LOOP
            RAISE WARNING 'randflake_sql: taking back a default privilege on % from %', object.name, privilege.grantee::regrole;
            EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %I', object.name, privilege.grantee::regrole::text);
        END LOOP;
    END LOOP;
END
$$;
COMMENT ON FUNCTION randflake.revoke_default_privileges(boolean) IS
'Takes from every object of randflake_sql (or only from its sequences, the node records) each privilege that its owner''s ALTER DEFAULT PRIVILEGES granted to any role, predefined roles such as pg_monitor included, with a WARNING for each. The script ends by calling it, before its own grants to pg_monitor; randflake.configure() calls it for the records it creates, leaving the owner''s own grants on the routines alone.';
REVOKE ALL ON FUNCTION randflake.revoke_default_privileges(boolean) FROM PUBLIC;

SELECT randflake.revoke_default_privileges();

-- Run by CREATE EXTENSION (pg_tle's, or a control file), the state is the extension's
-- configuration, so that pg_dump dumps its rows and values (the node records, which configure()
-- creates later, are not members and are dumped as any sequence). The secret is left out: a
-- dump never carries it. Run by psql, there is no extension (schema randflake is no member of
-- one), and PostgreSQL would refuse the call.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                WHERE d.classid = 'pg_catalog.pg_namespace'::regclass AND d.objid = 'randflake'::regnamespace
                  AND d.deptype = 'e') THEN
        PERFORM pg_catalog.pg_extension_config_dump('randflake.settings', '');
        PERFORM pg_catalog.pg_extension_config_dump('randflake.node_leases', '');
        PERFORM pg_catalog.pg_extension_config_dump('randflake.high_water', '');
    END IF;
END
$$;

-- What pg_monitor may see, granted only now: revoke_default_privileges() spares no role, since an
-- owner's default privileges for pg_monitor would otherwise reach randflake.secret.
GRANT USAGE ON SCHEMA randflake TO pg_monitor;
GRANT SELECT ON TABLE randflake.node_leases TO pg_monitor;
GRANT EXECUTE ON FUNCTION public.randflake_status() TO pg_monitor;
