//! The keeper launcher: a background worker connected to no database that keeps one lease
//! keeper running in `randflake.database`.
//!
//! The lease keeper is a separate, dynamic worker because it must be able to stop and come back
//! without the server's help: the postmaster restarts a static worker only when it exits with a
//! failure, after a fixed interval, and a worker whose database does not exist dies at every
//! start with no way to say why. The launcher restarts the keeper a second after any exit
//! (terminated, its database dropped with FORCE, an error), and while the database is missing
//! it says so once, in the log and in randflake_status(), and looks again every second.

use std::ffi::CStr;
use std::time::{Duration, Instant};

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, DynamicBackgroundWorker};
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::{bounds, TICK};
use crate::gucs;
use crate::shmem::published_lease::{self, KeeperState};

/// A keeper that exits this soon after starting, before its first tick, is failing to start
/// (its database refuses connections, say): the next start waits this long, so the log gets a
/// line a minute, not a line a second.
const QUICK_EXIT: Duration = Duration::from_secs(5);
const RETRY_AFTER_QUICK_EXIT: Duration = Duration::from_secs(60);

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn randflake_keeper_launcher_main(_argument: pg_sys::Datum) {
    bounds::install_signal_handlers();
    // SAFETY: registering an exit callback from the worker's thread.
    unsafe { pg_sys::before_shmem_exit(Some(stop_keeper), pg_sys::Datum::from(0)) };
    // No database: the launcher reads only pg_database, a shared catalog.
    BackgroundWorker::connect_worker_to_spi(None, None);
    let mut launcher =
        Launcher { keeper: None, started_at: Instant::now(), next_start: Instant::now(), last_warning: None };
    loop {
        launcher.tick();
        bounds::idle(TICK);
    }
}

/// A launcher that stops (terminated, or the server shutting down) takes its keeper with it, so
/// that the next launcher never finds one it did not start.
///
/// # Safety
///
/// Only PostgreSQL calls this, as an `on_shmem_exit` callback.
#[pg_guard]
unsafe extern "C-unwind" fn stop_keeper(_code: i32, _argument: pg_sys::Datum) {
    let pid = published_lease::keeper().pid;
    if pid != 0 {
        // SAFETY: signalling a server process of this cluster, as pg_terminate_backend does.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
}

struct Launcher {
    keeper: Option<DynamicBackgroundWorker>,
    started_at: Instant,
    next_start: Instant,
    /// The last warning logged, so that a lasting condition is logged once.
    last_warning: Option<String>,
}

impl Launcher {
    fn tick(&mut self) {
        let mut exited_quickly = false;
        if let Some(keeper) = &self.keeper {
            match keeper.pid() {
                Ok(_) | Err(BackgroundWorkerStatus::NotYetStarted) => return,
                Err(_) => {
                    // A keeper that got as far as its first tick reported a state.
                    let never_ran = published_lease::keeper().state == KeeperState::NotStarted;
                    exited_quickly = never_ran && self.started_at.elapsed() < QUICK_EXIT;
                    self.keeper = None;
                }
            }
        }
        let database = gucs::database();
        if !database_exists(&database) {
            let cause = format!("database \"{database}\" (randflake.database) does not exist");
            published_lease::report_keeper(KeeperState::WaitingForDatabase, &cause);
            self.warn(format!("{cause}; the lease keeper starts once it does"));
            self.next_start = Instant::now();
            return;
        }
        if exited_quickly {
            self.next_start = Instant::now() + RETRY_AFTER_QUICK_EXIT;
            let cause = format!(
                "the lease keeper exited within {} s of starting in database \"{database}\"; the server log says why",
                QUICK_EXIT.as_secs()
            );
            published_lease::report_keeper(KeeperState::Failing, &cause);
            self.warn(format!("{cause}. Next attempt in {} s", RETRY_AFTER_QUICK_EXIT.as_secs()));
        }
        if Instant::now() < self.next_start {
            return;
        }
        published_lease::report_keeper(KeeperState::NotStarted, "");
        let keeper = BackgroundWorkerBuilder::new("randflake_pg lease keeper")
            .set_type("randflake_pg lease keeper")
            .set_library("randflake_pg")
            .set_function("randflake_lease_keeper_main")
            .enable_spi_access()
            // SAFETY: reading a PostgreSQL global from the worker's thread.
            .set_notify_pid(unsafe { pg_sys::MyProcPid })
            .load_dynamic();
        match keeper {
            Ok(keeper) => {
                self.keeper = Some(keeper);
                self.started_at = Instant::now();
                self.last_warning = None;
            }
            Err(_) => {
                let cause = "no background worker slot is free for the lease keeper";
                published_lease::report_keeper(KeeperState::Failing, cause);
                self.warn(format!("{cause}; raise max_worker_processes"));
            }
        }
    }

    fn warn(&mut self, warning: String) {
        if self.last_warning.as_ref() != Some(&warning) {
            warning!("randflake_pg keeper launcher: {warning}");
            self.last_warning = Some(warning);
        }
    }
}

/// Whether `name` is in pg_database. A sequential scan of the catalog, as the autovacuum
/// launcher reads it: with no database selected, an index on it may not be usable yet.
fn database_exists(name: &str) -> bool {
    // SAFETY: a catalog scan in a transaction of its own, from the worker's thread, with the
    // table open and locked for the whole scan; each tuple is a pg_database row. A failure
    // raises an ERROR like any other, which ends the launcher and has it restarted.
    unsafe {
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
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
        pg_sys::PopActiveSnapshot();
        pg_sys::CommitTransactionCommand();
        found
    }
}
