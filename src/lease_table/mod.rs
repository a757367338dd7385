//! The lease table, `randflake.node_leases` (or, in fleet mode, the foreign table that reaches a
//! coordinator's): every statement the extension runs on it (the keeper's, `keeper_store`; the
//! application lease procedures', `app_store`), the checks that say whether it may be trusted
//! (`vetting`), the reading back of the keeper's commits' durability beside it
//! (`commit_evidence`), how long a statement may wait for its lock, and the trigger's judgement of every
//! write that these statements did not make (`guard`).
//!
//! Each statement runs marked as the extension's own: a backend-local flag, set only around
//! this module's statements and reachable from no SQL, that the table's trigger reads. Writes
//! without it (a role with privileges on the table, or a fleet member's through postgres_fdw)
//! are refused, or held to the rules of `randflake::decisions::table_rules`.
#![forbid(unsafe_code)]

mod app_store;
mod commit_evidence;
mod guard;
mod keeper_store;
pub mod vetting;

use std::time::Duration;

use pgrx::prelude::*;

use crate::pg::backend::BackendLocal;
use crate::pg::lock::{self, TableLock};

pub use app_store::{AppLeaseTable, NewAppLease, StoredWindow};
pub use commit_evidence::EvidenceReader;
pub use guard::{authorize_write, TableUse};
pub use keeper_store::KeeperStore;

/// How long a statement on the lease table waits for its table lock, and (as `lock_timeout`)
/// for a row lock: a fifth of the smallest margin the keeper works with, the half of its lead a
/// range-mode high-water mark still has when it is rewritten (a fleet lease has two thirds of
/// its length left when renewed), so that several ticks can fail before generation must stop;
/// and inside the keeper's deadline for a tick. A lock held longer by another session fails the
/// statement, with a WARNING that names that session.
pub const LOCK_WAIT: Duration = Duration::from_millis(randflake::HIGH_WATER_LEAD * 1000 / 2 / 5);

/// Whether one of this module's statements is running now.
static WRITING: BackendLocal<bool> = BackendLocal::new(false);

/// Runs `work`, one of this module's statements, marked as the extension's own; the mark is
/// taken off afterwards, also when `work` fails.
fn as_extension<R>(work: impl FnOnce() -> R) -> R {
    struct Unmark(bool);
    impl Drop for Unmark {
        fn drop(&mut self) {
            WRITING.with(|writing| *writing = self.0);
        }
    }
    let _unmark = Unmark(WRITING.with(|writing| std::mem::replace(writing, true)));
    work()
}

/// Whether the statement writing the table now is one of this module's.
fn extension_is_writing() -> bool {
    WRITING.with(|writing| *writing)
}

/// A table lock not granted within [`LOCK_WAIT`], and who held it up.
#[derive(Debug)]
pub struct LockNotGranted {
    /// The sessions that hold or await a lock on the table, in words.
    pub sessions: String,
}

impl std::fmt::Display for LockNotGranted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "its lock was not granted within {} ms; {}", LOCK_WAIT.as_millis(), self.sessions)
    }
}

/// Takes `mode` on the table `relation` for the transaction, waiting [`LOCK_WAIT`] at most and
/// joining no queue; when it is not granted, names the sessions that hold or await its locks.
fn lock_table(relation: pg_sys::Oid, mode: TableLock) -> Result<(), LockNotGranted> {
    if lock::lock_table_within(relation, mode, LOCK_WAIT) {
        return Ok(());
    }
    Err(LockNotGranted { sessions: lockers_of(relation) })
}

/// The sessions that hold or await a lock on `relation`, with their role, application, state
/// and mode (never their query text). Names and applications are quoted, control characters
/// replaced, so that no client-chosen text can forge a log line.
fn lockers_of(relation: pg_sys::Oid) -> String {
    const QUERY: &str = "
SELECT pg_catalog.string_agg(pg_catalog.format('pid %s (role %s, application %s, %s) %s %s',
           l.pid, pg_catalog.quote_ident(coalesce(a.usename::text, '?')),
           pg_catalog.regexp_replace(pg_catalog.quote_literal(coalesce(a.application_name, '')), '[[:cntrl:]]', '?', 'g'),
           coalesce(a.state, a.backend_type, '?'),
           CASE WHEN l.granted THEN 'holds' ELSE 'awaits' END, l.mode)
         || CASE WHEN l.granted THEN ''
                 ELSE pg_catalog.format(' behind pids %s', pg_catalog.pg_blocking_pids(l.pid)) END,
       '; ' ORDER BY l.granted DESC, l.pid)
  FROM pg_catalog.pg_locks AS l
  LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
 WHERE l.locktype = 'relation' AND l.relation = $1
   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
   AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()";
    match Spi::get_one_with_args::<String>(QUERY, &[relation.into()]) {
        Ok(Some(sessions)) => format!("held up by {sessions}"),
        Ok(None) => "no session holds or awaits a lock on it any more".into(),
        Err(error) => format!("the sessions holding it could not be listed: {error}"),
    }
}
