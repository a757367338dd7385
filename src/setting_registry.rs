//! Every randflake_pg setting (GUC), listed here and defined beside the subsystem that owns it:
//!
//! | subsystem | settings |
//! |---|---|
//! | `node_config` | `node_source`, `node_id_min`, `node_id_max`, `fleet_lease_table`, `fleet_block_size`, `database`, `keeper_role`, `lease_seconds`, `keeper_tick` |
//! | `secret::settings` | `secret`, `secret_file` |
//! | `app_leases::settings` | `app_node_id_min`, `app_node_id_max`, `app_leases_per_role` |
//!
//! All of them can be set only by superusers, in the configuration files.
#![forbid(unsafe_code)]

use crate::errors::Error;
use crate::node_config::{self, Mode};
use crate::pg::guc;
use crate::{app_leases, secret};

/// Defines every setting, reserves the `randflake` prefix and checks what the settings cannot
/// check one by one. Called once, from `_PG_init`; an invalid configuration stops the server.
pub fn define() {
    node_config::define();
    secret::settings::define();
    app_leases::settings::define();
    // A misspelt randflake.* line would otherwise stay a placeholder and leave this server on
    // the default, widest node range, overlapping every other server.
    guc::reserve_prefix(c"randflake");
    startup_check().unwrap_or_else(|error| error.raise());
    // Without a usable secret the server still starts (a reload can give it one), but says so.
    if node_config::mode() != Mode::Off {
        if let Some(cause) = secret::cannot_issue_because() {
            Error::CannotIssue { cause }.warn();
        }
    }
}

fn startup_check() -> Result<(), Error> {
    if guc::rejected_while_loading() {
        return Err(Error::InvalidSettingsAtStartup {});
    }
    node_config::check_at_startup()?;
    app_leases::settings::check_at_startup()
}
