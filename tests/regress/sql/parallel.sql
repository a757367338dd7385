-- randflake_next() is PARALLEL SAFE: parallel workers each hold a node of their own.
CREATE TABLE seeds AS SELECT g FROM generate_series(1, 300000) g;
ANALYZE seeds;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
-- The call is evaluated in the parallel scan, that is, in the workers and the leader.
EXPLAIN (COSTS OFF, VERBOSE) CREATE TABLE made_in_parallel AS SELECT randflake_next() AS id FROM seeds;
CREATE TABLE made_in_parallel AS SELECT randflake_next() AS id FROM seeds;
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_ids FROM made_in_parallel;
SELECT count(*) = count(DISTINCT (d.timestamp, d.node_id, d.sequence)) AS parts_unique
  FROM made_in_parallel, randflake_decode(made_in_parallel.id) d;
DROP TABLE made_in_parallel, seeds;
