//! The cluster-wide node table in shared memory: which process holds each node, and the last
//! second in which each node issued IDs.
//!
//! A backend touches the table only when it takes or gives up a node, and once per second to
//! record the second it is issuing in; each of those is a single atomic operation on the
//! node's own slot. No lock is shared on the path that issues IDs.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use randflake::backend::NoNode;
use randflake::MAX_NODE;

use crate::pg::backend;
use crate::pg::shmem::{Shared, SharedArray};

const NODE_COUNT: usize = MAX_NODE as usize + 1;
const NO_HOLDER: i32 = 0;

#[derive(Default)]
pub struct NodeSlot {
    /// PID of the process holding the node, or `NO_HOLDER`.
    holder: AtomicI32,
    /// Last Unix second in which the node may have issued an ID. Written by the holder before
    /// it hands out the first ID of a second; read by the next holder, which must start later.
    used_through: AtomicU32,
}

#[derive(Default)]
pub struct Header {
    /// Where the next search for a free node begins, so that concurrent searches spread out.
    search_start: AtomicU32,
    /// The latest second any node has issued IDs in: the server's own clock floor.
    latest_used: AtomicU32,
}

/// Created empty whenever the postmaster (re)initialises shared memory. Nothing is carried
/// over from before a crash: the lease keeper's new lease starts after every second that may
/// have been used.
pub static HEADER: Shared<Header> = Shared::new(c"randflake_pg node table");
pub static SLOTS: SharedArray<NodeSlot, NODE_COUNT> = SharedArray::new(c"randflake_pg node slots");

/// How many nodes of `first..=last` running processes hold.
pub fn held_count(first: u32, last: u32) -> u32 {
    let slots = &SLOTS.get()[first as usize..=last as usize];
    slots.iter().filter(|slot| slot.holder.load(Ordering::Relaxed) != NO_HOLDER).count() as u32
}

/// Takes a free node of `first..=last` whose last used second is before `now`, for this
/// process. Returns the node and that second.
pub fn acquire(first: u32, last: u32, now: u64) -> Result<(u32, u64), NoNode> {
    let slots = SLOTS.get();
    let pid = backend::pid();
    let count = last - first + 1;
    let start = HEADER.get().search_start.fetch_add(1, Ordering::Relaxed) % count;
    let mut saw_free = false;
    for offset in 0..count {
        let node = first + (start + offset) % count;
        let slot = &slots[node as usize];
        if slot.holder.load(Ordering::Relaxed) != NO_HOLDER {
            continue;
        }
        saw_free = true;
        if u64::from(slot.used_through.load(Ordering::Relaxed)) >= now {
            continue;
        }
        if slot.holder.compare_exchange(NO_HOLDER, pid, Ordering::Acquire, Ordering::Relaxed).is_err() {
            continue;
        }
        // Read again now that the node is ours: the previous holder may have used it since.
        let used_through = u64::from(slot.used_through.load(Ordering::Acquire));
        if used_through < now {
            return Ok((node, used_through));
        }
        slot.holder.store(NO_HOLDER, Ordering::Release);
    }
    Err(if saw_free { NoNode::AllUsedThisSecond } else { NoNode::AllHeld })
}

/// Records that `node`, held by this process, issues IDs in `second`. Must happen before the
/// first such ID leaves the backend.
pub fn record_used(node: u32, second: u64) {
    let second = u32::try_from(second).expect("seconds past 2106 are refused before this");
    SLOTS.get()[node as usize].used_through.store(second, Ordering::Release);
    HEADER.get().latest_used.fetch_max(second, Ordering::AcqRel);
}

/// The latest second in which any process of this server has issued IDs. Read it before the
/// clock: a second recorded since was read from the clock after this, so only a clock stepped
/// back can read earlier than the value returned.
pub fn latest_used() -> u64 {
    u64::from(HEADER.get().latest_used.load(Ordering::Acquire))
}

pub fn release(node: u32) {
    SLOTS.get()[node as usize].holder.store(NO_HOLDER, Ordering::Release);
}

/// Releases every node of `first..=last` this process still holds. Runs when the process exits;
/// a scan needs no state that an error during exit could have left inconsistent. Only the
/// nodes a process can hold are scanned: the whole table is 1 MB of shared memory that a
/// short-lived backend has never touched, and paging it in on the way out made each connection
/// that made an ID measurably dearer (docs/performance.md, connections that come and go).
pub fn release_all_held(first: u32, last: u32) {
    let Some(slots) = SLOTS.try_get() else { return };
    let pid = backend::pid();
    for slot in slots.get(first as usize..=last as usize).unwrap_or_default() {
        if slot.holder.load(Ordering::Relaxed) == pid {
            slot.holder.store(NO_HOLDER, Ordering::Release);
        }
    }
}
