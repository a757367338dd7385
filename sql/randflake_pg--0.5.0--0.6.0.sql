-- randflake_pg 0.5.0 -> 0.6.0.
--
-- Run by ALTER EXTENSION randflake_pg UPDATE, and replayed at the end of every fresh install
-- script after the earlier upgrade scripts. Until 0.6.0 is released, this script may still grow;
-- once released, it never changes.

\echo Use "ALTER EXTENSION randflake_pg UPDATE" to load this file. \quit

-- Every object this script calls is named with its schema (pg_catalog's or @extschema@'s), so
-- that nothing a database owner put in a schema on search_path can run in its place.

-- ordered: randflake_key, a key ordered on disk and encrypted at the edge (issue 29).
-- It stores the plain 64-bit value of an ID ((second - 1730000000) << 34 | node << 17 |
-- sequence), so an index on it grows at its right end as an identity key's does, while its text
-- and binary forms, and every cast out of it, are the encrypted ID: exactly what
-- randflake_next() returns and randflake_to_string() prints. Input and output need the secret;
-- every process that prints or parses one (backends, parallel workers, walsenders decoding
-- logically) has it, since the secret is set in postgresql.conf only.
CREATE TYPE @extschema@.randflake_key;

CREATE FUNCTION @extschema@.randflake_key_in(cstring) RETURNS @extschema@.randflake_key
STABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_in_wrapper';
CREATE FUNCTION @extschema@.randflake_key_out(@extschema@.randflake_key) RETURNS cstring
STABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_out_wrapper';
CREATE FUNCTION @extschema@.randflake_key_recv(internal) RETURNS @extschema@.randflake_key
STABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_recv_wrapper';
CREATE FUNCTION @extschema@.randflake_key_send(@extschema@.randflake_key) RETURNS bytea
STABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_send_wrapper';

CREATE TYPE @extschema@.randflake_key (
    INPUT = @extschema@.randflake_key_in,
    OUTPUT = @extschema@.randflake_key_out,
    RECEIVE = @extschema@.randflake_key_recv,
    SEND = @extschema@.randflake_key_send,
    LIKE = pg_catalog.int8
);
COMMENT ON TYPE @extschema@.randflake_key IS
'A Randflake ID stored as its plain value, so that an index on it follows creation time, and shown encrypted: its text form is the ID''s canonical string (as randflake_to_string() prints it), its binary form and id::bigint the ID randflake_next() returns. Sorts by second, then node, then sequence: its plain value''s order, as an unsigned 64-bit integer. Input and output need the secret; input (text, binary, and the casts from bigint and randflake_id) also needs the decoder grant, EXECUTE on randflake_decode(bigint), since a key reveals the order of IDs.';
COMMENT ON FUNCTION @extschema@.randflake_key_in(cstring) IS
'Input of randflake_key: the canonical string of the ID only, as randflake_from_string() parses it, decrypted. For superusers and roles that may execute randflake_decode(bigint).';
COMMENT ON FUNCTION @extschema@.randflake_key_out(@extschema@.randflake_key) IS
'Output of randflake_key: the canonical string of the encrypted ID, as randflake_to_string() writes it.';
COMMENT ON FUNCTION @extschema@.randflake_key_recv(internal) IS
'Binary input of randflake_key: the ID as bigint''s eight bytes (big-endian, signed), decrypted. For superusers and roles that may execute randflake_decode(bigint).';
COMMENT ON FUNCTION @extschema@.randflake_key_send(@extschema@.randflake_key) IS
'Binary output of randflake_key: the encrypted ID as bigint''s eight bytes (big-endian, signed).';

-- Casts. Into the type (decrypting) on assignment or explicitly, and only for roles that may
-- decode: a key sorts by creation, so whoever can make keys of public IDs can order them. An
-- implicit cast would also let PostgreSQL reach the key's operators from expressions between its
-- own types (bigint = text would resolve through it). Out of the type (encrypting) on
-- assignment, so that bigint and randflake_id columns take a key. A public ID is compared with a
-- key by the equality operators below, which make no key.
CREATE FUNCTION @extschema@.randflake_key(bigint) RETURNS @extschema@.randflake_key
STABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_from_id_wrapper';
CREATE FUNCTION @extschema@.randflake_key(@extschema@.randflake_id) RETURNS @extschema@.randflake_key
STABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_from_id_wrapper';
CREATE FUNCTION @extschema@.randflake_key_to_bigint(@extschema@.randflake_key) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_to_id_wrapper';
CREATE FUNCTION @extschema@.randflake_key_to_id(@extschema@.randflake_key) RETURNS @extschema@.randflake_id
STABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_to_id_wrapper';
COMMENT ON FUNCTION @extschema@.randflake_key(bigint) IS
'The randflake_key of a Randflake ID (decrypted): the cast from bigint. For superusers and roles that may execute randflake_decode(bigint).';
COMMENT ON FUNCTION @extschema@.randflake_key(@extschema@.randflake_id) IS
'The randflake_key of a randflake_id (decrypted): the cast from randflake_id. For superusers and roles that may execute randflake_decode(bigint).';
COMMENT ON FUNCTION @extschema@.randflake_key_to_bigint(@extschema@.randflake_key) IS
'The Randflake ID a randflake_key holds (encrypted), as randflake_next() returns it: the cast to bigint.';
COMMENT ON FUNCTION @extschema@.randflake_key_to_id(@extschema@.randflake_key) IS
'The Randflake ID a randflake_key holds (encrypted): the cast to randflake_id.';

CREATE CAST (bigint AS @extschema@.randflake_key) WITH FUNCTION @extschema@.randflake_key(bigint) AS ASSIGNMENT;
CREATE CAST (@extschema@.randflake_id AS @extschema@.randflake_key)
    WITH FUNCTION @extschema@.randflake_key(@extschema@.randflake_id) AS ASSIGNMENT;
CREATE CAST (@extschema@.randflake_key AS bigint) WITH FUNCTION @extschema@.randflake_key_to_bigint(@extschema@.randflake_key) AS ASSIGNMENT;
CREATE CAST (@extschema@.randflake_key AS @extschema@.randflake_id)
    WITH FUNCTION @extschema@.randflake_key_to_id(@extschema@.randflake_key) AS ASSIGNMENT;
COMMENT ON CAST (bigint AS @extschema@.randflake_key) IS
'Decrypts, for superusers and roles that may execute randflake_decode(bigint); on assignment, so that a bigint column can be moved to randflake_key.';
COMMENT ON CAST (@extschema@.randflake_id AS @extschema@.randflake_key) IS
'Decrypts, for superusers and roles that may execute randflake_decode(bigint); on assignment.';
COMMENT ON CAST (@extschema@.randflake_key AS bigint) IS
'Encrypts: id::bigint is the public ID, as randflake_next() returns it. On assignment, so that a bigint column takes a randflake_key.';
COMMENT ON CAST (@extschema@.randflake_key AS @extschema@.randflake_id) IS
'Encrypts: the public ID as a randflake_id. On assignment, so that a randflake_id column takes a randflake_key.';

-- Comparison, in the order of randflake::format::ordered (the plain value as an unsigned 64-bit
-- integer: second, node, sequence): equality is bigint's (the same eight bytes), the order the
-- extension's. None of these can fail, so all are
-- LEAKPROOF, for security-barrier views and row security to use the index.
CREATE FUNCTION @extschema@.randflake_key_eq(@extschema@.randflake_key, @extschema@.randflake_key) RETURNS boolean
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE internal AS 'int8eq';
CREATE FUNCTION @extschema@.randflake_key_ne(@extschema@.randflake_key, @extschema@.randflake_key) RETURNS boolean
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE internal AS 'int8ne';
CREATE FUNCTION @extschema@.randflake_key_lt(@extschema@.randflake_key, @extschema@.randflake_key) RETURNS boolean
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_key_lt_wrapper';
CREATE FUNCTION @extschema@.randflake_key_le(@extschema@.randflake_key, @extschema@.randflake_key) RETURNS boolean
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_key_le_wrapper';
CREATE FUNCTION @extschema@.randflake_key_gt(@extschema@.randflake_key, @extschema@.randflake_key) RETURNS boolean
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_key_gt_wrapper';
CREATE FUNCTION @extschema@.randflake_key_ge(@extschema@.randflake_key, @extschema@.randflake_key) RETURNS boolean
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_key_ge_wrapper';
CREATE FUNCTION @extschema@.randflake_key_cmp(@extschema@.randflake_key, @extschema@.randflake_key) RETURNS integer
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_key_cmp_wrapper';
COMMENT ON FUNCTION @extschema@.randflake_key_eq(@extschema@.randflake_key, @extschema@.randflake_key) IS
'Whether two randflake_keys are the same ID: the function of operator =.';
COMMENT ON FUNCTION @extschema@.randflake_key_ne(@extschema@.randflake_key, @extschema@.randflake_key) IS
'Whether two randflake_keys are different IDs: the function of operator <>.';
COMMENT ON FUNCTION @extschema@.randflake_key_lt(@extschema@.randflake_key, @extschema@.randflake_key) IS
'Whether a randflake_key sorts before another (by second, then node, then sequence): the function of operator <.';
COMMENT ON FUNCTION @extschema@.randflake_key_le(@extschema@.randflake_key, @extschema@.randflake_key) IS
'Whether a randflake_key sorts before another or is the same: the function of operator <=.';
COMMENT ON FUNCTION @extschema@.randflake_key_gt(@extschema@.randflake_key, @extschema@.randflake_key) IS
'Whether a randflake_key sorts after another: the function of operator >.';
COMMENT ON FUNCTION @extschema@.randflake_key_ge(@extschema@.randflake_key, @extschema@.randflake_key) IS
'Whether a randflake_key sorts after another or is the same: the function of operator >=.';
COMMENT ON FUNCTION @extschema@.randflake_key_cmp(@extschema@.randflake_key, @extschema@.randflake_key) IS
'-1, 0 or 1 as a randflake_key sorts before, with or after another (by second, then node, then sequence): the btree support function.';
-- Sorts (CREATE INDEX, ORDER BY, merge joins) compare through this instead of calling
-- randflake_key_cmp() per comparison: without it, building an index over 5 M keys took 2.0x the
-- CPU time of the same IDs as bigint; with it, about as much (docs/ordered-keys.md).
CREATE FUNCTION @extschema@.randflake_key_sortsupport(internal) RETURNS void
IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_key_sortsupport';
COMMENT ON FUNCTION @extschema@.randflake_key_sortsupport(internal) IS
'Sort support of randflake_key''s btree operator class: sorts compare keys as unsigned 64-bit integers, with PostgreSQL''s own comparator, as they compare bigints.';

CREATE OPERATOR @extschema@.= (LEFTARG = @extschema@.randflake_key, RIGHTARG = @extschema@.randflake_key,
    FUNCTION = @extschema@.randflake_key_eq, COMMUTATOR = OPERATOR(@extschema@.=), NEGATOR = OPERATOR(@extschema@.<>),
    RESTRICT = pg_catalog.eqsel, JOIN = pg_catalog.eqjoinsel, HASHES, MERGES);
CREATE OPERATOR @extschema@.<> (LEFTARG = @extschema@.randflake_key, RIGHTARG = @extschema@.randflake_key,
    FUNCTION = @extschema@.randflake_key_ne, COMMUTATOR = OPERATOR(@extschema@.<>), NEGATOR = OPERATOR(@extschema@.=),
    RESTRICT = pg_catalog.neqsel, JOIN = pg_catalog.neqjoinsel);
CREATE OPERATOR @extschema@.< (LEFTARG = @extschema@.randflake_key, RIGHTARG = @extschema@.randflake_key,
    FUNCTION = @extschema@.randflake_key_lt, COMMUTATOR = OPERATOR(@extschema@.>), NEGATOR = OPERATOR(@extschema@.>=),
    RESTRICT = pg_catalog.scalarltsel, JOIN = pg_catalog.scalarltjoinsel);
CREATE OPERATOR @extschema@.<= (LEFTARG = @extschema@.randflake_key, RIGHTARG = @extschema@.randflake_key,
    FUNCTION = @extschema@.randflake_key_le, COMMUTATOR = OPERATOR(@extschema@.>=), NEGATOR = OPERATOR(@extschema@.>),
    RESTRICT = pg_catalog.scalarlesel, JOIN = pg_catalog.scalarlejoinsel);
CREATE OPERATOR @extschema@.> (LEFTARG = @extschema@.randflake_key, RIGHTARG = @extschema@.randflake_key,
    FUNCTION = @extschema@.randflake_key_gt, COMMUTATOR = OPERATOR(@extschema@.<), NEGATOR = OPERATOR(@extschema@.<=),
    RESTRICT = pg_catalog.scalargtsel, JOIN = pg_catalog.scalargtjoinsel);
CREATE OPERATOR @extschema@.>= (LEFTARG = @extschema@.randflake_key, RIGHTARG = @extschema@.randflake_key,
    FUNCTION = @extschema@.randflake_key_ge, COMMUTATOR = OPERATOR(@extschema@.<=), NEGATOR = OPERATOR(@extschema@.<),
    RESTRICT = pg_catalog.scalargesel, JOIN = pg_catalog.scalargejoinsel);
COMMENT ON OPERATOR @extschema@.= (@extschema@.randflake_key, @extschema@.randflake_key) IS 'Whether two randflake_keys are the same ID.';
COMMENT ON OPERATOR @extschema@.<> (@extschema@.randflake_key, @extschema@.randflake_key) IS 'Whether two randflake_keys are different IDs.';
COMMENT ON OPERATOR @extschema@.< (@extschema@.randflake_key, @extschema@.randflake_key) IS 'Made before (by second, then node, then sequence).';
COMMENT ON OPERATOR @extschema@.<= (@extschema@.randflake_key, @extschema@.randflake_key) IS 'Made before, or the same.';
COMMENT ON OPERATOR @extschema@.> (@extschema@.randflake_key, @extschema@.randflake_key) IS 'Made after (by second, then node, then sequence).';
COMMENT ON OPERATOR @extschema@.>= (@extschema@.randflake_key, @extschema@.randflake_key) IS 'Made after, or the same.';

-- The hash functions hash the public ID, as bigint's hash does: a hash of the plain value, which
-- anyone can reach through hash_array(), hash_record() or a hash partition's check, would give
-- the plain value away to whoever tried the few seconds, nodes and sequences an ID can have.
-- Hashing as bigint also lets a key and a bigint ID hash-join.
CREATE FUNCTION @extschema@.randflake_key_hash(@extschema@.randflake_key) RETURNS integer
STABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_key_hash_wrapper';
CREATE FUNCTION @extschema@.randflake_key_hash_extended(@extschema@.randflake_key, bigint) RETURNS bigint
STABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_key_hash_extended_wrapper';
COMMENT ON FUNCTION @extschema@.randflake_key_hash(@extschema@.randflake_key) IS
'The hash of a randflake_key: hashint8() of its public ID, for hash joins, hash aggregates, hash partitions and hash indexes. Reveals nothing the public ID does not.';
COMMENT ON FUNCTION @extschema@.randflake_key_hash_extended(@extschema@.randflake_key, bigint) IS
'The seeded hash of a randflake_key: hashint8extended() of its public ID.';

CREATE OPERATOR FAMILY @extschema@.randflake_key_ops USING btree;
CREATE OPERATOR CLASS @extschema@.randflake_key_ops DEFAULT FOR TYPE @extschema@.randflake_key
USING btree FAMILY @extschema@.randflake_key_ops AS
    OPERATOR 1 @extschema@.< (@extschema@.randflake_key, @extschema@.randflake_key),
    OPERATOR 2 @extschema@.<= (@extschema@.randflake_key, @extschema@.randflake_key),
    OPERATOR 3 @extschema@.= (@extschema@.randflake_key, @extschema@.randflake_key),
    OPERATOR 4 @extschema@.>= (@extschema@.randflake_key, @extschema@.randflake_key),
    OPERATOR 5 @extschema@.> (@extschema@.randflake_key, @extschema@.randflake_key),
    FUNCTION 1 @extschema@.randflake_key_cmp(@extschema@.randflake_key, @extschema@.randflake_key),
    FUNCTION 2 @extschema@.randflake_key_sortsupport(internal);
COMMENT ON OPERATOR FAMILY @extschema@.randflake_key_ops USING btree IS
'Orders randflake_keys by creation: second, then node, then sequence.';
COMMENT ON OPERATOR CLASS @extschema@.randflake_key_ops USING btree IS
'The default btree operator class of randflake_key: by second, then node, then sequence, the plain value''s order, in which a server makes its keys, so that they arrive at the right end of the index.';

CREATE OPERATOR FAMILY @extschema@.randflake_key_ops USING hash;
CREATE OPERATOR CLASS @extschema@.randflake_key_ops DEFAULT FOR TYPE @extschema@.randflake_key
USING hash FAMILY @extschema@.randflake_key_ops AS
    OPERATOR 1 @extschema@.= (@extschema@.randflake_key, @extschema@.randflake_key),
    FUNCTION 1 @extschema@.randflake_key_hash(@extschema@.randflake_key),
    FUNCTION 2 @extschema@.randflake_key_hash_extended(@extschema@.randflake_key, bigint);
COMMENT ON OPERATOR FAMILY @extschema@.randflake_key_ops USING hash IS
'Hashes randflake_keys as bigint hashes their public IDs, so that a key and a bigint ID hash-join.';
COMMENT ON OPERATOR CLASS @extschema@.randflake_key_ops USING hash IS
'The default hash operator class of randflake_key, for hash joins and hash indexes.';

CREATE OPERATOR FAMILY @extschema@.randflake_key_minmax_ops USING brin;
CREATE OPERATOR CLASS @extschema@.randflake_key_minmax_ops DEFAULT FOR TYPE @extschema@.randflake_key
USING brin FAMILY @extschema@.randflake_key_minmax_ops AS
    OPERATOR 1 @extschema@.< (@extschema@.randflake_key, @extschema@.randflake_key),
    OPERATOR 2 @extschema@.<= (@extschema@.randflake_key, @extschema@.randflake_key),
    OPERATOR 3 @extschema@.= (@extschema@.randflake_key, @extschema@.randflake_key),
    OPERATOR 4 @extschema@.>= (@extschema@.randflake_key, @extschema@.randflake_key),
    OPERATOR 5 @extschema@.> (@extschema@.randflake_key, @extschema@.randflake_key),
    FUNCTION 1 pg_catalog.brin_minmax_opcinfo(internal),
    FUNCTION 2 pg_catalog.brin_minmax_add_value(internal, internal, internal, internal),
    FUNCTION 3 pg_catalog.brin_minmax_consistent(internal, internal, internal),
    FUNCTION 4 pg_catalog.brin_minmax_union(internal, internal, internal);
COMMENT ON OPERATOR FAMILY @extschema@.randflake_key_minmax_ops USING brin IS
'Block ranges of randflake_keys summarized by their lowest and highest key.';
COMMENT ON OPERATOR CLASS @extschema@.randflake_key_minmax_ops USING brin IS
'The default BRIN operator class of randflake_key: minmax, for tables whose rows arrive in creation order.';

-- Generating, time ranges and decoding.
CREATE FUNCTION @extschema@.randflake_next_key() RETURNS @extschema@.randflake_key
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_next_key_wrapper';
COMMENT ON FUNCTION @extschema@.randflake_next_key() IS
'Returns a new Randflake ID as a randflake_key, without encrypting it: the same IDs randflake_next() issues. Use as: id randflake_key PRIMARY KEY DEFAULT randflake_next_key().';

CREATE FUNCTION @extschema@.randflake_key_lowest(timestamp with time zone) RETURNS @extschema@.randflake_key
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_lowest_wrapper';
CREATE FUNCTION @extschema@.randflake_key_highest(timestamp with time zone) RETURNS @extschema@.randflake_key
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_highest_wrapper';
COMMENT ON FUNCTION @extschema@.randflake_key_lowest(timestamp with time zone) IS
'The lowest randflake_key of the second a time falls in: id >= randflake_key_lowest(t1) AND id < randflake_key_lowest(t2) selects the keys made from t1''s second to before t2''s, by an index range scan. Forges IDs of a chosen second and reveals any ID''s second, so EXECUTE is granted to no one by default.';
COMMENT ON FUNCTION @extschema@.randflake_key_highest(timestamp with time zone) IS
'The highest randflake_key of the second a time falls in. Forges IDs of a chosen second and reveals any ID''s second, so EXECUTE is granted to no one by default.';
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_key_lowest(timestamp with time zone) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_key_highest(timestamp with time zone) FROM PUBLIC;

-- Decoding a key needs no cipher (it holds the plain value), but reveals as much as decoding the
-- ID. These are not overloads of randflake_decode() and its accessors: with a second overload, a
-- call with an untyped argument (a literal, or a parameter a driver sends untyped, as
-- node-postgres does), which 0.5.0 resolved to the bigint version, would be ambiguous.
CREATE FUNCTION @extschema@.randflake_key_decode(id @extschema@.randflake_key)
RETURNS TABLE ("timestamp" timestamp with time zone, node_id integer, sequence integer)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_decode_wrapper';
CREATE FUNCTION @extschema@.randflake_key_timestamp(id @extschema@.randflake_key) RETURNS timestamp with time zone
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_timestamp_wrapper';
CREATE FUNCTION @extschema@.randflake_key_node_id(id @extschema@.randflake_key) RETURNS integer
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_node_id_wrapper';
CREATE FUNCTION @extschema@.randflake_key_sequence(id @extschema@.randflake_key) RETURNS integer
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_key_sequence_wrapper';
COMMENT ON FUNCTION @extschema@.randflake_key_decode(@extschema@.randflake_key) IS
'The second a randflake_key was made in, the node that made it and its sequence within that node and second: randflake_decode(id::bigint) without the cipher. EXECUTE is granted to no one by default.';
COMMENT ON FUNCTION @extschema@.randflake_key_timestamp(@extschema@.randflake_key) IS
'The second a randflake_key was made in: randflake_key_decode(id).timestamp. EXECUTE is granted to no one by default.';
COMMENT ON FUNCTION @extschema@.randflake_key_node_id(@extschema@.randflake_key) IS
'The node that made a randflake_key: randflake_key_decode(id).node_id. EXECUTE is granted to no one by default.';
COMMENT ON FUNCTION @extschema@.randflake_key_sequence(@extschema@.randflake_key) IS
'A randflake_key''s sequence within its node and second: randflake_key_decode(id).sequence. EXECUTE is granted to no one by default.';
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_key_decode(@extschema@.randflake_key) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_key_timestamp(@extschema@.randflake_key) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_key_node_id(@extschema@.randflake_key) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_key_sequence(@extschema@.randflake_key) FROM PUBLIC;

-- Equality between a randflake_key and a public ID (issue 36). A role that may read a key column
-- finds a row by its public ID as a driver sends it (a bigint; an integer or smallint for the few
-- IDs that fit one; a randflake_id; the string as text or varchar) without making a key of it,
-- which only roles that may decode can do. Each operator tells only whether the two are the same
-- ID, so it is everyone's. The operators join the key's btree family, with support functions
-- that order a public ID by its plain value: the index then serves `id = $1`, `id = ANY($1)`
-- and joins to a bigint column (a nested loop probing the index). Those support functions
-- reveal the order of any IDs, so EXECUTE on them is granted to no one: btree calls them
-- without it. Equality with a bigint also hashes (the key's hash is bigint's hash of its public
-- ID), for hash joins. Only equality: an order between a key and a public ID would be the
-- oracle this release closes, and a family holding one would let merge joins sort public IDs.
DO $$
DECLARE
    public record;
BEGIN
    FOR public IN
        -- Each function's name says its type: with one name for all five, a call with an
        -- untyped argument could not choose between them.
        SELECT * FROM (VALUES ('pg_catalog.int2', 'int2', 'smallint', 'smallint', ' LEAKPROOF'),
                              ('pg_catalog.int4', 'int4', 'integer', 'integer', ' LEAKPROOF'),
                              ('pg_catalog.int8', 'int8', 'bigint', 'bigint', ' LEAKPROOF'),
                              ('@extschema@.randflake_id', 'int8', 'randflake_id', 'id', ' LEAKPROOF'),
                              -- An invalid string raises an error that shows it: not leakproof.
                              ('pg_catalog.text', 'text', 'text', 'text', ''))
               AS t(type, symbol, word, name, leakproof)
    LOOP
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION @extschema@.randflake_key_eq_%15$s(@extschema@.randflake_key, %1$s) RETURNS boolean '
            'STABLE STRICT PARALLEL SAFE%3$s LANGUAGE c AS %4$L, %5$L;'
            'CREATE FUNCTION @extschema@.randflake_key_ne_%15$s(@extschema@.randflake_key, %1$s) RETURNS boolean '
            'STABLE STRICT PARALLEL SAFE%3$s LANGUAGE c AS %4$L, %6$L;'
            'CREATE FUNCTION @extschema@.randflake_%15$s_eq_key(%1$s, @extschema@.randflake_key) RETURNS boolean '
            'STABLE STRICT PARALLEL SAFE%3$s LANGUAGE c AS %4$L, %7$L;'
            'CREATE FUNCTION @extschema@.randflake_%15$s_ne_key(%1$s, @extschema@.randflake_key) RETURNS boolean '
            'STABLE STRICT PARALLEL SAFE%3$s LANGUAGE c AS %4$L, %8$L;'
            'CREATE FUNCTION @extschema@.randflake_key_order_%15$s(@extschema@.randflake_key, %1$s) RETURNS integer '
            'STABLE STRICT PARALLEL SAFE LANGUAGE c AS %4$L, %9$L;'
            'CREATE FUNCTION @extschema@.randflake_%15$s_order(%1$s, %1$s) RETURNS integer '
            'STABLE STRICT PARALLEL SAFE LANGUAGE c AS %4$L, %10$L;'
            'REVOKE EXECUTE ON FUNCTION @extschema@.randflake_key_order_%15$s(@extschema@.randflake_key, %1$s) FROM PUBLIC;'
            'REVOKE EXECUTE ON FUNCTION @extschema@.randflake_%15$s_order(%1$s, %1$s) FROM PUBLIC;'
            'COMMENT ON FUNCTION @extschema@.randflake_key_eq_%15$s(@extschema@.randflake_key, %1$s) IS '
            '%11$L;'
            'COMMENT ON FUNCTION @extschema@.randflake_key_ne_%15$s(@extschema@.randflake_key, %1$s) IS '
            '%12$L;'
            'COMMENT ON FUNCTION @extschema@.randflake_%15$s_eq_key(%1$s, @extschema@.randflake_key) IS '
            '%11$L;'
            'COMMENT ON FUNCTION @extschema@.randflake_%15$s_ne_key(%1$s, @extschema@.randflake_key) IS '
            '%12$L;'
            'COMMENT ON FUNCTION @extschema@.randflake_key_order_%15$s(@extschema@.randflake_key, %1$s) IS '
            '%13$L;'
            'COMMENT ON FUNCTION @extschema@.randflake_%15$s_order(%1$s, %1$s) IS '
            '%14$L;',
            public.type, public.word, public.leakproof, 'MODULE_PATHNAME',
            pg_catalog.format('randflake_key_eq_%s_wrapper', public.symbol),
            pg_catalog.format('randflake_key_ne_%s_wrapper', public.symbol),
            pg_catalog.format('randflake_%s_eq_key_wrapper', public.symbol),
            pg_catalog.format('randflake_%s_ne_key_wrapper', public.symbol),
            pg_catalog.format('randflake_key_order_%s_wrapper', public.symbol),
            pg_catalog.format('randflake_%s_order_wrapper', public.symbol),
            pg_catalog.format('Whether a randflake_key and a public ID given as %s are the same ID: the function of operator =.', public.word),
            pg_catalog.format('Whether a randflake_key and a public ID given as %s are different IDs: the function of operator <>.', public.word),
            pg_catalog.format('-1, 0 or 1 as a randflake_key sorts before, with or after the plain value of a public ID given as %s: btree support of operator = between them, for index scans. Reveals the order of IDs, so EXECUTE is granted to no one.', public.word),
            pg_catalog.format('-1, 0 or 1 as the plain value of one public ID given as %s sorts before, with or after another''s: btree support, for sorting an array of IDs an index scan looks up. Reveals the order of IDs, so EXECUTE is granted to no one.', public.word),
            public.name);
        EXECUTE pg_catalog.format(
            'CREATE OPERATOR @extschema@.= (LEFTARG = @extschema@.randflake_key, RIGHTARG = %1$s, '
            'FUNCTION = @extschema@.randflake_key_eq_%5$s, COMMUTATOR = OPERATOR(@extschema@.=), '
            'NEGATOR = OPERATOR(@extschema@.<>), RESTRICT = pg_catalog.eqsel, JOIN = pg_catalog.eqjoinsel%2$s);'
            'CREATE OPERATOR @extschema@.<> (LEFTARG = @extschema@.randflake_key, RIGHTARG = %1$s, '
            'FUNCTION = @extschema@.randflake_key_ne_%5$s, COMMUTATOR = OPERATOR(@extschema@.<>), '
            'NEGATOR = OPERATOR(@extschema@.=), RESTRICT = pg_catalog.neqsel, JOIN = pg_catalog.neqjoinsel);'
            'CREATE OPERATOR @extschema@.= (LEFTARG = %1$s, RIGHTARG = @extschema@.randflake_key, '
            'FUNCTION = @extschema@.randflake_%5$s_eq_key, COMMUTATOR = OPERATOR(@extschema@.=), '
            'NEGATOR = OPERATOR(@extschema@.<>), RESTRICT = pg_catalog.eqsel, JOIN = pg_catalog.eqjoinsel%2$s);'
            'CREATE OPERATOR @extschema@.<> (LEFTARG = %1$s, RIGHTARG = @extschema@.randflake_key, '
            'FUNCTION = @extschema@.randflake_%5$s_ne_key, COMMUTATOR = OPERATOR(@extschema@.<>), '
            'NEGATOR = OPERATOR(@extschema@.=), RESTRICT = pg_catalog.neqsel, JOIN = pg_catalog.neqjoinsel);'
            'COMMENT ON OPERATOR @extschema@.= (@extschema@.randflake_key, %1$s) IS %3$L;'
            'COMMENT ON OPERATOR @extschema@.<> (@extschema@.randflake_key, %1$s) IS %4$L;'
            'COMMENT ON OPERATOR @extschema@.= (%1$s, @extschema@.randflake_key) IS %3$L;'
            'COMMENT ON OPERATOR @extschema@.<> (%1$s, @extschema@.randflake_key) IS %4$L;'
            'ALTER OPERATOR FAMILY @extschema@.randflake_key_ops USING btree ADD '
            'OPERATOR 3 @extschema@.= (@extschema@.randflake_key, %1$s), '
            'FUNCTION 1 (@extschema@.randflake_key, %1$s) @extschema@.randflake_key_order_%5$s(@extschema@.randflake_key, %1$s), '
            'FUNCTION 1 (%1$s, %1$s) @extschema@.randflake_%5$s_order(%1$s, %1$s);',
            public.type, CASE WHEN public.word = 'bigint' THEN ', HASHES' ELSE '' END,
            pg_catalog.format('The same ID: a randflake_key and a public ID given as %s. Uses the key''s index.', public.word),
            pg_catalog.format('Different IDs: a randflake_key and a public ID given as %s.', public.word),
            public.name);
    END LOOP;
END
$$;
-- The family holds bigint's own equality too: a hash join or semi-join hashes each side within
-- one family by its own type's equality (`id IN (SELECT unnest($1::bigint[]))` failed to plan
-- without it, "could not find compatible hash operator").
ALTER OPERATOR FAMILY @extschema@.randflake_key_ops USING hash ADD
    OPERATOR 1 @extschema@.= (@extschema@.randflake_key, bigint),
    OPERATOR 1 @extschema@.= (bigint, @extschema@.randflake_key),
    OPERATOR 1 pg_catalog.= (bigint, bigint),
    FUNCTION 1 (bigint, bigint) pg_catalog.hashint8(bigint),
    FUNCTION 2 (bigint, bigint) pg_catalog.hashint8extended(bigint, bigint);

-- max() and min() over randflake_key: the newest and oldest key of a column. Their sort
-- operators let the planner answer either from the btree index's end (one index probe, as for
-- bigint) instead of reading every row; the combine functions let a parallel scan share the work.
CREATE FUNCTION @extschema@.randflake_key_larger(@extschema@.randflake_key, @extschema@.randflake_key) RETURNS @extschema@.randflake_key
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_key_larger_wrapper';
CREATE FUNCTION @extschema@.randflake_key_smaller(@extschema@.randflake_key, @extschema@.randflake_key) RETURNS @extschema@.randflake_key
IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_key_smaller_wrapper';
CREATE AGGREGATE @extschema@.max(@extschema@.randflake_key) (
    SFUNC = @extschema@.randflake_key_larger, STYPE = @extschema@.randflake_key,
    COMBINEFUNC = @extschema@.randflake_key_larger, SORTOP = OPERATOR(@extschema@.>), PARALLEL = SAFE
);
CREATE AGGREGATE @extschema@.min(@extschema@.randflake_key) (
    SFUNC = @extschema@.randflake_key_smaller, STYPE = @extschema@.randflake_key,
    COMBINEFUNC = @extschema@.randflake_key_smaller, SORTOP = OPERATOR(@extschema@.<), PARALLEL = SAFE
);
COMMENT ON FUNCTION @extschema@.randflake_key_larger(@extschema@.randflake_key, @extschema@.randflake_key) IS
'The later of two keys in the key''s order (by creation second): the transition function of max(randflake_key).';
COMMENT ON FUNCTION @extschema@.randflake_key_smaller(@extschema@.randflake_key, @extschema@.randflake_key) IS
'The earlier of two keys in the key''s order (by creation second): the transition function of min(randflake_key).';
COMMENT ON AGGREGATE @extschema@.max(@extschema@.randflake_key) IS
'The newest key of a randflake_key column, in the key''s order; from the btree index''s end when there is one.';
COMMENT ON AGGREGATE @extschema@.min(@extschema@.randflake_key) IS
'The oldest key of a randflake_key column, in the key''s order; from the btree index''s end when there is one.';

-- The rest of 0.6.0: the lease table, application leases and monitoring.

CREATE FUNCTION randflake.flush_inserted_wal() RETURNS pg_catalog.pg_lsn
VOLATILE PARALLEL UNSAFE LANGUAGE c AS 'MODULE_PATHNAME', 'randflake_flush_inserted_wal_wrapper';
COMMENT ON FUNCTION randflake.flush_inserted_wal() IS
'Flushes this server''s WAL through the end of every record inserted so far and returns that position (NULL on a standby): randflake.wal_durability()''s insert_lsn. A record inserted after a commit on an otherwise idle server would stay unflushed, and a keeper comparing the flush position with the insert position would wait for it in vain.';
REVOKE ALL ON FUNCTION randflake.flush_inserted_wal() FROM PUBLIC;

-- Commit evidence: a lease write counts only once the server holding the lease table shows it durable.
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
    -- First: every commit that had returned before this call ends at or before it, and
    -- everything up to it is flushed here, as the commits were (records inserted since, which
    -- no commit flushed, would otherwise hold durable_lsn back on an idle server).
    insert_lsn := randflake.flush_inserted_wal();
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

-- table: one owner for the lease table (issue 28).
--
-- Only randflake_pg's own code writes randflake.node_leases: its keeper and lease procedures
-- mark their statements (a flag inside the backend that no SQL can set), and this trigger
-- refuses every other write by a session that did not log in as a superuser, whatever
-- privileges its role holds (pg_write_all_data, explicit grants, ownership). On a server that is
-- not in range mode (a fleet's coordinator has node_source fleet or off) it lets the members'
-- writes through postgres_fdw do what their keepers need and no more: no row deleted or
-- replaced while its seconds may be in use by this server's clock plus 60 s of skew, ends and high-water marks only moved forward, no row starting in the past, no TRUNCATE.
-- An application lease's release gets its end from this server's clock here.
CREATE FUNCTION randflake.authorize_lease_write() RETURNS trigger
LANGUAGE c
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'authorize_lease_write_wrapper';
COMMENT ON FUNCTION randflake.authorize_lease_write() IS
'Trigger of randflake.node_leases: refuses every write (INSERT, UPDATE, DELETE, TRUNCATE) that randflake_pg''s own code did not make, unless the session''s user is a superuser; on a server not in range mode (a fleet''s coordinator), lets its members'' writes do only what their keepers need, and sets a released application lease''s end by this server''s clock.';
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
-- randflake_status() and randflake_app_leases(), which run in a statement of their own. Nor may
-- it use the schema: PostgreSQL locks a table it names while parsing, before checking the
-- privilege, so a PREPARE of a SELECT from the table in an open transaction held its lock without
-- SELECT on it (issue 36). Without USAGE on the schema the name does not resolve, and nothing is
-- locked.
REVOKE SELECT ON randflake.node_leases FROM pg_monitor;
REVOKE USAGE ON SCHEMA randflake FROM pg_monitor;
COMMENT ON FUNCTION @extschema@.randflake_app_leases() IS
'The application pool, for monitoring: its first and last node, the leases held, the nodes free now and the soonest end of a held lease. No row on a server without a pool, outside randflake.database, or on a fleet member, where the pool''s state is the coordinator''s (ask it there). Refused inside a transaction block, so that no session keeps a lock on the lease table. For superusers and pg_monitor.';

-- applease and table: randflake.revoke_default_privileges(), as 0.5.0 made it, names every
-- routine a FUNCTION, which REVOKE refuses for a procedure, and restores pg_monitor's SELECT on
-- the lease table: the same function, naming procedures as such, without that grant.
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
            USING HINT = 'randflake_pg grants decoding and the lease table to nobody; GRANT by name what a role should have.';
    END LOOP;
    -- What the extension itself grants, in case a default privilege named the same role.
    GRANT EXECUTE ON FUNCTION @extschema@.randflake_status() TO pg_monitor;
    GRANT EXECUTE ON FUNCTION @extschema@.randflake_app_leases() TO pg_monitor;
END
$$;
COMMENT ON FUNCTION randflake.revoke_default_privileges() IS
'Takes from every object of randflake_pg each privilege that its owner''s ALTER DEFAULT PRIVILEGES granted to a role, with a WARNING for each, then restores the extension''s own grants to pg_monitor (its status functions). Every install and upgrade script ends by calling it, so that decoding and the lease table stay granted to nobody.';


-- waits: randflake_status() gains keeper_ticks, the ticks the lease keeper completed since
-- start-up, so that monitoring and tests can wait for the keeper to act rather than for the
-- clock. shared position: the server's backends share its nodes, so the columns of nodes say
-- how many nodes the server used in this second and the one before (nodes_in_use: in either),
-- and waits_for_next_second counts the calls that found every node of the lease used up. A
-- column cannot be added by CREATE OR REPLACE, so the function is dropped and created again (a
-- view a DBA built on it makes the DROP fail, naming the view: drop it, update, create it
-- again). Until then a 0.6.0 library answers the 0.5.0 declaration with its 14 columns.
DROP FUNCTION @extschema@.randflake_status();
CREATE FUNCTION @extschema@.randflake_status() RETURNS TABLE (
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
    nodes_used_this_second integer,
    nodes_used_last_second integer,
    node_switches bigint,
    waits_for_next_second bigint,
    clock_refusals bigint,
    lease_refusals bigint,
    keeper_pid integer,
    keeper_ticks bigint
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_status_wrapper';

COMMENT ON FUNCTION @extschema@.randflake_status() IS
'One row describing this server''s ID generation: node source (range, fleet, off), state (active, waiting for the clock to reach the lease, lease lapsed, standby, ...), the leased nodes and seconds, the high-water mark IDs may be issued through, the nodes the server used in this second or the one before (in use) and the others (free), the nodes used in this second and in the last, counts since start-up of node switches (a node''s second used up and the next node begun), waits for the next second (every node''s second used up), clock refusals and lease refusals, the lease keeper''s pid and the ticks it completed since start-up. For superusers and pg_monitor.';

REVOKE EXECUTE ON FUNCTION @extschema@.randflake_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.randflake_status() TO pg_monitor;

SELECT randflake.revoke_default_privileges();
