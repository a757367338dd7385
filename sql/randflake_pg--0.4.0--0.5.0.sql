-- randflake_pg 0.4.0 -> 0.5.0.
--
-- Run by ALTER EXTENSION randflake_pg UPDATE, and replayed at the end of every fresh install
-- script after the earlier upgrade scripts. Until 0.5.0 is released, this script may still grow;
-- once released, it never changes.

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
