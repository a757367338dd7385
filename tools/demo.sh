#!/usr/bin/env bash
# `make demo`: a throwaway cluster with randflake_pg preloaded and a freshly generated secret, a
# table keyed by randflake_next(), rows inserted by concurrent sessions, and the IDs decoded; then
# the same table keyed by randflake_key: what outsiders and a reading role see, and its index.
set -euo pipefail
dir=${1:?data directory}
port=${2:?port}
cluster="$(dirname "$0")/../tests/scratch-cluster.sh"

"$cluster" destroy "$dir"
"$cluster" init "$dir" "$port"
"$cluster" start "$dir"

sql() { psql -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres "$@"; }
say() { printf '\n\033[1m%s\033[0m\n' "$*"; }

say "A cluster on port $port, data in $dir, secret in $dir/randflake.key (mode 0600, made just now)."
sql -c "CREATE EXTENSION randflake_pg"
sql -c "CREATE TABLE orders (
            id       bigint PRIMARY KEY DEFAULT randflake_next(),
            customer text NOT NULL,
            placed   timestamptz NOT NULL DEFAULT now())"

say "Four sessions insert 2,500 orders each, at the same time:"
for session in 1 2 3 4; do
    sql -c "INSERT INTO orders (customer) SELECT 'customer-$session-' || g FROM generate_series(1, 2500) g" &
done
wait
sql -c "SELECT count(*) AS orders, count(DISTINCT id) AS distinct_ids FROM orders"

say "What outsiders see: session 1's first orders, in the order it inserted them. No pattern in the IDs:"
sql -c "SELECT id, randflake_to_string(id) AS id_string, customer FROM orders
         WHERE customer LIKE 'customer-1-%' ORDER BY substring(customer FROM '[0-9]+\$')::int LIMIT 8"

say "What the secret reveals (randflake_decode is granted to no one by default):"
sql -c "SELECT o.id, d.timestamp, d.node_id, d.sequence, o.customer
          FROM orders o, randflake_decode(o.id) d
         ORDER BY d.node_id, d.sequence LIMIT 8"
sql -c "SELECT d.node_id, count(*) AS ids, min(d.sequence) AS first_seq, max(d.sequence) AS last_seq
          FROM orders o, randflake_decode(o.id) d GROUP BY d.node_id ORDER BY d.node_id"

say "The four sessions shared the server's nodes: every second begins at the range's first node, which carries 131,072 IDs."
say "The same orders keyed by randflake_key, which stores the plain value and shows the encrypted ID:"
sql -c "CREATE TABLE keyed_orders (
            id       randflake_key PRIMARY KEY DEFAULT randflake_next_key(),
            customer text NOT NULL)"
for session in 1 2 3 4; do
    sql -c "INSERT INTO keyed_orders (customer) SELECT 'customer-$session-' || g FROM generate_series(1, 2500) g" &
done
wait
say "What outsiders see is the same kind of ID: the canonical string, and id::bigint as randflake_next() returns it:"
sql -c "SELECT id, id::bigint AS public_id, customer FROM keyed_orders ORDER BY id LIMIT 5"
say "A role that may only read the table compares by public ID, through the index, and cannot make keys:"
sql -c "CREATE ROLE demo_reader LOGIN; GRANT SELECT ON keyed_orders TO demo_reader"
public=$(sql -At -c "SELECT id::bigint FROM keyed_orders ORDER BY id OFFSET 4000 LIMIT 1")
sql -U demo_reader -d postgres -c "EXPLAIN (COSTS OFF) SELECT customer FROM keyed_orders WHERE id = $public"
sql -U demo_reader -d postgres -c "SELECT '$public'::bigint::randflake_key" 2>&1 | sed -n '1p' || true
say "What the index looks like: the key's grows at its right end, as an identity key's does, the random IDs' everywhere:"
sql -c "SELECT t.name, pg_size_pretty(pg_relation_size(t.index)) AS index_size,
               round(pg_relation_size(t.index)::numeric / t.rows, 1) AS index_bytes_per_row
          FROM (VALUES ('orders (bigint, randflake_next())', 'orders_pkey'::regclass, (SELECT count(*) FROM orders)),
                       ('keyed_orders (randflake_key)', 'keyed_orders_pkey'::regclass,
                        (SELECT count(*) FROM keyed_orders))) AS t(name, index, rows)"
say "The demo cluster keeps running so you can try it:"
echo "  psql -h $dir -p $port -U postgres"
echo "Remove it with: make demo-stop"
