//! Every SQL-callable function of randflake_pg. Their SQL comments and grants are in
//! `sql/bootstrap.sql`.

use pgrx::prelude::*;
use randflake::codec;

use crate::errors::Error;
use crate::{generation, secret};

/// Seconds from the Unix epoch to PostgreSQL's (2000-01-01).
const POSTGRES_EPOCH_UNIX_SECOND: i64 = 946_684_800;

/// A new ID: unique across every server sharing the secret with a disjoint node range.
#[pg_extern(volatile, parallel_safe)]
fn randflake_next() -> i64 {
    generation::next_id()
}

/// The second, node and sequence an ID was made from. Needs the secret, so EXECUTE is revoked
/// from PUBLIC.
#[pg_extern(stable, strict, parallel_safe)]
fn randflake_decode(
    id: i64,
) -> TableIterator<
    'static,
    (name!(timestamp, TimestampWithTimeZone), name!(node_id, i32), name!(sequence, i32)),
> {
    let parts = secret::with_cipher(|cipher| cipher.decrypt(id)).unwrap_or_else(|error| error.raise());
    let micros = (parts.timestamp as i64 - POSTGRES_EPOCH_UNIX_SECOND) * 1_000_000;
    let timestamp = TimestampWithTimeZone::try_from(micros)
        .expect("every Randflake second lies within PostgreSQL's timestamp range");
    TableIterator::once((timestamp, parts.node_id as i32, parts.sequence as i32))
}

/// The canonical string form: base32hex of the unsigned value.
#[pg_extern(immutable, strict, parallel_safe)]
fn randflake_to_string(id: i64) -> String {
    codec::encode(id).to_string()
}

/// Parses the canonical string form; anything else is an error, never a guess.
#[pg_extern(immutable, strict, parallel_safe)]
fn randflake_from_string(s: &str) -> i64 {
    codec::decode(s).unwrap_or_else(|reason| Error::InvalidIdString { input: s.to_owned(), reason }.raise())
}

