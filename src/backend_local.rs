//! Process-global state that is, in PostgreSQL, per-session state.

use std::cell::RefCell;

/// A value private to one PostgreSQL backend process.
///
/// PostgreSQL runs each session in its own single-threaded process and pgrx refuses calls into
/// PostgreSQL from other threads, so a plain static is per-session state with no data race. The
/// `RefCell` turns an accidental re-entrant use into a Rust panic, which pgrx reports as an
/// ERROR, instead of undefined behaviour.
pub struct BackendLocal<T>(RefCell<T>);

// SAFETY: see the type's documentation: only the backend's main thread ever touches the value.
unsafe impl<T> Sync for BackendLocal<T> {}

impl<T> BackendLocal<T> {
    pub const fn new(value: T) -> Self {
        Self(RefCell::new(value))
    }

    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.0.borrow_mut())
    }
}
