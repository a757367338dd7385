//! The hooks of the two secret settings, `randflake.secret` and `randflake.secret_file`
//! (defined with every other setting in `gucs`): they parse and check a proposed secret, hand it
//! to the cipher slots, keep its value out of SHOW, and refuse a secret given through SQL.

use std::ffi::{c_char, c_void};
use std::path::Path;

use pgrx::pg_sys;
use pgrx::prelude::*;
use randflake::Secret;

use super::ciphers::{self, SecretSource};
use super::sql_routes;
use crate::check_hooks::{proposed, reject};

/// Hands a parsed secret from a check hook to its assign hook through PostgreSQL's "extra"
/// pointer. PostgreSQL frees that with its GUC allocator, so the copy must come from it too:
/// malloc() up to 15; from 16 on, guc_malloc() (GUC memory, freed with pfree(), which rejects a
/// malloc()ed pointer, and does so in every parallel worker, which resets the settings).
///
/// # Safety
///
/// `extra` is the `extra` argument PostgreSQL passed to the calling check hook.
unsafe fn store_extra(extra: *mut *mut c_void, secret: &Secret) -> bool {
    let bytes = secret.as_bytes();
    // SAFETY: an allocation of 16 bytes; at LOG level guc_malloc() returns NULL rather than
    // raising an ERROR when memory runs out, as malloc() does.
    #[cfg(feature = "pg15")]
    let copy = unsafe { libc::malloc(bytes.len()) }.cast::<u8>();
    #[cfg(not(feature = "pg15"))]
    // SAFETY: as above.
    let copy = unsafe { pg_sys::guc_malloc(pg_sys::LOG as std::ffi::c_int, bytes.len()) }.cast::<u8>();
    if copy.is_null() {
        return reject("out of memory while validating the randflake secret", "Retry.");
    }
    // SAFETY: `copy` is a fresh allocation of `bytes.len()` bytes, not overlapping `bytes`;
    // `extra` is writable, as the caller guarantees.
    unsafe {
        copy.copy_from_nonoverlapping(bytes.as_ptr(), bytes.len());
        *extra = copy.cast();
    }
    true
}

/// The secret a check hook stored with [`store_extra`]; `None` for an unset setting.
///
/// # Safety
///
/// `extra` is the `extra` argument PostgreSQL passed to the assign hook: null, or what
/// `store_extra` stored for the value being assigned.
unsafe fn secret_from_extra(extra: *mut c_void) -> Option<Secret> {
    let bytes = extra.cast::<[u8; 16]>();
    // SAFETY: null, or 16 bytes written by `store_extra`, as the caller guarantees; a byte
    // array has no alignment requirement beyond 1.
    unsafe { bytes.as_ref() }.map(|bytes| Secret::from_bytes(*bytes))
}

/// # Safety
///
/// Only PostgreSQL calls this, as randflake.secret's check hook, with the arguments it documents for that hook.
#[pg_guard]
pub unsafe extern "C-unwind" fn check_secret(
    newval: *mut *mut c_char,
    extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // The utility hook refuses the statements whose parse tree gives the secret a value; what
    // reaches this point from a session was given at run time (set_config(), a connection
    // option), maybe by a function that would catch an ERROR: the session ends.
    if !is_configuration_file_or_server(source) {
        sql_routes::refuse(true);
    }
    // SAFETY: `newval` is this check hook's first argument.
    let Some(value) = (unsafe { proposed(newval) }) else { return true };
    let Ok(text) = value.to_str() else {
        return reject("invalid value for randflake.secret: it is not valid text", SECRET_FORMAT_HINT);
    };
    match Secret::from_hex(text) {
        // SAFETY: `extra` is this check hook's second argument.
        Ok(secret) => unsafe { store_extra(extra, &secret) },
        Err(error) => reject(&format!("invalid value for randflake.secret: {error}"), SECRET_FORMAT_HINT),
    }
}

/// Whether a value comes from where the secret may be set: the configuration files
/// (`ALTER SYSTEM` too is checked as a file, after the utility hook has refused it), the server's
/// command line or environment, the defaults, or the server itself. Everything else is SQL or a
/// connection option: per database or role, per session, per function.
fn is_configuration_file_or_server(source: pg_sys::GucSource::Type) -> bool {
    use pg_sys::GucSource::*;
    matches!(source, PGC_S_DEFAULT | PGC_S_DYNAMIC_DEFAULT | PGC_S_ENV_VAR | PGC_S_FILE | PGC_S_ARGV | PGC_S_OVERRIDE)
}

const SECRET_FORMAT_HINT: &str = "The secret is exactly 32 hexadecimal digits, for example from: openssl rand -hex 16";

/// # Safety
///
/// Only PostgreSQL calls this, as randflake.secret's assign hook, with the arguments it documents for that hook.
#[pg_guard]
pub unsafe extern "C-unwind" fn assign_secret(_newval: *const c_char, extra: *mut c_void) {
    // SAFETY: `extra` is this assign hook's, set by `check_secret`.
    ciphers::install(SecretSource::Setting, unsafe { secret_from_extra(extra) });
}

/// What SHOW, current_setting() and pg_settings say of randflake.secret, to every role, the
/// superuser included: whether it is set, never its value. pg_monitor members may read
/// superuser-only settings, and monitoring agents routinely are such members.
///
/// # Safety
///
/// Only PostgreSQL calls this, as randflake.secret's show hook, with the arguments it documents for that hook.
#[pg_guard]
pub unsafe extern "C-unwind" fn show_secret() -> *const c_char {
    if ciphers::is_set(SecretSource::Setting) { c"(set; hidden by randflake_pg)" } else { c"" }.as_ptr()
}

/// # Safety
///
/// Only PostgreSQL calls this, as randflake.secret_file's check hook, with the arguments it documents for that hook.
#[pg_guard]
pub unsafe extern "C-unwind" fn check_secret_file(
    newval: *mut *mut c_char,
    extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: `newval` is this check hook's first argument.
    let Some(value) = (unsafe { proposed(newval) }) else { return true };
    let Ok(path) = value.to_str() else {
        return reject("randflake.secret_file is not a valid path", "Use a UTF-8 path.");
    };
    match Secret::from_key_file(Path::new(path)) {
        // SAFETY: `extra` is this check hook's second argument.
        Ok(secret) => unsafe { store_extra(extra, &secret) },
        Err(error) => reject(
            &format!("invalid randflake.secret_file \"{path}\": {error}"),
            "The file must hold exactly 32 hexadecimal digits and have mode 0600 or 0400, owned by the server's user; a relative path is relative to the data directory.",
        ),
    }
}

/// # Safety
///
/// Only PostgreSQL calls this, as randflake.secret_file's assign hook, with the arguments it documents for that hook.
#[pg_guard]
pub unsafe extern "C-unwind" fn assign_secret_file(_newval: *const c_char, extra: *mut c_void) {
    // SAFETY: `extra` is this assign hook's, set by `check_secret_file`.
    ciphers::install(SecretSource::File, unsafe { secret_from_extra(extra) });
}
