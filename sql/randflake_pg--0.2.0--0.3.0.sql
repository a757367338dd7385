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
-- transaction, and 'remote_apply' is kept.
CREATE OR REPLACE FUNCTION randflake.check_node_lease() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
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
    ELSIF (NEW.first_node, NEW.last_node, NEW.holder, NEW.lease_start)
          IS DISTINCT FROM (OLD.first_node, OLD.last_node, OLD.holder, OLD.lease_start) THEN
        RAISE EXCEPTION 'the nodes, holder and start of a lease cannot change'
            USING ERRCODE = 'integrity_constraint_violation',
                  HINT = 'Leases are only renewed (lease_end, used_through) or ended; take a new lease instead.';
    ELSIF NEW.used_through < OLD.used_through THEN
        RAISE EXCEPTION 'used_through of a lease cannot move back (from % to %)', OLD.used_through, NEW.used_through
            USING ERRCODE = 'integrity_constraint_violation',
                  HINT = 'IDs may already exist up to the recorded second.';
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION randflake.check_node_lease() IS
'Trigger of randflake.node_leases: the writing transaction commits durably (synchronous_commit at least on); a new lease starts after every earlier lease of its nodes; a lease''s nodes, holder and start never change; used_through never moves back.';
