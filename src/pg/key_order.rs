//! The order of `randflake_key` as C entry points of their own: its comparison functions (the
//! btree support function and the functions of its operators), the transition functions of its
//! `max()` and `min()`, and its btree sort support.
//!
//! The comparison functions are called for every step of an index search (a lookup by key
//! compares it with tens of index entries) and for every key an index scan or a merge join
//! tests; written by hand, since nothing in them can fail, they skip pgrx's wrapper and guard.
//! Without the sort support, every comparison of a sort (CREATE INDEX, ORDER BY, merge joins)
//! would call the btree comparison function through the function manager.
//!
//! The order itself is the pure crate's ([`ordered::sort_key`]): a bijection of the stored raw
//! value onto an unsigned integer that sorts as the key does. Sorts that abbreviate (the first
//! column of CREATE INDEX's sort, and most others) store that integer as the abbreviated key and
//! compare it with PostgreSQL's own `ssup_datum_unsigned_cmp`, for which PostgreSQL 15 and later
//! have a specialised quicksort, as for `bigint`. The abbreviation loses nothing, so the full
//! comparison is needed only for equal keys, and abbreviation is never abandoned.

use core::cmp::Ordering;
use core::ffi::c_int;

use pgrx::pg_sys;
use randflake::ordered;

#[allow(unsafe_code)]
unsafe extern "C-unwind" {
    /// PostgreSQL's comparison of abbreviated keys as unsigned integers (sortsupport.h, 15 and
    /// later), declared here rather than taken from pgrx, whose `pg_sys` function is a Rust
    /// wrapper: tuplesort recognises this very function and sorts with its specialised quicksort.
    fn ssup_datum_unsigned_cmp(x: pg_sys::Datum, y: pg_sys::Datum, ssup: pg_sys::SortSupport) -> c_int;
}

/// The raw value a `randflake_key` Datum holds (by value, eight bytes).
fn raw(datum: pg_sys::Datum) -> u64 {
    datum.value() as u64
}

/// How the two `randflake_key` arguments of a comparison function compare.
///
/// # Safety
///
/// `fcinfo` is what PostgreSQL's function manager passed to a STRICT function of two
/// `randflake_key` arguments.
unsafe fn arguments_compared(fcinfo: pg_sys::FunctionCallInfo) -> Ordering {
    // SAFETY: the function has two non-null arguments (see above), Datums of keys by value.
    let arguments = unsafe { (*fcinfo).args.as_slice(2) };
    ordered::compare(raw(arguments[0].value), raw(arguments[1].value))
}

/// The comparison functions: `randflake_key_cmp` (-1, 0 or 1, btree's `FUNCTION 1`) and the
/// functions of the operators `<`, `<=`, `>` and `>=`, under the names SQL declares them by.
macro_rules! comparison_functions {
    ($($name:ident => $result:expr;)+) => {$(
        /// # Safety
        ///
        /// Called only by PostgreSQL's function manager, as the C function of that name, whose
        /// SQL declaration (STRICT, two `randflake_key` arguments) is in the 0.6.0 script.
        #[allow(unsafe_code)]
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            // SAFETY: as the function's own contract says.
            let order = unsafe { arguments_compared(fcinfo) };
            pg_sys::Datum::from($result(order))
        }
    )+};
}

comparison_functions! {
    randflake_key_cmp_wrapper => |order: Ordering| order as i32;
    randflake_key_lt_wrapper => Ordering::is_lt;
    randflake_key_le_wrapper => Ordering::is_le;
    randflake_key_gt_wrapper => Ordering::is_gt;
    randflake_key_ge_wrapper => Ordering::is_ge;
}

/// The transition (and combine) functions of `max()` and `min()` over `randflake_key`:
/// `randflake_key_larger` and `randflake_key_smaller`, the argument that comes last or first in
/// the key's order.
macro_rules! choice_functions {
    ($($name:ident => $keeps_first:expr;)+) => {$(
        /// # Safety
        ///
        /// Called only by PostgreSQL's function manager, as the C function of that name, whose
        /// SQL declaration (STRICT, two `randflake_key` arguments) is in the 0.6.0 script.
        #[allow(unsafe_code)]
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            // SAFETY: the function has two non-null arguments (see above), Datums of keys by value.
            let arguments = unsafe { (*fcinfo).args.as_slice(2) };
            let (first, second) = (arguments[0].value, arguments[1].value);
            if $keeps_first(ordered::compare(raw(first), raw(second))) { first } else { second }
        }
    )+};
}

choice_functions! {
    randflake_key_larger_wrapper => Ordering::is_ge;
    randflake_key_smaller_wrapper => Ordering::is_le;
}

super::version_1!(
    pg_finfo_randflake_key_larger_wrapper,
    pg_finfo_randflake_key_smaller_wrapper,
    pg_finfo_randflake_key_cmp_wrapper,
    pg_finfo_randflake_key_lt_wrapper,
    pg_finfo_randflake_key_le_wrapper,
    pg_finfo_randflake_key_gt_wrapper,
    pg_finfo_randflake_key_ge_wrapper,
    pg_finfo_randflake_key_sortsupport
);

/// The full comparison: as `randflake_key_cmp()`.
unsafe extern "C-unwind" fn compare_keys(a: pg_sys::Datum, b: pg_sys::Datum, _ssup: pg_sys::SortSupport) -> c_int {
    ordered::compare(raw(a), raw(b)) as c_int
}

/// The abbreviated key: the key's sort position as an unsigned integer, in a Datum.
unsafe extern "C-unwind" fn abbreviate(original: pg_sys::Datum, _ssup: pg_sys::SortSupport) -> pg_sys::Datum {
    pg_sys::Datum::from(ordered::sort_key(raw(original)))
}

/// Never abandons abbreviation: abbreviated keys are as distinct as the keys.
unsafe extern "C-unwind" fn keep_abbreviating(_memtupcount: c_int, _ssup: pg_sys::SortSupport) -> bool {
    false
}

/// `randflake_key_sortsupport(internal)`, `FUNCTION 2` of the btree operator class.
///
/// # Safety
///
/// Called only by PostgreSQL's function manager, as the C function behind that SQL function,
/// whose one argument is a `SortSupport` PostgreSQL prepared.
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C-unwind" fn randflake_key_sortsupport(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL calls a btree sort support function with one non-null argument, a
    // pointer to the SortSupportData it is filling; nothing here can fail or unwind.
    let ssup = unsafe {
        let argument = (*fcinfo).args.as_slice(1)[0].value;
        &mut *argument.cast_mut_ptr::<pg_sys::SortSupportData>()
    };
    if ssup.abbreviate {
        ssup.comparator = Some(ssup_datum_unsigned_cmp);
        ssup.abbrev_converter = Some(abbreviate);
        ssup.abbrev_abort = Some(keep_abbreviating);
        ssup.abbrev_full_comparator = Some(compare_keys);
    } else {
        ssup.comparator = Some(compare_keys);
    }
    pg_sys::Datum::from(0)
}
