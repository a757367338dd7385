-- A hostile search_path: objects named like the catalog's, placed before pg_catalog, must not
-- change what the extension's own SQL does. The lease rules live in a constraint (bound to the
-- catalog's operators when created) and a trigger function with its own search_path.
CREATE SCHEMA hostile;
CREATE FUNCTION hostile.int4range(integer, integer, text) RETURNS int4range
    LANGUAGE sql AS $$ SELECT 'empty'::pg_catalog.int4range $$;
CREATE FUNCTION hostile.never(int8range, int8range) RETURNS boolean
    LANGUAGE sql AS $$ SELECT false $$;
CREATE OPERATOR hostile.&& (LEFTARG = int8range, RIGHTARG = int8range, FUNCTION = hostile.never);
CREATE FUNCTION hostile.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT 'epoch'::timestamptz $$;
CREATE TABLE hostile.node_leases (first_node int);
CREATE FUNCTION hostile.count(anyelement) RETURNS bigint LANGUAGE sql AS $$ SELECT 0::bigint $$;
SET search_path = hostile, pg_catalog, public;

INSERT INTO randflake.node_leases (first_node, last_node, holder, server_name, lease_start, lease_end, used_through)
VALUES (0, 9, '1/1', 'regress', 1800000000, 1800000599, 1800000010);
SELECT statement, regress.error_of(statement) AS result
  FROM unnest(ARRAY[
      $$INSERT INTO randflake.node_leases VALUES (5, 20, '2/1', 'x', 1800000500, 1800000900, 1800000500, pg_catalog.now())$$,
      $$INSERT INTO randflake.node_leases VALUES (0, 9, '2/1', 'x', 1700000000, 1700000100, 1700000000, pg_catalog.now())$$,
      $$UPDATE randflake.node_leases SET used_through = used_through - 1$$
  ]) AS statement;
-- The row written through the hostile path has the real now(), not the planted one.
SELECT renewed_at > '2020-01-01' AS real_now FROM randflake.node_leases;
-- Generation and conversion do not depend on the path either.
SELECT public.randflake_from_string(public.randflake_to_string(public.randflake_next())) IS NOT NULL AS generates;
RESET search_path;
DELETE FROM randflake.node_leases;
DROP SCHEMA hostile CASCADE;
