-- Helpers shared by the suite, in a schema of their own.
CREATE SCHEMA regress;
-- Runs a statement that should fail and returns "SQLSTATE: message / HINT: hint".
CREATE FUNCTION regress.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    state text;
    message text;
    hint text;
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
    RETURN state || ': ' || message || coalesce(' / HINT: ' || nullif(hint, ''), '');
END
$$;
GRANT USAGE ON SCHEMA regress TO PUBLIC;
