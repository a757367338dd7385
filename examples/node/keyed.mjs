// The node-postgres recipe for a randflake_key column (docs/clients.md): node-postgres reads the
// type, which it does not know, as its text form, the canonical string; a string parameter is
// sent untyped and parsed as one. A BigInt parameter is cast to bigint in the SQL: sent untyped,
// its decimal text would be parsed as a canonical string and refused. Connects with the libpq
// environment variables; prints one JSON document for the test to check against the server.
import assert from 'node:assert/strict';
import pg from 'pg';
import { bigintTypes, idToString } from './randflake-ids.mjs';

const client = new pg.Client({ types: bigintTypes });
await client.connect();
try {
  await client.query(
    `CREATE TABLE IF NOT EXISTS keyed_orders (
       id randflake_key PRIMARY KEY DEFAULT randflake_next_key(), note text NOT NULL)`,
  );
  const rows = [];
  for (let index = 0; index < 20; index++) {
    const note = `node keyed ${index}`;
    const inserted = await client.query(
      'INSERT INTO keyed_orders (note) VALUES ($1) RETURNING id, id::bigint AS public', [note]);
    const { id, public: publicId } = inserted.rows[0];
    assert.equal(typeof id, 'string');
    assert.equal(typeof publicId, 'bigint');
    assert.equal(idToString(publicId), id);

    // node-postgres sends every parameter untyped, which the server would read as a key: making
    // one needs the decoder grant. Typed as text, the string is compared with the key instead.
    const byString = await client.query('SELECT note FROM keyed_orders WHERE id = $1::text', [id]);
    const byBigInt = await client.query('SELECT id FROM keyed_orders WHERE id = $1::bigint', [publicId]);
    assert.deepEqual(byString.rows, [{ note }]);
    assert.deepEqual(byBigInt.rows, [{ id }]);
    rows.push({ note, id, public: publicId.toString() });
  }
  // to_json() writes the key as its string, which JSON.parse keeps exact.
  const { rows: [{ document }] } = await client.query(
    "SELECT json_agg(json_build_object('id', id, 'note', note) ORDER BY id)::text AS document FROM keyed_orders");
  const fromJson = JSON.parse(document).map(({ id, note }) => ({ id, note }));
  console.log(JSON.stringify({ rows, fromJson }));
} finally {
  await client.end();
}
