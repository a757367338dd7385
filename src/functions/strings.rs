//! The canonical string form of an ID, and the `randflake_id` type that shows it.
#![forbid(unsafe_code)]

use std::ffi::{CStr, CString};

use pgrx::prelude::*;
use randflake::codec;

use crate::errors::Error;

/// The canonical string form: base32hex of the unsigned value.
#[pg_extern(immutable, strict, parallel_safe)]
fn randflake_to_string(id: i64) -> String {
    codec::encode(id).to_string()
}

/// Parses the canonical string form; anything else is an error, never a guess.
#[pg_extern(immutable, strict, parallel_safe)]
pub(crate) fn randflake_from_string(s: &str) -> i64 {
    codec::decode(s).unwrap_or_else(|reason| Error::InvalidIdString { input: s.to_owned(), reason }.raise())
}

/// Input of the `randflake_id` type, which is bigint's eight bytes shown as the canonical string
/// (declared in sql/randflake_pg--0.4.0--0.5.0.sql).
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
pub(crate) fn randflake_id_in(input: &CStr) -> i64 {
    // Bytes that are not UTF-8 become U+FFFD, which no ID string holds: the error shows where.
    randflake_from_string(&input.to_string_lossy())
}

/// Output of the `randflake_id` type: the canonical string.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_id_out(id: i64) -> CString {
    CString::new(randflake_to_string(id)).expect("base32hex digits hold no NUL")
}
