//! Keeps the secret out of the server log.
//!
//! randflake_pg's own messages never contain the secret, but PostgreSQL's can: on reload the
//! postmaster logs `parameter "randflake.secret" changed to "<value>"`, and a statement that
//! sets the secret (`ALTER SYSTEM SET randflake.secret = ...`) is copied into the log by
//! `log_statement`, by duration logging, and as the STATEMENT line of any error it raises. This
//! hook sees every message before it is written and removes those values. It runs inside
//! error reporting, so it leaves messages untouched unless one needs rewriting, and never
//! raises.

use std::ffi::{c_char, CStr, CString};

use pgrx::pg_sys;
use pgrx::prelude::*;

const VALUE_HIDDEN: &[u8] = b"(value hidden by randflake_pg)";
const STATEMENT_HIDDEN: &[u8] = b"<statement hidden by randflake_pg: it mentions randflake.secret>";

static mut PREVIOUS_HOOK: pg_sys::emit_log_hook_type = None;

/// Installs the hook. Called from `_PG_init` while preloading, so the postmaster has it too.
pub fn install() {
    // SAFETY: hook chaining in _PG_init, on the postmaster's only thread.
    unsafe {
        PREVIOUS_HOOK = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(redact_secret);
    }
}

/// # Safety
///
/// Only PostgreSQL calls this, as `emit_log_hook`, with the arguments it documents for that hook.
#[pg_guard]
unsafe extern "C-unwind" fn redact_secret(edata: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the message being reported; the strings it points to are
    // NUL-terminated and live in ErrorContext until the report is done.
    unsafe {
        if let Some(edata) = edata.as_mut() {
            let statement = text_of(pg_sys::debug_query_string).filter(|text| mentions_secret(text));
            if statement.is_some() {
                edata.hide_stmt = true;
            }
            if let Some(rewritten) = text_of(edata.message).and_then(|message| rewrite(message, statement)) {
                if let Ok(rewritten) = CString::new(rewritten) {
                    edata.message = pg_sys::MemoryContextStrdup(pg_sys::ErrorContext, rewritten.as_ptr());
                }
            }
        }
        if let Some(previous) = PREVIOUS_HOOK {
            previous(edata);
        }
    }
}

/// The bytes of a C string; `None` for a null pointer.
///
/// # Safety
///
/// `text` is null or a NUL-terminated string that outlives `'a`.
unsafe fn text_of<'a>(text: *const c_char) -> Option<&'a [u8]> {
    // SAFETY: non-null here, and NUL-terminated, as the caller guarantees.
    (!text.is_null()).then(|| unsafe { CStr::from_ptr(text) }.to_bytes())
}

/// Whether text names the `randflake.secret` setting, in any case, quoting or spacing
/// (`"RANDFLAKE" . "secret"` is the same setting); `randflake.secret_file` alone does not count.
fn mentions_secret(text: &[u8]) -> bool {
    let lower = text.to_ascii_lowercase();
    let Some(start) = find(&lower, b"randflake") else { return false };
    let rest = &lower[start..];
    (0..rest.len()).any(|at| rest[at..].starts_with(b"secret") && !rest[at + 6..].starts_with(b"_file"))
}

/// The message with secret values removed, or `None` when it has none.
fn rewrite(message: &[u8], secret_statement: Option<&[u8]>) -> Option<Vec<u8>> {
    if let Some(name_end) = reload_change(message) {
        return Some([&message[..name_end], b" changed ", VALUE_HIDDEN].concat());
    }
    let statement = secret_statement?;
    if let Some(at) = find(message, statement) {
        return Some([&message[..at], STATEMENT_HIDDEN, &message[at + statement.len()..]].concat());
    }
    // Any other message about such a statement (a syntax error quoting a token, say) keeps its
    // words but loses every run of hex digits long enough to be part of a key.
    scrub_hex_runs(message)
}

/// For `parameter "randflake.secret" changed to "..."`, the end of the quoted name.
fn reload_change(message: &[u8]) -> Option<usize> {
    let name = message.strip_prefix(b"parameter \"")?;
    let name_length = find(name, b"\" changed to \"")?;
    name[..name_length].eq_ignore_ascii_case(b"randflake.secret").then_some(b"parameter \"".len() + name_length + 1)
}

fn scrub_hex_runs(message: &[u8]) -> Option<Vec<u8>> {
    const LONGEST_KEPT: usize = 5;
    let mut scrubbed = Vec::with_capacity(message.len());
    let mut changed = false;
    let mut rest = message;
    while !rest.is_empty() {
        let run = rest.iter().take_while(|byte| byte.is_ascii_hexdigit()).count();
        if run > LONGEST_KEPT {
            scrubbed.extend_from_slice(b"<hidden>");
            changed = true;
            rest = &rest[run..];
        } else {
            let keep = run.max(1);
            scrubbed.extend_from_slice(&rest[..keep]);
            rest = &rest[keep..];
        }
    }
    changed.then_some(scrubbed)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}
