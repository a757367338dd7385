//! The extension's shared memory: the node table and the published lease. Requested while
//! preloading; found or created whenever the postmaster (re)initialises shared memory, which it
//! does at start-up and again after any backend crashes.

pub mod node_table;
pub mod published_lease;
mod segment;

use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;
static mut PREVIOUS_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;

const SIZE: usize = node_table::SHARED_SIZE + published_lease::SHARED_SIZE;

/// `AddinShmemInitLock`'s place in `MainLWLockArray` (PostgreSQL's lwlocklist.h; the same in
/// every supported major), which pgrx does not export as a symbol.
const ADDIN_SHMEM_INIT_LOCK: usize = 21;

/// Installs the hooks. Called from `_PG_init` while preloading.
pub fn reserve() {
    // SAFETY: hook chaining in _PG_init, on the postmaster's only thread, before any hook runs;
    // the previous hooks are kept and called first.
    unsafe {
        PREVIOUS_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(attach);
        PREVIOUS_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request);
    }
}

/// # Safety
///
/// Only PostgreSQL calls this, as `shmem_request_hook`, with the arguments it documents for that hook.
#[pg_guard]
unsafe extern "C-unwind" fn request() {
    // SAFETY: PostgreSQL calls this hook once, in the postmaster, while shared memory is being
    // sized: where RequestAddinShmemSpace is allowed. PREVIOUS_REQUEST_HOOK was written before.
    unsafe {
        if let Some(previous) = PREVIOUS_REQUEST_HOOK {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(SIZE);
    }
}

/// # Safety
///
/// Only PostgreSQL calls this, as `shmem_startup_hook`, with the arguments it documents for that hook.
#[pg_guard]
unsafe extern "C-unwind" fn attach() {
    // SAFETY: PostgreSQL calls this hook after creating shared memory, with the space requested
    // above; AddinShmemInitLock is the lock it documents for ShmemInitStruct, and both attaches
    // run while it is held. PREVIOUS_STARTUP_HOOK was written before.
    unsafe {
        if let Some(previous) = PREVIOUS_STARTUP_HOOK {
            previous();
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(ADDIN_SHMEM_INIT_LOCK)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        node_table::attach();
        published_lease::attach();
        pg_sys::LWLockRelease(init_lock);
    }
}
