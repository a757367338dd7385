-- randflake_pg 0.2.0 -> 0.3.0: every lease is committed durably by the server that stores it.
--
-- Run by ALTER EXTENSION randflake_pg UPDATE, and replayed at the end of every fresh install
-- script after the earlier upgrade scripts. A released script never changes.

\echo Use "ALTER EXTENSION randflake_pg UPDATE" to load this file. \quit

-- In fleet mode a lease is written by another server through postgres_fdw: the member's own
-- synchronous_commit does not reach the coordinator, where the role, database or server may
-- commit asynchronously. A lease lost in a coordinator crash after its member began issuing
-- lets a second member take the same nodes for the same seconds. So the transaction that
-- writes a lease commits durably here whatever is configured: synchronous_commit is raised to
-- 'on' (flushed locally, and confirmed by synchronous standbys where there are any) for that
-- transaction; 'remote_apply' is kept.
CREATE FUNCTION randflake.commit_leases_durably() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION randflake.commit_leases_durably() IS
'Trigger of randflake.node_leases: a transaction that writes a lease commits durably (synchronous_commit at least on), whoever writes it and however the server, database or role is configured.';

CREATE TRIGGER commit_leases_durably BEFORE INSERT OR UPDATE ON randflake.node_leases
    FOR EACH STATEMENT EXECUTE FUNCTION randflake.commit_leases_durably();

REVOKE ALL ON FUNCTION randflake.commit_leases_durably() FROM PUBLIC;
