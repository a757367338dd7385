-- Comments and privileges for the functions of release 0.1.0. Later releases' objects are made by
-- their upgrade scripts, which the install script replays after this file.

COMMENT ON FUNCTION @extschema@.randflake_next() IS
'Returns a new Randflake ID: a bigint unique across every server that shares the secret and uses a disjoint node range, and unpredictable without the secret. Use as: id bigint PRIMARY KEY DEFAULT randflake_next().';

COMMENT ON FUNCTION @extschema@.randflake_decode(bigint) IS
'Decrypts a Randflake ID into the second it was made in, the node that made it and its sequence within that node and second. Requires the secret; EXECUTE is granted to no one by default.';

COMMENT ON FUNCTION @extschema@.randflake_to_string(bigint) IS
'Canonical string form of a Randflake ID: 1 to 13 lower-case base32hex digits (0-9, a-v) of the unsigned 64-bit value, as in the Go, Python and TypeScript ports.';

COMMENT ON FUNCTION @extschema@.randflake_from_string(text) IS
'Parses the canonical string form of a Randflake ID back into the bigint. Rejects upper case, padding, leading zeros, white space and values over 64 bits.';

-- Decoding reveals when and where a row was made: the very thing the secret hides.
REVOKE EXECUTE ON FUNCTION @extschema@.randflake_decode(bigint) FROM PUBLIC;
