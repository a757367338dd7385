//! Application leases through SQL: `randflake_lease_acquire`, `_extend` and `_release` run the
//! crate's arithmetic (`randflake::app_lease`) over the very lease table this server's keeper
//! uses (in fleet mode, the fleet's), so that processes making IDs with a Randflake port and the
//! servers' own backends share one ID space and never collide.
//!
//! The functions are executable only by roles a DBA grants them to, and they write a table that
//! a superuser-run keeper trusts, so every argument is treated as hostile: the holder is stored
//! under the calling role's name (no role can name another's holders), the node must be one of
//! the application pool's, every statement is parameterised, and the table is written as the
//! keeper's role, after the same trust checks the keeper makes.
#![forbid(unsafe_code)]

pub mod settings;

use pgrx::prelude::*;
use pgrx::spi::quote_identifier;
use randflake::app_lease::{self, AppWindow};
use randflake::table_rules;

use crate::errors::Error;
use crate::keeper::settings::{self as keeper_settings, NodeSource};
use crate::lease_table::{AppLeaseTable, LockNotGranted, NewAppLease, StoredWindow};
use crate::pg::identity::{self, Role};
use crate::pg::lock::TableLock;
use crate::pg::{backend, clock};
use crate::shmem::keeper_report;

/// What one call may use: the pool, the table, and who asks.
struct Request {
    pool: (u32, u32),
    table: AppLeaseTable,
    holder: Holder,
    keeper: Role,
}

/// A holder under its role's name: the key stored in the table, and the name shown.
struct Holder {
    role: String,
    key: String,
    name: String,
    shown: String,
}

/// Checks what every call needs, in order: a pool, the keeper's database, a transaction of its
/// own, a well-formed holder, and a lease table the keeper may trust.
fn request(function: &'static str, holder: Option<&str>) -> Result<Request, Error> {
    let pool = settings::pool().ok_or(Error::NoAppPool {})?;
    let database = keeper_settings::database();
    if identity::database_name() != database {
        return Err(Error::AppLeaseDatabase { database });
    }
    if identity::in_transaction_block() {
        return Err(Error::AppLeaseInTransaction { function });
    }
    let name = holder.ok_or(Error::AppLeaseNull { argument: "holder" })?;
    app_lease::check_holder(name).map_err(|reason| Error::AppLeaseArgument { reason: reason.to_string() })?;
    let role = Role::current().name();
    let holder = Holder {
        role: role.clone(),
        key: format!("{}/{name}", role_prefix(&role)),
        name: name.to_owned(),
        shown: format!("application {role}: {name}"),
    };
    let keeper = Role::named(keeper_settings::keeper_role().as_deref()).ok_or_else(no_lease_table)?;
    let table = keeper.acting(open_table).ok_or_else(no_lease_table)?;
    Ok(Request { pool, table, holder, keeper })
}

/// The lease table the keeper uses, if it may be trusted. As the keeper's role.
fn open_table() -> Option<AppLeaseTable> {
    let (schema, table) = keeper_settings::lease_table();
    AppLeaseTable::open(&schema, &table, keeper_settings::node_source() == NodeSource::Fleet)
}

fn no_lease_table() -> Error {
    Error::NoLease { keeper: keeper_report::read(), database: keeper_settings::database() }
}

/// Raises the ERROR for a lock on the lease table not granted in time, after a WARNING (in the
/// server log too) that names the sessions that held it up.
fn locked(function: &'static str, not_granted: LockNotGranted) -> ! {
    warning!("randflake_pg: {function}() could not lock the lease table: {not_granted}");
    Error::LeaseTableLocked { function, sessions: not_granted.sessions }.raise()
}

fn node_in_pool(node: Option<i32>, pool: (u32, u32)) -> Result<u32, Error> {
    let node = node.ok_or(Error::AppLeaseNull { argument: "node_id" })?;
    u32::try_from(node).ok().filter(|node| (pool.0..=pool.1).contains(node)).ok_or_else(|| Error::AppLeaseArgument {
        reason: format!("node {node} is not in the application pool {}..{}", pool.0, pool.1),
    })
}

/// The last second of a window of `seconds` from the clock's reading now.
fn last_second(now: u64, seconds: Option<i32>) -> Result<u64, Error> {
    let seconds = seconds.ok_or(Error::AppLeaseNull { argument: "seconds" })?;
    app_lease::last_second(now, i64::from(seconds))
        .map_err(|reason| Error::AppLeaseArgument { reason: reason.to_string() })
}

/// `(node, last second)` of every window on record of a node of the pool, as
/// `app_lease::free_node` takes them.
fn windows_of(table: &AppLeaseTable, pool: (u32, u32)) -> Vec<(u32, u64)> {
    table.windows_of(pool.0, pool.1).into_iter().map(|window| (window.node, window.last)).collect()
}

/// Leases a free node of the application pool to `holder` for `seconds` from now.
pub fn acquire(holder: Option<&str>, seconds: Option<i32>) -> AppWindow {
    const FUNCTION: &str = "randflake_lease_acquire";
    let request = request(FUNCTION, holder).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let last = last_second(now, seconds).unwrap_or_else(|error| error.raise());
    let Request { pool, table, holder, keeper } = request;
    keeper.acting(|| {
        table.lock_for_acquisition().unwrap_or_else(|not_granted| locked(FUNCTION, not_granted));
        if let Some(limit) = settings::leases_per_role() {
            let kept = table.windows_kept(
                &format!("{}/", role_prefix(&holder.role)),
                &format!("{}/", released_prefix(&holder.role)),
                now,
            );
            if kept >= limit {
                Error::AppRoleQuota { role: holder.role.clone(), limit }.raise();
            }
        }
        let windows = windows_of(&table, pool);
        let spread = u64::from(backend::pid().unsigned_abs()) ^ now;
        let Some(node) = app_lease::free_node(pool.0, pool.1, &windows, now, spread) else {
            Error::AppPoolExhausted { first: pool.0, last: pool.1 }.raise()
        };
        // Windows of the node that ended before now bound nothing the new one does not. In a
        // fleet the coordinator deletes only those past the clocks' skew bound.
        table.delete_ended(node, table_rules::prune_bound(now));
        let lease = NewAppLease { node, holder: &holder.key, shown: &holder.shown, start: now, last };
        if table.insert(&lease).is_err() {
            Error::AppLeaseRace { node }.raise();
        }
        AppWindow { node, start: now, end_exclusive: last + 1 }
    })
}

/// Moves the end of `holder`'s live lease of `node` to `seconds` from now (never earlier).
pub fn extend(holder: Option<&str>, node: Option<i32>, seconds: Option<i32>) -> AppWindow {
    const FUNCTION: &str = "randflake_lease_extend";
    let request = request(FUNCTION, holder).unwrap_or_else(|error| error.raise());
    let node = node_in_pool(node, request.pool).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let last = last_second(now, seconds).unwrap_or_else(|error| error.raise());
    let Request { table, holder, keeper, .. } = request;
    keeper.acting(|| {
        table.lock(TableLock::RowExclusive).unwrap_or_else(|not_granted| locked(FUNCTION, not_granted));
        match table.extend(node, &holder.key, last, now) {
            Some(StoredWindow { start, last }) => AppWindow { node, start, end_exclusive: last + 1 },
            None => gone(&table, node, &holder).raise(),
        }
    })
}

/// Gives `holder`'s live lease of `node` back, keeping the seconds it may have used; false if
/// the lease had already ended.
pub fn release(holder: Option<&str>, node: Option<i32>) -> bool {
    const FUNCTION: &str = "randflake_lease_release";
    let request = request(FUNCTION, holder).unwrap_or_else(|error| error.raise());
    let node = node_in_pool(node, request.pool).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let Request { table, holder, keeper, .. } = request;
    keeper.acting(|| {
        table.lock(TableLock::RowExclusive).unwrap_or_else(|not_granted| locked(FUNCTION, not_granted));
        let Some(window) = table.latest(node, &holder.key) else {
            Error::AppLeaseNotHeld { node: node as i32, holder: holder.name }.raise()
        };
        if window.last < now {
            return false;
        }
        // The row keeps the seconds the holder may have used under a holder no application can
        // extend; the table's trigger cuts its end to the table server's clock plus the
        // allowance for a fast application clock, never later than it was. None if another
        // call released it meanwhile (it waited for that call's row lock).
        table
            .release(
                node,
                window.start,
                &holder.key,
                &format!("{}/{}", released_prefix(&holder.role), holder.name),
                &format!("released by {}", holder.shown),
            )
            .is_some()
    })
}

/// The application pool as monitoring sees it: leases held, nodes free now, and when the soonest
/// lease ends (the second after its last, as the lease functions' `lease_end_exclusive`).
pub struct PoolStatus {
    pub pool: (u32, u32),
    pub held: u32,
    pub free: u32,
    pub soonest_end: Option<u64>,
}

/// The pool's state; `None` without a pool, or outside the keeper's database.
pub fn status() -> Option<PoolStatus> {
    const FUNCTION: &str = "randflake_app_leases";
    let pool = settings::pool()?;
    if identity::database_name() != keeper_settings::database() {
        return None;
    }
    // A monitoring session must not keep a lock on the table open: one held in an idle
    // transaction would queue a VACUUM FULL's request, and the keeper behind it.
    if identity::in_transaction_block() {
        Error::AppLeaseInTransaction { function: FUNCTION }.raise();
    }
    let keeper = Role::named(keeper_settings::keeper_role().as_deref())?;
    keeper.acting(|| {
        let table = open_table()?;
        table.lock(TableLock::AccessShare).unwrap_or_else(|not_granted| locked(FUNCTION, not_granted));
        let now = clock::unix_second();
        let held = table.held_ends(pool.0, pool.1, now);
        let windows = windows_of(&table, pool);
        let free =
            (pool.0..=pool.1).filter(|node| app_lease::free_node(*node, *node, &windows, now, 0).is_some()).count();
        // The moment the soonest lease ends: the second after its last.
        let soonest_end = held.iter().min().map(|last| last + 1);
        Some(PoolStatus { pool, held: held.len() as u32, free: free as u32, soonest_end })
    })
}

/// The start of the holder of every lease that `role`'s holders released: it counts against the
/// role's limit until it ends.
fn released_prefix(role: &str) -> String {
    format!("{}/{}", app_lease::RELEASED, quote_identifier(role))
}

/// The start of every holder key of `role`'s: a quoted role name cannot be the beginning of
/// another's, so no role can name another's holders.
fn role_prefix(role: &str) -> String {
    format!("{}/{}", app_lease::HELD, quote_identifier(role))
}

/// Why `holder` has no live lease of `node`.
fn gone(table: &AppLeaseTable, node: u32, holder: &Holder) -> Error {
    match table.latest(node, &holder.key) {
        Some(window) => Error::AppLeaseEnded { node: node as i32, holder: holder.name.clone(), last: window.last },
        None => Error::AppLeaseNotHeld { node: node as i32, holder: holder.name.clone() },
    }
}
