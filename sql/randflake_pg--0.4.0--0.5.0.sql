-- randflake_pg 0.4.0 -> 0.5.0.
--
-- Run by ALTER EXTENSION randflake_pg UPDATE, and replayed at the end of every fresh install
-- script after the earlier upgrade scripts. A released script changes only in how it names what
-- it uses, never in what it makes (0.6.0 named pg_catalog's functions and operators).

\echo Use "ALTER EXTENSION randflake_pg UPDATE" to load this file. \quit

-- A lease counts only once its commit is durable by the standard the server is configured for.
-- Where synchronous_standby_names asks for standbys that are not connected, a lease's commit
-- (synchronous_commit is at least 'on' for it, see commit_leases_durably) would wait for them
-- until something cancelled the wait, and then stand committed here only, lost in a failover.
-- This check, run at commit, fails such a commit instead, with a message that reaches the
-- writing keeper, through postgres_fdw too. A standby that is connected but does not confirm is
-- the keeper's to handle: it counts a commit whose wait was interrupted as not granted.
-- SECURITY DEFINER because pg_stat_replication's sync_state is hidden from roles without
-- pg_read_all_stats, such as a randflake.keeper_role or a fleet member's user mapping.
CREATE FUNCTION randflake.require_synchronous_standbys() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    names text := current_setting('synchronous_standby_names');
    wanted integer;
    connected integer;
BEGIN
    IF names = '' OR current_setting('synchronous_commit') NOT IN ('on', 'remote_write', 'remote_apply') THEN
        RETURN NULL;
    END IF;
    -- FIRST n (...), ANY n (...) and n (...) ask for n standbys; a plain list for one.
    wanted := coalesce((regexp_match(names, '^[[:space:]]*(first[[:space:]]+|any[[:space:]]+)?([[:digit:]]+)[[:space:]]*[(]', 'i'))[2]::integer, 1);
    SELECT count(*) INTO connected
      FROM pg_stat_get_wal_senders() AS s
     WHERE s.sync_state IN ('sync', 'quorum') AND s.state = 'streaming';
    IF connected < wanted THEN
        RAISE EXCEPTION 'randflake_pg: % of the % synchronous standbys that synchronous_standby_names asks for are connected, so a lease committed now would not be durable',
            connected, wanted
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Start the synchronous standby, or change synchronous_standby_names (now ' || quote_literal(names) || '). Lease keepers try again every second.';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION randflake.require_synchronous_standbys() IS
'Trigger of randflake.node_leases, run at commit: fails a transaction that writes a lease while fewer synchronous standbys are connected than synchronous_standby_names asks for, since its commit could only be local.';
REVOKE ALL ON FUNCTION randflake.require_synchronous_standbys() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER require_synchronous_standbys AFTER INSERT OR UPDATE ON randflake.node_leases
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION randflake.require_synchronous_standbys();

-- Application leases: nodes of the application pool (randflake.app_node_id_min..max) leased to
-- processes that make IDs with a Randflake port, in the same lease table as the servers'. As
-- pgrx declares them from src/functions.rs: in a fresh install pgrx has already created them and
-- these statements replace them with the same definitions. Their search_path is pinned: they run
-- SQL as the keeper's role, and a caller's own operators must not be found ahead of pg_catalog's.
CREATE OR REPLACE FUNCTION @extschema@.randflake_lease_acquire(holder text, seconds integer DEFAULT 600)
RETURNS TABLE (node_id integer, lease_start bigint, lease_end_exclusive bigint)
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_lease_acquire_wrapper';

CREATE OR REPLACE FUNCTION @extschema@.randflake_lease_extend(holder text, node_id integer, seconds integer DEFAULT 600)
RETURNS TABLE (node_id integer, lease_start bigint, lease_end_exclusive bigint)
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_lease_extend_wrapper';

CREATE OR REPLACE FUNCTION @extschema@.randflake_lease_release(holder text, node_id integer) RETURNS boolean
VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_lease_release_wrapper';

CREATE OR REPLACE FUNCTION @extschema@.randflake_app_leases()
RETURNS TABLE (pool_first integer, pool_last integer, leases_held integer, nodes_free integer, soonest_end timestamp with time zone)
STRICT VOLATILE PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_app_leases_wrapper';

COMMENT ON FUNCTION @extschema@.randflake_lease_acquire(text, integer) IS
'Leases a free node of the application pool to holder for seconds from now (default 600, at least 1): returns node_id, lease_start and lease_end_exclusive in Unix seconds, the window to pass to a Randflake port''s Lease(node_id, start, end_exclusive). The holder is kept under the calling role; the lease counts once committed, so the function refuses to run inside a transaction block. Call it in randflake.database. EXECUTE is granted to no one by default.';
COMMENT ON FUNCTION @extschema@.randflake_lease_extend(text, integer, integer) IS
'Moves the end of holder''s live lease of node_id to seconds from now (never earlier), keeping its node and start: the reference ports'' extend_lease. Fails once the lease has ended or was taken back; the application must then stop issuing with that node. EXECUTE is granted to no one by default.';
COMMENT ON FUNCTION @extschema@.randflake_lease_release(text, integer) IS
'Gives holder''s lease of node_id back: the node is leased again only after the seconds its holder may have used, with a minute''s allowance for an application clock running ahead of the server''s. Returns false if the lease had already ended. EXECUTE is granted to no one by default.';
COMMENT ON FUNCTION @extschema@.randflake_app_leases() IS
'The application pool, for monitoring: its first and last node, the leases held, the nodes free now and the soonest end of a held lease. No row on a server without a pool, or outside randflake.database. For superusers and pg_monitor.';

REVOKE EXECUTE ON FUNCTION @extschema@.randflake_lease_acquire(text, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_lease_extend(text, integer, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_lease_release(text, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_app_leases() FROM PUBLIC;

-- randflake_id: the same 8 bytes as bigint, whose text form is the canonical string, so that an ID
-- survives JSON (to_jsonb, json_agg and the APIs built on them write it as a string, where a
-- JavaScript number would round it). Binary send and receive are bigint's own functions, so
-- binary COPY and drivers that read int8 see the same value. The two types convert into each
-- other on assignment (DEFAULT randflake_next() fills a randflake_id column) and by an explicit
-- cast (randflake_decode(id::bigint)), never implicitly: with an implicit cast to bigint,
-- `id = 5` would find two equally good operators, and `id + 1` would mean something.
CREATE TYPE @extschema@.randflake_id;

CREATE FUNCTION @extschema@.randflake_id_in(cstring) RETURNS @extschema@.randflake_id
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_id_in_wrapper';
CREATE FUNCTION @extschema@.randflake_id_out(@extschema@.randflake_id) RETURNS cstring
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_id_out_wrapper';
CREATE FUNCTION @extschema@.randflake_id_recv(internal) RETURNS @extschema@.randflake_id
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE internal
AS 'int8recv';
CREATE FUNCTION @extschema@.randflake_id_send(@extschema@.randflake_id) RETURNS bytea
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE internal
AS 'int8send';

CREATE TYPE @extschema@.randflake_id (
    INPUT = @extschema@.randflake_id_in,
    OUTPUT = @extschema@.randflake_id_out,
    RECEIVE = @extschema@.randflake_id_recv,
    SEND = @extschema@.randflake_id_send,
    LIKE = pg_catalog.int8
);
COMMENT ON TYPE @extschema@.randflake_id IS
'A Randflake ID: the eight bytes of a bigint, shown as its canonical string (1 to 13 lower-case base32hex digits), so that JSON and JavaScript get a string, never a rounded number. Binary send and receive are bigint''s. It and bigint convert into each other on assignment (so DEFAULT randflake_next() fills it) and by explicit casts (randflake_decode(id::bigint)).';
COMMENT ON FUNCTION @extschema@.randflake_id_in(cstring) IS
'Input of randflake_id: the canonical string form only, as randflake_from_string() parses it.';
COMMENT ON FUNCTION @extschema@.randflake_id_out(@extschema@.randflake_id) IS
'Output of randflake_id: the canonical string form, as randflake_to_string() writes it.';
COMMENT ON FUNCTION @extschema@.randflake_id_recv(internal) IS
'Binary input of randflake_id: bigint''s (eight bytes, big-endian, signed).';
COMMENT ON FUNCTION @extschema@.randflake_id_send(@extschema@.randflake_id) IS
'Binary output of randflake_id: bigint''s (eight bytes, big-endian, signed).';

CREATE CAST (bigint AS @extschema@.randflake_id) WITHOUT FUNCTION AS ASSIGNMENT;
CREATE CAST (@extschema@.randflake_id AS bigint) WITHOUT FUNCTION AS ASSIGNMENT;
COMMENT ON CAST (bigint AS @extschema@.randflake_id) IS
'The same eight bytes; on assignment, so that DEFAULT randflake_next() and bigint values fill a randflake_id column.';
COMMENT ON CAST (@extschema@.randflake_id AS bigint) IS
'The same eight bytes; on assignment, so that bigint columns take a randflake_id, and explicitly (id::bigint) for randflake_decode() and the accessors.';

-- Comparison: bigint's own functions, since the representation is bigint's, between two
-- randflake_ids and between a randflake_id and a bigint either way, in one btree and one hash
-- family, so that an index on a randflake_id column serves `id = 4594531474933654033` too. Each
-- family also holds bigint's own operators: the planner sorts and hashes each side of a join by
-- its own type within one family, so a family over two types must compare each with itself.
-- Every function and operator the block calls is pg_catalog's by name: a script runs with
-- @extschema@ on search_path, where a database owner could have put a better match (such as a
-- format(text, text, text, text, text) ahead of format(text, VARIADIC "any")).
DO $$
DECLARE
    pair record;
    op record;
    function_name text;
BEGIN
    FOR pair IN
        SELECT * FROM (VALUES ('@extschema@.randflake_id', '@extschema@.randflake_id', 'randflake_id', 'randflake_id', 'randflake_id'),
                              ('@extschema@.randflake_id', 'pg_catalog.int8', 'randflake_id_int8', 'randflake_id', 'bigint'),
                              ('pg_catalog.int8', '@extschema@.randflake_id', 'int8_randflake_id', 'bigint', 'randflake_id'))
               AS p(l, r, stem, l_word, r_word)
    LOOP
        FOR op IN
            SELECT * FROM (VALUES ('=', 'eq', 'int8eq', '=', '<>', 'eqsel', 'eqjoinsel', ', HASHES, MERGES', 'Equal to'),
                                  ('<>', 'ne', 'int8ne', '<>', '=', 'neqsel', 'neqjoinsel', '', 'Not equal to'),
                                  ('<', 'lt', 'int8lt', '>', '>=', 'scalarltsel', 'scalarltjoinsel', '', 'Less than'),
                                  ('<=', 'le', 'int8le', '>=', '>', 'scalarlesel', 'scalarlejoinsel', '', 'Less than or equal to'),
                                  ('>', 'gt', 'int8gt', '<', '<=', 'scalargtsel', 'scalargtjoinsel', '', 'Greater than'),
                                  ('>=', 'ge', 'int8ge', '<=', '<', 'scalargesel', 'scalargejoinsel', '', 'Greater than or equal to'))
                   AS o(symbol, suffix, internal_name, commutator, negator, restrict_estimator, join_estimator, options, words)
        LOOP
            function_name := pg_catalog.format('%s_%s', pair.stem, op.suffix);
            EXECUTE pg_catalog.format('CREATE FUNCTION @extschema@.%I(%s, %s) RETURNS boolean '
                                      'IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE internal AS %L',
                                      function_name, pair.l, pair.r, op.internal_name);
            EXECUTE pg_catalog.format('COMMENT ON FUNCTION @extschema@.%I(%s, %s) IS %L',
                                      function_name, pair.l, pair.r,
                                      pg_catalog.format('Whether a %s is %s a %s, as bigints compare: the function of operator %s.',
                                                        pair.l_word, pg_catalog.lower(op.words), pair.r_word, op.symbol));
            EXECUTE pg_catalog.format('CREATE OPERATOR @extschema@.%s (LEFTARG = %s, RIGHTARG = %s, '
                                      'FUNCTION = @extschema@.%I, COMMUTATOR = OPERATOR(@extschema@.%s), '
                                      'NEGATOR = OPERATOR(@extschema@.%s), RESTRICT = pg_catalog.%I, JOIN = pg_catalog.%I%s)',
                                      op.symbol, pair.l, pair.r, function_name, op.commutator, op.negator,
                                      op.restrict_estimator, op.join_estimator, op.options);
            EXECUTE pg_catalog.format('COMMENT ON OPERATOR @extschema@.%s (%s, %s) IS %L',
                                      op.symbol, pair.l, pair.r, pg_catalog.format('%s, as bigints compare.', op.words));
        END LOOP;
        function_name := pg_catalog.format('%s_cmp', pair.stem);
        EXECUTE pg_catalog.format('CREATE FUNCTION @extschema@.%I(%s, %s) RETURNS integer '
                                  'IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE internal AS %L',
                                  function_name, pair.l, pair.r, 'btint8cmp');
        EXECUTE pg_catalog.format('COMMENT ON FUNCTION @extschema@.%I(%s, %s) IS %L',
                                  function_name, pair.l, pair.r,
                                  pg_catalog.format('-1, 0 or 1 as a %s sorts before, with or after a %s: the btree support function.',
                                                    pair.l_word, pair.r_word));
    END LOOP;
END
$$;

CREATE FUNCTION @extschema@.randflake_id_hash(@extschema@.randflake_id) RETURNS integer
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF
LANGUAGE internal
AS 'hashint8';
CREATE FUNCTION @extschema@.randflake_id_hash_extended(@extschema@.randflake_id, bigint) RETURNS bigint
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF
LANGUAGE internal
AS 'hashint8extended';
COMMENT ON FUNCTION @extschema@.randflake_id_hash(@extschema@.randflake_id) IS
'The hash of a randflake_id: bigint''s, so hash joins with bigint columns work.';
COMMENT ON FUNCTION @extschema@.randflake_id_hash_extended(@extschema@.randflake_id, bigint) IS
'The seeded hash of a randflake_id: bigint''s.';

CREATE OPERATOR FAMILY @extschema@.randflake_id_ops USING btree;
CREATE OPERATOR CLASS @extschema@.randflake_id_ops DEFAULT FOR TYPE @extschema@.randflake_id
USING btree FAMILY @extschema@.randflake_id_ops AS
    OPERATOR 1 @extschema@.< (@extschema@.randflake_id, @extschema@.randflake_id),
    OPERATOR 2 @extschema@.<= (@extschema@.randflake_id, @extschema@.randflake_id),
    OPERATOR 3 @extschema@.= (@extschema@.randflake_id, @extschema@.randflake_id),
    OPERATOR 4 @extschema@.>= (@extschema@.randflake_id, @extschema@.randflake_id),
    OPERATOR 5 @extschema@.> (@extschema@.randflake_id, @extschema@.randflake_id),
    FUNCTION 1 @extschema@.randflake_id_cmp(@extschema@.randflake_id, @extschema@.randflake_id);
ALTER OPERATOR FAMILY @extschema@.randflake_id_ops USING btree ADD
    OPERATOR 1 @extschema@.< (@extschema@.randflake_id, bigint),
    OPERATOR 2 @extschema@.<= (@extschema@.randflake_id, bigint),
    OPERATOR 3 @extschema@.= (@extschema@.randflake_id, bigint),
    OPERATOR 4 @extschema@.>= (@extschema@.randflake_id, bigint),
    OPERATOR 5 @extschema@.> (@extschema@.randflake_id, bigint),
    FUNCTION 1 @extschema@.randflake_id_int8_cmp(@extschema@.randflake_id, bigint),
    OPERATOR 1 @extschema@.< (bigint, @extschema@.randflake_id),
    OPERATOR 2 @extschema@.<= (bigint, @extschema@.randflake_id),
    OPERATOR 3 @extschema@.= (bigint, @extschema@.randflake_id),
    OPERATOR 4 @extschema@.>= (bigint, @extschema@.randflake_id),
    OPERATOR 5 @extschema@.> (bigint, @extschema@.randflake_id),
    FUNCTION 1 @extschema@.int8_randflake_id_cmp(bigint, @extschema@.randflake_id),
    OPERATOR 1 pg_catalog.< (bigint, bigint),
    OPERATOR 2 pg_catalog.<= (bigint, bigint),
    OPERATOR 3 pg_catalog.= (bigint, bigint),
    OPERATOR 4 pg_catalog.>= (bigint, bigint),
    OPERATOR 5 pg_catalog.> (bigint, bigint),
    FUNCTION 1 pg_catalog.btint8cmp(bigint, bigint);
COMMENT ON OPERATOR FAMILY @extschema@.randflake_id_ops USING btree IS
'Orders randflake_ids as bigints, among themselves and against bigint, so that an index on a randflake_id column serves comparisons with either.';
COMMENT ON OPERATOR CLASS @extschema@.randflake_id_ops USING btree IS
'The default btree operator class of randflake_id: the order of the bigints the IDs are.';

CREATE OPERATOR FAMILY @extschema@.randflake_id_ops USING hash;
CREATE OPERATOR CLASS @extschema@.randflake_id_ops DEFAULT FOR TYPE @extschema@.randflake_id
USING hash FAMILY @extschema@.randflake_id_ops AS
    OPERATOR 1 @extschema@.= (@extschema@.randflake_id, @extschema@.randflake_id),
    FUNCTION 1 @extschema@.randflake_id_hash(@extschema@.randflake_id),
    FUNCTION 2 @extschema@.randflake_id_hash_extended(@extschema@.randflake_id, bigint);
ALTER OPERATOR FAMILY @extschema@.randflake_id_ops USING hash ADD
    OPERATOR 1 @extschema@.= (@extschema@.randflake_id, bigint),
    OPERATOR 1 @extschema@.= (bigint, @extschema@.randflake_id),
    OPERATOR 1 pg_catalog.= (bigint, bigint),
    FUNCTION 1 pg_catalog.hashint8(bigint),
    FUNCTION 2 pg_catalog.hashint8extended(bigint, bigint);
COMMENT ON OPERATOR FAMILY @extschema@.randflake_id_ops USING hash IS
'Hashes randflake_ids as bigints, so that they hash-join with bigint columns.';
COMMENT ON OPERATOR CLASS @extschema@.randflake_id_ops USING hash IS
'The default hash operator class of randflake_id: bigint''s hash, for hash joins and hash indexes.';

-- Default privileges: PostgreSQL applies the ALTER DEFAULT PRIVILEGES of the role that creates
-- an object, so every object an install or upgrade script creates also gets what those name.
-- Up to 0.4.0 the scripts only revoked from PUBLIC, which left the decoders (which reveal what
-- the secret hides) executable by any role a default privilege named, and the lease table
-- writable by any role a default privilege on tables named. Every script ends by calling this.
CREATE FUNCTION randflake.revoke_default_privileges() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    granted record;
BEGIN
    FOR granted IN
        WITH members AS (
            SELECT d.classid, d.objid
              FROM pg_depend AS d
              JOIN pg_extension AS e ON e.oid = d.refobjid
             WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'randflake_pg'
        ), objects AS (
            SELECT format('FUNCTION %s', p.oid::regprocedure) AS object, 'f'::"char" AS kind,
                   p.pronamespace AS namespace, p.proowner AS owner, p.proacl AS acl
              FROM members AS m JOIN pg_proc AS p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
            UNION ALL
            SELECT format(CASE WHEN c.relkind = 'S' THEN 'SEQUENCE %s' ELSE 'TABLE %s' END, c.oid::regclass),
                   CASE WHEN c.relkind = 'S' THEN 'S' ELSE 'r' END::"char", c.relnamespace, c.relowner, c.relacl
              FROM members AS m JOIN pg_class AS c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
            UNION ALL
            SELECT format('SCHEMA %I', n.nspname), 'n'::"char", 0::oid, n.nspowner, n.nspacl
              FROM members AS m JOIN pg_namespace AS n ON m.classid = 'pg_namespace'::regclass AND n.oid = m.objid
            UNION ALL
            SELECT format('TYPE %s', t.oid::regtype), 'T'::"char", t.typnamespace, t.typowner, t.typacl
              FROM members AS m JOIN pg_type AS t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
        )
        SELECT o.object, a.privilege_type, a.grantee
          FROM objects AS o, aclexplode(o.acl) AS a
         WHERE a.grantee NOT IN (o.owner, 0)  -- PUBLIC's privileges are each script's to give or revoke
           AND EXISTS (SELECT
                         FROM pg_default_acl AS d, aclexplode(d.defaclacl) AS default_grant
                        WHERE d.defaclrole = o.owner
                          AND d.defaclobjtype = o.kind
                          AND d.defaclnamespace IN (0, o.namespace)
                          AND default_grant.grantee = a.grantee
                          AND default_grant.privilege_type = a.privilege_type)
    LOOP
        EXECUTE format('REVOKE %s ON %s FROM %I CASCADE', granted.privilege_type, granted.object,
                       pg_get_userbyid(granted.grantee));
        -- A WARNING, not a NOTICE: extension scripts run with client_min_messages at warning.
        RAISE WARNING 'randflake_pg: revoked % on % from %, which ALTER DEFAULT PRIVILEGES granted',
            granted.privilege_type, granted.object, pg_get_userbyid(granted.grantee)
            USING HINT = 'randflake_pg grants decoding to nobody and the lease table to pg_monitor for reading only; GRANT by name what a role should have.';
    END LOOP;
    -- What the extension itself grants, in case a default privilege named the same role.
    GRANT USAGE ON SCHEMA randflake TO pg_monitor;
    GRANT SELECT ON randflake.node_leases TO pg_monitor;
    GRANT EXECUTE ON FUNCTION @extschema@.randflake_status() TO pg_monitor;
    GRANT EXECUTE ON FUNCTION @extschema@.randflake_app_leases() TO pg_monitor;
END
$$;
COMMENT ON FUNCTION randflake.revoke_default_privileges() IS
'Takes from every object of randflake_pg each privilege that its owner''s ALTER DEFAULT PRIVILEGES granted to a role, with a WARNING for each, then restores the extension''s own grants to pg_monitor. Every install and upgrade script ends by calling it, so that decoding stays granted to nobody and the lease table writable by superusers only.';
REVOKE ALL ON FUNCTION randflake.revoke_default_privileges() FROM PUBLIC;

SELECT randflake.revoke_default_privileges();
