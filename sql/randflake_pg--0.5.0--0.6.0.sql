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

REVOKE EXECUTE ON PROCEDURE @extschema@.randflake_lease_acquire(IN text, IN integer, OUT integer, OUT bigint, OUT bigint) FROM PUBLIC;
REVOKE EXECUTE ON PROCEDURE @extschema@.randflake_lease_extend(IN text, IN integer, IN integer, OUT integer, OUT bigint, OUT bigint) FROM PUBLIC;
REVOKE EXECUTE ON PROCEDURE @extschema@.randflake_lease_release(IN text, IN integer, OUT boolean) FROM PUBLIC;

SELECT randflake.revoke_default_privileges();
