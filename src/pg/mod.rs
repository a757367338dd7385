//! PostgreSQL's internals behind one boundary: the hooks randflake_pg installs and the parts of
//! PostgreSQL's data structures it reads or changes, offered to the rest of the extension as
//! safe Rust values and calls.

pub mod identity;
pub mod log_hook;
pub mod parse_tree;
pub mod statement;
pub mod unguarded;
pub mod utility_hook;
