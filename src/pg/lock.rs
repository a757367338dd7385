//! Table locks taken without queueing: a lock that is not free is waited for by polling, so the
//! wait has a bound of the caller's and never joins a queue that another session's lock (or its
//! pending request) holds up.

use std::time::{Duration, Instant};

use pgrx::pg_sys;

use super::backend;

/// The table lock modes the extension's statements on the lease table need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableLock {
    /// What a SELECT takes.
    AccessShare,
    /// What an INSERT, UPDATE or DELETE takes.
    RowExclusive,
    /// Conflicts with itself, VACUUM and stronger modes, not with reads or writes.
    ShareUpdateExclusive,
}

impl TableLock {
    fn mode(self) -> pg_sys::LOCKMODE {
        (match self {
            Self::AccessShare => pg_sys::AccessShareLock,
            Self::RowExclusive => pg_sys::RowExclusiveLock,
            Self::ShareUpdateExclusive => pg_sys::ShareUpdateExclusiveLock,
        }) as pg_sys::LOCKMODE
    }
}

/// How often a lock that was not free is asked for again.
const POLL: Duration = Duration::from_millis(10);

/// Takes `lock` on `relation` for the rest of the transaction, waiting for it at most `bound`;
/// false if it was not granted by then. PostgreSQL does not grant a lock that conflicts with a
/// request queued before it, so this never overtakes a waiting session either.
pub fn lock_table_within(relation: pg_sys::Oid, lock: TableLock, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        // SAFETY: a lock request on a relation by oid, from the backend's main thread, inside a
        // transaction (the caller's); it never waits, and is released at the transaction's end.
        if unsafe { pg_sys::ConditionalLockRelationOid(relation, lock.mode()) } {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        backend::wait_on_latch(POLL);
        pgrx::check_for_interrupts!();
    }
}
