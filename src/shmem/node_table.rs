//! The cluster-wide node table, `randflake::shared::node_table_protocol`, placed in shared memory:
//! which process holds each node, and the last second in which each node issued IDs.
#![forbid(unsafe_code)]

use randflake::decisions::refill::NoNode;
use randflake::shared::node_table_protocol::{Header, NodeSlot, NodeTable};
use randflake::MAX_NODE;

use crate::pg::backend;
use crate::pg::shmem_segments::{Shared, SharedArray};

const NODE_COUNT: usize = MAX_NODE as usize + 1;

/// Created empty whenever the postmaster (re)initialises shared memory. Nothing is carried
/// over from before a crash: the lease keeper's new lease starts after every second that may
/// have been used.
pub static HEADER: Shared<Header> = Shared::new(c"randflake_pg node table");
pub static SLOTS: SharedArray<NodeSlot, NODE_COUNT> = SharedArray::new(c"randflake_pg node slots");

#[inline]
fn table() -> NodeTable<'static> {
    NodeTable::new(HEADER.get(), SLOTS.get())
}

/// How many nodes of `first..=last` running processes hold.
pub fn held_count(first: u32, last: u32) -> u32 {
    table().held_count(first, last)
}

/// Takes a free node of `first..=last` whose last used second is before `now`, for this
/// process. Returns the node and that second.
pub fn acquire(first: u32, last: u32, now: u64) -> Result<(u32, u64), NoNode> {
    table().acquire(first, last, now, backend::pid())
}

/// Records that `node`, held by this process, issues IDs in `second`. Must happen before the
/// first such ID leaves the backend.
pub fn record_used(node: u32, second: u64) {
    table().record_used(node, second);
}

/// The latest second in which any process of this server has issued IDs; read it before the
/// clock.
#[inline]
pub fn latest_used() -> u64 {
    HEADER.get().latest_used()
}

pub fn release(node: u32) {
    table().release(node);
}

/// Releases every node of `first..=last` this process still holds, when it exits. Only the
/// nodes a process can hold are scanned: the whole table is 1 MB of shared memory that a
/// short-lived backend has never touched, and paging it in on the way out made each connection
/// that made an ID measurably dearer (docs/performance.md, connections that come and go).
pub fn release_all_held(first: u32, last: u32) {
    let (Some(header), Some(slots)) = (HEADER.try_get(), SLOTS.try_get()) else { return };
    NodeTable::new(header, slots).release_all_held(first, last, backend::pid());
}
