//! Sort support for a type passed by value whose order is that of an unsigned integer made from
//! each value without loss (`randflake_key`'s: `randflake::format::ordered::sort_key`).
//!
//! Without it, every comparison of a sort (CREATE INDEX, ORDER BY, merge joins) would call the
//! btree comparison function through the function manager. Sorts that abbreviate (the first
//! column of CREATE INDEX's sort, and most others) store the unsigned integer as the abbreviated
//! key and compare it with PostgreSQL's own `ssup_datum_unsigned_cmp`, for which PostgreSQL 15
//! and later have a specialised quicksort, as for `bigint`. The abbreviation loses nothing, so
//! the full comparison is needed only for equal keys, and abbreviation is never abandoned.

use core::ffi::c_int;
use core::marker::PhantomData;

use pgrx::pg_sys;

use super::entry::Arguments;

#[allow(unsafe_code)]
unsafe extern "C-unwind" {
    /// PostgreSQL's comparison of abbreviated keys as unsigned integers (sortsupport.h, 15 and
    /// later), declared here rather than taken from pgrx, whose `pg_sys` function is a Rust
    /// wrapper: tuplesort recognises this very function and sorts with its specialised quicksort.
    fn ssup_datum_unsigned_cmp(x: pg_sys::Datum, y: pg_sys::Datum, ssup: pg_sys::SortSupport) -> c_int;
}

/// An order: each value (a Datum's 64 bits) onto an unsigned integer that sorts as it does, one
/// to one.
pub trait UnsignedOrder {
    fn sort_key(value: u64) -> u64;
}

/// The sort support's callbacks for order `O`. They cannot fail: nothing in them allocates or
/// calls into PostgreSQL.
struct Callbacks<O>(PhantomData<O>);

impl<O: UnsignedOrder> Callbacks<O> {
    /// The full comparison, as the btree comparison function compares.
    unsafe extern "C-unwind" fn compare(a: pg_sys::Datum, b: pg_sys::Datum, _ssup: pg_sys::SortSupport) -> c_int {
        O::sort_key(a.value() as u64).cmp(&O::sort_key(b.value() as u64)) as c_int
    }

    /// The abbreviated key: the value's sort position as an unsigned integer, in a Datum.
    unsafe extern "C-unwind" fn abbreviate(original: pg_sys::Datum, _ssup: pg_sys::SortSupport) -> pg_sys::Datum {
        pg_sys::Datum::from(O::sort_key(original.value() as u64))
    }

    /// Never abandons abbreviation: abbreviated keys are as distinct as the values.
    unsafe extern "C-unwind" fn keep_abbreviating(_memtupcount: c_int, _ssup: pg_sys::SortSupport) -> bool {
        false
    }
}

/// A btree operator class's sort support function (`FUNCTION 2`, one `internal` argument, the
/// SortSupport PostgreSQL is filling): fills it for order `O`.
pub fn fill<O: UnsignedOrder>(arguments: &Arguments) {
    // SAFETY: PostgreSQL calls a btree sort support function with one argument, a pointer to the
    // SortSupportData it is filling, valid and unaliased for the call.
    let ssup = unsafe { &mut *arguments.internal(0).cast::<pg_sys::SortSupportData>() };
    if ssup.abbreviate {
        ssup.comparator = Some(ssup_datum_unsigned_cmp);
        ssup.abbrev_converter = Some(Callbacks::<O>::abbreviate);
        ssup.abbrev_abort = Some(Callbacks::<O>::keep_abbreviating);
        ssup.abbrev_full_comparator = Some(Callbacks::<O>::compare);
    } else {
        ssup.comparator = Some(Callbacks::<O>::compare);
    }
}
