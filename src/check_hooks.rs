//! What every settings check hook needs: the proposed value, read from PostgreSQL's arguments,
//! and a rejection that never quotes it.

use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::pg_sys;

use crate::errors::INVALID_SETTING;

/// Set when a check hook rejects a value while the library is being preloaded. PostgreSQL
/// reports such a rejection only as a WARNING and keeps the default, and a default node range
/// or a missing secret is not what the DBA asked for: `_PG_init` refuses to start instead.
static REJECTED_WHILE_LOADING: AtomicBool = AtomicBool::new(false);

/// Whether any check hook rejected a value while the library was being preloaded.
pub fn rejected_while_loading() -> bool {
    REJECTED_WHILE_LOADING.load(Ordering::Relaxed)
}

/// Rejects a proposed setting from inside a check hook, and returns the hook's `false`.
/// PostgreSQL then reports `message` and `hint` in place of its default text, which would quote
/// the rejected value, and that value may be a secret.
pub fn reject(message: &str, hint: &str) -> bool {
    // SAFETY: check hooks run in a PostgreSQL process, on its only thread, with ErrorContext set
    // up; reading a boolean global and setting the three check-hook error globals is what
    // PostgreSQL's own GUC_check_errmsg() does, and the strings are copied into ErrorContext,
    // which outlives the report.
    unsafe {
        if pg_sys::process_shared_preload_libraries_in_progress {
            REJECTED_WHILE_LOADING.store(true, Ordering::Relaxed);
        }
        pg_sys::GUC_check_errcode(INVALID_SETTING as i32);
        pg_sys::GUC_check_errmsg_string = copy_to_error_context(message);
        pg_sys::GUC_check_errhint_string = copy_to_error_context(hint);
    }
    false
}

/// # Safety
///
/// Only where `pg_sys::ErrorContext` exists: inside a PostgreSQL process.
unsafe fn copy_to_error_context(text: &str) -> *mut c_char {
    let text = CString::new(text.replace('\0', "")).unwrap_or_default();
    // SAFETY: `text` is NUL-terminated; MemoryContextStrdup copies it into the context, which
    // the caller guarantees exists.
    unsafe { pg_sys::MemoryContextStrdup(pg_sys::ErrorContext, text.as_ptr()) }
}

/// The proposed value of a string setting; `None` when unset or empty.
///
/// # Safety
///
/// `newval` is the first argument PostgreSQL passed to a string setting's check hook: null, or
/// a pointer to null or to a NUL-terminated string that lives for the call.
pub unsafe fn proposed<'a>(newval: *mut *mut c_char) -> Option<&'a CStr> {
    // SAFETY: as the caller guarantees, `newval` is null or points to a readable pointer.
    let value = unsafe { newval.as_ref().map(|value| *value) }.filter(|value| !value.is_null())?;
    // SAFETY: a non-null proposed value is a NUL-terminated string, as the caller guarantees.
    let value = unsafe { CStr::from_ptr(value) };
    (!value.is_empty()).then_some(value)
}
