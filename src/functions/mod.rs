//! Every SQL-callable function of randflake_pg but `randflake_key`'s (`key`), one file a
//! subject: `next.rs` (`randflake_next()`), `decoding.rs` (`randflake_decode()` and the three
//! accessors, and PostgreSQL's timestamps of Unix seconds), `strings.rs` (the string form and the
//! `randflake_id` type's input and output), `status.rs` (`randflake_status()`), `leases.rs` (the
//! application lease procedures, `randflake_app_leases()`, the lease table's trigger and WAL
//! flush). Their SQL comments and grants are in `sql/comments_and_grants_0.1.0.sql` and the
//! upgrade scripts after it.
//!
//! The C functions written by hand (`randflake_next()`, the application lease procedures) are
//! declared through `pg::entry::entry_points!` and `pg::procedure::procedure_entry_points!`,
//! whose items are the only ones that allow `unsafe` here; no `unsafe` is written in these files.
#![deny(unsafe_code)]

mod decoding;
mod leases;
mod next;
mod status;
mod strings;

pub(crate) use decoding::{timestamp_of, POSTGRES_EPOCH_UNIX_SECOND};
pub(crate) use strings::{randflake_from_string, randflake_id_in};
