-- Every way a string can fail to be an ID: SQLSTATE, message and hint.
SELECT input, regress.error_of(format('SELECT randflake_from_string(%L)', input)) AS result
  FROM unnest(ARRAY[
      '', '00', '01', 'A', '1V', '0=', 'abc=', 'g000000000000', 'vvvvvvvvvvvvv', 'fvvvvvvvvvvvw',
      '10000000000000', '-1', '+1', ' 1', '1 ', E'1\n', 'w', 'é', '１', '0x1f'
  ]) AS input;

-- The largest values parse; the smallest overflow does not.
SELECT randflake_from_string('fvvvvvvvvvvvv') AS minus_one,
       randflake_from_string('7vvvvvvvvvvvv') AS max,
       randflake_from_string('8000000000000') AS min,
       randflake_from_string('0') AS zero;

-- STRICT functions return NULL for NULL input.
SELECT randflake_to_string(NULL) IS NULL AS to_string_null,
       randflake_from_string(NULL) IS NULL AS from_string_null,
       (SELECT count(*) FROM randflake_decode(NULL)) AS decode_rows;
