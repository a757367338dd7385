//! The server's position, `randflake::shared::server_position`, placed in shared memory: the
//! next plain value any process of the server hands out, which every backend advances.
#![forbid(unsafe_code)]

use randflake::shared::server_position::{NodeSpan, PositionReport, ServerPosition, Take};

use crate::pg::shmem_segments::Shared;

/// Created at the epoch's first value whenever the postmaster (re)initialises shared memory.
/// Nothing is carried over from before a crash: the lease keeper's new lease starts after every
/// second that may have been used.
pub static POSITION: Shared<ServerPosition> = Shared::new(c"randflake_pg server position");

/// Takes up to `run` values of second `now` in `span`.
#[inline]
pub fn take(now: u64, span: NodeSpan, run: u32) -> Take {
    POSITION.get().take(now, span, run)
}

/// The latest second in which any process of this server has issued IDs; read it before the
/// clock.
#[inline]
pub fn latest_second() -> u64 {
    POSITION.get().latest_second()
}

/// The position and the end of the second before it, for randflake_status().
pub fn report() -> PositionReport {
    POSITION.get().report()
}
