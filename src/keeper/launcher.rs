//! The keeper launcher: a background worker connected to no database that keeps one lease
//! keeper running in `randflake.database`.
//!
//! The lease keeper is a separate, dynamic worker because it must be able to stop and come back
//! without the server's help: the postmaster restarts a static worker only when it exits with a
//! failure, after a fixed interval, and a worker whose database does not exist dies at every
//! start with no way to say why. The launcher restarts the keeper a second after any exit
//! (terminated, its database dropped with FORCE, an error), and while the database is missing
//! it says so once, in the log and in randflake_status(), and looks again every second.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerStatus, DynamicBackgroundWorker};
use pgrx::prelude::*;
use randflake::decisions::keeper_report::KeeperState;

use super::worker;
use crate::node_config;
use crate::pg::bgworker::Worker;
use crate::pg::{backend, bgworker, transaction};
use crate::shmem::keeper_board;

const KEEPER: Worker = Worker { name: "randflake_pg lease keeper", main: worker::main };

/// A keeper that exits this soon after starting, before its first tick, is failing to start
/// (its database refuses connections, say): the next start waits this long, so the log gets a
/// line a minute, not a line a second.
const QUICK_EXIT: Duration = Duration::from_secs(5);
const RETRY_AFTER_QUICK_EXIT: Duration = Duration::from_secs(60);

pub fn main() {
    bgworker::install_signal_handlers();
    backend::before_exit(stop_keeper);
    // No database: the launcher reads only pg_database, a shared catalog.
    BackgroundWorker::connect_worker_to_spi(None, None);
    let mut launcher =
        Launcher { keeper: None, started_at: Instant::now(), next_start: Instant::now(), last_warning: None };
    loop {
        launcher.tick();
        bgworker::idle(node_config::tick());
    }
}

/// A launcher that stops (terminated, or the server shutting down) takes its keeper with it, so
/// that the next launcher never finds one it did not start.
fn stop_keeper() {
    let pid = keeper_board::read().pid;
    if pid != 0 {
        backend::terminate(pid);
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
                    let never_ran = keeper_board::read().state == KeeperState::NotStarted;
                    exited_quickly = never_ran && self.started_at.elapsed() < QUICK_EXIT;
                    self.keeper = None;
                }
            }
        }
        let database = node_config::database();
        if !transaction::database_exists(&database) {
            let cause = format!("database \"{database}\" (randflake.database) does not exist");
            keeper_board::report(KeeperState::WaitingForDatabase, &cause);
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
            keeper_board::report(KeeperState::Failing, &cause);
            self.warn(format!("{cause}. Next attempt in {} s", RETRY_AFTER_QUICK_EXIT.as_secs()));
        }
        if Instant::now() < self.next_start {
            return;
        }
        keeper_board::report(KeeperState::NotStarted, "");
        match KEEPER.start() {
            Some(keeper) => {
                self.keeper = Some(keeper);
                self.started_at = Instant::now();
                self.last_warning = None;
            }
            None => {
                let cause = "no background worker slot is free for the lease keeper";
                keeper_board::report(KeeperState::Failing, cause);
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
