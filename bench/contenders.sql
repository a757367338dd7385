-- What users would pick instead of randflake_next(), for `make bench`. All in schema bench.
CREATE EXTENSION IF NOT EXISTS randflake_pg;
DROP SCHEMA IF EXISTS bench CASCADE;
CREATE SCHEMA bench;

CREATE SEQUENCE bench.seq_cache1 CACHE 1;
CREATE SEQUENCE bench.seq_cache100 CACHE 100;

-- Snowflake-style key in PL/pgSQL, as Instagram described it: milliseconds since a custom
-- epoch (41 bits), a shard number (13 bits) and a per-millisecond counter from a sequence
-- (10 bits).
CREATE SEQUENCE bench.instagram_counter;
CREATE FUNCTION bench.instagram_next_id() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    millis bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1577836800000;
    counter bigint := nextval('bench.instagram_counter') % 1024;
BEGIN
    RETURN (millis << 23) | (7 << 10) | counter;
END
$$;

-- The "unpredictable bigint in pure SQL" alternative: a four-round balanced Feistel network
-- over the two 32-bit halves of a sequence value, keyed by per-round hash seeds.
CREATE SEQUENCE bench.feistel_counter;
CREATE FUNCTION bench.feistel_permute(value bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    left_half bigint := (value >> 32) & 4294967295;
    right_half bigint := value & 4294967295;
    previous_right bigint;
    round_key bigint;
BEGIN
    FOREACH round_key IN ARRAY ARRAY[7919, 104729, 1299709, 15485863]::bigint[] LOOP
        previous_right := right_half;
        right_half := left_half # (hashint8extended(right_half, round_key) & 4294967295);
        left_half := previous_right;
    END LOOP;
    RETURN (left_half << 32) | right_half;
END
$$;
