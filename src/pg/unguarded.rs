//! PostgreSQL functions declared here without pgrx's guard, for the hooks through which
//! PostgreSQL's own work passes, and for the allocation of the results of the functions written
//! by hand for speed (`entry`), where the guard would cost more than the allocation.
//!
//! pgrx wraps every function of `pg_sys` in a guard that catches an ERROR, flushes PostgreSQL's
//! error state and raises the error again as a new report. Around `standard_ProcessUtility`
//! that would rewrite every error of every utility statement on the server (its position, its
//! table and constraint names lost, a Rust backtrace added); inside `emit_log_hook` it would
//! destroy the very message being reported. Declared without the guard, an ERROR from these
//! functions reaches PostgreSQL's own handler as it was raised.
//!
//! Such a longjmp skips the Rust frames it crosses without dropping their values. The utility
//! hook holds none when it calls on. The log hook calls only `MemoryContextStrdup`, into
//! ErrorContext, which keeps space reserved for reporting: an ERROR inside error reporting
//! empties ErrorContext and cannot be undone, so the log hook calls nothing else that can raise.

use std::ffi::{c_char, c_int};

use pgrx::pg_sys;

unsafe extern "C-unwind" {
    #[link_name = "standard_ProcessUtility"]
    pub fn standard_process_utility(
        statement: *mut pg_sys::PlannedStmt,
        query_string: *const c_char,
        read_only_tree: bool,
        context: pg_sys::ProcessUtilityContext::Type,
        params: pg_sys::ParamListInfo,
        query_environment: *mut pg_sys::QueryEnvironment,
        destination: *mut pg_sys::DestReceiver,
        completion: *mut pg_sys::QueryCompletion,
    );

    /// For the results of `entry`'s functions: with MCXT_ALLOC_NO_OOM it returns NULL instead of
    /// raising when memory runs out, so it needs no guard.
    #[link_name = "palloc_extended"]
    pub fn palloc_extended(size: usize, flags: c_int) -> *mut std::ffi::c_void;

    #[link_name = "MemoryContextStrdup"]
    pub fn memory_context_strdup(context: pg_sys::MemoryContext, text: *const c_char) -> *mut c_char;

    /// PostgreSQL's SIGINT handler for backends: requests a query cancel. For signal handlers,
    /// which pgrx's guard (a sigsetjmp) has no business in.
    #[link_name = "StatementCancelHandler"]
    pub fn statement_cancel_handler(signal: c_int);

    /// PostgreSQL's SIGTERM handler for backends: requests termination. As above.
    #[link_name = "die"]
    pub fn die(signal: c_int);
}
