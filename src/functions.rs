//! Every SQL-callable function of randflake_pg. Their SQL comments and grants are in
//! `sql/bootstrap.sql`.

use pgrx::prelude::*;
use randflake::codec;

use crate::errors::Error;
use crate::{generation, node_table, secret, status};

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
    TableIterator::once((timestamp_of(parts.timestamp), parts.node_id as i32, parts.sequence as i32))
}

/// This server's lease and what generation has met since start-up: one row, for monitoring.
/// EXECUTE is granted to pg_monitor only.
// pgrx reads the column names from the signature itself, so the row type cannot be an alias.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe)]
fn randflake_status() -> TableIterator<
    'static,
    (
        name!(node_source, String),
        name!(state, String),
        name!(first_node, Option<i32>),
        name!(last_node, Option<i32>),
        name!(lease_start, Option<TimestampWithTimeZone>),
        name!(lease_end, Option<TimestampWithTimeZone>),
        name!(issuable_through, Option<TimestampWithTimeZone>),
        name!(renewed_at, Option<TimestampWithTimeZone>),
        name!(nodes_in_use, Option<i32>),
        name!(nodes_free, Option<i32>),
        name!(node_switches, i64),
        name!(clock_refusals, i64),
        name!(lease_refusals, i64),
        name!(keeper_pid, Option<i32>),
    ),
> {
    let status = status::current();
    let lease = status.lease;
    let held = lease.map(|lease| node_table::held_count(lease.first_node, lease.last_node));
    TableIterator::once((
        status.node_source.to_owned(),
        status.state,
        lease.map(|lease| lease.first_node as i32),
        lease.map(|lease| lease.last_node as i32),
        lease.map(|lease| timestamp_of(lease.start)),
        lease.map(|lease| timestamp_of(lease.end)),
        lease.map(|lease| timestamp_of(lease.issuable_through())),
        status.renewed_at.map(timestamp_of),
        held.map(|held| held as i32),
        lease.zip(held).map(|(lease, held)| (lease.last_node - lease.first_node + 1 - held) as i32),
        status.node_switches as i64,
        status.clock_refusals as i64,
        status.lease_refusals as i64,
        status.keeper_pid,
    ))
}

fn timestamp_of(unix_second: u64) -> TimestampWithTimeZone {
    let micros = (unix_second as i64 - POSTGRES_EPOCH_UNIX_SECOND) * 1_000_000;
    TimestampWithTimeZone::try_from(micros).expect("every Randflake second lies within PostgreSQL's timestamp range")
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
