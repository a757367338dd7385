-- randflake_pg 0.1.0 -> 0.2.0: node leases and randflake_status().
--
-- Run by ALTER EXTENSION randflake_pg UPDATE, and replayed at the end of every fresh install
-- script, so that an updated database and a new one are built by the same statements. A
-- released script changes only in how it names what it uses, never in what it makes (0.6.0
-- named pg_catalog's operators); the next release adds its own.

\echo Use "ALTER EXTENSION randflake_pg UPDATE" to load this file. \quit

-- The lease table: which server may issue IDs with which nodes, in which seconds.
-- The lease keeper of each server writes it in its own transactions; see docs/operating.md.

CREATE SCHEMA randflake;
COMMENT ON SCHEMA randflake IS
'randflake_pg''s node leases. The lease keeper background worker writes them; superusers and pg_monitor may read them.';

-- Every operator is named with its schema, here and below: a script runs with @extschema@ on
-- search_path, where a database owner could have put a better-matching one.
CREATE TABLE randflake.node_leases (
    first_node   integer NOT NULL CONSTRAINT first_node_is_a_node
                 CHECK (first_node OPERATOR(pg_catalog.>=) 0 AND first_node OPERATOR(pg_catalog.<=) 131071),
    last_node    integer NOT NULL CONSTRAINT last_node_ends_the_block
                 CHECK (last_node OPERATOR(pg_catalog.>=) first_node AND last_node OPERATOR(pg_catalog.<=) 131071),
    holder       text    NOT NULL,
    server_name  text    NOT NULL,
    lease_start  bigint  NOT NULL CONSTRAINT lease_start_fits_an_id
                 CHECK (lease_start OPERATOR(pg_catalog.>=) 1730000000 AND lease_start OPERATOR(pg_catalog.<=) 2803741823),
    lease_end    bigint  NOT NULL CONSTRAINT lease_end_fits_an_id
                 CHECK (lease_end OPERATOR(pg_catalog.>=) lease_start AND lease_end OPERATOR(pg_catalog.<=) 2803741823),
    used_through bigint  NOT NULL,
    renewed_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (first_node, lease_start),
    CONSTRAINT used_through_within_lease
        CHECK (used_through OPERATOR(pg_catalog.>=) (lease_start OPERATOR(pg_catalog.-) 1)
               AND used_through OPERATOR(pg_catalog.<=) lease_end),
    -- No two leases share a node and a second, whichever servers wrote them and however
    -- concurrently: a losing writer gets 23P01 and tries another block or later seconds.
    CONSTRAINT node_leases_do_not_overlap EXCLUDE USING gist (
        pg_catalog.int4range(first_node, last_node, '[]') WITH OPERATOR(pg_catalog.&&),
        pg_catalog.int8range(lease_start, lease_end, '[]') WITH OPERATOR(pg_catalog.&&)
    )
);

COMMENT ON TABLE randflake.node_leases IS
'Leases of Randflake node blocks: a server issues IDs with nodes first_node..last_node only in seconds lease_start..lease_end (Unix time), and only up to used_through. A new lease of a node always starts after every earlier lease of that node ended. Written only by lease keepers; in fleet mode, the coordination server''s table is the one that counts.';
COMMENT ON COLUMN randflake.node_leases.first_node IS 'First node id of the leased block.';
COMMENT ON COLUMN randflake.node_leases.last_node IS 'Last node id of the leased block (inclusive).';
COMMENT ON COLUMN randflake.node_leases.holder IS 'The holding server''s identity: system identifier/timeline. A promoted standby or a restored backup is a new holder.';
COMMENT ON COLUMN randflake.node_leases.server_name IS 'Readable name of the holder: cluster_name, or host:port.';
COMMENT ON COLUMN randflake.node_leases.lease_start IS 'First second (Unix time) of the lease.';
COMMENT ON COLUMN randflake.node_leases.lease_end IS 'Last second (Unix time) of the lease, inclusive. Renewed by the holder while it runs.';
COMMENT ON COLUMN randflake.node_leases.used_through IS 'Durable high-water mark: the holder issues no ID after this second until it has recorded a later one. A restarted holder resumes right after it.';
COMMENT ON COLUMN randflake.node_leases.renewed_at IS 'When the holder last wrote this row, by the clock of the server storing it.';

CREATE FUNCTION randflake.check_node_lease() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
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
'Trigger of randflake.node_leases: a new lease starts after every earlier lease of its nodes; a lease''s nodes, holder and start never change; used_through never moves back.';

CREATE TRIGGER check_node_lease BEFORE INSERT OR UPDATE ON randflake.node_leases
    FOR EACH ROW EXECUTE FUNCTION randflake.check_node_lease();

-- Not registered with pg_extension_config_dump: a database restored from a dump lives on another
-- server, which takes its own lease; old rows would only collide with it.

REVOKE ALL ON randflake.node_leases FROM PUBLIC;
REVOKE ALL ON FUNCTION randflake.check_node_lease() FROM PUBLIC;
GRANT USAGE ON SCHEMA randflake TO pg_monitor;
GRANT SELECT ON randflake.node_leases TO pg_monitor;

-- The status function, as pgrx declares it from src/functions.rs. In a fresh install pgrx has
-- already created it and this replaces it with the same definition.
CREATE OR REPLACE FUNCTION @extschema@.randflake_status() RETURNS TABLE (
    node_source text,
    state text,
    first_node integer,
    last_node integer,
    lease_start timestamp with time zone,
    lease_end timestamp with time zone,
    issuable_through timestamp with time zone,
    renewed_at timestamp with time zone,
    nodes_in_use integer,
    nodes_free integer,
    node_switches bigint,
    clock_refusals bigint,
    lease_refusals bigint,
    keeper_pid integer
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_status_wrapper';

COMMENT ON FUNCTION @extschema@.randflake_status() IS
'One row describing this server''s ID generation: node source (range, fleet, off), state (active, waiting for the clock to reach the lease, lease lapsed, standby, ...), the leased nodes and seconds, the high-water mark IDs may be issued through, nodes held and free, and counts since start-up of node switches (a node''s second used up), clock refusals and lease refusals. For superusers and pg_monitor.';

REVOKE EXECUTE ON FUNCTION @extschema@.randflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.randflake_status() TO pg_monitor;
