//! Transactions a background worker runs for itself, outside any client's, a subtransaction that
//! gives its locks back, and the one catalog read that needs no database.

use std::ffi::CStr;

use pgrx::pg_sys;

/// Starts a transaction with a snapshot, as a client's statement would have. Between
/// transactions only.
pub fn start() {
    // SAFETY: starting a transaction in a background worker connected to a database; PostgreSQL
    // raises an ERROR if one is already open.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
}

/// Work run in a transaction of its own after a commit: a background worker's, started and
/// committed between its transactions ([`Worker`]), or a procedure's next one after its own
/// commit (`procedure::Committed`). For a foreign table, each is a new remote transaction.
pub trait Alone {
    /// Runs `work` in a transaction of its own, which it then commits.
    fn alone<T>(&mut self, work: impl FnOnce() -> T) -> T;
}

/// A background worker's transactions.
pub struct Worker;

impl Alone for Worker {
    fn alone<T>(&mut self, work: impl FnOnce() -> T) -> T {
        start();
        let value = work();
        commit();
        value
    }
}

/// Commits the transaction [`start`] opened; an ERROR at commit (a remote COMMIT that failed, a
/// deferred check) is raised as any other. Does nothing outside a transaction.
pub fn commit() {
    // SAFETY: the snapshot is popped only if one is set, and the commit only inside a
    // transaction, which is what these calls require.
    unsafe {
        if !pg_sys::IsTransactionState() {
            return;
        }
        if pg_sys::ActiveSnapshotSet() {
            pg_sys::PopActiveSnapshot();
        }
        pg_sys::CommitTransactionCommand();
    }
}

/// Rolls back whatever transaction is open, the failed one after a caught ERROR included; does
/// nothing between transactions. This is how a background worker recovers from an error.
pub fn abort() {
    // SAFETY: AbortCurrentTransaction handles every transaction state, idle included, and
    // releases the snapshots, locks and memory of the aborted transaction.
    unsafe { pg_sys::AbortCurrentTransaction() };
}

/// Runs read-only `work` in a subtransaction that is then rolled back, so that the locks it took
/// are released when it returns instead of lasting to the end of the caller's transaction: an
/// idle transaction, or a pipeline that has not sent its Sync, then holds none of them. What
/// `work` returns must be its own (Rust) values: whatever it allocated in the subtransaction's
/// memory is gone.
pub fn with_locks_released<T>(work: impl FnOnce() -> T) -> T {
    // SAFETY: reading the caller's memory context and resource owner, to restore them after the
    // subtransaction as PL/pgSQL does around an exception block.
    let (context, owner) = unsafe { (pg_sys::CurrentMemoryContext, pg_sys::CurrentResourceOwner) };
    // SAFETY: a subtransaction inside the caller's transaction, which a SQL function runs in;
    // an ERROR in `work` aborts the caller's transaction, subtransaction and all.
    unsafe { pg_sys::BeginInternalSubTransaction(std::ptr::null()) };
    let value = work();
    // SAFETY: rolling back the subtransaction begun above, which releases its locks, then
    // putting back the caller's memory context and resource owner.
    unsafe {
        pg_sys::RollbackAndReleaseCurrentSubTransaction();
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
    }
    value
}

/// Whether `name` is in pg_database, read in a transaction of its own by a worker connected to
/// no database. A sequential scan, as the autovacuum launcher reads the catalog: with no
/// database selected, an index on it may not be usable yet.
pub fn database_exists(name: &str) -> bool {
    start();
    // SAFETY: a catalog scan inside the transaction just started, with the table open and
    // locked for the whole scan; each tuple is a pg_database row. A failure raises an ERROR
    // like any other, which ends the worker.
    let found = unsafe {
        let catalog = pg_sys::table_open(pg_sys::DatabaseRelationId, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let scan = pg_sys::table_beginscan_catalog(catalog, 0, std::ptr::null_mut());
        let mut found = false;
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let row = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tuple);
            if CStr::from_ptr((*row).datname.data.as_ptr()).to_bytes() == name.as_bytes() {
                found = true;
                break;
            }
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(catalog, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        found
    };
    commit();
    found
}
