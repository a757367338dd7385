//! PostgreSQL's timeouts (utils/timeout.h, which pgrx does not bind): the statement timeout,
//! which a background worker must arm itself (only the client protocol loop does), and one
//! timeout of the extension's own whose handler shuts down the worker's stream sockets.

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use super::bgworker;
use super::headers::{STATEMENT_TIMEOUT, USER_TIMEOUT};

unsafe extern "C-unwind" {
    fn RegisterTimeout(id: c_int, handler: Option<unsafe extern "C-unwind" fn()>) -> c_int;
    fn enable_timeout_after(id: c_int, delay_ms: c_int);
    fn disable_timeout(id: c_int, keep_indicator: bool);
}

/// The id PostgreSQL allocated for the socket deadline, or -1 before it was registered.
static SOCKET_DEADLINE: AtomicI32 = AtomicI32::new(-1);

/// Allocates the socket deadline's timeout. Once per process, once the timeout machinery is
/// set up (after connecting to a database).
pub fn register_socket_deadline() {
    // SAFETY: RegisterTimeout takes any id from USER_TIMEOUT on and returns the free slot it
    // allocated; the handler makes only async-signal-safe calls.
    let id = unsafe { RegisterTimeout(USER_TIMEOUT, Some(socket_deadline_reached)) };
    SOCKET_DEADLINE.store(id, Ordering::Relaxed);
}

/// # Safety
///
/// Only PostgreSQL's timeout handler calls this, in signal context.
unsafe extern "C-unwind" fn socket_deadline_reached() {
    bgworker::shut_down_stream_sockets();
}

/// Runs `work` with the statement timeout armed to fire after `statement` and, if registered,
/// the socket deadline after `sockets`; both are disarmed afterwards, and a cancel the statement
/// timeout left pending after `work` finished is forgotten.
pub fn with_deadlines<R>(statement: Duration, sockets: Duration, work: impl FnOnce() -> R) -> R {
    let socket_deadline = SOCKET_DEADLINE.load(Ordering::Relaxed);
    // SAFETY: arming timeouts of this process from its only thread; both ids are registered.
    unsafe {
        enable_timeout_after(STATEMENT_TIMEOUT, milliseconds(statement));
        if socket_deadline >= 0 {
            enable_timeout_after(socket_deadline, milliseconds(sockets));
        }
    }
    let result = work();
    // SAFETY: as above, disarming.
    unsafe {
        disable_timeout(STATEMENT_TIMEOUT, false);
        if socket_deadline >= 0 {
            disable_timeout(socket_deadline, false);
        }
    }
    bgworker::forget_pending_cancel();
    result
}

fn milliseconds(duration: Duration) -> c_int {
    c_int::try_from(duration.as_millis()).unwrap_or(c_int::MAX)
}
