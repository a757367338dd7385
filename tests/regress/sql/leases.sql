-- The lease table's rules, checked against this database's own copy of the table. The lease
-- keeper works in the database named by randflake.database, never in this one, so these rows
-- are inert.
SET client_min_messages = warning;

-- Setting up: a block of nodes 0..9, leased for seconds 1800000000..1800000599.
INSERT INTO randflake.node_leases (first_node, last_node, holder, server_name, lease_start, lease_end, used_through)
VALUES (0, 9, '1/1', 'regress', 1800000000, 1800000599, 1800000010);

-- Each bad lease gets its SQLSTATE; the table keeps exactly its one good row.
SELECT statement, regress.error_of(statement) AS result
  FROM unnest(ARRAY[
      -- overlaps nodes and seconds
      $$INSERT INTO randflake.node_leases VALUES (5, 20, '2/1', 'x', 1800000500, 1800000900, 1800000500)$$,
      -- same nodes, placed before the existing lease
      $$INSERT INTO randflake.node_leases VALUES (0, 9, '2/1', 'x', 1700000000, 1700000100, 1700000000)$$,
      $$INSERT INTO randflake.node_leases VALUES (0, 9, '2/1', 'x', 1799999000, 1799999100, 1799999000)$$,
      -- impossible values
      $$INSERT INTO randflake.node_leases VALUES (9, 0, '2/1', 'x', 1900000000, 1900000100, 1900000000)$$,
      $$INSERT INTO randflake.node_leases VALUES (0, 131072, '2/1', 'x', 1900000000, 1900000100, 1900000000)$$,
      $$INSERT INTO randflake.node_leases VALUES (0, 9, '2/1', 'x', 1900000100, 1900000000, 1900000100)$$,
      $$INSERT INTO randflake.node_leases VALUES (0, 9, '2/1', 'x', 2803741823, 2803741824, 2803741823)$$,
      $$INSERT INTO randflake.node_leases VALUES (0, 9, '2/1', 'x', 1900000000, 1900000100, 1900000101)$$,
      -- a lease's identity is fixed; its high-water mark only moves forward
      $$UPDATE randflake.node_leases SET first_node = 1$$,
      $$UPDATE randflake.node_leases SET holder = 'someone else'$$,
      $$UPDATE randflake.node_leases SET lease_start = 1800000001$$,
      $$UPDATE randflake.node_leases SET used_through = 1800000009$$,
      $$UPDATE randflake.node_leases SET lease_end = 1800000009$$
  ]) AS statement;
SELECT first_node, last_node, lease_start, lease_end, used_through FROM randflake.node_leases;

-- What the keeper does: renew, end a lease at its high-water mark, lease the next seconds,
-- and lease other nodes in the same seconds.
UPDATE randflake.node_leases SET lease_end = 1800000899, used_through = 1800000020;
UPDATE randflake.node_leases SET lease_end = used_through;
INSERT INTO randflake.node_leases VALUES (0, 9, '1/1', 'regress', 1800000021, 1800000620, 1800000031, now());
INSERT INTO randflake.node_leases VALUES (10, 19, '2/1', 'regress', 1800000000, 1800000599, 1800000599, now());
SELECT first_node, last_node, holder, lease_start, lease_end, used_through FROM randflake.node_leases ORDER BY 1, 4;

-- A transaction that writes a lease commits durably, whatever the session asked for, and only
-- that transaction; one that only reads keeps the session's setting; a stronger one is kept.
SET synchronous_commit = off;
BEGIN;
SELECT count(*) AS leases FROM randflake.node_leases;
SHOW synchronous_commit;
UPDATE randflake.node_leases SET used_through = used_through WHERE first_node = 10;
SHOW synchronous_commit;
COMMIT;
SHOW synchronous_commit;
BEGIN;
SET LOCAL synchronous_commit = remote_apply;
UPDATE randflake.node_leases SET used_through = used_through WHERE first_node = 10;
SHOW synchronous_commit;
COMMIT;
RESET synchronous_commit;

-- Only superusers write leases (and read them); pg_monitor calls randflake_status().
CREATE ROLE randflake_watcher LOGIN IN ROLE pg_monitor;
CREATE ROLE randflake_intruder LOGIN;
SET ROLE randflake_intruder;
SELECT statement, regress.error_of(statement) AS result
  FROM unnest(ARRAY[
      'SELECT count(*) FROM randflake.node_leases',
      $$INSERT INTO randflake.node_leases VALUES (20, 29, '3/1', 'x', 1900000000, 1900000100, 1900000000)$$,
      'UPDATE randflake.node_leases SET lease_end = lease_end + 1',
      'DELETE FROM randflake.node_leases',
      'SELECT count(*) FROM randflake_status()'
  ]) AS statement;
RESET ROLE;
SET ROLE randflake_watcher;
SELECT regress.error_of('SELECT count(*) FROM randflake.node_leases') AS monitor_reads_the_lease_table;
SELECT node_source, state, nodes_in_use + nodes_free = last_node - first_node + 1 AS nodes_add_up,
       lease_start <= now() AND now() <= issuable_through AS lease_covers_now,
       keeper_pid IS NOT NULL AS keeper_running
  FROM randflake_status();
SELECT regress.error_of($$INSERT INTO randflake.node_leases VALUES (20, 29, '3/1', 'x', 1900000000, 1900000100, 1900000000)$$) AS monitor_insert;
RESET ROLE;
DROP ROLE randflake_watcher;
DROP ROLE randflake_intruder;
DELETE FROM randflake.node_leases;
