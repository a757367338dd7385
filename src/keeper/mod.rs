//! The lease keeper and its launcher: the background workers that hold this server's node
//! lease. The launcher keeps one keeper running in `randflake.database`; the keeper takes,
//! checks and renews the lease and publishes it to the backends through `shmem::published_lease`.

mod bounds;
mod holder;
mod launcher;
pub mod vetting;
mod worker;

use std::time::Duration;

use pgrx::bgworkers::BackgroundWorkerBuilder;

use crate::gucs::{self, NodeSource};

/// How often the keeper checks the clock and the lease, and the launcher the keeper.
const TICK: Duration = Duration::from_secs(1);

/// How soon the postmaster starts a launcher again after it stopped with a failure.
const LAUNCHER_RESTART: Duration = Duration::from_secs(5);

/// Registers the launcher. Called from `_PG_init` while preloading, after the settings exist.
pub fn register() {
    if gucs::node_source() == NodeSource::Off {
        return;
    }
    // pg_upgrade starts both servers in binary-upgrade mode while it rebuilds the catalogs and
    // moves the data files. A keeper connected then keeps pg_restore from dropping and
    // re-creating its database, so pg_upgrade fails, and leases it wrote would be overwritten.
    // SAFETY: a PostgreSQL global, set from the postmaster's options before libraries preload.
    if unsafe { pgrx::pg_sys::IsBinaryUpgrade } {
        return;
    }
    // Starts only once recovery has finished: a standby cannot write leases, and promotion is
    // exactly when it must begin to.
    BackgroundWorkerBuilder::new("randflake_pg keeper launcher")
        .set_type("randflake_pg keeper launcher")
        .set_library("randflake_pg")
        .set_function("randflake_keeper_launcher_main")
        .enable_spi_access()
        .set_restart_time(Some(LAUNCHER_RESTART))
        .load();
}
