-- randflake_pg 0.5.0 -> 0.6.0.
--
-- Run by ALTER EXTENSION randflake_pg UPDATE, and replayed at the end of every fresh install
-- script after the earlier upgrade scripts. Until 0.6.0 is released, this script may still grow;
-- once released, it never changes.

\echo Use "ALTER EXTENSION randflake_pg UPDATE" to load this file. \quit

-- Every object this script calls is named with its schema (pg_catalog's or @extschema@'s), so
-- that nothing a database owner put in a schema on search_path can run in its place.

SELECT randflake.revoke_default_privileges();
