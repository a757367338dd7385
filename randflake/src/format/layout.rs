//! The 64-bit layout of an unencrypted Randflake ID: 30 bits of seconds since the Randflake
//! epoch, 17 bits of node, 17 bits of sequence, most significant first.

use core::fmt;

/// Unix second at which the Randflake timestamp field is zero (2024-10-27T03:33:20Z).
pub const EPOCH_SECOND: u64 = 1_730_000_000;

/// Width of the timestamp field: seconds since [`EPOCH_SECOND`].
pub const TIMESTAMP_BITS: u32 = 30;
/// Width of the node field.
pub const NODE_BITS: u32 = 17;
/// Width of the sequence field.
pub const SEQUENCE_BITS: u32 = 17;

/// Highest node id: 131071.
pub const MAX_NODE: u32 = (1 << NODE_BITS) - 1;
/// Highest sequence number within one node and one second: 131071.
pub const MAX_SEQUENCE: u32 = (1 << SEQUENCE_BITS) - 1;
/// Last Unix second a Randflake ID can carry: 2803741823 (2058-11-05T17:10:23Z).
pub const MAX_SECOND: u64 = EPOCH_SECOND + (1 << TIMESTAMP_BITS) - 1;

/// The three fields of an ID, as issued by a generator or recovered by decryption.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Parts {
    /// Unix seconds, within `EPOCH_SECOND..=MAX_SECOND`.
    pub timestamp: u64,
    /// Node id, within `0..=MAX_NODE`.
    pub node_id: u32,
    /// Sequence within the node and second, within `0..=MAX_SEQUENCE`.
    pub sequence: u32,
}

/// A field that does not fit its place in the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// A Unix second outside `EPOCH_SECOND..=MAX_SECOND`.
    TimestampOutOfRange(u64),
    /// A node id above [`MAX_NODE`].
    NodeOutOfRange(u32),
    /// A sequence above [`MAX_SEQUENCE`].
    SequenceOutOfRange(u32),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TimestampOutOfRange(second) => {
                write!(f, "timestamp {second} is outside the Randflake range {EPOCH_SECOND}..={MAX_SECOND}")
            }
            Self::NodeOutOfRange(node) => write!(f, "node id {node} is outside 0..={MAX_NODE}"),
            Self::SequenceOutOfRange(sequence) => {
                write!(f, "sequence {sequence} is outside 0..={MAX_SEQUENCE}")
            }
        }
    }
}

impl std::error::Error for LayoutError {}

impl Parts {
    /// Checks each field against its width.
    ///
    /// ```
    /// use randflake::{format::layout::LayoutError, Parts, MAX_NODE};
    ///
    /// assert!(Parts::new(1733706297, 42, 1).is_ok());
    /// assert_eq!(Parts::new(1733706297, MAX_NODE + 1, 0), Err(LayoutError::NodeOutOfRange(131072)));
    /// ```
    pub fn new(timestamp: u64, node_id: u32, sequence: u32) -> Result<Self, LayoutError> {
        if !(EPOCH_SECOND..=MAX_SECOND).contains(&timestamp) {
            return Err(LayoutError::TimestampOutOfRange(timestamp));
        }
        if node_id > MAX_NODE {
            return Err(LayoutError::NodeOutOfRange(node_id));
        }
        if sequence > MAX_SEQUENCE {
            return Err(LayoutError::SequenceOutOfRange(sequence));
        }
        Ok(Self { timestamp, node_id, sequence })
    }

    /// Packs the fields into the unencrypted 64-bit value:
    /// `(timestamp - EPOCH_SECOND) << 34 | node_id << 17 | sequence`.
    ///
    /// ```
    /// # use randflake::Parts;
    /// assert_eq!(Parts::new(1733706297, 42, 1).unwrap().to_raw(), 63673697622556673);
    /// ```
    #[inline]
    pub fn to_raw(self) -> u64 {
        ((self.timestamp - EPOCH_SECOND) << (NODE_BITS + SEQUENCE_BITS))
            | (u64::from(self.node_id) << SEQUENCE_BITS)
            | u64::from(self.sequence)
    }

    /// Splits an unencrypted value into its fields; every 64-bit value is a valid layout.
    #[inline]
    pub fn from_raw(raw: u64) -> Self {
        Self {
            timestamp: EPOCH_SECOND + (raw >> (NODE_BITS + SEQUENCE_BITS)),
            node_id: ((raw >> SEQUENCE_BITS) as u32) & MAX_NODE,
            sequence: (raw as u32) & MAX_SEQUENCE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_second_is_the_published_one() {
        assert_eq!(MAX_SECOND, 2_803_741_823);
    }

    #[test]
    fn fields_are_checked_at_their_edges() {
        assert!(Parts::new(EPOCH_SECOND, 0, 0).is_ok());
        assert!(Parts::new(MAX_SECOND, MAX_NODE, MAX_SEQUENCE).is_ok());
        assert_eq!(Parts::new(EPOCH_SECOND - 1, 0, 0), Err(LayoutError::TimestampOutOfRange(EPOCH_SECOND - 1)));
        assert_eq!(Parts::new(MAX_SECOND + 1, 0, 0), Err(LayoutError::TimestampOutOfRange(MAX_SECOND + 1)));
        assert_eq!(Parts::new(EPOCH_SECOND, MAX_NODE + 1, 0), Err(LayoutError::NodeOutOfRange(MAX_NODE + 1)));
        assert_eq!(
            Parts::new(EPOCH_SECOND, 0, MAX_SEQUENCE + 1),
            Err(LayoutError::SequenceOutOfRange(MAX_SEQUENCE + 1))
        );
    }

    #[test]
    fn extreme_layouts_fill_all_64_bits() {
        assert_eq!(Parts::new(MAX_SECOND, MAX_NODE, MAX_SEQUENCE).unwrap().to_raw(), u64::MAX);
        assert_eq!(Parts::new(EPOCH_SECOND, 0, 0).unwrap().to_raw(), 0);
        assert_eq!(Parts::from_raw(u64::MAX), Parts::new(MAX_SECOND, MAX_NODE, MAX_SEQUENCE).unwrap());
    }
}
