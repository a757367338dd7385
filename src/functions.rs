//! Every SQL-callable function of randflake_pg. Their SQL comments and grants are in
//! `sql/comments_and_grants_0.1.0.sql` and the upgrade scripts after it.
//!
//! `randflake_key`'s functions are `key`'s. The C functions written by hand here
//! (`randflake_next()`, the application lease procedures) are declared through
//! `pg::entry::entry_points!` and
//! `pg::procedure::procedure_entry_points!`, whose items are the only ones that allow `unsafe`
//! here; no `unsafe` is written in this file.
#![deny(unsafe_code)]

use std::ffi::{CStr, CString};

use pgrx::prelude::*;
use randflake::{codec, Parts};

use crate::errors::Error;
use crate::generation::Output;
use crate::lease_table::TableUse;
use crate::node_config::{self, Mode};
use crate::pg;
use crate::pg::entry::Arguments;
use crate::pg::procedure::{Call, Out};
use crate::{app_leases, generation, lease_table, secret, status};

pg::entry::entry_points! {
    /// `randflake_next()`: a new ID, unique across every server sharing the secret with a
    /// disjoint node range. Written by hand (`pg::entry`) rather than by `#[pg_extern]`, whose
    /// wrapper would be a large share of a call this short; the SQL declaration below is what
    /// pgrx would have generated. docs/performance.md has the measurements.
    randflake_next_wrapper, pg_finfo_randflake_next_wrapper => next_id;
}

/// An ID reserved earlier, or else a new run reserved, with every check that needs.
fn next_id(_: &Arguments) -> i64 {
    generation::reserved_id(Output::Ids).unwrap_or_else(|| generation::next_id(Output::Ids))
}

extension_sql!(
    r#"
CREATE FUNCTION "randflake_next"() RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_next_wrapper';
"#,
    name = "randflake_next"
);

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
    secret::with_cipher(|cipher| cipher.decrypt(id)).unwrap_or_else(|error| error.raise())
}

/// This server's lease and what generation has met since start-up: one row, for monitoring.
/// EXECUTE is granted to pg_monitor only. Declared by the upgrade scripts (0.2.0's, and 0.6.0's,
/// which added `keeper_ticks`): a column cannot be added by CREATE OR REPLACE.
// pgrx reads the column names from the signature itself, so the row type cannot be an alias.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe, sql = false)]
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
        name!(keeper_ticks, i64),
    ),
> {
    let status = status::current();
    let lease = status.lease;
    TableIterator::once((
        status.node_source.to_owned(),
        status.state,
        lease.map(|lease| lease.first_node as i32),
        lease.map(|lease| lease.last_node as i32),
        lease.map(|lease| timestamp_of(lease.start)),
        lease.map(|lease| timestamp_of(lease.end)),
        lease.map(|lease| timestamp_of(lease.issuable_through())),
        status.renewed_at.map(timestamp_of),
        status.nodes.as_ref().map(|nodes| nodes.in_use as i32),
        status.nodes.as_ref().map(|nodes| nodes.free as i32),
        status.node_switches as i64,
        status.clock_refusals as i64,
        status.lease_refusals as i64,
        status.keeper_pid,
        status.keeper_ticks as i64,
    ))
}

/// Seconds from the Unix epoch to PostgreSQL's (2000-01-01).
pub(crate) const POSTGRES_EPOCH_UNIX_SECOND: i64 = 946_684_800;

/// A Unix second as PostgreSQL's timestamp.
pub(crate) fn timestamp_of(unix_second: u64) -> TimestampWithTimeZone {
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
pub(crate) fn randflake_from_string(s: &str) -> i64 {
    codec::decode(s).unwrap_or_else(|reason| Error::InvalidIdString { input: s.to_owned(), reason }.raise())
}

/// Input of the `randflake_id` type, which is bigint's eight bytes shown as the canonical string
/// (declared in sql/randflake_pg--0.4.0--0.5.0.sql).
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
pub(crate) fn randflake_id_in(input: &CStr) -> i64 {
    // Bytes that are not UTF-8 become U+FFFD, which no ID string holds: the error shows where.
    randflake_from_string(&input.to_string_lossy())
}

/// Output of the `randflake_id` type: the canonical string.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_id_out(id: i64) -> CString {
    CString::new(randflake_to_string(id)).expect("base32hex digits hold no NUL")
}

/// 0.5.0's application lease functions. A function cannot commit, so they returned a lease whose
/// transaction the caller could still roll back (or lose, uncommitted, in a pipeline); 0.6.0
/// replaces them with the procedures below, of the same names. Their entry points remain for
/// the 0.4.0 to 0.5.0 script, and for a database still at 0.5.0 under this library, where they
/// refuse, naming the update and the CALL to use.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn randflake_lease_acquire(
    holder: Option<&str>,
    seconds: default!(Option<i32>, 600),
) -> TableIterator<'static, (name!(node_id, i32), name!(lease_start, i64), name!(lease_end_exclusive, i64))> {
    let _ = (holder, seconds);
    Error::AppLeaseIsProcedure {
        function: "randflake_lease_acquire",
        call: "CALL randflake_lease_acquire(holder, seconds, NULL, NULL, NULL)",
    }
    .raise()
}

/// See [`randflake_lease_acquire`].
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn randflake_lease_extend(
    holder: Option<&str>,
    node_id: Option<i32>,
    seconds: default!(Option<i32>, 600),
) -> TableIterator<'static, (name!(node_id, i32), name!(lease_start, i64), name!(lease_end_exclusive, i64))> {
    let _ = (holder, node_id, seconds);
    Error::AppLeaseIsProcedure {
        function: "randflake_lease_extend",
        call: "CALL randflake_lease_extend(holder, node_id, seconds, NULL, NULL, NULL)",
    }
    .raise()
}

/// See [`randflake_lease_acquire`].
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn randflake_lease_release(holder: Option<&str>, node_id: Option<i32>) -> bool {
    let _ = (holder, node_id);
    Error::AppLeaseIsProcedure {
        function: "randflake_lease_release",
        call: "CALL randflake_lease_release(holder, node_id, NULL)",
    }
    .raise()
}

// The application lease procedures: C procedures declared by hand in
// sql/randflake_pg--0.5.0--0.6.0.sql (pgrx declares functions only, and a function cannot
// commit), run by `pg::procedure::Call::run` under pgrx's guard, which turns any error or panic
// into an ERROR. EXECUTE is granted to nobody by default.
pg::procedure::procedure_entry_points! {
    /// `CALL randflake_lease_acquire(holder, seconds, OUT node_id, OUT lease_start, OUT
    /// lease_end_exclusive)`: a node of the application pool, leased to `holder` for `seconds`
    /// from now, returned once its commit is durable: the window to pass to a Randflake port's
    /// `Lease(node_id, start, end_exclusive)`.
    randflake_lease_acquire_procedure, pg_finfo_randflake_lease_acquire_procedure => lease_acquire;
    /// `CALL randflake_lease_extend(holder, node_id, seconds, OUT node_id, OUT lease_start, OUT
    /// lease_end_exclusive)`: `holder`'s lease of `node_id`, its end moved to `seconds` from now
    /// (never earlier), returned once durable.
    randflake_lease_extend_procedure, pg_finfo_randflake_lease_extend_procedure => lease_extend;
    /// `CALL randflake_lease_release(holder, node_id, OUT released)`: gives `holder`'s lease of
    /// `node_id` back; true once the release is durable, false if the lease had already ended.
    randflake_lease_release_procedure, pg_finfo_randflake_lease_release_procedure => lease_release;
}

fn lease_acquire(call: &Call) -> [Out; 3] {
    window_row(app_leases::acquire(call, call.text(0).as_deref(), call.int4(1)))
}

fn lease_extend(call: &Call) -> [Out; 3] {
    window_row(app_leases::extend(call, call.text(0).as_deref(), call.int4(1), call.int4(2)))
}

fn lease_release(call: &Call) -> [Out; 1] {
    [Out::Bool(app_leases::release(call, call.text(0).as_deref(), call.int4(1)))]
}

/// A window as the procedures' OUT row: node_id, lease_start, lease_end_exclusive.
fn window_row(window: randflake::decisions::app_lease::AppWindow) -> [Out; 3] {
    [Out::Int4(window.node as i32), Out::Int8(window.start as i64), Out::Int8(window.end_exclusive as i64)]
}

/// The application pool, for monitoring: its nodes, the leases held, the nodes free now, and
/// the soonest end of a held lease. No row without a pool, outside randflake.database, or on a
/// fleet member (the pool's state is the coordinator's: ask it there).
/// EXECUTE is granted to pg_monitor only.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn randflake_app_leases() -> TableIterator<
    'static,
    (
        name!(pool_first, i32),
        name!(pool_last, i32),
        name!(leases_held, i32),
        name!(nodes_free, i32),
        name!(soonest_end, Option<TimestampWithTimeZone>),
    ),
> {
    TableIterator::new(app_leases::status().map(|status| {
        (
            status.pool.0 as i32,
            status.pool.1 as i32,
            status.held as i32,
            status.free as i32,
            status.soonest_end.map(timestamp_of),
        )
    }))
}

/// The trigger of `randflake.node_leases` that refuses every write randflake_pg's own code did
/// not make (`lease_table::authorize_write`). Declared in sql/randflake_pg--0.5.0--0.6.0.sql.
#[pg_trigger(sql = false)]
fn authorize_lease_write<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, pgrx::AllocatedByRust>>, pgrx::datum::TryFromDatumError> {
    let table_use = match node_config::mode() {
        Mode::Range => TableUse::ThisServerOnly,
        Mode::Fleet | Mode::Off => TableUse::Fleet,
    };
    lease_table::authorize_write(trigger, table_use)
}

/// Flushes this server's WAL through the end of what was inserted and returns that position (a
/// `pg_lsn`; NULL on a standby): the insert position of `randflake.wal_durability()`, which a
/// lease keeper compares with the flush position after its commit returned. Declared in
/// sql/randflake_pg--0.5.0--0.6.0.sql.
#[pg_extern(volatile, sql = false)]
fn randflake_flush_inserted_wal() -> Option<i64> {
    pg::backend::flush_inserted_wal().map(|end| end as i64)
}
