//! Decoding an ID with the secret: `randflake_decode()` and its three scalar accessors; and
//! PostgreSQL's timestamp of a Unix second, which every function returning a second uses.
#![forbid(unsafe_code)]

use pgrx::prelude::*;
use randflake::Parts;

use crate::secret;

/// The second, node and sequence an ID was made from. Needs the secret, so EXECUTE is revoked
/// from PUBLIC.
#[pg_extern(stable, strict, parallel_safe)]
fn randflake_decode(
    id: i64,
) -> TableIterator<'static, (name!(timestamp, TimestampWithTimeZone), name!(node_id, i32), name!(sequence, i32))> {
    let parts = decrypted(id);
    TableIterator::once((timestamp_of(parts.timestamp), parts.node_id as i32, parts.sequence as i32))
}

/// The second an ID was made in: `randflake_decode(id).timestamp` as a plain function, which
/// the executor calls per row for a fraction of the cost of a set-returning one. Needs the
/// secret, so EXECUTE is revoked from PUBLIC, as for the other accessors.
#[pg_extern(stable, strict, parallel_safe)]
fn randflake_timestamp(id: i64) -> TimestampWithTimeZone {
    timestamp_of(decrypted(id).timestamp)
}

/// The node that made an ID: `randflake_decode(id).node_id`.
#[pg_extern(stable, strict, parallel_safe)]
fn randflake_node_id(id: i64) -> i32 {
    decrypted(id).node_id as i32
}

/// An ID's sequence within its node and second: `randflake_decode(id).sequence`.
#[pg_extern(stable, strict, parallel_safe)]
fn randflake_sequence(id: i64) -> i32 {
    decrypted(id).sequence as i32
}

/// Decrypts with the configured secret, or raises the error saying why there is none.
fn decrypted(id: i64) -> Parts {
    secret::with_cipher_or_raise(|cipher| cipher.decrypt(id))
}

/// Seconds from the Unix epoch to PostgreSQL's (2000-01-01).
pub(crate) const POSTGRES_EPOCH_UNIX_SECOND: i64 = 946_684_800;

/// A Unix second as PostgreSQL's timestamp.
pub(crate) fn timestamp_of(unix_second: u64) -> TimestampWithTimeZone {
    let micros = (unix_second as i64 - POSTGRES_EPOCH_UNIX_SECOND) * 1_000_000;
    TimestampWithTimeZone::try_from(micros).expect("every Randflake second lies within PostgreSQL's timestamp range")
}
