//! A struct placed in PostgreSQL's shared memory under a name, and the pointer each process
//! keeps to it.

use std::ffi::CStr;
use std::mem::size_of;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

use pgrx::pg_sys;

/// A `T` in shared memory, found by `name` when the postmaster (re)creates shared memory and
/// inherited by every process it forks afterwards.
///
/// `T` is shared between processes, so it must be made only of atomics (or of data that never
/// changes after initialisation), `#[repr(C)]`, with no pointers into any one process's memory.
pub struct SharedStruct<T> {
    name: &'static CStr,
    attached: AtomicPtr<T>,
}

impl<T: Sync> SharedStruct<T> {
    /// What to request from PostgreSQL for this struct.
    pub const SIZE: usize = size_of::<T>();

    pub const fn new(name: &'static CStr) -> Self {
        Self { name, attached: AtomicPtr::new(null_mut()) }
    }

    /// Finds the struct, or creates it with `initialise` if this is the first process to ask for
    /// it since shared memory was (re)created.
    ///
    /// # Safety
    ///
    /// Only from the shared memory start-up hook, with `AddinShmemInitLock` held, after
    /// [`Self::SIZE`] was requested; `initialise` must write every field of the struct it is
    /// given.
    pub unsafe fn attach(&self, initialise: impl FnOnce(*mut T)) {
        let mut found = false;
        // SAFETY: the caller holds AddinShmemInitLock in the start-up hook, as ShmemInitStruct
        // requires; it returns memory of the requested size, aligned for any type (MAXALIGN),
        // or raises an ERROR when the space was not requested.
        let shared = unsafe { pg_sys::ShmemInitStruct(self.name.as_ptr(), Self::SIZE, &mut found) }.cast::<T>();
        if !found {
            initialise(shared);
        }
        self.attached.store(shared, Ordering::Release);
    }

    /// The struct, once attached: in every process of a server that preloaded the library.
    pub fn get(&self) -> &'static T {
        self.try_get().expect("randflake_pg shared memory is attached when the library is preloaded")
    }

    /// The struct, or `None` in a process where it was never attached.
    pub fn try_get(&self) -> Option<&'static T> {
        let shared = self.attached.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was stored by `attach` after the struct was initialised;
        // shared memory stays mapped for the life of every process, and `T: Sync` (atomics only)
        // makes shared references from several processes and threads sound.
        unsafe { shared.as_ref() }
    }
}
