//! The order of plain Randflake values that `randflake_pg`'s ordered key type sorts by: by
//! second, then sequence, then node. The stored value stays the raw one
//! ([`Parts::to_raw`]); only the comparison differs from the raw order.
//!
//! Why not the raw order (second, node, sequence): on a server, each backend issues from a
//! node of its own, so in raw order each backend's keys of the current second form a run of
//! their own inside the index's last pages, and a B-tree splits a page in the middle of such a
//! run 50/50, leaving half-empty pages behind (nbtree packs pages full only where inserts go to
//! the rightmost page). Ordered by sequence before node, the backends' keys of one second
//! interleave and keep arriving near the right end of the index, where splits leave full pages.
//! docs/performance.md has the measurement.

use core::cmp::Ordering;

use crate::format::layout::{LayoutError, Parts, NODE_BITS, SEQUENCE_BITS};
use crate::{MAX_NODE, MAX_SEQUENCE};

const SECOND_SHIFT: u32 = NODE_BITS + SEQUENCE_BITS;

/// The value a raw value sorts as: its second, sequence and node, most significant first.
#[inline]
pub const fn sort_key(raw: u64) -> u64 {
    let node = (raw >> SEQUENCE_BITS) & MAX_NODE as u64;
    let sequence = raw & MAX_SEQUENCE as u64;
    (raw >> SECOND_SHIFT) << SECOND_SHIFT | sequence << NODE_BITS | node
}

/// How two raw values compare in the key order.
#[inline]
pub fn compare(a: u64, b: u64) -> Ordering {
    sort_key(a).cmp(&sort_key(b))
}

/// The lowest raw value of a Unix second in the key order: node 0, sequence 0.
pub fn lowest_of_second(unix_second: u64) -> Result<u64, LayoutError> {
    Ok(Parts::new(unix_second, 0, 0)?.to_raw())
}

/// The highest raw value of a Unix second in the key order: the last sequence of the last node.
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
    fn seconds_come_first_then_sequences_then_nodes() {
        let t = EPOCH_SECOND + 1000;
        assert_eq!(compare(raw(t, MAX_NODE, MAX_SEQUENCE), raw(t + 1, 0, 0)), Ordering::Less);
        assert_eq!(compare(raw(t, MAX_NODE, 0), raw(t, 0, 1)), Ordering::Less);
        assert_eq!(compare(raw(t, 1, 5), raw(t, 2, 5)), Ordering::Less);
        assert_eq!(compare(raw(t, 7, 9), raw(t, 7, 9)), Ordering::Equal);
        // The raw order would put node 2's sequence 0 after node 1's sequence 1.
        assert!(raw(t, 2, 0) > raw(t, 1, 1));
        assert_eq!(compare(raw(t, 2, 0), raw(t, 1, 1)), Ordering::Less);
    }

    #[test]
    fn the_order_is_unsigned_up_to_the_last_second() {
        // Past 2041 the raw value's top bit is set: as a signed number it would sort first.
        let late = raw(MAX_SECOND, 0, 0);
        assert!((late as i64) < 0);
        assert_eq!(compare(raw(EPOCH_SECOND, MAX_NODE, MAX_SEQUENCE), late), Ordering::Less);
    }

    #[test]
    fn sort_key_is_a_bijection_on_the_fields() {
        for (second, node, sequence) in [(EPOCH_SECOND, 0, 0), (EPOCH_SECOND + 7, 3, 9), (MAX_SECOND, MAX_NODE, 1)] {
            let key = sort_key(raw(second, node, sequence));
            assert_eq!(key >> SECOND_SHIFT, second - EPOCH_SECOND);
            assert_eq!((key >> NODE_BITS) & MAX_SEQUENCE as u64, u64::from(sequence));
            assert_eq!(key & MAX_NODE as u64, u64::from(node));
        }
    }

    #[test]
    fn a_second_spans_from_its_lowest_to_its_highest_value() {
        let t = EPOCH_SECOND + 42;
        let (low, high) = (lowest_of_second(t).unwrap(), highest_of_second(t).unwrap());
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
