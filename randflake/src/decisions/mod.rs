//! What randflake_pg decides without a server, each behind a trait for what PostgreSQL
//! provides, so that the simulations in `tests/` run the very decisions the extension ships:
//!
//! * [`lease`]: the arithmetic of node leases shared by many servers;
//! * [`keeper`]: the lease keeper's tick (check, renew, withdraw, take), judging its commits
//!   by [`durability`], and what it reports ([`keeper_report`]);
//! * [`refill`]: a backend's next run of IDs under its server's published lease;
//! * [`app_lease`]: leases of single nodes for applications;
//! * [`table_rules`]: what a write to a lease table from outside the extension may do.

pub mod app_lease;
pub mod durability;
mod invisible;
pub mod keeper;
pub mod keeper_report;
pub mod lease;
pub mod refill;
pub mod table_rules;
