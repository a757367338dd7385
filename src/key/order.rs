//! The order of `randflake_key`: its raw value's, compared unsigned, which is by second, then
//! node, then sequence (`randflake::format::ordered`, which says why). Its comparison functions
//! (btree's `FUNCTION 1` and the functions of `<`, `<=`, `>`, `>=`), the transition functions of
//! its `max()` and `min()`, and its sort support.
//!
//! The comparison functions are called for every step of an index search (a lookup by key
//! compares it with tens of index entries) and for every key an index scan or a merge join
//! tests, so they are C functions written by hand (`pg::entry`) rather than pgrx's.
#![deny(unsafe_code)]

use core::cmp::Ordering;

use randflake::format::ordered;

use crate::pg;
use crate::pg::entry::Arguments;
use crate::pg::sort_support;

pg::entry::entry_points! {
    /// `randflake_key_cmp`: -1, 0 or 1.
    randflake_key_cmp_wrapper, pg_finfo_randflake_key_cmp_wrapper => cmp;
    randflake_key_lt_wrapper, pg_finfo_randflake_key_lt_wrapper => lt;
    randflake_key_le_wrapper, pg_finfo_randflake_key_le_wrapper => le;
    randflake_key_gt_wrapper, pg_finfo_randflake_key_gt_wrapper => gt;
    randflake_key_ge_wrapper, pg_finfo_randflake_key_ge_wrapper => ge;
    /// `randflake_key_larger`, the transition and combine function of `max()`.
    randflake_key_larger_wrapper, pg_finfo_randflake_key_larger_wrapper => larger;
    /// `randflake_key_smaller`, the transition and combine function of `min()`.
    randflake_key_smaller_wrapper, pg_finfo_randflake_key_smaller_wrapper => smaller;
    /// `randflake_key_sortsupport(internal)`, `FUNCTION 2` of the btree operator class.
    randflake_key_sortsupport, pg_finfo_randflake_key_sortsupport => sort_support;
}

/// How the call's two keys compare.
fn compared(arguments: &Arguments) -> Ordering {
    ordered::compare(arguments.int8(0) as u64, arguments.int8(1) as u64)
}

fn cmp(arguments: &Arguments) -> i32 {
    compared(arguments) as i32
}

fn lt(arguments: &Arguments) -> bool {
    compared(arguments).is_lt()
}

fn le(arguments: &Arguments) -> bool {
    compared(arguments).is_le()
}

fn gt(arguments: &Arguments) -> bool {
    compared(arguments).is_gt()
}

fn ge(arguments: &Arguments) -> bool {
    compared(arguments).is_ge()
}

/// The argument that comes last in the key's order.
fn larger(arguments: &Arguments) -> i64 {
    if compared(arguments).is_ge() {
        arguments.int8(0)
    } else {
        arguments.int8(1)
    }
}

/// The argument that comes first in the key's order.
fn smaller(arguments: &Arguments) -> i64 {
    if compared(arguments).is_le() {
        arguments.int8(0)
    } else {
        arguments.int8(1)
    }
}

/// The key's Datums compare unsigned, as `ordered::compare` compares raw values.
fn sort_support(arguments: &Arguments) {
    sort_support::fill_unsigned(arguments);
}
