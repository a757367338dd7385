//! The order of plain Randflake values that `randflake_pg`'s ordered key type sorts by: the raw
//! value's own ([`Parts::to_raw`]) compared as an unsigned 64-bit integer, which is by second,
//! then node, then sequence.
//!
//! Why the raw order: all backends of a server draw their IDs from one shared position, which
//! walks (second, node, sequence) in exactly this order, so the keys a server makes arrive in
//! ascending raw order, as an identity column's values do. A B-tree index on the key then takes
//! each new key at its right edge, and nbtree splits its rightmost page leaving the old page
//! full (to its fillfactor) rather than half empty, as it splits pages in the middle of the index.
//!
//! Unsigned, because the key is stored as a `bigint`: compared signed, the values past 2041
//! (whose top bit is set) would sort before every earlier one.

use core::cmp::Ordering;

use crate::format::layout::{LayoutError, Parts};
use crate::{MAX_NODE, MAX_SEQUENCE};

/// How two raw values compare in the key order: as unsigned integers.
#[inline]
pub fn compare(a: u64, b: u64) -> Ordering {
    a.cmp(&b)
}

/// The lowest raw value of a Unix second in the key order: node 0, sequence 0.
pub fn lowest_of_second(unix_second: u64) -> Result<u64, LayoutError> {
    Ok(Parts::new(unix_second, 0, 0)?.to_raw())
}

/// The highest raw value of a Unix second in the key order: the last node's last sequence.
pub fn highest_of_second(unix_second: u64) -> Result<u64, LayoutError> {
    Ok(Parts::new(unix_second, MAX_NODE, MAX_SEQUENCE)?.to_raw())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EPOCH_SECOND, MAX_SECOND};

    fn raw(second: u64, node: u32, sequence: u32) -> u64 {
        Parts::new(second, node, sequence).unwrap().to_raw()
    }

    #[test]
    fn seconds_come_first_then_nodes_then_sequences() {
        let t = EPOCH_SECOND + 1000;
        assert_eq!(compare(raw(t, MAX_NODE, MAX_SEQUENCE), raw(t + 1, 0, 0)), Ordering::Less);
        // A node's last sequence comes before the next node's first.
        assert_eq!(compare(raw(t, 1, MAX_SEQUENCE), raw(t, 2, 0)), Ordering::Less);
        assert_eq!(compare(raw(t, 0, MAX_SEQUENCE), raw(t, MAX_NODE, 0)), Ordering::Less);
        assert_eq!(compare(raw(t, 7, 4), raw(t, 7, 5)), Ordering::Less);
        assert_eq!(compare(raw(t, 2, 0), raw(t, 1, 1)), Ordering::Greater);
        assert_eq!(compare(raw(t, 7, 9), raw(t, 7, 9)), Ordering::Equal);
    }

    #[test]
    fn the_order_is_unsigned_up_to_the_last_second() {
        // Past 2041 the raw value's top bit is set: as a signed number it would sort first.
        let late = raw(MAX_SECOND, 0, 0);
        assert!((late as i64) < 0);
        assert_eq!(compare(raw(EPOCH_SECOND, MAX_NODE, MAX_SEQUENCE), late), Ordering::Less);
        assert_eq!(compare(raw(MAX_SECOND, MAX_NODE, MAX_SEQUENCE), late), Ordering::Greater);
        assert_eq!(compare(raw(MAX_SECOND, 0, 1), raw(MAX_SECOND, 1, 0)), Ordering::Less);
    }

    #[test]
    fn a_second_spans_from_its_lowest_to_its_highest_value() {
        let t = EPOCH_SECOND + 42;
        let (low, high) = (lowest_of_second(t).unwrap(), highest_of_second(t).unwrap());
        assert_eq!((low, high), (raw(t, 0, 0), raw(t, MAX_NODE, MAX_SEQUENCE)));
        for inside in [
            raw(t, 0, 0),
            raw(t, MAX_NODE, 0),
            raw(t, 0, MAX_SEQUENCE),
            raw(t, 77, 1234),
            raw(t, MAX_NODE, MAX_SEQUENCE),
        ] {
            assert_ne!(compare(inside, low), Ordering::Less);
            assert_ne!(compare(inside, high), Ordering::Greater);
        }
        assert_eq!(compare(high, lowest_of_second(t + 1).unwrap()), Ordering::Less);
        assert_eq!(compare(highest_of_second(t - 1).unwrap(), low), Ordering::Less);
        assert_eq!(lowest_of_second(EPOCH_SECOND - 1), Err(LayoutError::TimestampOutOfRange(EPOCH_SECOND - 1)));
        assert!(highest_of_second(MAX_SECOND + 1).is_err());
    }
}
