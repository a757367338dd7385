//! Application leases through SQL: the procedures `randflake_lease_acquire`, `_extend` and
//! `_release` run the crate's arithmetic (`randflake::app_lease`) over the very lease table this
//! server's keeper uses, so that processes making IDs with a Randflake port and the servers' own
//! backends share one ID space and never collide.
//!
//! A lease reaches the application only once its commit is durable: each procedure runs in a
//! transaction of its own, commits it, and returns its result only on evidence that the commit
//! is flushed here and confirmed by the synchronous standbys (`pg::procedure`), as the keeper
//! publishes a lease only once durable. On a fleet member, where the table is the
//! coordinator's and no such evidence is available yet, they refuse.
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
use randflake::app_lease::{self, AppLeaseRefusal, AppLeaseStore, AppWindow, CommitEvidence};

use crate::errors::Error;
use crate::keeper::settings::{self as keeper_settings, NodeSource};
use crate::keeper::vetting::{self, Verdict};
use crate::pg::identity::{self, Role};
use crate::pg::procedure::{Call, Durability, NotOwn, OwnTransaction};
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

/// One of the application lease procedures.
struct Procedure {
    name: &'static str,
    /// What the application must do when the call's commit is not known durable.
    if_unconfirmed: &'static str,
}

const ACQUIRE: Procedure = Procedure {
    name: "randflake_lease_acquire",
    if_unconfirmed:
        "Do not issue IDs with this node: the window its commit recorded keeps it from others until it ends.",
};
const EXTEND: Procedure =
    Procedure { name: "randflake_lease_extend", if_unconfirmed: "Keep to the window the lease had before this call." };
const RELEASE: Procedure = Procedure {
    name: "randflake_lease_release",
    if_unconfirmed:
        "Whether the release counts is unknown: stop issuing IDs with this node anyway, as after any release.",
};

/// The transaction of the call, which the procedure commits itself; refused where it cannot.
fn own_transaction(call: &Call, function: &'static str) -> OwnTransaction {
    call.own_transaction().unwrap_or_else(|not_own| {
        match not_own {
            NotOwn::Atomic => Error::AppLeaseInTransaction { function },
            NotOwn::AlreadyWrote => Error::AppLeaseAfterWrites { function },
        }
        .raise()
    })
}

/// Checks what every call needs, in order: a pool, the keeper's database, range mode, a
/// well-formed holder, and a lease table the keeper may trust.
fn request(function: &'static str, holder: Option<&str>) -> Result<Request, Error> {
    let pool = settings::pool().ok_or(Error::NoAppPool {})?;
    let database = keeper_settings::database();
    if identity::database_name() != database {
        return Err(Error::AppLeaseDatabase { database });
    }
    if keeper_settings::node_source() == NodeSource::Fleet {
        return Err(Error::AppLeaseInFleet { function });
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
    match keeper.acting(|| vetting::vet(&schema, &table, false)) {
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

/// Leases a free node of the application pool to `holder` for `seconds` from now, committed
/// durably before it is returned.
pub fn acquire(call: &Call, holder: Option<&str>, seconds: Option<i32>) -> AppWindow {
    let own = own_transaction(call, ACQUIRE.name);
    let request = request(ACQUIRE.name, holder).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let last = last_second(now, seconds).unwrap_or_else(|error| error.raise());
    let mut store = SqlStore::new(request, own);
    store.keeper.acting(|| {
        // Serialises this server's acquisitions, which read the pool and then choose: a lock on
        // this server's own lease table that conflicts only with itself and VACUUM, not with the
        // keeper's writes, and that no role without write rights on the table can take, so that
        // none can hold acquisitions up. The procedure's own commit releases it: no caller's
        // statement holds it longer.
        or_raise(Spi::run("LOCK TABLE randflake.node_leases IN SHARE UPDATE EXCLUSIVE MODE"));
        if let Some(limit) = settings::leases_per_role() {
            if live_leases_of(&store.table, &store.holder.role, now) >= limit {
                Error::AppRoleQuota { role: store.holder.role.clone(), limit }.raise();
            }
        }
    });
    let spread = u64::from(backend::pid().unsigned_abs()) ^ now;
    let pool = store.pool;
    app_lease::acquire(&mut store, pool, now, last, spread).unwrap_or_else(|refusal| store.refused(&ACQUIRE, refusal))
}

/// Moves the end of `holder`'s live lease of `node` to `seconds` from now (never earlier),
/// committed durably before it is returned.
pub fn extend(call: &Call, holder: Option<&str>, node: Option<i32>, seconds: Option<i32>) -> AppWindow {
    let own = own_transaction(call, EXTEND.name);
    let request = request(EXTEND.name, holder).unwrap_or_else(|error| error.raise());
    let node = node_in_pool(node, request.pool).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let last = last_second(now, seconds).unwrap_or_else(|error| error.raise());
    let mut store = SqlStore::new(request, own);
    app_lease::extend(&mut store, node, now, last).unwrap_or_else(|refusal| store.refused(&EXTEND, refusal))
}

/// Gives `holder`'s live lease of `node` back, keeping the seconds it may have used; false if
/// the lease had already ended. True is returned only once the release is durable.
pub fn release(call: &Call, holder: Option<&str>, node: Option<i32>) -> bool {
    let own = own_transaction(call, RELEASE.name);
    let request = request(RELEASE.name, holder).unwrap_or_else(|error| error.raise());
    let node = node_in_pool(node, request.pool).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let mut store = SqlStore::new(request, own);
    app_lease::release(&mut store, node, now).unwrap_or_else(|refusal| store.refused(&RELEASE, refusal))
}

/// The lease table as one call sees it ([`app_lease::AppLeaseStore`]): each statement runs as
/// the keeper's role, and the commit, made as the caller, is the procedure's own.
struct SqlStore {
    pool: (u32, u32),
    table: String,
    holder: Holder,
    keeper: Role,
    own: Option<OwnTransaction>,
}

impl SqlStore {
    fn new(request: Request, own: OwnTransaction) -> Self {
        let Request { pool, table, holder, keeper } = request;
        Self { pool, table, holder, keeper, own: Some(own) }
    }

    /// Raises the refusal as its error; the transaction is rolled back, unless it was committed
    /// (an unconfirmed commit: its row is kept, and keeps its node from others).
    fn refused(&self, procedure: &Procedure, refusal: AppLeaseRefusal) -> ! {
        let holder = || self.holder.name.clone();
        match refusal {
            AppLeaseRefusal::PoolExhausted => Error::AppPoolExhausted { first: self.pool.0, last: self.pool.1 },
            AppLeaseRefusal::Race { node } => Error::AppLeaseRace { node },
            AppLeaseRefusal::NotHeld { node } => Error::AppLeaseNotHeld { node: node as i32, holder: holder() },
            AppLeaseRefusal::Ended { node, last } => Error::AppLeaseEnded { node: node as i32, holder: holder(), last },
            AppLeaseRefusal::Unconfirmed { node } => {
                Error::AppLeaseUnconfirmed { function: procedure.name, node, consequence: procedure.if_unconfirmed }
            }
        }
        .raise()
    }
}

impl AppLeaseStore for SqlStore {
    fn windows(&mut self, first: u32, last: u32) -> Vec<(u32, u64)> {
        self.keeper.acting(|| windows_of(&self.table, (first, last)))
    }

    fn remove_ended(&mut self, node: u32, now: u64) {
        self.keeper.acting(|| {
            or_raise(Spi::run_with_args(
                &format!("DELETE FROM {} WHERE first_node = $1 AND last_node = $1 AND lease_end < $2", self.table),
                &[(node as i32).into(), (now as i64).into()],
            ))
        });
    }

    fn insert(&mut self, window: AppWindow) -> bool {
        self.keeper.acting(|| {
            PgTryBuilder::new(|| {
                insert(&self.table, window.node, &self.holder.key, &self.holder.shown, window.start, window.last());
                true
            })
            .catch_when(PgSqlErrorCode::ERRCODE_EXCLUSION_VIOLATION, |_| false)
            .execute()
        })
    }

    fn lengthen(&mut self, node: u32, last: u64, now: u64) -> Option<(u64, u64)> {
        let table = &self.table;
        let key = self.holder.key.as_str();
        self.keeper.acting(|| {
            or_raise(Spi::connect_mut(|client| {
                let rows = client.update(
                    &format!(
                        "UPDATE {table} SET lease_end = greatest(lease_end, $1), used_through = greatest(used_through, $1),
                                            renewed_at = pg_catalog.now()
                          WHERE first_node = $2 AND last_node = $2 AND holder = $3 AND lease_end >= $4
                      RETURNING lease_start, lease_end"
                    ),
                    Some(1),
                    &[(last as i64).into(), (node as i32).into(), key.into(), (now as i64).into()],
                )?;
                if rows.is_empty() {
                    return Ok(None);
                }
                let row = rows.first();
                Ok::<_, SpiError>(row.get::<i64>(1)?.zip(row.get::<i64>(2)?).map(|(start, end)| (start as u64, end as u64)))
            }))
        })
    }

    fn latest(&mut self, node: u32) -> Option<(u64, u64)> {
        self.keeper.acting(|| latest_window(&self.table, node, &self.holder.key))
    }

    fn replace_released(&mut self, node: u32, start: u64, last: u64) -> bool {
        let (table, holder) = (&self.table, &self.holder);
        self.keeper.acting(|| {
            // The row is replaced by one no holder can extend, over the seconds the holder may
            // have used: a window is never given back before a fast application clock could reach it.
            let deleted = or_raise(Spi::connect_mut(|client| {
                let rows = client.update(
                    &format!(
                        "DELETE FROM {table} WHERE first_node = $1 AND lease_start = $2 AND holder = $3 RETURNING 1"
                    ),
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
                table,
                node,
                &format!("{}/{}", released_prefix(&holder.role), holder.name),
                &format!("released by {}", holder.shown),
                start,
                last,
            );
            true
        })
    }

    /// Made as the caller, not as the keeper: a transaction started while acting as another
    /// role would go back to that role if it aborted.
    fn commit(&mut self) -> CommitEvidence {
        match self.own.take().map(OwnTransaction::commit) {
            Some(Durability::Durable) => CommitEvidence::Durable,
            // A write (in fleet mode, to another server) leaves evidence here or is unconfirmed.
            Some(Durability::Unconfirmed | Durability::NothingWritten) | None => CommitEvidence::Unconfirmed,
        }
    }
}

/// The application pool as monitoring sees it: leases held, nodes free now, and when the soonest
/// lease ends (the second after its last, as the lease functions' `lease_end_exclusive`).
pub struct PoolStatus {
    pub pool: (u32, u32),
    pub held: u32,
    pub free: u32,
    pub soonest_end: Option<u64>,
}

/// The pool's state; `None` without a pool, outside the keeper's database, or on a fleet member.
pub fn status() -> Option<PoolStatus> {
    let pool = settings::pool()?;
    // A fleet member leases no application nodes, and reading the coordinator's table would
    // keep a connection to it open for the rest of the session.
    if identity::database_name() != keeper_settings::database() || keeper_settings::node_source() == NodeSource::Fleet {
        return None;
    }
    let keeper = Role::named(keeper_settings::keeper_role().as_deref())?;
    let (schema, table) = keeper_settings::lease_table();
    let table_name = quote_qualified_identifier(schema.as_str(), table.as_str());
    keeper.acting(|| {
        if !matches!(vetting::vet(&schema, &table, false), Verdict::Trusted) {
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
