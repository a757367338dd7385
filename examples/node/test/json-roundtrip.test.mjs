// IDs through JSON and back, in node-postgres: the string form survives bit for bit, a bigint
// written as a JSON number does not. Run with `node --test` and the libpq environment variables
// (PGHOST, PGPORT, PGDATABASE, PGUSER) naming a database where randflake_pg is installed and the
// user may create a table. Every test runs twice: on a randflake_id column (ID_SQL) and on a
// bigint column through the string functions (BIGINT_ID_SQL).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { BIGINT_ID_SQL, ID_SQL, bigintTypes, idFromString, idToString } from '../randflake-ids.mjs';

const GENERATED = 2000;
// Values at the edges of the sign, of 53 bits and of 64 bits, stored next to generated IDs.
const EDGE_IDS = [0n, 1n, -1n, (1n << 53n) - 1n, 1n << 53n, (1n << 53n) + 1n, -((1n << 53n) + 1n),
  (1n << 63n) - 1n, -(1n << 63n)];

for (const [label, SQL] of Object.entries({ randflake_id: ID_SQL, bigint: BIGINT_ID_SQL })) {
describe(`IDs in a ${label} column`, () => {
  const table = `json_roundtrip_${label}`;
  const plain = new pg.Client(); // node-postgres as it comes: a bigint arrives as a string
  const exact = new pg.Client({ types: bigintTypes });
  // note -> the ID as stored, read as a BigInt
  let stored;

  before(async () => {
    await Promise.all([plain.connect(), exact.connect()]);
    await exact.query(`DROP TABLE IF EXISTS ${table}`);
    await exact.query(
      `CREATE TABLE ${table} (id ${SQL.columnType} PRIMARY KEY DEFAULT ${SQL.defaultExpression},
                              note text NOT NULL UNIQUE)`,
    );
    await exact.query(`INSERT INTO ${table} (note) SELECT 'made ' || n FROM generate_series(1, ${GENERATED}) n`);
    for (const id of EDGE_IDS) {
      await exact.query(`INSERT INTO ${table} (id, note) VALUES (${SQL.fromText('$1')}, $2)`, [
        idToString(id), `edge ${id}`,
      ]);
    }
    const { rows } = await exact.query(`SELECT ${SQL.toBigint('id')} AS id, note FROM ${table}`);
    stored = new Map(rows.map(({ id, note }) => [note, id]));
    assert.equal(stored.size, GENERATED + EDGE_IDS.length);
  });

  after(async () => {
    await exact.query(`DROP TABLE IF EXISTS ${table}`);
    await Promise.all([plain.end(), exact.end()]);
  });

  // Sends (text, note) pairs back as parameters; the server says how many name the stored row of
  // their note exactly, and how many notes it recognised at all.
  async function matchedOnServer(pairs) {
    const { rows } = await plain.query(
      `SELECT count(*)::int AS notes, count(*) FILTER (WHERE t.id = ${SQL.fromText('r.text')})::int AS exact
         FROM unnest($1::text[], $2::text[]) AS r(text, note) JOIN ${table} t USING (note)`,
      [pairs.map(({ text }) => text), pairs.map(({ note }) => note)],
    );
    return rows[0];
  }

  test('the string form survives JSON.stringify, JSON.parse and the trip back as a parameter', async () => {
    const { rows } = await plain.query(`SELECT ${SQL.toText('id')} AS text, note FROM ${table}`);
    const received = JSON.parse(JSON.stringify(rows));
    assert.equal(received.length, stored.size);

    // Bit for bit in JavaScript: the string decodes to the very 64 bits the server stored...
    for (const { text, note } of received) {
      assert.equal(typeof text, 'string');
      assert.equal(idFromString(text), stored.get(note), `${note}: ${text}`);
      assert.equal(idToString(stored.get(note)), text);
    }
    // ...and on the server: every string sent back finds its own row by ID.
    assert.deepEqual(await matchedOnServer(received), { notes: stored.size, exact: stored.size });

    // One at a time, as an API handler would: a parameter that is the parsed string.
    for (const { text, note } of received.filter(({ note }) => note.startsWith('edge'))) {
      const found = await exact.query(`SELECT ${SQL.toBigint('id')} AS id FROM ${table}
                                        WHERE id = ${SQL.fromText('$1')}`, [text]);
      assert.deepEqual(found.rows, [{ id: stored.get(note) }]);
    }
  });

  test('JSON made by the server carries the string form just as exactly', async () => {
    const { rows } = await plain.query(
      `SELECT json_agg(json_build_object('id', ${SQL.toText('id')}, 'note', note))::text AS document FROM ${table}`,
    );
    const received = JSON.parse(rows[0].document);
    assert.equal(received.length, stored.size);
    for (const { id, note } of received) assert.equal(idFromString(id), stored.get(note), note);
  });

  test('whole rows made into JSON by the server (json_agg, to_jsonb) keep IDs exact only as randflake_id', async () => {
    const { rows } = await plain.query(
      `SELECT json_agg(t)::text AS agg, json_agg(to_jsonb(t))::text AS rows FROM ${table} t`,
    );
    for (const document of [rows[0].agg, rows[0].rows]) {
      const received = JSON.parse(document);
      assert.equal(received.length, stored.size);
      if (SQL === ID_SQL) {
        for (const { id, note } of received) {
          assert.equal(typeof id, 'string');
          assert.equal(idFromString(id), stored.get(note), note);
        }
      } else {
        // A bigint column is a JSON number, rounded by JSON.parse (the test below counts how badly).
        assert.ok(received.every(({ id }) => typeof id === 'number'));
      }
    }
  });

  test('a BigInt cannot be put into JSON as it is', () => {
    assert.throws(() => JSON.stringify({ id: stored.get('made 1') }), TypeError);
  });

  test('a bigint written as a JSON number is rounded by JSON.parse: most IDs come back wrong', async () => {
    // What to_json does with a bigint: a JSON number, with all its digits.
    const { rows } = await plain.query(
      `SELECT json_agg(json_build_object('id', ${SQL.toBigint('id')}, 'note', note))::text AS document
         FROM ${table} WHERE note LIKE 'made %'`,
    );
    const received = JSON.parse(rows[0].document);
    assert.equal(received.length, GENERATED);
    const survivors = received.filter(({ id, note }) => BigInt(id) === stored.get(note));

    // A double has 53 significant bits; a random 64-bit ID survives only if its magnitude is below
    // 2^53 or enough of its low bits happen to be zero: about 0.6% of IDs. Allow far more.
    assert.ok(survivors.length < GENERATED * 0.05, `${survivors.length} of ${GENERATED} IDs survived`);
    // The survivors are exactly the IDs that a double can hold.
    const representable = received.filter(({ note }) => BigInt(Number(stored.get(note))) === stored.get(note));
    assert.deepEqual(survivors, representable);

    // Sent back, the rounded numbers no longer name their rows. A Number travels as its shortest
    // decimal form, which for a few IDs ending in zeros is the ID itself again; numeric, because
    // rounding can push an ID past the ends of bigint.
    const { rows: found } = await plain.query(
      `SELECT count(*)::int AS n FROM ${table} t
         JOIN unnest($1::numeric[], $2::text[]) AS r(id, note) USING (note)
        WHERE ${SQL.toBigint('t.id')}::numeric = r.id`,
      [received.map(({ id }) => id), received.map(({ note }) => note)],
    );
    const sentExactly = received.filter(({ id, note }) => String(id) === stored.get(note).toString());
    assert.equal(found[0].n, sentExactly.length);
    assert.ok(found[0].n < GENERATED * 0.05, `${found[0].n} of ${GENERATED} IDs found`);
  });

  test('the string codec in JavaScript agrees with the server at the edges and on bad strings', async () => {
    for (const id of EDGE_IDS) {
      const { rows } = await exact.query('SELECT randflake_to_string($1::bigint) AS text', [id]);
      assert.equal(idToString(id), rows[0].text);
    }
    for (const bad of ['', '00', '0a', 'V', 'w', '-1', 'g000000000000', '10000000000000', ' 1']) {
      assert.throws(() => idFromString(bad), RangeError, JSON.stringify(bad));
      await assert.rejects(exact.query('SELECT randflake_from_string($1)', [bad]), JSON.stringify(bad));
    }
  });
});
}
