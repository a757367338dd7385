// The node-postgres recipe of docs/clients.md: insert rows keyed by randflake_next(), read them
// back by ID and by string, and decode them as a role allowed to. Connects with the libpq
// environment variables (PGHOST, PGPORT, PGDATABASE, PGUSER: the application's role);
// RANDFLAKE_AUDITOR names the role that was granted EXECUTE on randflake_decode and
// randflake_timestamp. Prints one JSON document, IDs as decimal strings, for the test to check
// against the server.
import assert from 'node:assert/strict';
import pg from 'pg';
import { BIGINT_ID_SQL, bigintTypes, idFromString, idToString } from './randflake-ids.mjs';

const NOTES = Array.from({ length: 20 }, (_, index) => `node order ${index}`);
const auditorRole = process.env.RANDFLAKE_AUDITOR;
if (!auditorRole) {
  console.error('recipe.mjs: set RANDFLAKE_AUDITOR to the role that may decode IDs');
  process.exit(2);
}

const app = new pg.Client({ types: bigintTypes });
const appWithDefaults = new pg.Client();
const auditor = new pg.Client({ user: auditorRole, types: bigintTypes });
await Promise.all([app.connect(), appWithDefaults.connect(), auditor.connect()]);
try {
  await app.query(
    `CREATE TABLE IF NOT EXISTS orders (
       id ${BIGINT_ID_SQL.columnType} PRIMARY KEY DEFAULT ${BIGINT_ID_SQL.defaultExpression},
       note text NOT NULL)`,
  );

  const rows = [];
  for (const note of NOTES) {
    const inserted = await app.query(
      `INSERT INTO orders (note) VALUES ($1) RETURNING id, ${BIGINT_ID_SQL.toText('id')} AS text`,
      [note],
    );
    const { id, text } = inserted.rows[0];
    assert.equal(typeof id, 'bigint');
    assert.equal(idToString(id), text);
    assert.equal(idFromString(text), id);

    // A BigInt parameter is sent as its decimal text: the server gets the exact value.
    const byId = await app.query('SELECT note FROM orders WHERE id = $1', [id]);
    const byString = await app.query(`SELECT id FROM orders WHERE id = ${BIGINT_ID_SQL.fromText('$1')}`, [text]);
    assert.deepEqual(byId.rows, [{ note }]);
    assert.deepEqual(byString.rows, [{ id }]);
    rows.push({ note, id, text });
  }

  // Without the parser, node-postgres hands a bigint over as a string: exact, but not a number.
  const asDefault = await appWithDefaults.query('SELECT id FROM orders WHERE id = $1', [rows[0].id]);
  const defaultType = typeof asDefault.rows[0].id;
  assert.equal(asDefault.rows[0].id, rows[0].id.toString());

  // Number(id) keeps 53 significant bits: about 99.4% of IDs come back changed.
  const survivingNumber = rows.filter(({ id }) => BigInt(Number(id)) === id).map(({ id }) => id.toString());

  // Decoding needs the secret, so only a role granted EXECUTE may call it.
  let decodeDenied = null;
  try {
    await app.query('SELECT * FROM randflake_decode($1)', [rows[0].id]);
  } catch (error) {
    decodeDenied = error.code;
  }

  const decoded = [];
  for (const { id, text } of rows) {
    const parts = await auditor.query(
      `SELECT d.timestamp, d.node_id, d.sequence, randflake_timestamp($1) AS made_at
         FROM randflake_decode(${BIGINT_ID_SQL.fromText('$2')}) AS d`,
      [id, text],
    );
    const { timestamp, node_id: node, sequence, made_at: madeAt } = parts.rows[0];
    assert.equal(madeAt.getTime(), timestamp.getTime());
    decoded.push({ id: id.toString(), unixSeconds: timestamp.getTime() / 1000, node, sequence });
  }

  const rowsAsStrings = rows.map(({ note, id, text }) => ({ note, id: id.toString(), text }));
  console.log(JSON.stringify({ defaultType, rows: rowsAsStrings, survivingNumber, decodeDenied, decoded }));
} finally {
  await Promise.all([app.end(), appWithDefaults.end(), auditor.end()]);
}
