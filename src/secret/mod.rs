//! The secret inside PostgreSQL: the ciphers this process keys from the two secret settings,
//! the hooks of those settings, the guard that refuses a secret given through SQL, and the log
//! filter that keeps the secret out of the server log. Parsing, key files and the cipher itself
//! are the `randflake` crate's.
#![forbid(unsafe_code)]

mod ciphers;
pub mod log_redaction;
pub mod settings;
pub mod sql_routes;

pub use ciphers::{cannot_issue_because, redact, version, with_cipher, with_cipher_or_raise};
