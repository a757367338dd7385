//! Application leases through SQL: the procedures `randflake_lease_acquire`, `_extend` and
//! `_release` run the crate's arithmetic (`randflake::decisions::app_lease`) over the very lease
//! table this server's keeper uses, so that processes making IDs with a Randflake port and the
//! servers' own backends share one ID space and never collide.
//!
//! A lease reaches the application only once its commit is durable: each procedure runs in a
//! transaction of its own, commits it, and returns its result only on evidence that the commit
//! is flushed here and confirmed by the synchronous standbys (`pg::procedure`), as the keeper
//! publishes a lease only once durable. On a fleet member, where the table is the coordinator's,
//! the evidence is the coordinator's, read back as the keeper reads it (its
//! `randflake.commit_evidence`, imported beside the table) in transactions of their own after the
//! commit; the member's connection to the coordinator is then closed, so that an idle
//! application session holds none of the coordinator's connections.
//!
//! The functions are executable only by roles a DBA grants them to, and they write a table that
//! a superuser-run keeper trusts, so every argument is treated as hostile: the holder is stored
//! under the calling role's name (no role can name another's holders), the node must be one of
//! the application pool's, every statement is parameterised, and the table is written as the
//! keeper's role, after the same trust checks the keeper makes. Their statements are
//! `lease_table::AppLeaseTable`'s, marked as the extension's own for the table's trigger, with
//! their lock waits bounded.
#![forbid(unsafe_code)]

pub mod settings;

use pgrx::prelude::*;
use pgrx::spi::quote_identifier;
use std::time::Duration;

use randflake::decisions::app_lease::{self, AppLeaseRefusal, AppLeaseStore, AppWindow, CommitEvidence};
use randflake::decisions::durability::Commit;

use crate::errors::Error;
use crate::lease_table::{AppLeaseTable, LockNotGranted, NewAppLease, StoredWindow, LOCK_WAIT};
use crate::node_config::{self, Mode};
use crate::pg::identity::{self, Role};
use crate::pg::lock::TableLock;
use crate::pg::procedure::{Call, Committed, Durability, NotOwn, OwnTransaction};
use crate::pg::transaction::{self, Alone};
use crate::pg::{backend, clock};
use crate::shmem::keeper_board;

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
fn request(holder: Option<&str>) -> Result<Request, Error> {
    let pool = settings::pool().ok_or(Error::NoAppPool {})?;
    let database = node_config::database();
    if identity::database_name() != database {
        return Err(Error::AppLeaseDatabase { database });
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
    let keeper = Role::named(node_config::keeper_role().as_deref()).ok_or_else(no_lease_table)?;
    let table = keeper.acting(open_table).ok_or_else(no_lease_table)?;
    Ok(Request { pool, table, holder, keeper })
}

/// This server's lease table, if the keeper would trust it (in range mode: the extension's
/// own; in fleet mode: the coordinator's, with its evidence relation). As the keeper's role.
fn open_table() -> Option<AppLeaseTable> {
    let (schema, table) = node_config::lease_table();
    AppLeaseTable::open(&schema, &table, node_config::mode() == Mode::Fleet)
}

fn no_lease_table() -> Error {
    Error::NoLease { keeper: keeper_board::read(), database: node_config::database() }
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

/// `(node, last second)` of every window on record of a node of `first..=last`, as
/// `app_lease::free_node` takes them.
fn windows_of(table: &AppLeaseTable, (first, last): (u32, u32)) -> Vec<(u32, u64)> {
    table.windows_of(first, last).into_iter().map(|window| (window.node, window.last)).collect()
}

/// Leases a free node of the application pool to `holder` for `seconds` from now, committed
/// durably before it is returned.
pub fn acquire(call: &Call, holder: Option<&str>, seconds: Option<i32>) -> AppWindow {
    let own = own_transaction(call, ACQUIRE.name);
    let request = request(holder).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let last = last_second(now, seconds).unwrap_or_else(|error| error.raise());
    let mut store = ProcedureStore::new(request, own);
    store.keeper.acting(|| {
        // Serialises this server's acquisitions, which read the pool and then choose, waiting a
        // bounded time. The procedure's own commit releases the lock: no caller's statement
        // holds it longer.
        store.table.lock_for_acquisition().unwrap_or_else(|not_granted| locked(ACQUIRE.name, not_granted));
        if let Some(limit) = settings::leases_per_role() {
            // The role's live leases, and the ones it released that have not ended (or a role
            // could take the whole pool by releasing and leasing again).
            let role = &store.holder.role;
            let kept = store.table.windows_kept(
                &format!("{}/", role_prefix(role)),
                &format!("{}/", released_prefix(role)),
                now,
            );
            if kept >= limit {
                Error::AppRoleQuota { role: role.clone(), limit }.raise();
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
    let request = request(holder).unwrap_or_else(|error| error.raise());
    let node = node_in_pool(node, request.pool).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let last = last_second(now, seconds).unwrap_or_else(|error| error.raise());
    let mut store = ProcedureStore::new(request, own);
    store.lock(EXTEND.name);
    app_lease::extend(&mut store, node, now, last).unwrap_or_else(|refusal| store.refused(&EXTEND, refusal))
}

/// Gives `holder`'s live lease of `node` back, keeping the seconds it may have used; false if
/// the lease had already ended. True is returned only once the release is durable.
pub fn release(call: &Call, holder: Option<&str>, node: Option<i32>) -> bool {
    let own = own_transaction(call, RELEASE.name);
    let request = request(holder).unwrap_or_else(|error| error.raise());
    let node = node_in_pool(node, request.pool).unwrap_or_else(|error| error.raise());
    let now = clock::unix_second();
    let mut store = ProcedureStore::new(request, own);
    store.lock(RELEASE.name);
    app_lease::release(&mut store, node, now).unwrap_or_else(|refusal| store.refused(&RELEASE, refusal))
}

/// How long a call on a fleet member reads the coordinator's evidence after its commit before it
/// gives up on it as unconfirmed: as long as its statements wait for a lock.
const EVIDENCE_WAIT: Duration = LOCK_WAIT;

/// The transactions of a call after its commit, their work done as the keeper's role (whose user
/// mapping reaches the coordinator) and each committed as the caller.
struct AsKeeper {
    committed: Committed,
    keeper: Role,
}

impl Alone for AsKeeper {
    fn alone<T>(&mut self, work: impl FnOnce() -> T) -> T {
        let keeper = self.keeper;
        self.committed.alone(|| keeper.acting(work))
    }
}

/// The lease table as one call sees it ([`app_lease::AppLeaseStore`]): each statement runs as
/// the keeper's role, and the commit, made as the caller, is the procedure's own.
struct ProcedureStore {
    pool: (u32, u32),
    table: AppLeaseTable,
    holder: Holder,
    keeper: Role,
    own: Option<OwnTransaction>,
}

impl ProcedureStore {
    fn new(request: Request, own: OwnTransaction) -> Self {
        let Request { pool, table, holder, keeper } = request;
        Self { pool, table, holder, keeper, own: Some(own) }
    }

    /// Takes the lock that extensions and releases write the table under, waiting a bounded
    /// time; the procedure's commit releases it.
    fn lock(&self, function: &'static str) {
        self.keeper
            .acting(|| self.table.lock(TableLock::RowExclusive))
            .unwrap_or_else(|not_granted| locked(function, not_granted));
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

impl AppLeaseStore for ProcedureStore {
    fn windows(&mut self, first: u32, last: u32) -> Vec<(u32, u64)> {
        self.keeper.acting(|| windows_of(&self.table, (first, last)))
    }

    fn remove_ended(&mut self, node: u32, now: u64) {
        self.keeper.acting(|| self.table.delete_ended(node, now));
    }

    fn insert(&mut self, window: AppWindow) -> bool {
        let holder = &self.holder;
        let lease = NewAppLease {
            node: window.node,
            holder: &holder.key,
            shown: &holder.shown,
            start: window.start,
            last: window.last(),
        };
        self.keeper.acting(|| self.table.insert(&lease).is_ok())
    }

    fn lengthen(&mut self, node: u32, last: u64, now: u64) -> Option<(u64, u64)> {
        let window = self.keeper.acting(|| self.table.extend(node, &self.holder.key, last, now));
        window.map(|StoredWindow { start, last }| (start, last))
    }

    fn latest(&mut self, node: u32) -> Option<(u64, u64)> {
        let window = self.keeper.acting(|| self.table.latest(node, &self.holder.key));
        window.map(|StoredWindow { start, last }| (start, last))
    }

    /// One UPDATE gives the row a holder no application can extend. Its end is set by the
    /// table's trigger to `released_last` by the table server's clock (in fleet mode the
    /// coordinator's), not to the `last` the crate computed by this server's.
    fn replace_released(&mut self, node: u32, start: u64, _last: u64) -> bool {
        let holder = &self.holder;
        let released = self.keeper.acting(|| {
            self.table.release(
                node,
                start,
                &holder.key,
                &format!("{}/{}", released_prefix(&holder.role), holder.name),
                &format!("released by {}", holder.shown),
            )
        });
        // None: another call released it meanwhile (it waited for that call's row lock).
        released.is_some()
    }

    /// Made as the caller, not as the keeper: a transaction started while acting as another
    /// role would go back to that role if it aborted. In fleet mode the commit commits the
    /// coordinator's transaction too (postgres_fdw commits it first), and the coordinator's
    /// evidence decides; the connection to it is closed afterwards, durable or not.
    fn commit(&mut self) -> CommitEvidence {
        let Some(own) = self.own.take() else {
            return CommitEvidence::Unconfirmed;
        };
        let keeper = self.keeper;
        let Some(evidence) = self.table.evidence.as_mut() else {
            return match own.commit() {
                Durability::Durable => CommitEvidence::Durable,
                Durability::Unconfirmed | Durability::NothingWritten => CommitEvidence::Unconfirmed,
            };
        };
        // The server the writes went to, read on their remote connection (the keeper's role's
        // user mapping), before the commit.
        let written_on = keeper.acting(|| evidence.server()).unwrap_or_else(|error| error!("{error}"));
        evidence.start_tick(EVIDENCE_WAIT);
        // What the commit shows here says nothing: the rows are the coordinator's.
        let (_, committed) = own.commit_and_continue();
        let mut transactions = AsKeeper { committed, keeper };
        let read = evidence.after_commit(written_on, &mut transactions);
        transactions.alone(|| self.table.disconnect());
        transactions.committed.finish();
        match read {
            Ok(evidence) if evidence.commit() == Commit::Durable => CommitEvidence::Durable,
            Ok(_) | Err(_) => CommitEvidence::Unconfirmed,
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
    const FUNCTION: &str = "randflake_app_leases";
    let pool = settings::pool()?;
    // On a fleet member the pool's state is the coordinator's table's: read it there (reading it
    // here would keep a connection to the coordinator open for the rest of the session).
    if identity::database_name() != node_config::database() || node_config::mode() == Mode::Fleet {
        return None;
    }
    // A monitoring session must not keep a lock on the table open: one held in an idle
    // transaction would queue a VACUUM FULL's request, and the keeper behind it. Refused in a
    // transaction block, and read in a subtransaction rolled back at once, which releases the
    // lock also where a pipeline leaves the transaction open.
    if identity::in_transaction_block() {
        Error::PoolStatusInTransaction { function: FUNCTION }.raise();
    }
    let keeper = Role::named(node_config::keeper_role().as_deref())?;
    keeper.acting(|| transaction::with_locks_released(|| pool_status(FUNCTION, pool)))
}

/// The pool's state, read from the lease table.
fn pool_status(function: &'static str, pool: (u32, u32)) -> Option<PoolStatus> {
    let table = open_table()?;
    table.lock(TableLock::AccessShare).unwrap_or_else(|not_granted| locked(function, not_granted));
    let now = clock::unix_second();
    let held = table.held_ends(pool.0, pool.1, now);
    let windows = windows_of(&table, pool);
    let free = (pool.0..=pool.1).filter(|node| app_lease::free_node(*node, *node, &windows, now, 0).is_some()).count();
    // The moment the soonest lease ends: the second after its last.
    let soonest_end = held.iter().min().map(|last| last + 1);
    Some(PoolStatus { pool, held: held.len() as u32, free: free as u32, soonest_end })
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
