//! PostgreSQL functions declared here without pgrx's guard, for the hooks through which
//! PostgreSQL's own work passes.
//!
//! pgrx wraps every function of `pg_sys` in a guard that catches an ERROR, flushes PostgreSQL's
//! error state and raises the error again as a new report. Around `standard_ProcessUtility`
//! that would rewrite every error of every utility statement on the server (its position, its
//! table and constraint names lost, a Rust backtrace added); inside `emit_log_hook` it would
//! destroy the very message being reported. Declared without the guard, an ERROR from these
//! functions reaches PostgreSQL's own handler as it was raised.
//!
//! Such a longjmp skips the Rust frames it crosses without dropping their values. The utility
//! hook holds none when it calls on. In the log hook, the only ERROR these calls can raise is
//! memory running out (the text they parse has just been parsed without error, and walks stop
//! short of the stack limit), which would leak what those frames hold.

use std::ffi::{c_char, c_int, c_void};

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

    #[link_name = "raw_parser"]
    pub fn raw_parser(text: *const c_char, mode: pg_sys::RawParseMode::Type) -> *mut pg_sys::List;

    // 16 turned the walker into a macro around this function.
    #[cfg_attr(feature = "pg15", link_name = "raw_expression_tree_walker")]
    #[cfg_attr(not(feature = "pg15"), link_name = "raw_expression_tree_walker_impl")]
    pub fn raw_expression_tree_walker(
        node: *mut pg_sys::Node,
        walker: Option<unsafe extern "C-unwind" fn(*mut pg_sys::Node, *mut c_void) -> bool>,
        context: *mut c_void,
    ) -> bool;

    #[link_name = "stack_is_too_deep"]
    pub fn stack_is_too_deep() -> bool;

    #[link_name = "AllocSetContextCreateInternal"]
    pub fn alloc_set_context_create(
        parent: pg_sys::MemoryContext,
        name: *const c_char,
        min_size: usize,
        initial_block_size: usize,
        max_block_size: usize,
    ) -> pg_sys::MemoryContext;

    #[link_name = "MemoryContextDelete"]
    pub fn memory_context_delete(context: pg_sys::MemoryContext);

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
