-- Who may decode, and that no ordinary role can read or change any randflake setting.
CREATE ROLE randflake_app LOGIN;
CREATE ROLE randflake_auditor LOGIN;
GRANT EXECUTE ON FUNCTION randflake_decode(bigint) TO randflake_auditor;
SELECT has_function_privilege('randflake_app', 'randflake_decode(bigint)', 'EXECUTE') AS app_may_decode,
       has_function_privilege('randflake_auditor', 'randflake_decode(bigint)', 'EXECUTE') AS auditor_may_decode,
       has_function_privilege('randflake_app', 'randflake_next()', 'EXECUTE') AS app_may_generate;
-- The accessors decode too: no one but superusers may call them until granted.
SELECT f AS accessor,
       has_function_privilege('randflake_app', f, 'EXECUTE') AS app_may_call,
       has_function_privilege('randflake_auditor', f, 'EXECUTE') AS auditor_may_call
  FROM unnest(ARRAY['randflake_timestamp(bigint)', 'randflake_node_id(bigint)', 'randflake_sequence(bigint)']) AS f;
-- Application leases write the lease table: no one but superusers until granted; monitoring the
-- pool is pg_monitor's.
SELECT f AS lease_function,
       has_function_privilege('randflake_app', f, 'EXECUTE') AS app_may_call,
       has_function_privilege('pg_monitor', f, 'EXECUTE') AS monitor_may_call
  FROM unnest(ARRAY['randflake_lease_acquire(text,integer)', 'randflake_lease_extend(text,integer,integer)',
                    'randflake_lease_release(text,integer)', 'randflake_app_leases()']) AS f;

SET ROLE randflake_app;
-- Generating and converting need no privilege.
SELECT randflake_from_string(randflake_to_string(randflake_next())) IS NOT NULL AS app_generates;
SELECT statement, regress.error_of(statement) AS result
  FROM unnest(ARRAY[
      'SELECT * FROM randflake_decode(1)',
      'SELECT randflake_timestamp(1)',
      'SELECT randflake_node_id(1)',
      'SELECT randflake_sequence(1)',
      'CALL randflake_lease_acquire(''x'', 5, NULL, NULL, NULL)',
      'CALL randflake_lease_release(''x'', 1, NULL)',
      'SHOW randflake.secret',
      'SHOW randflake.secret_file',
      'SELECT current_setting(''randflake.secret'')',
      'SELECT current_setting(''randflake.secret'', true)',
      'SELECT current_setting(''randflake.secret_file'', true)',
      'SET randflake.node_id_min = 5',
      'SET randflake.app_leases_per_role = 1000',
      'SELECT count(*) FROM pg_file_settings'
  ]) AS statement;
-- Giving the secret a value through SQL is refused to every role. Straight from the client it is
-- an ERROR; from inside a function (as regress.error_of would run it) or at run time it ends the
-- session, which tests/integration/test_secret.py covers.
SET randflake.secret = '00112233445566778899aabbccddeeff';
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE randflake_app SET randflake.secret = '00112233445566778899aabbccddeeff';
\echo :LAST_ERROR_SQLSTATE
-- Listings leave the secret settings out.
SELECT count(*) AS secret_rows_in_pg_settings FROM pg_settings WHERE name LIKE 'randflake.secret%';
SELECT count(*) AS secret_rows_in_show_all FROM pg_show_all_settings() WHERE name LIKE 'randflake.secret%';
-- The other settings are visible, with their descriptions.
SELECT name, context, short_desc <> '' AS described FROM pg_settings WHERE name LIKE 'randflake.%' ORDER BY name;
RESET ROLE;

SET ROLE randflake_auditor;
SELECT count(*) AS auditor_decodes FROM randflake_decode(randflake_next());
RESET ROLE;

-- Not even a superuser can plant a secret per role or database, nor change one per session.
SELECT statement, regress.error_of(statement) AS result
  FROM unnest(ARRAY[
      'SET randflake.secret_file = ''/tmp/k''',
      'ALTER ROLE randflake_app SET randflake.secret_file = ''/tmp/k''',
      'ALTER ROLE randflake_app SET randflake.node_id_max = 3'
  ]) AS statement;
SET randflake.secret = '00112233445566778899aabbccddeeff';
ALTER ROLE randflake_app SET randflake.secret = '00112233445566778899aabbccddeeff';
ALTER DATABASE randflake_regress SET randflake.secret = '00112233445566778899aabbccddeeff';
SELECT count(*) AS planted_settings FROM pg_db_role_setting WHERE array_to_string(setconfig, ',') LIKE '%randflake%';

-- ALTER SYSTEM refuses the secret whatever its value, validates the other settings, and its
-- errors never quote a rejected value. RESET, which carries none, is allowed.
\set VERBOSITY default
ALTER SYSTEM SET randflake.secret = 'c0ffeec0ffeec0ffeec0ffee';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET randflake.secret = '00112233445566778899aabbccddeeff';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM RESET randflake.secret;
ALTER SYSTEM SET randflake.secret_file = '/nonexistent/randflake.key';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET randflake.node_id_min = 131072;
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET randflake.app_leases_per_role = -1;
\echo :LAST_ERROR_SQLSTATE
SET ROLE randflake_app;
ALTER SYSTEM SET randflake.secret = '00112233445566778899aabbccddeeff';
\echo :LAST_ERROR_SQLSTATE
ALTER SYSTEM SET randflake.app_leases_per_role = 64;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

DROP OWNED BY randflake_app, randflake_auditor;
DROP ROLE randflake_app;
DROP ROLE randflake_auditor;
