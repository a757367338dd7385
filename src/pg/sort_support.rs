//! Sort support for a type passed by value whose order is its Datum's 64 bits compared as an
//! unsigned integer (`randflake_key`'s: `randflake::format::ordered`).
//!
//! Without it, every comparison of a sort (CREATE INDEX, ORDER BY, merge joins) would call the
//! btree comparison function through the function manager. With it, sorts compare the Datums
//! themselves with PostgreSQL's own `ssup_datum_unsigned_cmp`, for which PostgreSQL 15 and later
//! have a specialised quicksort, as `bigint` has for its signed twin. No abbreviated key is made:
//! the Datum already is one that loses nothing.

use core::ffi::c_int;

use pgrx::pg_sys;

use super::entry::Arguments;

#[allow(unsafe_code)]
unsafe extern "C-unwind" {
    /// PostgreSQL's comparison of Datums as unsigned integers (sortsupport.h, 15 and later),
    /// declared here rather than taken from pgrx, whose `pg_sys` function is a Rust wrapper:
    /// tuplesort recognises this very function and sorts with its specialised quicksort.
    fn ssup_datum_unsigned_cmp(x: pg_sys::Datum, y: pg_sys::Datum, ssup: pg_sys::SortSupport) -> c_int;
}

/// A btree operator class's sort support function (`FUNCTION 2`, one `internal` argument, the
/// SortSupport PostgreSQL is filling), for a type ordered as its Datums compared unsigned.
pub fn fill_unsigned(arguments: &Arguments) {
    // SAFETY: PostgreSQL calls a btree sort support function with one argument, a pointer to the
    // SortSupportData it is filling, valid and unaliased for the call.
    let ssup = unsafe { &mut *arguments.internal(0).cast::<pg_sys::SortSupportData>() };
    ssup.comparator = Some(ssup_datum_unsigned_cmp);
}
