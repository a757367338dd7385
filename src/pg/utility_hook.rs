//! randflake_pg's `ProcessUtility_hook`: each utility statement is shown to a check, as the
//! facts of its parse tree, before PostgreSQL runs it.

use std::ffi::c_char;
use std::sync::OnceLock;

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::parse_tree::{self, StatementFacts};
use super::unguarded;

/// Looks at a utility statement before it runs; raises an ERROR (or worse) to stop it.
/// `nested`: the statement comes from a function, a DO block or a procedure rather than
/// straight from the client.
pub type Check = fn(facts: &StatementFacts, nested: bool);

static CHECK: OnceLock<Check> = OnceLock::new();
static mut PREVIOUS_HOOK: pg_sys::ProcessUtility_hook_type = None;

/// Installs the hook. Called once, from `_PG_init` while preloading.
pub fn install(check: Check) {
    if CHECK.set(check).is_err() {
        return;
    }
    // SAFETY: hook chaining in _PG_init, on the postmaster's only thread, before any statement runs.
    unsafe {
        PREVIOUS_HOOK = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(check_then_run);
    }
}

/// Not guarded by pgrx: an ERROR of the statement itself, from the previous hook or from
/// PostgreSQL, must reach PostgreSQL untouched (see `unguarded`). Only the check runs guarded.
///
/// # Safety
///
/// Only PostgreSQL calls this, as `ProcessUtility_hook`, with the arguments it documents for that hook.
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn check_then_run(
    statement: *mut pg_sys::PlannedStmt,
    query_string: *const c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_environment: *mut pg_sys::QueryEnvironment,
    destination: *mut pg_sys::DestReceiver,
    completion: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: the statement PostgreSQL passed; a refusal leaves through pgrx's guard, and this
    // frame holds nothing to drop.
    unsafe { check(statement, context) };
    // SAFETY: the arguments PostgreSQL passed, handed on unchanged to the previous hook or to
    // PostgreSQL's own implementation, as every ProcessUtility hook must; nothing in this frame
    // needs dropping if either longjmps out with an ERROR.
    unsafe {
        let run = PREVIOUS_HOOK.unwrap_or(unguarded::standard_process_utility);
        run(statement, query_string, read_only_tree, context, params, query_environment, destination, completion)
    }
}

/// # Safety
///
/// `statement` is the utility statement's plan that PostgreSQL passed to the hook.
#[pg_guard]
unsafe extern "C-unwind" fn check(statement: *mut pg_sys::PlannedStmt, context: pg_sys::ProcessUtilityContext::Type) {
    if let Some(check) = CHECK.get() {
        // SAFETY: a utility statement's plan holds its parse tree in utilityStmt.
        let facts = unsafe { parse_tree::facts_of((*statement).utilityStmt) };
        check(&facts, context != pg_sys::ProcessUtilityContext::PROCESS_UTILITY_TOPLEVEL);
    }
}
