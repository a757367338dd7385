//! Every randflake_pg setting (GUC), with its description and validation.
//!
//! All of them can be set only by superusers: a role that could set the node range or the
//! secret could make this server issue IDs that collide with another's.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;
use randflake::{Secret, MAX_NODE};

use crate::errors::reject_setting;
use crate::secret::{self, SecretSource};

static SECRET: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static SECRET_FILE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static NODE_ID_MIN: GucSetting<i32> = GucSetting::<i32>::new(0);
static NODE_ID_MAX: GucSetting<i32> = GucSetting::<i32>::new(MAX_NODE as i32);
static MAX_NODES_PER_BACKEND: GucSetting<i32> = GucSetting::<i32>::new(128);

/// Set when a check hook rejects a value while the library is being preloaded. PostgreSQL
/// reports such a rejection only as a WARNING and keeps the default, and a default node range
/// or a missing secret is not what the DBA asked for: `_PG_init` refuses to start instead.
static REJECTED_WHILE_LOADING: AtomicBool = AtomicBool::new(false);

/// Registers all settings. Called once, from `_PG_init`, while preloading.
pub fn define() {
    // SAFETY: the hooks below are #[pg_guard]ed and only read their arguments as PostgreSQL
    // documents them.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"randflake.secret",
            c"Randflake secret: 32 hexadecimal digits (128 bits) keying the ID permutation.",
            c"Prefer randflake.secret_file, which keeps the key out of postgresql.conf. Setting both is an error. Use one secret for the whole fleet and never change it: IDs made under different secrets can collide. Only superusers can see it.",
            &SECRET,
            GucContext::Sighup,
            GucFlags::SUPERUSER_ONLY | GucFlags::NO_SHOW_ALL,
            Some(check_secret),
            Some(assign_secret),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"randflake.secret_file",
            c"Path of a file holding the Randflake secret (32 hexadecimal digits), readable only by the server's operating-system user.",
            c"Read by the server at start-up and on reload, like ssl_key_file; a relative path is relative to the data directory. The file must not be accessible to group or others. Setting both this and randflake.secret is an error.",
            &SECRET_FILE,
            GucContext::Sighup,
            GucFlags::SUPERUSER_ONLY,
            Some(check_secret_file),
            Some(assign_secret_file),
            None,
        );
        GucRegistry::define_int_guc_with_hooks(
            c"randflake.node_id_min",
            c"Lowest Randflake node id this server may use.",
            c"Give each server of a fleet a disjoint node_id_min..node_id_max range. Each running backend or parallel worker holds one node of the range.",
            &NODE_ID_MIN,
            0,
            MAX_NODE as i32,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_node_id_min),
            None,
            None,
        );
        GucRegistry::define_int_guc_with_hooks(
            c"randflake.node_id_max",
            c"Highest Randflake node id this server may use.",
            c"Must not be below randflake.node_id_min. The range must hold more nodes than the server has connections plus parallel workers.",
            &NODE_ID_MAX,
            0,
            MAX_NODE as i32,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_node_id_max),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"randflake.max_nodes_per_backend",
        c"Most nodes one backend may take within a single second.",
        c"A node issues at most 131072 IDs per second; a backend that uses them up takes another free node. Past this many nodes in one second, it waits for the next second instead, so one busy session cannot drain the node range.",
        &MAX_NODES_PER_BACKEND,
        1,
        MAX_NODE as i32 + 1,
        GucContext::Sighup,
        GucFlags::default(),
    );
    if REJECTED_WHILE_LOADING.load(Ordering::Relaxed) {
        crate::errors::Error::InvalidSettingsAtStartup.raise();
    }
}

/// The configured node range, `first..=last`; the check hooks keep `first <= last`.
pub fn node_range() -> (u32, u32) {
    (NODE_ID_MIN.get() as u32, NODE_ID_MAX.get() as u32)
}

pub fn max_nodes_per_backend() -> u32 {
    MAX_NODES_PER_BACKEND.get() as u32
}

fn reject(message: &str, hint: &str) -> bool {
    // SAFETY: reading a PostgreSQL global from the backend's thread.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        REJECTED_WHILE_LOADING.store(true, Ordering::Relaxed);
    }
    reject_setting(message, hint)
}

/// The proposed value of a string setting; `None` when unset or empty.
unsafe fn proposed<'a>(newval: *mut *mut c_char) -> Option<&'a CStr> {
    let value = unsafe { newval.as_ref().map(|value| *value) }.filter(|value| !value.is_null())?;
    let value = unsafe { CStr::from_ptr(value) };
    (!value.is_empty()).then_some(value)
}

/// Hands a parsed secret from a check hook to its assign hook through PostgreSQL's "extra"
/// pointer, which PostgreSQL frees with free(): so the copy must come from malloc().
unsafe fn store_extra(extra: *mut *mut c_void, secret: &Secret) -> bool {
    let bytes = secret.as_bytes();
    let copy = unsafe { libc::malloc(bytes.len()) }.cast::<u8>();
    if copy.is_null() {
        return reject("out of memory while validating the randflake secret", "Retry.");
    }
    unsafe {
        copy.copy_from_nonoverlapping(bytes.as_ptr(), bytes.len());
        *extra = copy.cast();
    }
    true
}

unsafe fn secret_from_extra(extra: *mut c_void) -> Option<Secret> {
    let bytes = extra.cast::<[u8; 16]>();
    unsafe { bytes.as_ref() }.map(|bytes| Secret::from_bytes(*bytes))
}

#[pg_guard]
unsafe extern "C-unwind" fn check_secret(
    newval: *mut *mut c_char,
    extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let Some(value) = (unsafe { proposed(newval) }) else { return true };
    let Ok(text) = value.to_str() else {
        return reject("invalid value for randflake.secret: it is not valid text", SECRET_FORMAT_HINT);
    };
    match Secret::from_hex(text) {
        Ok(secret) => unsafe { store_extra(extra, &secret) },
        Err(error) => reject(&format!("invalid value for randflake.secret: {error}"), SECRET_FORMAT_HINT),
    }
}

const SECRET_FORMAT_HINT: &str =
    "The secret is exactly 32 hexadecimal digits, for example from: openssl rand -hex 16";

#[pg_guard]
unsafe extern "C-unwind" fn assign_secret(_newval: *const c_char, extra: *mut c_void) {
    secret::install(SecretSource::Setting, unsafe { secret_from_extra(extra) });
}

#[pg_guard]
unsafe extern "C-unwind" fn check_secret_file(
    newval: *mut *mut c_char,
    extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let Some(value) = (unsafe { proposed(newval) }) else { return true };
    let Ok(path) = value.to_str() else {
        return reject("randflake.secret_file is not a valid path", "Use a UTF-8 path.");
    };
    match Secret::from_key_file(Path::new(path)) {
        Ok(secret) => unsafe { store_extra(extra, &secret) },
        Err(error) => reject(
            &format!("invalid randflake.secret_file \"{path}\": {error}"),
            "The file must hold exactly 32 hexadecimal digits and have mode 0600 or 0400, owned by the server's user; a relative path is relative to the data directory.",
        ),
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_secret_file(_newval: *const c_char, extra: *mut c_void) {
    secret::install(SecretSource::File, unsafe { secret_from_extra(extra) });
}

const NODE_RANGE_HINT: &str =
    "Set randflake.node_id_min <= randflake.node_id_max; to move a range, change both in postgresql.conf and restart.";

/// Both bounds' check hooks compare against the other bound's current value. At start-up that
/// is order-independent, because the defaults are the widest range; for ALTER SYSTEM it is the
/// running value, which is conservative.
fn node_range_is_valid(min: i32, max: i32) -> bool {
    min <= max
        || reject(
            &format!("randflake.node_id_min ({min}) is greater than randflake.node_id_max ({max})"),
            NODE_RANGE_HINT,
        )
}

#[pg_guard]
unsafe extern "C-unwind" fn check_node_id_min(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    node_range_is_valid(unsafe { *newval }, NODE_ID_MAX.get())
}

#[pg_guard]
unsafe extern "C-unwind" fn check_node_id_max(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    node_range_is_valid(NODE_ID_MIN.get(), unsafe { *newval })
}
