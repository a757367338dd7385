-- randflake_pg 0.3.0 -> 0.4.0: scalar accessors for decoding at scale.
--
-- Run by ALTER EXTENSION randflake_pg UPDATE, and replayed at the end of every fresh install
-- script after the earlier upgrade scripts. A released script never changes.

\echo Use "ALTER EXTENSION randflake_pg UPDATE" to load this file. \quit

-- Each returns one field of randflake_decode(id). A plain function is called once per row by
-- the executor; the set-returning randflake_decode costs several times more per row. As pgrx
-- declares them from src/functions.rs: in a fresh install pgrx has already created them and
-- these statements replace them with the same definitions.
CREATE OR REPLACE FUNCTION @extschema@.randflake_timestamp(id bigint) RETURNS timestamp with time zone
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_timestamp_wrapper';

CREATE OR REPLACE FUNCTION @extschema@.randflake_node_id(id bigint) RETURNS integer
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_node_id_wrapper';

CREATE OR REPLACE FUNCTION @extschema@.randflake_sequence(id bigint) RETURNS integer
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_sequence_wrapper';

COMMENT ON FUNCTION @extschema@.randflake_timestamp(bigint) IS
'The second a Randflake ID was made in: randflake_decode(id).timestamp, several times cheaper per row. Requires the secret; EXECUTE is granted to no one by default. No index can be built on it: the result depends on the secret, which may change.';

COMMENT ON FUNCTION @extschema@.randflake_node_id(bigint) IS
'The node that made a Randflake ID: randflake_decode(id).node_id, several times cheaper per row. Requires the secret; EXECUTE is granted to no one by default.';

COMMENT ON FUNCTION @extschema@.randflake_sequence(bigint) IS
'The sequence of a Randflake ID within its node and second: randflake_decode(id).sequence, several times cheaper per row. Requires the secret; EXECUTE is granted to no one by default.';

-- Decoding reveals when and where a row was made: the very thing the secret hides.
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_timestamp(bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_node_id(bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_sequence(bigint) FROM PUBLIC;
