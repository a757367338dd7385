-- The installed objects, their properties and documentation, and ID generation.
CREATE EXTENSION randflake_pg;
\dx+ randflake_pg

-- Every function is documented, with the volatility and parallel safety its contract needs.
SELECT p.oid::regprocedure AS function,
       p.provolatile AS volatility,
       p.proparallel AS parallel,
       p.proisstrict AS strict,
       pg_get_function_result(p.oid) AS result,
       length(obj_description(p.oid, 'pg_proc')) > 40 AS documented
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'randflake_pg'
 ORDER BY p.oid::regprocedure::text COLLATE "C";

-- Every other object of the extension (its schema, table, type, casts, operators and operator
-- classes) has a comment too, so that \dx+ and \dd read like documentation. Row and array types,
-- which come with a table or type (and which 18 also records as members), are left out.
CREATE TEMP VIEW commentable AS
SELECT d.classid, d.objid, pg_describe_object(d.classid, d.objid, 0) AS object
  FROM pg_depend d
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'randflake_pg'
 WHERE d.deptype = 'e' AND d.classid <> 'pg_proc'::regclass
   AND NOT EXISTS (SELECT FROM pg_type t WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                                          AND (t.typrelid <> 0 OR t.typcategory = 'A'));
SELECT object AS undocumented FROM commentable
 WHERE coalesce(length(obj_description(objid, (SELECT relname FROM pg_class WHERE oid = classid))), 0) < 20
 ORDER BY 1;
SELECT count(*) AS objects_checked FROM commentable;

-- IDs are distinct and decode to this second, a node of the configured range, a valid sequence.
CREATE TABLE things (id bigint PRIMARY KEY DEFAULT randflake_next(), payload int);
INSERT INTO things (payload) SELECT g FROM generate_series(1, 10000) g;
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_ids FROM things;
SELECT bool_and(abs(extract(epoch FROM d.timestamp - now())) < 60) AS recent,
       bool_and(d.node_id BETWEEN current_setting('randflake.node_id_min')::int
                              AND current_setting('randflake.node_id_max')::int) AS node_in_range,
       bool_and(d.sequence BETWEEN 0 AND 131071) AS sequence_in_range
  FROM things, randflake_decode(things.id) d;
-- Encryption is a permutation, so the decrypted parts are as unique as the IDs.
SELECT count(*) = count(DISTINCT (d.timestamp, d.node_id, d.sequence)) AS parts_unique
  FROM things, randflake_decode(things.id) d;
-- IDs spread over the whole bigint range: both signs occur in bulk.
SELECT count(*) FILTER (WHERE id < 0) > 1000 AND count(*) FILTER (WHERE id > 0) > 1000 AS both_signs
  FROM things;

-- The decoded row is typed as documented.
SELECT pg_typeof(timestamp) AS timestamp_type, pg_typeof(node_id) AS node_type,
       pg_typeof(sequence) AS sequence_type
  FROM randflake_decode(randflake_next());

-- The scalar accessors read each row's own parts, exactly as randflake_decode does, and are
-- typed like its columns.
SELECT count(*) FILTER (WHERE (randflake_timestamp(id), randflake_node_id(id), randflake_sequence(id))
                              IS DISTINCT FROM (d.timestamp, d.node_id, d.sequence)) AS accessors_differ,
       count(DISTINCT (randflake_timestamp(id), randflake_node_id(id), randflake_sequence(id))) AS distinct_parts
  FROM things, randflake_decode(things.id) d;
SELECT pg_typeof(randflake_timestamp(1)) AS timestamp_type, pg_typeof(randflake_node_id(1)) AS node_type,
       pg_typeof(randflake_sequence(1)) AS sequence_type;

-- Volatile: each row and each call gets its own ID.
SELECT count(DISTINCT x) AS distinct_in_one_row
  FROM (SELECT unnest(ARRAY[randflake_next(), randflake_next(), randflake_next()]) AS x) s;

-- Every published known-answer vector (the same file the Rust tests read) converts both ways.
\set vectors `cat ../../randflake/tests/data/reference_vectors.json`
SELECT v->>'encrypted_id' AS id,
       randflake_to_string((v->>'encrypted_id')::bigint) AS to_string,
       randflake_to_string((v->>'encrypted_id')::bigint) = v->>'encoded_id' AS matches,
       randflake_from_string(v->>'encoded_id') = (v->>'encrypted_id')::bigint AS parses_back
  FROM jsonb_array_elements((:'vectors')::jsonb -> 'randflake') v;

-- String forms of new IDs are canonical and round-trip.
SELECT count(*) FILTER (WHERE randflake_from_string(randflake_to_string(id)) <> id) AS mismatches,
       count(*) FILTER (WHERE randflake_to_string(id) !~ '^([1-9a-v][0-9a-v]{0,12}|0)$') AS non_canonical
  FROM things;
SELECT randflake_to_string(0) AS zero, randflake_to_string(-1) AS minus_one,
       randflake_to_string(9223372036854775807) AS max, randflake_to_string(-9223372036854775808) AS min;

DROP TABLE things;
