//! The cluster-wide node table in shared memory: which process holds each node, and the last
//! second in which each node issued IDs.
//!
//! A backend touches the table only when it takes or gives up a node, and once per second to
//! record the second it is issuing in; each of those is a single atomic operation on the
//! node's own slot. No lock is shared on the path that issues IDs.

use std::mem::size_of;
use std::ptr::{addr_of_mut, null_mut};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, Ordering};

use pgrx::pg_sys;
use pgrx::prelude::*;
use randflake::MAX_NODE;

use crate::clock;

const NODE_COUNT: usize = MAX_NODE as usize + 1;
const NO_HOLDER: i32 = 0;

#[repr(C)]
struct NodeSlot {
    /// PID of the process holding the node, or `NO_HOLDER`.
    holder: AtomicI32,
    /// Last Unix second in which the node may have issued an ID. Written by the holder before
    /// it hands out the first ID of a second; read by the next holder, which must start later.
    used_through: AtomicU32,
}

#[repr(C)]
struct NodeTable {
    /// The second in which this shared memory was initialised. It counts as used by every node:
    /// after a crash or a quick restart, processes that no longer exist may have issued IDs in
    /// it, and nothing recorded which.
    startup_second: u64,
    /// Where the next search for a free node begins, so that concurrent searches spread out.
    search_start: AtomicU32,
    slots: [NodeSlot; NODE_COUNT],
}

static TABLE: AtomicPtr<NodeTable> = AtomicPtr::new(null_mut());
static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
static mut PREVIOUS_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;

/// Why no node could be taken.
pub enum NoNode {
    /// Every node of the range is held by a running process.
    AllHeld,
    /// Some nodes are free but each has already issued IDs in the current second.
    AllUsedThisSecond,
}

/// Asks PostgreSQL for the table's shared memory. Called from `_PG_init` while preloading.
pub fn reserve() {
    // SAFETY: hook chaining in _PG_init, on the postmaster's only thread.
    unsafe {
        PREVIOUS_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(attach);
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        pg_sys::RequestAddinShmemSpace(size_of::<NodeTable>());
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        {
            PREVIOUS_REQUEST_HOOK = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(request);
        }
    }
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pg_guard]
unsafe extern "C-unwind" fn request() {
    unsafe {
        if let Some(previous) = PREVIOUS_REQUEST_HOOK {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(size_of::<NodeTable>());
    }
}

/// Finds or creates the table. The postmaster runs this at start-up and again after a crash,
/// when shared memory is rebuilt from scratch.
#[pg_guard]
unsafe extern "C-unwind" fn attach() {
    unsafe {
        if let Some(previous) = PREVIOUS_STARTUP_HOOK {
            previous();
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock; // AddinShmemInitLock
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let table = pg_sys::ShmemInitStruct(
            c"randflake_pg node table".as_ptr(),
            size_of::<NodeTable>(),
            &mut found,
        )
        .cast::<NodeTable>();
        if !found {
            let startup_second = clock::unix_time().as_secs();
            addr_of_mut!((*table).startup_second).write(startup_second);
            addr_of_mut!((*table).search_start).write(AtomicU32::new(0));
            let slots = addr_of_mut!((*table).slots).cast::<NodeSlot>();
            let stamp = u32::try_from(startup_second).unwrap_or(u32::MAX);
            for index in 0..NODE_COUNT {
                slots.add(index).write(NodeSlot {
                    holder: AtomicI32::new(NO_HOLDER),
                    used_through: AtomicU32::new(stamp),
                });
            }
        }
        TABLE.store(table, Ordering::Release);
        pg_sys::LWLockRelease(init_lock);
    }
}

fn table() -> &'static NodeTable {
    let table = TABLE.load(Ordering::Acquire);
    // SAFETY: set by `attach` before any backend exists; shared memory outlives every backend.
    unsafe { table.as_ref() }.expect("randflake_pg node table is attached when preloaded")
}

pub fn startup_second() -> u64 {
    table().startup_second
}

/// Takes a free node of `first..=last` whose last used second is before `now`, for this
/// process. Returns the node and that second.
pub fn acquire(first: u32, last: u32, now: u64) -> Result<(u32, u64), NoNode> {
    let table = table();
    // SAFETY: reading a PostgreSQL global from the backend's thread.
    let pid = unsafe { pg_sys::MyProcPid };
    let count = last - first + 1;
    let start = table.search_start.fetch_add(1, Ordering::Relaxed) % count;
    let mut saw_free = false;
    for offset in 0..count {
        let node = first + (start + offset) % count;
        let slot = &table.slots[node as usize];
        if slot.holder.load(Ordering::Relaxed) != NO_HOLDER {
            continue;
        }
        saw_free = true;
        if u64::from(slot.used_through.load(Ordering::Relaxed)) >= now {
            continue;
        }
        if slot
            .holder
            .compare_exchange(NO_HOLDER, pid, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
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
    table().slots[node as usize].used_through.store(second, Ordering::Release);
}

pub fn release(node: u32) {
    table().slots[node as usize].holder.store(NO_HOLDER, Ordering::Release);
}

/// Releases every node this process still holds. Runs when the process exits; a scan of the
/// whole table needs no state that an error during exit could have left inconsistent.
pub fn release_all_held() {
    let Some(table) = (unsafe { TABLE.load(Ordering::Acquire).as_ref() }) else { return };
    // SAFETY: reading a PostgreSQL global from the backend's thread.
    let pid = unsafe { pg_sys::MyProcPid };
    for slot in &table.slots {
        if slot.holder.load(Ordering::Relaxed) == pid {
            slot.holder.store(NO_HOLDER, Ordering::Release);
        }
    }
}
