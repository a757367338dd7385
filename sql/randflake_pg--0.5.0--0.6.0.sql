-- randflake_pg 0.5.0 -> 0.6.0.
--
-- Run by ALTER EXTENSION randflake_pg UPDATE, and replayed at the end of every fresh install
-- script after the earlier upgrade scripts. Until 0.6.0 is released, this script may still grow;
-- once released, it never changes.

\echo Use "ALTER EXTENSION randflake_pg UPDATE" to load this file. \quit

-- Every object this script calls is named with its schema (pg_catalog's or @extschema@'s), so
-- that nothing a database owner put in a schema on search_path can run in its place.

-- applease: application leases are returned only once their commit is durable. 0.5.0's
-- functions returned a lease inside the caller's transaction, which the caller (or a pipeline's
-- later error, or a cancelled wait for synchronous standbys and a failover) could take back
-- after the application had started issuing IDs with it. Procedures commit their own
-- transaction and check its commit before returning anything. They are C procedures without a
-- SET clause (PostgreSQL lets no procedure with one commit): each pins its own search_path to
-- pg_catalog, pg_temp for its transaction. They take the functions' names (a SELECT of one now
-- gets PostgreSQL's "is a procedure" and its HINT to use CALL); the functions' C entry points
-- stay in the library only for a database not yet updated, where they refuse with a HINT.
DROP FUNCTION @extschema@.randflake_lease_acquire(text, integer);
DROP FUNCTION @extschema@.randflake_lease_extend(text, integer, integer);
DROP FUNCTION @extschema@.randflake_lease_release(text, integer);

CREATE PROCEDURE @extschema@.randflake_lease_acquire(holder text, seconds integer,
    OUT node_id integer, OUT lease_start bigint, OUT lease_end_exclusive bigint)
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_lease_acquire_procedure';

CREATE PROCEDURE @extschema@.randflake_lease_extend(holder text, node_id integer, seconds integer,
    OUT node_id integer, OUT lease_start bigint, OUT lease_end_exclusive bigint)
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_lease_extend_procedure';

CREATE PROCEDURE @extschema@.randflake_lease_release(holder text, node_id integer, OUT released boolean)
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_lease_release_procedure';

COMMENT ON PROCEDURE @extschema@.randflake_lease_acquire(IN text, IN integer, OUT integer, OUT bigint, OUT bigint) IS
'CALL randflake_lease_acquire(holder, seconds, NULL, NULL, NULL): leases a free node of the application pool to holder for seconds from now (at least 1), and returns node_id, lease_start and lease_end_exclusive in Unix seconds, the window to pass to a Randflake port''s Lease(node_id, start, end_exclusive), only once its commit is durable (flushed, and confirmed by the synchronous standbys synchronous_standby_names asks for). The holder is kept under the calling role. It commits its own transaction, so it must be a statement of its own in autocommit mode. Call it in randflake.database. EXECUTE is granted to no one by default.';
COMMENT ON PROCEDURE @extschema@.randflake_lease_extend(IN text, IN integer, IN integer, OUT integer, OUT bigint, OUT bigint) IS
'CALL randflake_lease_extend(holder, node_id, seconds, NULL, NULL, NULL): moves the end of holder''s live lease of node_id to seconds from now (never earlier), keeping its node and start, and returns the window once durable: the reference ports'' extend_lease. Fails once the lease has ended or was taken back; the application must then stop issuing with that node. EXECUTE is granted to no one by default.';
COMMENT ON PROCEDURE @extschema@.randflake_lease_release(IN text, IN integer, OUT boolean) IS
'CALL randflake_lease_release(holder, node_id, NULL): gives holder''s lease of node_id back, true once durable: the node is leased again only after the seconds its holder may have used, with a minute''s allowance for an application clock running ahead of the server''s. False if the lease had already ended. EXECUTE is granted to no one by default.';

COMMENT ON FUNCTION @extschema@.randflake_app_leases() IS
'The application pool, for monitoring: its first and last node, the leases held, the nodes free now and the soonest end of a held lease. No row on a server without a pool, outside randflake.database, or on a fleet member, which leases no application nodes. For superusers and pg_monitor.';

-- randflake.revoke_default_privileges(), as 0.5.0 made it, names every routine a FUNCTION,
-- which REVOKE refuses for a procedure: the same function, naming procedures as such.
CREATE OR REPLACE FUNCTION randflake.revoke_default_privileges() RETURNS void
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
            SELECT format(CASE WHEN p.prokind = 'p' THEN 'PROCEDURE %s' ELSE 'FUNCTION %s' END, p.oid::regprocedure)
                       AS object, 'f'::"char" AS kind,
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

REVOKE EXECUTE ON PROCEDURE @extschema@.randflake_lease_acquire(IN text, IN integer, OUT integer, OUT bigint, OUT bigint) FROM PUBLIC;
REVOKE EXECUTE ON PROCEDURE @extschema@.randflake_lease_extend(IN text, IN integer, IN integer, OUT integer, OUT bigint, OUT bigint) FROM PUBLIC;
REVOKE EXECUTE ON PROCEDURE @extschema@.randflake_lease_release(IN text, IN integer, OUT boolean) FROM PUBLIC;

SELECT randflake.revoke_default_privileges();
