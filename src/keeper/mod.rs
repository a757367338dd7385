//! The lease keeper and its launcher: the background workers that hold this server's node
//! lease. The launcher keeps one keeper running in `randflake.database`; the keeper takes,
//! checks and renews the lease and publishes it to the backends through `shmem::lease_board`.
#![forbid(unsafe_code)]

mod launcher;
mod runtime;
mod server_identity;
mod worker;

use std::time::Duration;

use crate::node_config::{self, Mode};
use crate::pg::backend;
use crate::pg::bgworker::Worker;

/// How soon the postmaster starts a launcher again after it stopped with a failure.
const LAUNCHER_RESTART: Duration = Duration::from_secs(5);

const LAUNCHER: Worker = Worker { name: "randflake_pg keeper launcher", main: launcher::main };

/// Registers the launcher. Called from `_PG_init` while preloading, after the settings exist.
/// It starts only once recovery has finished: a standby cannot write leases, and promotion is
/// exactly when it must begin to.
pub fn register() {
    if node_config::mode() == Mode::Off {
        return;
    }
    // pg_upgrade starts both servers in binary-upgrade mode while it rebuilds the catalogs and
    // moves the data files. A keeper connected then keeps pg_restore from dropping and
    // re-creating its database, so pg_upgrade fails, and leases it wrote would be overwritten.
    if backend::in_binary_upgrade() {
        return;
    }
    LAUNCHER.register(LAUNCHER_RESTART);
}
