//! The extension's shared memory: one board per concern, each a segment of its own.
//!
//! - `server_position`: the next value any process of the server hands out;
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
pub mod server_position;

use crate::pg::shmem_segments::Segment;

/// Every segment, for `_PG_init` to request.
pub static SEGMENTS: [&dyn Segment; 4] =
    [&server_position::POSITION, &lease_board::BOARD, &keeper_board::BOARD, &counters::BOARD];
