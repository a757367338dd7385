//! A key against public IDs: equality with `smallint`, `integer`, `bigint`, `randflake_id` and
//! `text`, with the btree support that lets an index on the key serve it, and the key's hash,
//! which is bigint's hash of its public ID.
#![forbid(unsafe_code)]

use pgrx::prelude::*;
use randflake::format::ordered;

use super::{plain_value, public_id};
use crate::functions::randflake_from_string;
use crate::pg;

// Equality between a `randflake_key` and a public ID (smallint, integer, bigint, randflake_id,
// text), so that `WHERE id = $1` finds a row by its public ID without making a key of it, which
// only roles that may decode can do. Each operator says only whether the two are the same ID, so
// it is everyone's. The btree operator family holds these operators with the support functions
// below, which order a public ID by its plain value: the index then serves `id = $1`, `id =
// ANY($1)` and joins with a bigint column. Those support functions reveal the order, so their
// EXECUTE is granted to no one; btree calls them without that privilege.

/// `=`, `<>` and the btree support of a key against one type of public ID, under the names the
/// 0.6.0 script declares; `$id` turns the argument into the ID's bigint.
macro_rules! compared_with_public_ids {
    ($($public:ty => $eq:ident, $ne:ident, $eq_reversed:ident, $ne_reversed:ident, $order:ident, $order_of_ids:ident, $id:expr;)+) => {$(
        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $eq(key: i64, id: $public) -> bool {
            public_id(key) == $id(id)
        }

        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $ne(key: i64, id: $public) -> bool {
            public_id(key) != $id(id)
        }

        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $eq_reversed(id: $public, key: i64) -> bool {
            public_id(key) == $id(id)
        }

        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $ne_reversed(id: $public, key: i64) -> bool {
            public_id(key) != $id(id)
        }

        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $order(key: i64, id: $public) -> i32 {
            ordered::compare(key as u64, plain_value($id(id))) as i32
        }

        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $order_of_ids(left: $public, right: $public) -> i32 {
            ordered::compare(plain_value($id(left)), plain_value($id(right))) as i32
        }
    )+};
}

compared_with_public_ids! {
    i16 => randflake_key_eq_int2, randflake_key_ne_int2, randflake_int2_eq_key, randflake_int2_ne_key,
        randflake_key_order_int2, randflake_int2_order, i64::from;
    i32 => randflake_key_eq_int4, randflake_key_ne_int4, randflake_int4_eq_key, randflake_int4_ne_key,
        randflake_key_order_int4, randflake_int4_order, i64::from;
    i64 => randflake_key_eq_int8, randflake_key_ne_int8, randflake_int8_eq_key, randflake_int8_ne_key,
        randflake_key_order_int8, randflake_int8_order, i64::from;
    &str => randflake_key_eq_text, randflake_key_ne_text, randflake_text_eq_key, randflake_text_ne_key,
        randflake_key_order_text, randflake_text_order, randflake_from_string;
}

/// The hash of a key: bigint's hash of its public ID, so that a key and the same ID as a bigint
/// hash alike (hash joins between the two), and so that no hash the server exposes (through
/// `hash_array()`, `hash_record()`, hash partitions) is a function of the plain value.
#[pg_extern(stable, strict, parallel_safe, sql = false)]
fn randflake_key_hash(key: i64) -> i32 {
    pg::hash::int8(public_id(key))
}

/// The seeded hash of a key: bigint's seeded hash of its public ID.
#[pg_extern(stable, strict, parallel_safe, sql = false)]
fn randflake_key_hash_extended(key: i64, seed: i64) -> i64 {
    pg::hash::int8_extended(public_id(key), seed)
}
