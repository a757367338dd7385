//! randflake_pg's `emit_log_hook`: every message PostgreSQL is about to write to the server log
//! is shown to a filter that may rewrite it first. The hook runs inside error reporting: the
//! filter must not raise.

use std::ffi::{c_char, CStr, CString};
use std::sync::OnceLock;

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::unguarded;

/// Looks at, and may rewrite, a message on its way to the server log.
pub type Filter = fn(&mut LogLine);

static FILTER: OnceLock<Filter> = OnceLock::new();
static mut PREVIOUS_HOOK: pg_sys::emit_log_hook_type = None;

/// Installs the hook. Called once, from `_PG_init` while preloading, so the postmaster has it too.
pub fn install(filter: Filter) {
    if FILTER.set(filter).is_err() {
        return;
    }
    // SAFETY: hook chaining in _PG_init, on the postmaster's only thread.
    unsafe {
        PREVIOUS_HOOK = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(filter_then_pass);
    }
}

/// Not guarded by pgrx: its guard would catch an ERROR raised in here by flushing PostgreSQL's
/// error state, which holds the message being reported (see `unguarded`); a panic is caught below.
///
/// # Safety
///
/// Only PostgreSQL calls this, as `emit_log_hook`, with the arguments it documents for that hook.
unsafe extern "C-unwind" fn filter_then_pass(data: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the message being reported, whose strings live in ErrorContext
    // until the report is done; the previous hook gets the same pointer.
    unsafe {
        if let (Some(filter), Some(data)) = (FILTER.get(), data.as_mut()) {
            // A panic must not unwind into PostgreSQL, nor become an ERROR inside the report of
            // another message. The message is withheld instead, since the filter could not say
            // it was safe to write.
            let filtered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| filter(&mut LogLine { data })));
            if filtered.is_err() {
                let mut line = LogLine { data };
                line.hide_statement();
                line.hide_quoted_sql(WITHHELD);
                line.set_message(WITHHELD);
            }
        }
        if let Some(previous) = PREVIOUS_HOOK {
            previous(data);
        }
    }
}

const WITHHELD: &[u8] = b"(message withheld: randflake_pg's log filter failed on it)";

/// A message on its way to the server log.
pub struct LogLine<'a> {
    data: &'a mut pg_sys::ErrorData,
}

impl LogLine<'_> {
    /// A syntax error: the statement was never parsed.
    pub fn is_syntax_error(&self) -> bool {
        self.data.sqlerrcode == PgSqlErrorCode::ERRCODE_SYNTAX_ERROR as i32
    }

    /// The message's untranslated format string: the same whatever `lc_messages` says.
    pub fn message_id(&self) -> Option<&[u8]> {
        bytes(self.data.message_id)
    }

    /// The message as it will be written (translated, arguments filled in).
    pub fn message(&self) -> Option<&[u8]> {
        bytes(self.data.message)
    }

    pub fn detail(&self) -> Option<&[u8]> {
        bytes(self.data.detail)
    }

    pub fn set_message(&mut self, text: &[u8]) {
        self.data.message = in_error_context(text);
    }

    /// Leaves out the `STATEMENT:` line that would quote the statement being run.
    pub fn hide_statement(&mut self) {
        self.data.hide_stmt = true;
    }

    /// Rewrites each part of the message (the message itself, DETAIL, HINT, CONTEXT, QUERY) that
    /// `rewrite` returns a new text for.
    pub fn rewrite_each_part(&mut self, rewrite: impl Fn(&[u8]) -> Option<Vec<u8>>) {
        for part in [
            &mut self.data.message,
            &mut self.data.detail,
            &mut self.data.detail_log,
            &mut self.data.hint,
            &mut self.data.context,
            &mut self.data.internalquery,
        ] {
            if let Some(rewritten) = bytes(*part).and_then(&rewrite) {
                *part = in_error_context(&rewritten);
            }
        }
    }

    /// Replaces each part that may quote SQL text (DETAIL, CONTEXT, QUERY) with `note`.
    pub fn hide_quoted_sql(&mut self, note: &[u8]) {
        for part in [&mut self.data.detail, &mut self.data.detail_log, &mut self.data.context] {
            if !part.is_null() {
                *part = in_error_context(note);
            }
        }
        if !self.data.internalquery.is_null() {
            self.data.internalquery = in_error_context(note);
        }
    }
}

fn bytes<'a>(text: *const c_char) -> Option<&'a [u8]> {
    // SAFETY: every string of an ErrorData is null or NUL-terminated and lives in ErrorContext
    // until the report is done, beyond any borrow of the LogLine.
    (!text.is_null()).then(|| unsafe { CStr::from_ptr(text) }.to_bytes())
}

/// A copy of `text` in ErrorContext, where PostgreSQL expects an ErrorData's strings; NUL
/// bytes, which a C string cannot hold, are left out.
fn in_error_context(text: &[u8]) -> *mut c_char {
    let text = CString::new(text.iter().copied().filter(|byte| *byte != 0).collect::<Vec<u8>>()).unwrap_or_default();
    // SAFETY: ErrorContext exists in every PostgreSQL process while a message is reported, and
    // keeps space for such copies; MemoryContextStrdup copies the NUL-terminated text into it.
    unsafe { unguarded::memory_context_strdup(pg_sys::ErrorContext, text.as_ptr()) }
}
