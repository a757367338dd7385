-- randflake_pg 0.5.0 -> 0.6.0.
--
-- Run by ALTER EXTENSION randflake_pg UPDATE, and replayed at the end of every fresh install
-- script after the earlier upgrade scripts. Until 0.6.0 is released, this script may still grow;
-- once released, it never changes.

\echo Use "ALTER EXTENSION randflake_pg UPDATE" to load this file. \quit

-- Every object this script calls is named with its schema (pg_catalog's or @extschema@'s), so
-- that nothing a database owner put in a schema on search_path can run in its place.

-- durable: a lease write counts only once the server holding the lease table shows it durable.
-- PostgreSQL answers a commit whose wait for synchronous standbys was cancelled with a WARNING,
-- and the cancel may come from anywhere (pg_cancel_backend on a coordinator's backend, a
-- driver's time-out), so the writer learns nothing from the commit itself. After it returned,
-- the keeper reads randflake.commit_evidence on the server holding the table (through
-- postgres_fdw, for a fleet member) in a transaction of its own: the WAL insert position then
-- covers its commit, and the commit is durable once durable_lsn reaches it on the same system
-- and timeline (randflake::durability decides). SECURITY DEFINER because pg_control_system()
-- and pg_stat_get_wal_senders()'s positions are hidden from roles without pg_read_all_stats.
CREATE FUNCTION randflake.wal_durability(OUT system_identifier bigint, OUT timeline bigint,
                                         OUT insert_lsn pg_catalog.pg_lsn, OUT durable_lsn pg_catalog.pg_lsn)
LANGUAGE plpgsql
VOLATILE PARALLEL RESTRICTED
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    names text := pg_catalog.current_setting('synchronous_standby_names');
    wanted integer;
    standbys pg_catalog.pg_lsn[];
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION 'randflake_pg: this server is in recovery, so it shows no commit as durable'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    -- First: every commit that had returned before this call ends at or before it.
    insert_lsn := pg_catalog.pg_current_wal_insert_lsn();
    system_identifier := (pg_catalog.pg_control_system()).system_identifier;
    -- A WAL file's name begins with the timeline it is written on, in 8 hex digits.
    timeline := pg_catalog.int8(pg_catalog.textcat('x', pg_catalog.left(pg_catalog.pg_walfile_name(insert_lsn), 8))::pg_catalog.bit(32));
    durable_lsn := pg_catalog.pg_current_wal_flush_lsn();
    IF names <> '' THEN
        -- FIRST n (...), n (...) and ANY n (...) ask for n standbys; a plain list for one. Either
        -- way a position is durable once n of the standbys chosen (sync_state 'sync' for FIRST,
        -- 'quorum' for ANY) have flushed it: the n-th most advanced flush position among them.
        wanted := coalesce((pg_catalog.regexp_match(names, '^[[:space:]]*(first[[:space:]]+|any[[:space:]]+)?([[:digit:]]+)[[:space:]]*[(]', 'i'))[2]::integer, 1);
        SELECT pg_catalog.array_agg(s.flush_lsn ORDER BY s.flush_lsn DESC) INTO standbys
          FROM pg_catalog.pg_stat_get_wal_senders() AS s
         WHERE s.sync_state OPERATOR(pg_catalog.=) ANY (ARRAY['sync', 'quorum'])
           AND s.state OPERATOR(pg_catalog.=) 'streaming' AND s.flush_lsn IS NOT NULL;
        durable_lsn := CASE WHEN pg_catalog.cardinality(standbys) OPERATOR(pg_catalog.>=) wanted
                            THEN LEAST(durable_lsn, standbys[wanted]) END;
    END IF;
    RETURN;
END
$$;
COMMENT ON FUNCTION randflake.wal_durability() IS
'This server''s system identifier, the timeline it writes WAL on, its WAL insert position, and the position through which its WAL is durable as configured (flushed here and by as many synchronous standbys as synchronous_standby_names asks for; NULL while fewer are connected). Read through randflake.commit_evidence.';
REVOKE ALL ON FUNCTION randflake.wal_durability() FROM PUBLIC;

CREATE VIEW randflake.commit_evidence AS
    SELECT e.system_identifier, e.timeline, e.insert_lsn, e.durable_lsn FROM randflake.wal_durability() AS e;
COMMENT ON VIEW randflake.commit_evidence IS
'How far this server''s WAL is durable, for lease keepers to confirm their commits: a commit is durable once durable_lsn reaches the insert_lsn of a reading made after it returned, on the same system_identifier and timeline. Fleet members import it beside node_leases; their role needs SELECT on it and EXECUTE on randflake.wal_durability().';
COMMENT ON COLUMN randflake.commit_evidence.system_identifier IS 'This cluster''s system identifier.';
COMMENT ON COLUMN randflake.commit_evidence.timeline IS 'The timeline this server writes WAL on; a promoted standby starts a new one.';
COMMENT ON COLUMN randflake.commit_evidence.insert_lsn IS 'The WAL insert position when read: past the end of every commit that had returned.';
COMMENT ON COLUMN randflake.commit_evidence.durable_lsn IS 'The position through which WAL is durable as configured; NULL while fewer synchronous standbys are connected than asked for.';
REVOKE ALL ON randflake.commit_evidence FROM PUBLIC;

SELECT randflake.revoke_default_privileges();
