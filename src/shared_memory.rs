//! The extension's shared memory: the node table and the published lease. Requested while
//! preloading; found or created whenever the postmaster (re)initialises shared memory, which it
//! does at start-up and again after any backend crashes.

use std::ffi::CStr;
use std::mem::size_of;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::{lease_state, node_table};

static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;
static mut PREVIOUS_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;

const SIZE: usize = node_table::SHARED_SIZE + lease_state::SHARED_SIZE;

/// Installs the hooks. Called from `_PG_init` while preloading.
pub fn reserve() {
    // SAFETY: hook chaining in _PG_init, on the postmaster's only thread.
    unsafe {
        PREVIOUS_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(attach);
        PREVIOUS_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn request() {
    unsafe {
        if let Some(previous) = PREVIOUS_REQUEST_HOOK {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(SIZE);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn attach() {
    unsafe {
        if let Some(previous) = PREVIOUS_STARTUP_HOOK {
            previous();
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock; // AddinShmemInitLock
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        node_table::attach();
        lease_state::attach();
        pg_sys::LWLockRelease(init_lock);
    }
}

/// The shared struct called `name`, initialised by `initialise` if this is the first process to
/// ask for it since shared memory was (re)created.
///
/// # Safety
/// Only from the start-up hook, with `AddinShmemInitLock` held; `initialise` must write every
/// field of the struct.
pub unsafe fn find_or_create<T>(name: &CStr, initialise: impl FnOnce(*mut T)) -> *mut T {
    let mut found = false;
    let shared = unsafe { pg_sys::ShmemInitStruct(name.as_ptr(), size_of::<T>(), &mut found) }.cast::<T>();
    if !found {
        initialise(shared);
    }
    shared
}
