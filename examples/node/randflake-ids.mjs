// randflake_pg IDs in node-postgres: the one module that knows how an ID is typed in SQL and in
// JavaScript. A Randflake ID is a signed 64-bit integer; a JavaScript Number holds 53 bits of
// mantissa, so it must travel as a BigInt or as its string form, never as a Number.
import pg from 'pg';

// How SQL types an ID column and turns it into, and back from, its JSON-safe text form. Everything
// else (recipe.mjs, the tests) builds its SQL from one of these.
//
// ID_SQL, for new tables: the randflake_id type, bigint's eight bytes whose text form is the
// canonical string. node-postgres reads it as that string, to_json() and json_agg() write it as
// a JSON string, and a string parameter is an ID: no conversion in any query.
export const ID_SQL = {
  columnType: 'randflake_id',
  defaultExpression: 'randflake_next()',
  toText: (column) => column,
  fromText: (placeholder) => `${placeholder}::randflake_id`,
  toBigint: (column) => `${column}::bigint`,
};

// BIGINT_ID_SQL, for existing bigint columns: the string form through randflake_to_string() and
// randflake_from_string().
export const BIGINT_ID_SQL = {
  columnType: 'bigint',
  defaultExpression: 'randflake_next()',
  toText: (column) => `randflake_to_string(${column})`,
  fromText: (placeholder) => `randflake_from_string(${placeholder})`,
  toBigint: (column) => column,
};

// Type parsers for one client or pool (`new pg.Client({ types: bigintTypes })`) rather than the
// process-wide pg.types.setTypeParser, so that other code sharing the process keeps its strings.
// node-postgres receives results as text: BigInt('-42') parses the text form exactly.
export const bigintTypes = {
  getTypeParser(oid, format) {
    if (oid === pg.types.builtins.INT8 && format !== 'binary') return BigInt;
    return pg.types.getTypeParser(oid, format);
  },
};

// What randflake_from_string() accepts: 1 to 13 base32hex digits, lower case, no leading zero.
const CANONICAL = /^(0|[1-9a-v][0-9a-v]{0,12})$/;

// The canonical string of an ID, as randflake_to_string() makes it: the 64 bits read as an
// unsigned number, in base 32 with the digits 0-9a-v (which is exactly BigInt's radix-32 form).
export const idToString = (id) => BigInt.asUintN(64, BigInt(id)).toString(32);

// The ID (a signed 64-bit BigInt) of a canonical string, as randflake_from_string() reads it.
export function idFromString(text) {
  if (typeof text !== 'string' || !CANONICAL.test(text)) {
    throw new RangeError(`not a canonical Randflake ID string: ${JSON.stringify(text)}`);
  }
  let value = 0n;
  for (const digit of text) value = value * 32n + BigInt(parseInt(digit, 32));
  if (value >> 64n) throw new RangeError(`Randflake ID string past 64 bits: ${text}`);
  return BigInt.asIntN(64, value);
}
