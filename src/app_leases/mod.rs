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
use pgrx::spi::{quote_identifier, quote_qualified_identifier, SpiError};
use randflake::app_lease::{self, AppWindow};

use crate::errors::Error;
use crate::keeper::settings::{self as keeper_settings, NodeSource};
use crate::lease_table::vetting::{self, Verdict};
use crate::pg::identity::{self, Role};
use crate::pg::{backend, clock};
use crate::shmem::keeper_report;

/// The start of the holder written in place of a released lease's, followed by the role and
/// holder it was (`released/<quoted role>/<holder>`): it keeps the window's bound, counts
/// against the role's limit until it ends, and no application's holder (all "app/...") can
/// name it.
const RELEASED: &str = "released";

/// What one call may use: the pool, the table, and who asks.
struct Request {
    pool: (u32, u32),
    table: String,
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
    let (schema, table) = keeper_settings::lease_table();
    let foreign_allowed = keeper_settings::node_source() == NodeSource::Fleet;
    match keeper.acting(|| vetting::vet(&schema, &table, foreign_allowed)) {
        Verdict::Trusted => {}
        Verdict::Missing | Verdict::Refused(_) => return Err(no_lease_table()),
    }
    Ok(Request { pool, table: quote_qualified_identifier(schema.as_str(), table.as_str()), holder, keeper })
}

fn no_lease_table() -> Error {
    Error::NoLease { keeper: keeper_report::read(), database: keeper_settings::database() }
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

/// The value of an SPI call; a failure is raised as the statement's ERROR.
fn or_raise<T>(result: Result<T, SpiError>) -> T {
    result.unwrap_or_else(|error| error!("{error}"))
}

/// Leases a free node of the application pool to `holder` for `seconds` from now.
pub fn acquire(holder: Option<&str>, seconds: Option<i32>) -> AppWindow {
    let request = request("randflake_lease_acquire", holder).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let last = last_second(now, seconds).unwrap_or_else(|error| error.raise());
    let Request { pool, table, holder, keeper } = request;
    keeper.acting(|| {
        // Serialises this server's acquisitions, which read the pool and then choose: a lock on
        // this server's own lease table (in fleet mode too) that conflicts only with itself and
        // VACUUM, not with the keeper's writes, and that no role without write rights on the
        // table can take, so that none can hold acquisitions up. The exclusion constraint still
        // settles a race between servers of a fleet.
        or_raise(Spi::run("LOCK TABLE randflake.node_leases IN SHARE UPDATE EXCLUSIVE MODE"));
        if let Some(limit) = settings::leases_per_role() {
            if live_leases_of(&table, &holder.role, now) >= limit {
                Error::AppRoleQuota { role: holder.role.clone(), limit }.raise();
            }
        }
        let windows = windows_of(&table, pool);
        let spread = u64::from(backend::pid().unsigned_abs()) ^ now;
        let Some(node) = app_lease::free_node(pool.0, pool.1, &windows, now, spread) else {
            Error::AppPoolExhausted { first: pool.0, last: pool.1 }.raise()
        };
        // Windows of the node that ended before now bound nothing the new one does not.
        or_raise(Spi::run_with_args(
            &format!("DELETE FROM {table} WHERE first_node = $1 AND last_node = $1 AND lease_end < $2"),
            &[(node as i32).into(), (now as i64).into()],
        ));
        let inserted = PgTryBuilder::new(|| {
            insert(&table, node, &holder.key, &holder.shown, now, last);
            true
        })
        .catch_when(PgSqlErrorCode::ERRCODE_EXCLUSION_VIOLATION, |_| false)
        .execute();
        if !inserted {
            Error::AppLeaseRace { node }.raise();
        }
        AppWindow { node, start: now, end_exclusive: last + 1 }
    })
}

/// Moves the end of `holder`'s live lease of `node` to `seconds` from now (never earlier).
pub fn extend(holder: Option<&str>, node: Option<i32>, seconds: Option<i32>) -> AppWindow {
    let request = request("randflake_lease_extend", holder).unwrap_or_else(|error| error.raise());
    let node = node_in_pool(node, request.pool).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let last = last_second(now, seconds).unwrap_or_else(|error| error.raise());
    let Request { table, holder, keeper, .. } = request;
    keeper.acting(|| {
        let renewed = or_raise(Spi::connect_mut(|client| {
            let rows = client.update(
                &format!(
                    "UPDATE {table} SET lease_end = greatest(lease_end, $1), used_through = greatest(used_through, $1),
                                        renewed_at = pg_catalog.now()
                      WHERE first_node = $2 AND last_node = $2 AND holder = $3 AND lease_end >= $4
                  RETURNING lease_start, lease_end"
                ),
                Some(1),
                &[(last as i64).into(), (node as i32).into(), holder.key.as_str().into(), (now as i64).into()],
            )?;
            if rows.is_empty() {
                return Ok(None);
            }
            let row = rows.first();
            Ok::<_, SpiError>(row.get::<i64>(1)?.zip(row.get::<i64>(2)?))
        }));
        match renewed {
            Some((start, end)) => AppWindow { node, start: start as u64, end_exclusive: end as u64 + 1 },
            None => gone(&table, node, &holder).raise(),
        }
    })
}

/// Gives `holder`'s live lease of `node` back, keeping the seconds it may have used; false if
/// the lease had already ended.
pub fn release(holder: Option<&str>, node: Option<i32>) -> bool {
    let request = request("randflake_lease_release", holder).unwrap_or_else(|error| error.raise());
    let node = node_in_pool(node, request.pool).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let Request { table, holder, keeper, .. } = request;
    keeper.acting(|| {
        let Some((start, end)) = latest_window(&table, node, &holder.key) else {
            Error::AppLeaseNotHeld { node: node as i32, holder: holder.name }.raise()
        };
        if end < now {
            return false;
        }
        // The row is replaced by one no holder can extend, over the seconds the holder may have
        // used: a window is never given back before a fast application clock could reach it.
        let deleted = or_raise(Spi::connect_mut(|client| {
            let rows = client.update(
                &format!("DELETE FROM {table} WHERE first_node = $1 AND lease_start = $2 AND holder = $3 RETURNING 1"),
                None,
                &[(node as i32).into(), (start as i64).into(), holder.key.as_str().into()],
            )?;
            Ok::<_, SpiError>(rows.len())
        }));
        if deleted == 0 {
            // Another call released it meanwhile (it waited for that call's row lock).
            return false;
        }
        insert(
            &table,
            node,
            &format!("{}/{}", released_prefix(&holder.role), holder.name),
            &format!("released by {}", holder.shown),
            start,
            app_lease::released_last(start, end, now),
        );
        true
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
    let pool = settings::pool()?;
    if identity::database_name() != keeper_settings::database() {
        return None;
    }
    let keeper = Role::named(keeper_settings::keeper_role().as_deref())?;
    let (schema, table) = keeper_settings::lease_table();
    let foreign_allowed = keeper_settings::node_source() == NodeSource::Fleet;
    let table_name = quote_qualified_identifier(schema.as_str(), table.as_str());
    keeper.acting(|| {
        if !matches!(vetting::vet(&schema, &table, foreign_allowed), Verdict::Trusted) {
            return None;
        }
        let now = clock::unix_second();
        let held: Vec<u64> = or_raise(Spi::connect(|client| {
            let rows = client.select(
                &format!(
                    "SELECT lease_end FROM {table_name}
                      WHERE first_node BETWEEN $1 AND $2 AND holder LIKE 'app/%' AND lease_end >= $3"
                ),
                None,
                &[(pool.0 as i32).into(), (pool.1 as i32).into(), (now as i64).into()],
            )?;
            rows.map(|row| row.get::<i64>(1).map(|end| end.unwrap_or_default() as u64)).collect::<Result<_, _>>()
        }));
        let windows = windows_of(&table_name, pool);
        let free =
            (pool.0..=pool.1).filter(|node| app_lease::free_node(*node, *node, &windows, now, 0).is_some()).count();
        // The moment the soonest lease ends: the second after its last.
        let soonest_end = held.iter().min().map(|last| last + 1);
        Some(PoolStatus { pool, held: held.len() as u32, free: free as u32, soonest_end })
    })
}

/// `(node, last second)` of every window on record of a node of the pool.
fn windows_of(table: &str, pool: (u32, u32)) -> Vec<(u32, u64)> {
    let rows: Vec<(i32, i32, i64)> = or_raise(Spi::connect(|client| {
        let rows = client.select(
            &format!("SELECT first_node, last_node, lease_end FROM {table} WHERE first_node <= $2 AND last_node >= $1"),
            None,
            &[(pool.0 as i32).into(), (pool.1 as i32).into()],
        )?;
        rows.map(|row| {
            Ok((
                row.get::<i32>(1)?.unwrap_or_default(),
                row.get::<i32>(2)?.unwrap_or_default(),
                row.get::<i64>(3)?.unwrap_or_default(),
            ))
        })
        .collect::<Result<_, SpiError>>()
    }));
    // A row of several nodes (only a misconfigured server's) counts for each of them.
    rows.into_iter()
        .flat_map(|(first, last, end)| {
            (first.max(pool.0 as i32)..=last.min(pool.1 as i32)).map(move |node| (node as u32, end as u64))
        })
        .collect()
}

/// How many nodes the holders of `role` keep from others now: their live leases, and the ones
/// they released that have not ended (or a role could take the whole pool by releasing and
/// leasing again).
fn live_leases_of(table: &str, role: &str, now: u64) -> u32 {
    let (held, released) = (format!("{}/", role_prefix(role)), format!("{}/", released_prefix(role)));
    let count = or_raise(Spi::get_one_with_args::<i64>(
        &format!(
            "SELECT count(*) FROM {table}
              WHERE (pg_catalog.starts_with(holder, $1) OR pg_catalog.starts_with(holder, $3)) AND lease_end >= $2"
        ),
        &[held.as_str().into(), (now as i64).into(), released.as_str().into()],
    ));
    count.unwrap_or_default() as u32
}

/// The start of the holder of every lease that `role`'s holders released.
fn released_prefix(role: &str) -> String {
    format!("{RELEASED}/{}", quote_identifier(role))
}

/// The start of every holder key of `role`'s: a quoted role name cannot be the beginning of
/// another's, so no role can name another's holders.
fn role_prefix(role: &str) -> String {
    format!("app/{}", quote_identifier(role))
}

/// The start and last second of `holder`'s latest window of `node`.
fn latest_window(table: &str, node: u32, key: &str) -> Option<(u64, u64)> {
    or_raise(Spi::connect(|client| {
        let rows = client.select(
            &format!(
                "SELECT lease_start, lease_end FROM {table}
                  WHERE first_node = $1 AND last_node = $1 AND holder = $2 ORDER BY lease_start DESC LIMIT 1"
            ),
            Some(1),
            &[(node as i32).into(), key.into()],
        )?;
        if rows.is_empty() {
            return Ok(None);
        }
        let row = rows.first();
        Ok::<_, SpiError>(row.get::<i64>(1)?.zip(row.get::<i64>(2)?).map(|(start, end)| (start as u64, end as u64)))
    }))
}

/// Why `holder` has no live lease of `node`.
fn gone(table: &str, node: u32, holder: &Holder) -> Error {
    match latest_window(table, node, &holder.key) {
        Some((_, last)) => Error::AppLeaseEnded { node: node as i32, holder: holder.name.clone(), last },
        None => Error::AppLeaseNotHeld { node: node as i32, holder: holder.name.clone() },
    }
}

fn insert(table: &str, node: u32, holder: &str, shown: &str, start: u64, last: u64) {
    or_raise(Spi::run_with_args(
        &format!(
            // renewed_at is explicit: through postgres_fdw, a remote default does not apply.
            "INSERT INTO {table} (first_node, last_node, holder, server_name, lease_start, lease_end, used_through, renewed_at)
             VALUES ($1, $1, $2, $3, $4, $5, $5, pg_catalog.now())"
        ),
        &[(node as i32).into(), holder.into(), shown.into(), (start as i64).into(), (last as i64).into()],
    ));
}
