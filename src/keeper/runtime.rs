//! The keeper's runtime: the settings its SQL runs under, and the bounds on everything it waits
//! for.
//!
//! The keeper's work is a short transaction a second. Three things can stall one: a lock on
//! the lease table, a statement that never returns, and, in fleet mode, a coordination server
//! that stops answering. A stalled keeper cannot renew, so generation stops when the lease or
//! its high-water mark runs out, and a keeper deaf to SIGTERM also holds up a fast shutdown.
//! So every transaction runs under two deadlines:
//! - a soft one, PostgreSQL's own statement timeout, which cancels the statement like any
//!   backend's;
//! - a hard one, a moment later, for what a cancel cannot interrupt. postgres_fdw before
//!   PostgreSQL 17 connects with a blocking libpq call, and on abort sends the remote server a
//!   cancel request whose reply libpq awaits with no time limit: against a stopped coordinator
//!   both wait forever; from 17 it sends the cancel again after a second, on a new connection,
//!   and waits 30 s for that. The keeper owns no stream socket but its coordinator
//!   connections, so the hard deadline shuts every one of them down, and again every 100 ms
//!   until the transaction ends, catching connections opened after it: each wait then ends at
//!   once, as on a dropped connection, and the transaction aborts cleanly. SIGTERM shuts them
//!   down too, so a fast shutdown never waits for a coordinator.
#![forbid(unsafe_code)]

use std::ffi::CStr;
use std::time::Duration;

use crate::lease_table::LOCK_WAIT;
use crate::pg::{guc, timeout};

/// How long after the soft deadline the hard one drops the coordinator connections.
const HARD_GRACE: Duration = Duration::from_secs(1);

/// Sets up a worker that runs the keeper's SQL: the settings its SQL depends on, and its hard
/// deadline. Once connected to its database.
pub fn prepare() {
    pin_settings();
    timeout::register_socket_deadline();
}

/// Pins the settings the keeper's SQL depends on, over anything `ALTER DATABASE ... SET` or
/// `ALTER ROLE ... SET` applied at connection: the owner of the keeper's database may be an
/// ordinary role, and must not be able to steer name lookup or disable the keeper's bounds.
fn pin_settings() {
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
        guc::set_for_process(name, value);
    }
}

/// Runs `work` (one keeper transaction, errors already caught) under the soft deadline `limit`
/// and the hard one just after it.
pub fn bounded<R>(limit: Duration, work: impl FnOnce() -> R) -> R {
    timeout::with_deadlines(limit, limit + HARD_GRACE, work)
}
