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

/// How often the socket deadline shuts down stream sockets again once it has passed, until the
/// work it bounds ends.
const SOCKET_DEADLINE_REPEAT: Duration = Duration::from_millis(100);

/// # Safety
///
/// Only PostgreSQL's timeout handler calls this, in signal context.
unsafe extern "C-unwind" fn socket_deadline_reached() {
    bgworker::shut_down_stream_sockets();
    // Once is not enough: the clean-up that the dropped connections set off may open new ones
    // (postgres_fdw from PostgreSQL 17 sends a cancel request again after a second, each on a
    // connection of its own, and waits up to 30 s for a reply), so the deadline stays in force
    // until `with_deadlines` disarms it.
    // SAFETY: timeout.c calls handlers with its alarm disabled, before it schedules the next
    // one, so a handler may queue a timeout (enable_timeout_after makes only a clock reading and
    // a setitimer call, both async-signal-safe); the id was registered, or this did not fire.
    unsafe {
        enable_timeout_after(SOCKET_DEADLINE.load(Ordering::Relaxed), milliseconds(SOCKET_DEADLINE_REPEAT));
    }
}

/// Runs `work` with the statement timeout armed to fire after `statement` and, if registered,
/// the socket deadline after `sockets` and every [`SOCKET_DEADLINE_REPEAT`] from then on; both
/// are disarmed afterwards, and a cancel the statement timeout left pending after `work`
/// finished is forgotten.
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
