//! The lease table, `randflake.node_leases` (or, in fleet mode, the foreign table that reaches a
//! coordinator's): every statement the extension runs on it, and the checks that say whether it
//! may be trusted.
#![forbid(unsafe_code)]

mod keeper_store;
pub mod vetting;

pub use keeper_store::SqlStore;
