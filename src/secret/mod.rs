//! The secret inside PostgreSQL: the ciphers this process keys from the two secret settings,
//! the hooks of those settings, and the log hook that keeps the secret out of the server log.
//! Parsing, key files and the cipher itself are the `randflake` crate's.

mod ciphers;
pub mod log_redaction;
pub mod settings;

pub use ciphers::{version, with_cipher};
