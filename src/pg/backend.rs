//! This process as PostgreSQL runs it: who it is, what state the server is in, callbacks at its
//! exit, waiting on its latch, and values private to it.

use std::cell::RefCell;
use std::ffi::{c_int, c_long, CStr};
use std::time::Duration;

use pgrx::pg_sys;
use pgrx::prelude::*;

/// This process's id.
pub fn pid() -> i32 {
    // SAFETY: a plain read of a PostgreSQL global, set when the process starts.
    unsafe { pg_sys::MyProcPid }
}

/// Whether the server is a standby still replaying WAL (or a primary still starting up).
pub fn in_recovery() -> bool {
    // SAFETY: a plain read of shared state, from the process's main thread.
    unsafe { pg_sys::RecoveryInProgress() }
}

/// Whether the server runs for pg_upgrade, which rebuilds the catalogs meanwhile.
pub fn in_binary_upgrade() -> bool {
    // SAFETY: a PostgreSQL global, set from the postmaster's options before libraries preload.
    unsafe { pg_sys::IsBinaryUpgrade }
}

/// Whether the library is being loaded through `shared_preload_libraries`, in the postmaster.
pub fn preloading() -> bool {
    // SAFETY: a plain read of a PostgreSQL global, from the loading thread.
    unsafe { pg_sys::process_shared_preload_libraries_in_progress }
}

/// Who the server is in WAL: its system identifier and the timeline it writes on.
pub fn system_identity() -> (u64, u32) {
    // SAFETY: plain reads of shared state; called once recovery has finished.
    unsafe { (pg_sys::GetSystemIdentifier(), pg_sys::GetWALInsertionTimeLine()) }
}

/// Flushes this server's WAL through the end of every record inserted so far, as a commit
/// flushes through its own record, and returns that end; `None` on a standby, which inserts none.
///
/// A record inserted after a commit and before the next one (the running transactions that the
/// background writer logs for standbys, a hint bit's full-page image) lies on a page that the WAL
/// writer leaves unflushed while the server is otherwise idle: a lease keeper that compares the
/// flush position with the insert position would wait for it in vain.
pub fn flush_inserted_wal() -> Option<u64> {
    if in_recovery() {
        return None;
    }
    // SAFETY: a read of the shared insert position, then a flush through the end of what was
    // inserted, which a commit does; not in recovery (checked above), where XLogFlush would move
    // the minimum recovery point instead. The segment size is set at start-up.
    unsafe {
        let end = inserted_end(pg_sys::GetXLogInsertRecPtr(), pg_sys::wal_segment_size as u64);
        pg_sys::XLogFlush(end);
        Some(end)
    }
}

/// The end of the last WAL record inserted, given the insert position that PostgreSQL reports
/// (`pg_current_wal_insert_lsn()`): when that record ended a page, the position points past the
/// header of the next page, which nothing has begun, and a flush through it would ask for WAL not
/// yet generated. (`GetXLogInsertEndRecPtr()` answers this, but only from later minor releases.)
fn inserted_end(position: u64, segment_size: u64) -> u64 {
    const fn aligned(size: usize) -> u64 {
        size.next_multiple_of(pg_sys::MAXIMUM_ALIGNOF as usize) as u64
    }
    let long_header = aligned(size_of::<pg_sys::XLogLongPageHeaderData>());
    let header = if position % segment_size == long_header {
        long_header
    } else {
        aligned(size_of::<pg_sys::XLogPageHeaderData>())
    };
    if position % u64::from(pg_sys::XLOG_BLCKSZ) == header {
        position - header
    } else {
        position
    }
}

/// The machine's host name, or `localhost` if it has none.
pub fn host_name() -> String {
    let mut host = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length; gethostname NUL-terminates within it
    // or the read below finds no NUL and falls back.
    unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) };
    CStr::from_bytes_until_nul(&host)
        .map_or_else(|_| "localhost".to_owned(), |host| host.to_string_lossy().into_owned())
}

/// Asks another process of this server to terminate, as `pg_terminate_backend` does.
pub fn terminate(pid: i32) {
    // SAFETY: sending a signal has no memory effects in this process.
    unsafe { libc::kill(pid, libc::SIGTERM) };
}

/// Runs `callback` when this process exits, after its transaction's clean-up (for giving up
/// what shared memory says it holds).
pub fn at_exit(callback: fn()) {
    // SAFETY: registering an exit callback from the process's main thread; the argument is a
    // function pointer of this library, which PostgreSQL hands back unchanged.
    unsafe { pg_sys::on_shmem_exit(Some(run_exit_callback), pg_sys::Datum::from(callback as usize)) };
}

/// Runs `callback` when this process exits, before its transaction's clean-up.
pub fn before_exit(callback: fn()) {
    // SAFETY: as for `at_exit`.
    unsafe { pg_sys::before_shmem_exit(Some(run_exit_callback), pg_sys::Datum::from(callback as usize)) };
}

/// # Safety
///
/// Only PostgreSQL calls this, as an exit callback registered by `at_exit` or `before_exit`.
#[pg_guard]
unsafe extern "C-unwind" fn run_exit_callback(_code: c_int, callback: pg_sys::Datum) {
    // SAFETY: the argument is the `fn()` that `at_exit` or `before_exit` registered with it.
    let callback: fn() = unsafe { std::mem::transmute::<usize, fn()>(callback.value()) };
    callback();
}

/// Sleeps on this process's latch for `duration` at most, waking early when the latch is set
/// (a signal, a reload) and at once if the postmaster dies. The caller serves interrupts.
pub fn wait_on_latch(duration: Duration) {
    let timeout_ms = c_long::try_from(duration.as_millis()).unwrap_or(c_long::MAX);
    // SAFETY: waiting on this process's own latch from its main thread.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as c_int,
            timeout_ms,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
}

/// A value private to this PostgreSQL process: a plain static, where `thread_local!` would be
/// the checked choice.
///
/// In a library that PostgreSQL loads with dlopen(), every thread-local access calls
/// `__tls_get_addr`, a large share of a call that reads a reserved ID (docs/performance.md has
/// the figures). A plain static is sound because PostgreSQL runs each
/// session in its own single-threaded process and pgrx refuses calls into PostgreSQL from any
/// other thread, so only the process's main thread reaches the value. The `RefCell` turns an
/// accidental re-entrant use into a panic, which the caller's guard reports as an ERROR, instead
/// of undefined behaviour.
pub struct BackendLocal<T>(RefCell<T>);

// SAFETY: see the type's documentation: only the process's main thread ever touches the value.
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

/// A value private to this PostgreSQL process, shared by reference rather than borrowed: for a
/// value whose fields are `Cell`s, which a hot path reads and writes without marking a borrow
/// (`BackendLocal`'s `RefCell` costs a load, a store and a read-modify-write of its flag a call,
/// each waiting on the one before). Sound for the same reason as `BackendLocal`: only the
/// process's main thread reaches the value, and a `Cell` is safe to use re-entrantly.
pub struct BackendShared<T>(T);

// SAFETY: see the type's documentation: only the process's main thread ever touches the value.
unsafe impl<T> Sync for BackendShared<T> {}

impl<T> BackendShared<T> {
    pub const fn new(value: T) -> Self {
        Self(value)
    }

    #[inline]
    pub fn get(&self) -> &T {
        &self.0
    }
}

/// The value of the function `function`, taking text and returning boolean, called with
/// `argument`: by OID, so no name is resolved, and without an EXECUTE check (the extension
/// calls it for itself). An ERROR it raises is raised as any other.
pub fn call_text_to_bool(function: pg_sys::Oid, argument: &str) -> bool {
    use pgrx::IntoDatum;
    let argument = argument.into_datum().unwrap_or_else(|| pgrx::error!("randflake_pg: text argument not formed"));
    // SAFETY: the caller found `function` taking one text argument and returning boolean, and
    // the argument is a text datum in the current memory context; a NULL result raises an ERROR.
    let result = unsafe { pg_sys::OidFunctionCall1Coll(function, pg_sys::InvalidOid, argument) };
    result.value() != 0
}

#[cfg(test)]
mod tests {
    use super::inserted_end;

    const SEGMENT: u64 = 16 << 20;

    #[test]
    fn an_insert_position_past_a_page_header_ends_at_the_page() {
        // A page's short header is 24 bytes, a segment's first page's long header 40.
        assert_eq!(inserted_end(3 * SEGMENT + 5 * 8192 + 24, SEGMENT), 3 * SEGMENT + 5 * 8192);
        assert_eq!(inserted_end(3 * SEGMENT + 40, SEGMENT), 3 * SEGMENT);
    }

    #[test]
    fn an_insert_position_inside_a_page_is_the_end() {
        for position in [3 * SEGMENT + 5 * 8192 + 32, 3 * SEGMENT + 5 * 8192 + 8000, 3 * SEGMENT + 48] {
            assert_eq!(inserted_end(position, SEGMENT), position);
        }
    }
}
