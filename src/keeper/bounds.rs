//! Bounds on everything the lease keeper waits for, and the settings its SQL runs under.
//!
//! The keeper's work is a short transaction a second. Three things can stall one: a lock on
//! the lease table, a statement that never returns, and, in fleet mode, a coordination server
//! that stops answering. A stalled keeper cannot renew, so generation stops when the lease or
//! its high-water mark runs out, and a keeper deaf to SIGTERM also holds up a fast shutdown.
//! So every transaction runs under two deadlines:
//! - a soft one, PostgreSQL's own statement timeout, which cancels the statement like any
//!   backend's (a background worker must arm it itself: only the client protocol loop does);
//! - a hard one, a moment later, for what a cancel cannot interrupt. postgres_fdw before
//!   PostgreSQL 17 connects with a blocking libpq call, and on abort sends the remote server a
//!   cancel request whose reply libpq awaits with no time limit: against a stopped coordinator
//!   both wait forever. The keeper owns no stream socket but its coordinator connections, so
//!   the hard deadline shuts every one of them down: each wait then ends at once, as on a
//!   dropped connection, and the transaction aborts cleanly. SIGTERM does the same, so a fast
//!   shutdown never waits for a coordinator.

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use pgrx::pg_sys;

use crate::pg::unguarded;

/// How long a lock on the lease table may hold up one of the keeper's statements.
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// How long after the soft deadline the hard one drops the coordinator connections.
const HARD_GRACE: Duration = Duration::from_secs(1);

// utils/timeout.h is not among pgrx's bindings. These ids are positions in its `TimeoutId`.
/// `STATEMENT_TIMEOUT`: the fourth entry in every supported major.
const STATEMENT_TIMEOUT: c_int = 3;
/// `USER_TIMEOUT`, the first id for extensions' timeouts; 17 added `TRANSACTION_TIMEOUT` before it.
#[cfg(any(feature = "pg15", feature = "pg16"))]
const USER_TIMEOUT: c_int = 12;
#[cfg(not(any(feature = "pg15", feature = "pg16")))]
const USER_TIMEOUT: c_int = 13;

unsafe extern "C-unwind" {
    fn RegisterTimeout(id: c_int, handler: Option<unsafe extern "C-unwind" fn()>) -> c_int;
    fn enable_timeout_after(id: c_int, delay_ms: c_int);
    fn disable_timeout(id: c_int, keep_indicator: bool);
}

/// The id PostgreSQL allocated for the hard deadline, or -1 before `register_hard_deadline`.
static HARD_DEADLINE: AtomicI32 = AtomicI32::new(-1);

/// How many cancel and terminate signals the keeper has received (the soft deadline's cancel
/// among them): a commit during which this moved may have had its wait for synchronous standbys
/// cut short, which PostgreSQL answers with a WARNING and a commit that is only local.
static INTERRUPTS: AtomicU64 = AtomicU64::new(0);

/// See [`INTERRUPTS`].
pub fn interrupts() -> u64 {
    INTERRUPTS.load(Ordering::SeqCst)
}

/// The keeper's signal handlers: reload on SIGHUP; on SIGTERM, drop the coordinator
/// connections and then terminate as PostgreSQL's backends do (at the next interrupt check,
/// with a FATAL and exit status 1, which the launcher or the postmaster answers with a restart
/// unless the server is shutting down). SIGINT cancels the statement, as PostgreSQL's handler
/// for backends does, which the soft deadline needs. Both count in [`INTERRUPTS`].
pub fn install_signal_handlers() {
    // SAFETY: installing handlers from the worker's only thread before anything else runs; the
    // handlers only count, set flags, set the latch and make async-signal-safe system calls.
    unsafe {
        set_handler(pg_sys::SIGHUP as c_int, reload);
        set_handler(pg_sys::SIGINT as c_int, cancel);
        set_handler(pg_sys::SIGTERM as c_int, terminate);
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

/// # Safety
///
/// From the worker's main thread; `handler` must be async-signal-safe.
unsafe fn set_handler(signal: c_int, handler: unsafe extern "C-unwind" fn(c_int)) {
    // SAFETY: the caller's; pqsignal is PostgreSQL's portable sigaction wrapper.
    #[cfg(not(feature = "pg18"))]
    unsafe {
        pg_sys::pqsignal(signal, Some(handler));
    }
    // SAFETY: as above; 18 renamed the backend's variant.
    #[cfg(feature = "pg18")]
    unsafe {
        pg_sys::pqsignal_be(signal, Some(handler));
    }
}

/// # Safety
///
/// Only the kernel calls this, as the SIGHUP handler.
unsafe extern "C-unwind" fn reload(_signal: c_int) {
    // SAFETY: what PostgreSQL's SignalHandlerForConfigReload does: a flag and the latch.
    unsafe {
        std::ptr::write_volatile(&raw mut pg_sys::ConfigReloadPending, 1);
        pg_sys::SetLatch(pg_sys::MyLatch);
    }
}

/// # Safety
///
/// Only the kernel calls this, as the SIGINT handler.
unsafe extern "C-unwind" fn cancel(signal: c_int) {
    INTERRUPTS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: PostgreSQL's own SIGINT handler for backends, called as a signal handler.
    unsafe { unguarded::statement_cancel_handler(signal) };
}

/// # Safety
///
/// Only the kernel calls this, as the SIGTERM handler.
unsafe extern "C-unwind" fn terminate(signal: c_int) {
    INTERRUPTS.fetch_add(1, Ordering::SeqCst);
    drop_coordinator_connections();
    // SAFETY: PostgreSQL's own SIGTERM handler for backends, called as a signal handler.
    unsafe { unguarded::die(signal) };
}

/// Pins the settings the keeper's SQL depends on, over anything `ALTER DATABASE ... SET` or
/// `ALTER ROLE ... SET` applied at connection: the owner of the keeper's database may be an
/// ordinary role, and must not be able to steer name lookup or disable the keeper's bounds.
pub fn pin_settings() {
    let lock_timeout = format!("{}ms", LOCK_WAIT.as_millis());
    let settings: [(&CStr, &str); 7] = [
        // Only pg_catalog is searched for functions, operators and types; pg_temp last, so a
        // temporary object never shadows anything (the keeper makes none).
        (c"search_path", "pg_catalog, pg_temp"),
        (c"lock_timeout", &lock_timeout),
        // The keeper arms the statement timeout itself, per transaction.
        (c"statement_timeout", "0"),
        (c"idle_in_transaction_session_timeout", "0"),
        (c"default_transaction_read_only", "off"),
        (c"default_transaction_isolation", "read committed"),
        // A lease or high-water mark is published only after its commit is flushed here, even
        // where commits are asynchronous. (In fleet mode the coordinator forces its own.)
        (c"synchronous_commit", "local"),
    ];
    for (name, value) in settings {
        let value = std::ffi::CString::new(value).unwrap_or_default();
        // SAFETY: setting GUCs from the worker's thread after it connected, outside a
        // transaction; PGC_S_OVERRIDE outranks the database and role settings.
        unsafe {
            pg_sys::SetConfigOption(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_SUSET,
                pg_sys::GucSource::PGC_S_OVERRIDE,
            );
        }
    }
}

/// Allocates the hard deadline's timeout. Once, after connecting: the timeout machinery is set
/// up by then.
pub fn register_hard_deadline() {
    // SAFETY: RegisterTimeout takes any id from USER_TIMEOUT on and returns the free slot it
    // allocated; the handler makes only async-signal-safe calls.
    let id = unsafe { RegisterTimeout(USER_TIMEOUT, Some(hard_deadline_reached)) };
    HARD_DEADLINE.store(id, Ordering::Relaxed);
}

/// # Safety
///
/// Only PostgreSQL's timeout handler calls this, in signal context.
unsafe extern "C-unwind" fn hard_deadline_reached() {
    drop_coordinator_connections();
}

/// Runs `work` (one keeper transaction, errors already caught) under the soft deadline `limit`
/// and the hard one just after it.
pub fn bounded<R>(limit: Duration, work: impl FnOnce() -> R) -> R {
    let soft = milliseconds(limit);
    let hard = milliseconds(limit + HARD_GRACE);
    let hard_id = HARD_DEADLINE.load(Ordering::Relaxed);
    // SAFETY: arming and disarming timeouts of this process from its only thread.
    unsafe {
        enable_timeout_after(STATEMENT_TIMEOUT, soft);
        if hard_id >= 0 {
            enable_timeout_after(hard_id, hard);
        }
    }
    let result = work();
    // SAFETY: as above. A soft deadline that fired after the work finished left a cancel
    // pending that concerns no statement; it must not cancel the next one.
    unsafe {
        disable_timeout(STATEMENT_TIMEOUT, false);
        if hard_id >= 0 {
            disable_timeout(hard_id, false);
        }
        std::ptr::write_volatile(&raw mut pg_sys::QueryCancelPending, 0);
    }
    result
}

fn milliseconds(duration: Duration) -> c_int {
    c_int::try_from(duration.as_millis()).unwrap_or(c_int::MAX)
}

/// Waits up to `duration` on the latch, then serves interrupts: a reload, or the termination
/// SIGTERM asked for. A cancel (pg_cancel_backend) between transactions has nothing to cancel.
pub fn idle(duration: Duration) {
    // SAFETY: waiting on this process's own latch from its only thread; clearing a pending
    // cancel before the interrupt check keeps it from raising an ERROR outside a transaction.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as c_int,
            milliseconds(duration).into(),
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
        std::ptr::write_volatile(&raw mut pg_sys::QueryCancelPending, 0);
        pgrx::check_for_interrupts!();
        if std::ptr::read_volatile(&raw const pg_sys::ConfigReloadPending) != 0 {
            std::ptr::write_volatile(&raw mut pg_sys::ConfigReloadPending, 0);
            pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
        }
    }
}

/// Shuts down every stream socket of this process: the keeper's coordinator connections, and
/// a cancel request's connection if one is waiting. The descriptors stay open (libpq closes
/// them), so no number is reused under anyone. Async-signal-safe: system calls only.
fn drop_coordinator_connections() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit, fstat, getsockopt and shutdown are async-signal-safe and only read or
    // change the descriptors named; out-parameters point at locals.
    unsafe {
        let highest = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(65_536) as c_int
        } else {
            1024
        };
        for fd in 0..highest {
            let mut stat: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut stat) != 0 || stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
                continue;
            }
            let mut kind: c_int = 0;
            let mut length = std::mem::size_of::<c_int>() as libc::socklen_t;
            let read = libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&raw mut kind).cast(), &mut length);
            if read == 0 && kind == libc::SOCK_STREAM {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
        }
    }
}
