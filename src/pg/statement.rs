//! The client statement this backend is running: its text as PostgreSQL keeps it for error
//! reports (`debug_query_string`), and the copy that pg_stat_activity shows of it.

use std::ffi::CStr;
use std::hash::{DefaultHasher, Hash, Hasher};

use pgrx::pg_sys;

/// Tells one statement's text from another's without keeping it: PostgreSQL reuses its input
/// buffer, so the address alone does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatementId {
    address: usize,
    length: usize,
    hash: u64,
}

/// The text of the client statement this backend is running, or reporting on while an error
/// from it is being logged; `None` between statements and in processes that run none.
pub fn with_current<R>(f: impl FnOnce(Option<&CStr>) -> R) -> R {
    // SAFETY: debug_query_string is null or points to the statement's NUL-terminated text,
    // which PostgreSQL keeps until the next statement replaces it; `f` cannot keep the borrow.
    let text = unsafe { pg_sys::debug_query_string.as_ref().map(|text| CStr::from_ptr(text)) };
    f(text)
}

/// The identity of the current statement's text, as for [`with_current`].
pub fn current_id() -> Option<StatementId> {
    with_current(|text| {
        text.map(|text| {
            let mut hasher = DefaultHasher::new();
            text.to_bytes().hash(&mut hasher);
            StatementId { address: text.as_ptr() as usize, length: text.to_bytes().len(), hash: hasher.finish() }
        })
    })
}

/// Replaces what pg_stat_activity shows as this backend's query with `text`. PostgreSQL keeps
/// showing it after the statement ends, until the backend runs its next one.
pub fn replace_activity_text(text: &CStr) {
    // SAFETY: reporting this backend's own activity, from its main thread; PostgreSQL copies
    // the text into the backend's slot.
    unsafe { pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_RUNNING, text.as_ptr()) };
}
