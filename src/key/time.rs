//! Keys and time: the generator, the lowest and highest key of a second (range and partition
//! bounds) and the decoders, which need no cipher since a key holds the plain value.
#![forbid(unsafe_code)]

use pgrx::prelude::*;
use randflake::format::ordered;
use randflake::Parts;

use crate::errors::Error;
use crate::functions::{timestamp_of, POSTGRES_EPOCH_UNIX_SECOND};
use crate::generation::{self, Output};

/// A new `randflake_key`: the plain value of the next ID the server's position hands out, taken
/// alone (`generation::Output::run` says why), never encrypted. Declared in
/// sql/randflake_pg--0.5.0--0.6.0.sql.
#[pg_extern(volatile, parallel_safe, sql = false)]
fn randflake_next_key() -> i64 {
    generation::next(Output::Key)
}

/// The lowest `randflake_key` of the second `at` falls in: `id >= randflake_key_lowest(t1) AND
/// id < randflake_key_lowest(t2)` selects the keys made from t1's second up to t2's, by an
/// index range scan.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_lowest(at: TimestampWithTimeZone) -> i64 {
    key_of_second(at, ordered::lowest_of_second)
}

/// The highest `randflake_key` of the second `at` falls in.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_highest(at: TimestampWithTimeZone) -> i64 {
    key_of_second(at, ordered::highest_of_second)
}

/// `bound` of the Unix second `at` falls in, or the error saying no ID carries that second.
fn key_of_second(
    at: TimestampWithTimeZone,
    bound: fn(u64) -> Result<u64, randflake::format::layout::LayoutError>,
) -> i64 {
    let second = if at.is_infinity() {
        i64::MAX
    } else if !at.is_finite() {
        i64::MIN
    } else {
        at.into_inner().div_euclid(1_000_000) + POSTGRES_EPOCH_UNIX_SECOND
    };
    u64::try_from(second)
        .ok()
        .and_then(|second| bound(second).ok())
        .unwrap_or_else(|| Error::TimestampOutsideIds { unix_second: second }.raise()) as i64
}

/// The parts of a `randflake_key`: `randflake_key_decode()` and its accessors, which need no
/// cipher (the key holds the plain value) but reveal as much as `randflake_decode()`, so their
/// EXECUTE is revoked from PUBLIC like its. Named apart rather than overloading the decoders, so
/// that a decoder called with an untyped argument still has one reading. Declared in
/// sql/randflake_pg--0.5.0--0.6.0.sql.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_decode(
    key: i64,
) -> TableIterator<'static, (name!(timestamp, TimestampWithTimeZone), name!(node_id, i32), name!(sequence, i32))> {
    let parts = Parts::from_raw(key as u64);
    TableIterator::once((timestamp_of(parts.timestamp), parts.node_id as i32, parts.sequence as i32))
}

#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_timestamp(key: i64) -> TimestampWithTimeZone {
    timestamp_of(Parts::from_raw(key as u64).timestamp)
}

#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_node_id(key: i64) -> i32 {
    Parts::from_raw(key as u64).node_id as i32
}

#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_sequence(key: i64) -> i32 {
    Parts::from_raw(key as u64).sequence as i32
}
