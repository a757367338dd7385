//! randflake_pg: Randflake IDs generated inside PostgreSQL.
//!
//! The format, the generator state machine and lease arithmetic live in the pure `randflake`
//! crate; this crate is the PostgreSQL side. PostgreSQL's internals are behind `pg`, the one
//! module with hand-written `unsafe`; every other module forbids it (or denies it, where
//! `pg`'s entry macros write the only items that allow it). docs/architecture.md maps the modules.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

mod app_leases;
mod errors;
mod functions;
mod generation;
mod keeper;
mod key;
mod lease_table;
mod node_config;
mod pg;
#[cfg(any(test, feature = "pg_test"))]
mod pg_tests;
mod secret;
mod setting_registry;
mod shmem;
mod status;

use pgrx::prelude::*;

::pgrx::pg_module_magic!(name, version);

// The install script is the 0.1.0 functions and their comments, then every upgrade script since,
// replayed in order: a fresh install and an updated one are built by the same SQL. A release
// that changes a function an earlier script (re)defines must reconcile the two there;
// tests/integration/test_upgrade.py fails until a fresh install equals an updated one.
pgrx::extension_sql_file!(
    "../sql/comments_and_grants_0.1.0.sql",
    name = "comments_and_grants_0_1_0",
    requires = [
        "randflake_next",
        functions::decoding::randflake_decode,
        functions::strings::randflake_to_string,
        functions::strings::randflake_from_string
    ]
);
pgrx::extension_sql_file!(
    "../sql/randflake_pg--0.1.0--0.2.0.sql",
    name = "upgrade_to_0_2_0",
    requires = ["comments_and_grants_0_1_0"]
);
pgrx::extension_sql_file!(
    "../sql/randflake_pg--0.2.0--0.3.0.sql",
    name = "upgrade_to_0_3_0",
    requires = ["upgrade_to_0_2_0"]
);
pgrx::extension_sql_file!(
    "../sql/randflake_pg--0.3.0--0.4.0.sql",
    name = "upgrade_to_0_4_0",
    requires = [
        "upgrade_to_0_3_0",
        functions::decoding::randflake_timestamp,
        functions::decoding::randflake_node_id,
        functions::decoding::randflake_sequence
    ]
);
pgrx::extension_sql_file!(
    "../sql/randflake_pg--0.4.0--0.5.0.sql",
    name = "upgrade_to_0_5_0",
    requires = [
        "upgrade_to_0_4_0",
        functions::leases::randflake_lease_acquire,
        functions::leases::randflake_lease_extend,
        functions::leases::randflake_lease_release,
        functions::leases::randflake_app_leases
    ]
);
pgrx::extension_sql_file!(
    "../sql/randflake_pg--0.5.0--0.6.0.sql",
    name = "upgrade_to_0_6_0",
    requires = ["upgrade_to_0_5_0"],
    finalize
);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // Loaded on demand the library would have no node table, and generating without one could
    // issue duplicates; refusing here makes CREATE EXTENSION and every call fail clearly.
    if !pg::backend::preloading() {
        errors::Error::NotPreloaded {}.raise();
    }
    setting_registry::define();
    log!(
        "randflake_pg: {}; IDs encrypted {} at a time with the {} kernel",
        node_config::describe(),
        randflake::BATCH,
        randflake::Kernel::best().name()
    );
    secret::log_redaction::install();
    secret::sql_routes::install();
    pg::shmem_segments::install(&shmem::SEGMENTS);
    keeper::register();
}

/// Required by `cargo pgrx test`: the test server must preload the library like a real one.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![
            "shared_preload_libraries = 'randflake_pg'",
            // The first published vector's secret, so that its ID decodes in the tests.
            "randflake.secret = 'dffd6021bb2bd5b0af676290809ec3a5'",
            // The lease keeper works where `cargo pgrx test` creates the extension.
            "randflake.database = 'pgrx_tests'",
        ]
    }
}
