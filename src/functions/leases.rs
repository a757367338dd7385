//! Application leases in SQL: the procedures, 0.5.0's functions of the same names (which refuse,
//! naming the CALL), `randflake_app_leases()`; and the lease table's trigger and WAL flush.
#![deny(unsafe_code)]

use pgrx::prelude::*;

use super::timestamp_of;
use crate::app_leases;
use crate::errors::Error;
use crate::lease_table::{self, TableUse};
use crate::node_config::{self, Mode};
use crate::pg;
use crate::pg::procedure::{Call, Out};

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
