//! The extension's shared memory: one board per concern, each a segment of its own.
//!
//! - `node_table`: which process holds each node, and the last second each node issued in;
//! - `lease_board`: the lease the keeper publishes to every backend;
//! - `keeper_board`: what the keeper is doing, and which process it is;
//! - `counters`: what generation met, for randflake_status().
//!
//! The first two, and the sequence lock of the first three, are protocols of the `randflake`
//! crate (`randflake::shared`), model-checked there; here they are only placed.
#![forbid(unsafe_code)]

pub mod counters;
pub mod keeper_board;
pub mod lease_board;
pub mod node_table;

use crate::pg::shmem_segments::Segment;

/// Every segment, for `_PG_init` to request.
pub static SEGMENTS: [&dyn Segment; 5] =
    [&node_table::HEADER, &node_table::SLOTS, &lease_board::BOARD, &keeper_board::BOARD, &counters::BOARD];
