//! Shared memory segments: values placed in PostgreSQL's shared memory under a name, each a
//! segment of its own, requested while preloading and found or created whenever the postmaster
//! (re)initialises shared memory, which it does at start-up and again after any backend crashes.
//! The extension's boards, which are placed in them, are the top-level `shmem` module.
//!
//! A shared value is made only of atomics (`Sync`, nothing to drop, so no pointer into one
//! process's memory), and starts as its `Default`: PostgreSQL forks every process from the
//! postmaster, and each finds the segments at the same addresses.

use std::ffi::CStr;
use std::mem::{needs_drop, size_of};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::headers::ADDIN_SHMEM_INIT_LOCK;

/// Proof that the caller is the shared memory start-up hook holding `AddinShmemInitLock`: only
/// this module makes one.
pub struct StartupHook(());

/// A segment of shared memory, as the start-up hooks see it.
pub trait Segment: Sync {
    /// Bytes to request.
    fn size(&self) -> usize;
    /// Finds the segment, or creates and initialises it if this is the first process to ask
    /// since shared memory was (re)created.
    fn attach(&self, hook: &StartupHook);
}

/// One `T` in shared memory.
pub struct Shared<T> {
    name: &'static CStr,
    attached: AtomicPtr<T>,
}

impl<T: Default + Sync + 'static> Shared<T> {
    pub const fn new(name: &'static CStr) -> Self {
        const { assert!(!needs_drop::<T>(), "a shared value holds nothing a process would free") };
        Self { name, attached: AtomicPtr::new(null_mut()) }
    }

    /// The value, once attached: in every process of a server that preloaded the library.
    pub fn get(&self) -> &'static T {
        self.try_get().expect("randflake_pg shared memory is attached when the library is preloaded")
    }

    /// The value, or `None` in a process where it was never attached.
    pub fn try_get(&self) -> Option<&'static T> {
        let shared = self.attached.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was stored by `attach` after the value was initialised;
        // shared memory stays mapped for the life of every process, and `T: Sync` makes shared
        // references from several processes and threads sound.
        unsafe { shared.as_ref() }
    }
}

impl<T: Default + Sync + 'static> Segment for Shared<T> {
    fn size(&self) -> usize {
        size_of::<T>()
    }

    fn attach(&self, _hook: &StartupHook) {
        let place = init_struct::<T>(self.name, size_of::<T>(), |place| {
            // SAFETY: `place` is fresh shared memory of T's size and alignment, written once.
            unsafe { place.write(T::default()) }
        });
        self.attached.store(place, Ordering::Release);
    }
}

/// `ShmemInitStruct`: the named struct of `size` bytes, initialised by `initialise` if this
/// process created it.
fn init_struct<T>(name: &CStr, size: usize, initialise: impl FnOnce(*mut T)) -> *mut T {
    let mut found = false;
    // SAFETY: called from `attach`, which only the start-up hook below calls, with
    // AddinShmemInitLock held, as ShmemInitStruct requires; it returns memory of the requested
    // size aligned for any type (MAXALIGN), or raises an ERROR when the space was not requested.
    let place = unsafe { pg_sys::ShmemInitStruct(name.as_ptr(), size, &mut found) }.cast::<T>();
    if !found {
        initialise(place);
    }
    place
}

static SEGMENTS: OnceLock<&'static [&'static dyn Segment]> = OnceLock::new();
static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;
static mut PREVIOUS_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;

/// Requests `segments` and attaches them in every process. Called once, from `_PG_init` while
/// preloading.
pub fn install(segments: &'static [&'static dyn Segment]) {
    if SEGMENTS.set(segments).is_err() {
        return;
    }
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
    // Each struct is placed at a cache-line boundary.
    let line = pg_sys::PG_CACHE_LINE_SIZE as usize;
    let size: usize =
        SEGMENTS.get().into_iter().flat_map(|segments| segments.iter()).map(|s| s.size().next_multiple_of(line)).sum();
    // SAFETY: PostgreSQL calls this hook once, in the postmaster, while shared memory is being
    // sized: where RequestAddinShmemSpace is allowed. PREVIOUS_REQUEST_HOOK was written before.
    unsafe {
        if let Some(previous) = PREVIOUS_REQUEST_HOOK {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(size);
    }
}

/// # Safety
///
/// Only PostgreSQL calls this, as `shmem_startup_hook`, with the arguments it documents for that hook.
#[pg_guard]
unsafe extern "C-unwind" fn attach() {
    // SAFETY: PostgreSQL calls this hook after creating shared memory, with the space requested
    // above; AddinShmemInitLock is the lock it documents for ShmemInitStruct (its place in
    // MainLWLockArray read from this major's headers by build.rs), held while every segment
    // attaches. PREVIOUS_STARTUP_HOOK was written before.
    unsafe {
        if let Some(previous) = PREVIOUS_STARTUP_HOOK {
            previous();
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(ADDIN_SHMEM_INIT_LOCK)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let hook = StartupHook(());
        for segment in SEGMENTS.get().copied().unwrap_or_default() {
            segment.attach(&hook);
        }
        pg_sys::LWLockRelease(init_lock);
    }
}
