-- randflake_id: bigint's eight bytes, shown and read as the canonical string.
CREATE TABLE typed (id randflake_id PRIMARY KEY DEFAULT randflake_next(), n int);
CREATE TABLE plain (id bigint PRIMARY KEY, n int);
INSERT INTO typed (n) SELECT g FROM generate_series(1, 2000) g;
INSERT INTO plain SELECT id, n FROM typed;
ANALYZE typed;
ANALYZE plain;

-- Text in and out: the canonical string, the same as randflake_to_string() of the bigint.
SELECT count(*) AS rows,
       count(*) FILTER (WHERE t.id::text = randflake_to_string(p.id)) AS text_is_canonical,
       count(*) FILTER (WHERE t.id::text::randflake_id = t.id) AS text_round_trips
  FROM typed t JOIN plain p USING (n);
SELECT '3vgoe12ccb8gh'::randflake_id AS id, '3vgoe12ccb8gh'::randflake_id::bigint AS as_bigint,
       4594531474933654033::randflake_id AS from_bigint, 'fvvvvvvvvvvvv'::randflake_id::bigint AS minus_one;
-- Only canonical strings: the same errors as randflake_from_string().
SELECT input, regress.error_of(format('SELECT %L::randflake_id', input)) AS result
  FROM unnest(ARRAY['', '00', '1V', 'g000000000000', '4594531474933654033', ' 1', 'é']) AS input;

-- JSON gets a string, never a number that JavaScript would round.
SELECT to_jsonb(t) ->> 'id' = t.id::text AS jsonb_string,
       jsonb_typeof(to_jsonb(t) -> 'id') AS jsonb_type,
       json_typeof(to_json(t) -> 'id') AS json_type
  FROM typed t ORDER BY n LIMIT 1;
SELECT json_typeof(json_agg(t) -> 0 -> 'id') AS agg_type,
       (json_agg(t) -> 0 ->> 'id')::randflake_id = min(p.id) AS agg_value
  FROM (SELECT * FROM typed ORDER BY id LIMIT 1) t, plain p;

-- Casts: both ways on assignment (DEFAULT randflake_next() above, bigint columns) and explicitly
-- (the decoders take id::bigint); never implicitly, so a small integer compares unambiguously and
-- arithmetic on IDs is refused.
SELECT castcontext, castmethod, format_type(castsource, NULL) || ' -> ' || format_type(casttarget, NULL) AS cast
  FROM pg_cast WHERE 'randflake_id'::regtype IN (castsource, casttarget) ORDER BY 3;
SELECT count(*) FILTER (WHERE randflake_node_id(t.id::bigint) = randflake_node_id(p.id)) AS nodes_alike,
       count(*) FILTER (WHERE randflake_timestamp(t.id::bigint) = randflake_timestamp(p.id)) AS timestamps_alike
  FROM typed t JOIN plain p USING (n);
UPDATE plain SET id = typed.id FROM typed WHERE typed.n = plain.n AND plain.n <= 5;
SELECT count(*) FILTER (WHERE id = 5 OR id IN (1, 2, 3)) AS small_ids,
       count(*) FILTER (WHERE id < 0) = count(*) FILTER (WHERE id::bigint < 0::bigint) AS signs_compare
  FROM typed;
SELECT statement, regress.error_of(statement) AS result
  FROM unnest(ARRAY['SELECT id + 1 FROM typed', 'SELECT randflake_decode(id) FROM typed']) AS statement;

-- Order and equality are bigint's, also across the two types.
SELECT (SELECT array_agg(id ORDER BY id)::bigint[] FROM typed) = (SELECT array_agg(id ORDER BY id) FROM plain) AS same_order,
       (SELECT count(*) FROM typed t JOIN plain p ON t.id = p.id) AS joined,
       (SELECT count(*) FROM typed t JOIN plain p ON p.id < t.id AND t.n = p.n) AS none_less;

-- An index on a randflake_id column serves comparisons with a randflake_id, a string or a bigint.
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT n FROM typed WHERE id = '3vgoe12ccb8gh';
EXPLAIN (COSTS OFF) SELECT n FROM typed WHERE id = 4594531474933654033;
EXPLAIN (COSTS OFF) SELECT n FROM typed WHERE 4594531474933654033 > id;
SELECT count(*) AS found FROM typed t, plain p WHERE t.id = p.id AND t.id = p.id::randflake_id AND p.n = 7;
RESET enable_seqscan;
RESET enable_bitmapscan;
-- Joins with bigint columns by merging and by hashing.
SET enable_nestloop = off;
SET enable_hashjoin = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM typed t JOIN plain p ON t.id = p.id;
SELECT count(*) AS merged FROM typed t JOIN plain p ON t.id = p.id;
RESET enable_hashjoin;
SET enable_mergejoin = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM typed t JOIN plain p ON t.id = p.id;
SELECT count(*) AS hashed FROM typed t JOIN plain p ON t.id = p.id;
RESET enable_mergejoin;
RESET enable_nestloop;
CREATE INDEX typed_hash ON typed USING hash (id);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
ALTER TABLE typed DROP CONSTRAINT typed_pkey;
EXPLAIN (COSTS OFF) SELECT n FROM typed WHERE id = '3vgoe12ccb8gh';
RESET enable_seqscan;
RESET enable_bitmapscan;

-- A bigint column can reference a randflake_id key, and a column changes type in place (the
-- table is not rewritten: the same relfilenode before and after).
CREATE TABLE parent (id randflake_id PRIMARY KEY DEFAULT randflake_next());
CREATE TABLE child (parent_id bigint REFERENCES parent);
INSERT INTO parent SELECT FROM generate_series(1, 3);
INSERT INTO child SELECT id FROM parent;
SELECT regress.error_of('INSERT INTO child VALUES (12345)') AS orphan;
CREATE TEMP TABLE before AS SELECT pg_relation_filenode('plain') AS node, (SELECT array_agg(id ORDER BY n) FROM plain) AS ids;
ALTER TABLE plain ALTER COLUMN id TYPE randflake_id;
SELECT pg_relation_filenode('plain') = node AS not_rewritten,
       (SELECT array_agg(id::bigint ORDER BY n) FROM plain) = ids AS same_ids,
       format_type(atttypid, NULL) AS now
  FROM before, pg_attribute WHERE attrelid = 'plain'::regclass AND attname = 'id';

DROP TABLE typed, plain, child, parent;
