-- randflake_pg 0.5.0 -> 0.6.0.
--
-- Run by ALTER EXTENSION randflake_pg UPDATE, and replayed at the end of every fresh install
-- script after the earlier upgrade scripts. Until 0.6.0 is released, this script may still grow;
-- once released, it never changes.

\echo Use "ALTER EXTENSION randflake_pg UPDATE" to load this file. \quit

-- Every object this script calls is named with its schema (pg_catalog's or @extschema@'s), so
-- that nothing a database owner put in a schema on search_path can run in its place.

-- table: one owner for the lease table (issue 28).
--
-- Only randflake_pg's own code writes randflake.node_leases: its keeper and lease functions
-- mark their statements (a flag inside the backend that no SQL can set), and this trigger
-- refuses every other write by a session that did not log in as a superuser, whatever
-- privileges its role holds (pg_write_all_data, explicit grants, ownership). On a server that is
-- not in range mode (a fleet's coordinator has node_source fleet or off) it lets the members'
-- writes through postgres_fdw do what their keepers and lease functions need and no more: no
-- row deleted or replaced while its seconds may be in use by this server's clock plus 60 s of
-- skew, ends and high-water marks only moved forward, no row starting in the past, no TRUNCATE.
-- An application lease's release gets its end from this server's clock here.
CREATE FUNCTION randflake.authorize_lease_write() RETURNS trigger
LANGUAGE c
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'authorize_lease_write_wrapper';
COMMENT ON FUNCTION randflake.authorize_lease_write() IS
'Trigger of randflake.node_leases: refuses every write (INSERT, UPDATE, DELETE, TRUNCATE) that randflake_pg''s own code did not make, unless the session''s user is a superuser; on a server not in range mode (a fleet''s coordinator), lets its members'' writes do only what their keepers and lease functions need, and sets a released application lease''s end by this server''s clock.';
REVOKE ALL ON FUNCTION randflake.authorize_lease_write() FROM PUBLIC;

-- Named to run before check_node_lease (BEFORE row triggers run in name order), so that a
-- refused write is refused first and the end it sets is the one checked.
CREATE TRIGGER authorize_lease_write BEFORE INSERT OR UPDATE OR DELETE ON randflake.node_leases
    FOR EACH ROW EXECUTE FUNCTION randflake.authorize_lease_write();
CREATE TRIGGER authorize_lease_truncate BEFORE TRUNCATE ON randflake.node_leases
    FOR EACH STATEMENT EXECUTE FUNCTION randflake.authorize_lease_write();

-- A release is now one UPDATE (it was a DELETE and an INSERT, which a coordinator now refuses):
-- an application's holder app/<role>/<holder> becomes released/<role>/<holder>, and its end
-- and high-water mark move back to what authorize_lease_write set.
CREATE OR REPLACE FUNCTION randflake.check_node_lease() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    released boolean;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- The exclusion constraint forbids overlaps; this also forbids a lease placed before a
        -- later one, whose seconds an older, since pruned, lease may have used.
        PERFORM 1 FROM randflake.node_leases AS earlier
          WHERE earlier.first_node <= NEW.last_node AND earlier.last_node >= NEW.first_node
            AND earlier.lease_end >= NEW.lease_start;
        IF FOUND THEN
            RAISE EXCEPTION 'lease of nodes %..% from second % overlaps or precedes an existing lease of those nodes',
                NEW.first_node, NEW.last_node, NEW.lease_start
                USING ERRCODE = 'exclusion_violation',
                      HINT = 'A new lease must start after the end of every earlier lease of its nodes.';
        END IF;
        RETURN NEW;
    END IF;
    released := pg_catalog.starts_with(OLD.holder, 'app/') AND NEW.holder = 'released/' || pg_catalog.substr(OLD.holder, 5);
    IF (NEW.first_node, NEW.last_node, NEW.lease_start) IS DISTINCT FROM (OLD.first_node, OLD.last_node, OLD.lease_start)
       OR (NEW.holder IS DISTINCT FROM OLD.holder AND NOT released) THEN
        RAISE EXCEPTION 'the nodes, holder and start of a lease cannot change'
            USING ERRCODE = 'integrity_constraint_violation',
                  HINT = 'Leases are only renewed (lease_end, used_through), released or ended; take a new lease instead.';
    ELSIF NEW.used_through < OLD.used_through AND NOT released THEN
        RAISE EXCEPTION 'used_through of a lease cannot move back (from % to %)', OLD.used_through, NEW.used_through
            USING ERRCODE = 'integrity_constraint_violation',
                  HINT = 'IDs may already exist up to the recorded second.';
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION randflake.check_node_lease() IS
'Trigger of randflake.node_leases: a new lease starts after every earlier lease of its nodes; a lease''s nodes, holder and start never change, except an application lease''s holder on its release; used_through never moves back, except on that release.';

-- A role that can read the table can hold a lock on it in an idle transaction, and a VACUUM
-- FULL queued behind that lock holds up the keeper. pg_monitor reads what it needs through
-- randflake_status() and randflake_app_leases(), which run in a statement of their own.
REVOKE SELECT ON randflake.node_leases FROM pg_monitor;
COMMENT ON FUNCTION @extschema@.randflake_app_leases() IS
'The application pool, for monitoring: its first and last node, the leases held, the nodes free now and the soonest end of a held lease. No row on a server without a pool, or outside randflake.database. Refused inside a transaction block, so that no session keeps a lock on the lease table. For superusers and pg_monitor.';

-- Restores the extension's own grants without the lease table's to pg_monitor.
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
            USING HINT = 'randflake_pg grants decoding and the lease table to nobody; GRANT by name what a role should have.';
    END LOOP;
    -- What the extension itself grants, in case a default privilege named the same role.
    GRANT USAGE ON SCHEMA randflake TO pg_monitor;
    GRANT EXECUTE ON FUNCTION @extschema@.randflake_status() TO pg_monitor;
    GRANT EXECUTE ON FUNCTION @extschema@.randflake_app_leases() TO pg_monitor;
END
$$;
COMMENT ON FUNCTION randflake.revoke_default_privileges() IS
'Takes from every object of randflake_pg each privilege that its owner''s ALTER DEFAULT PRIVILEGES granted to a role, with a WARNING for each, then restores the extension''s own grants to pg_monitor (its status functions). Every install and upgrade script ends by calling it, so that decoding and the lease table stay granted to nobody.';


SELECT randflake.revoke_default_privileges();
