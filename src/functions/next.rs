//! `randflake_next()`, the one call on the hot path.
#![deny(unsafe_code)]

use pgrx::prelude::*;

use crate::generation::{self, Output};
use crate::pg;
use crate::pg::entry::Arguments;

pg::entry::entry_points! {
    /// `randflake_next()`: a new ID, unique across every server sharing the secret with a
    /// disjoint node range. Written by hand (`pg::entry`) rather than by `#[pg_extern]`, whose
    /// wrapper would be a large share of a call this short; the SQL declaration below is what
    /// pgrx would have generated. docs/performance.md has the measurements.
    randflake_next_wrapper, pg_finfo_randflake_next_wrapper => next_id;
}

/// An ID reserved earlier, or else a new run reserved, with every check that needs.
fn next_id(_: &Arguments) -> i64 {
    generation::reserved_id().unwrap_or_else(|| generation::next(Output::Id))
}

extension_sql!(
    r#"
CREATE FUNCTION "randflake_next"() RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_next_wrapper';
"#,
    name = "randflake_next"
);
