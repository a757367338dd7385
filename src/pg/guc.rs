//! Settings (GUCs) as PostgreSQL keeps them: defining them with hooks written as safe Rust,
//! rejecting a proposed value without quoting it, and reading or pinning other settings.
//!
//! PostgreSQL calls a setting's hooks through plain C function pointers with no room for data,
//! so each setting with hooks is a type implementing [`IntHooks`] or [`StringHooks`], and the
//! pointers PostgreSQL gets are this module's generic functions instantiated for that type.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::mem::{align_of, size_of};
use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::guc::{GucContext, GucEnum, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::backend;
use crate::errors::Error;

/// A setting's name and descriptions, and who may set it when.
pub struct Definition {
    pub name: &'static CStr,
    pub short: &'static CStr,
    pub long: &'static CStr,
    pub context: GucContext,
    pub flags: GucFlags,
}

/// Where a proposed value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The configuration files (`ALTER SYSTEM` too, checked as a file), the server's command
    /// line or environment, the defaults, or the server itself.
    ConfigurationOrServer,
    /// SQL or a connection option: per database or role, per session, per function.
    Session,
}

impl Source {
    fn of(source: pg_sys::GucSource::Type) -> Self {
        use pg_sys::GucSource::*;
        match source {
            PGC_S_DEFAULT | PGC_S_DYNAMIC_DEFAULT | PGC_S_ENV_VAR | PGC_S_FILE | PGC_S_ARGV | PGC_S_OVERRIDE => {
                Self::ConfigurationOrServer
            }
            _ => Self::Session,
        }
    }
}

/// The check of an integer setting.
pub trait IntHooks: 'static {
    /// Accepts the proposed value, or says why not.
    fn check(proposed: i32) -> Result<(), Error>;
}

/// The hooks of a string setting.
pub trait StringHooks: 'static {
    /// What the check hands to the assign hook; at most 16 bytes, aligned to at most 8.
    type Parsed: Copy + 'static;

    /// Accepts the proposed value (`None`: unset or empty), with what was parsed from it, or
    /// says why not.
    fn check(proposed: Option<&CStr>, source: Source) -> Result<Option<Self::Parsed>, Error>;

    /// Takes in the value PostgreSQL now applies, as its check parsed it.
    fn assign(_parsed: Option<Self::Parsed>) {}

    /// What SHOW says of the value; `None` leaves it to PostgreSQL.
    fn show() -> Option<&'static CStr> {
        None
    }

    /// Whether [`Self::show`] replaces PostgreSQL's own.
    const SHOWS: bool = false;
}

/// Defines an integer setting from `min` to `max` whose values `H` checks.
pub fn define_checked_int<H: IntHooks>(
    definition: Definition,
    setting: &'static GucSetting<i32>,
    (min, max): (i32, i32),
) {
    let Definition { name, short, long, context, flags } = definition;
    // SAFETY: the hook is a #[pg_guard]ed function that reads its argument as PostgreSQL
    // documents it for an integer check hook.
    unsafe {
        GucRegistry::define_int_guc_with_hooks(
            name,
            short,
            long,
            setting,
            min,
            max,
            context,
            flags,
            Some(check_int::<H>),
            None,
            None,
        );
    }
}

/// Defines a string setting with `H`'s hooks.
pub fn define_hooked_string<H: StringHooks>(definition: Definition, setting: &'static GucSetting<Option<CString>>) {
    const { assert!(size_of::<H::Parsed>() <= 16 && align_of::<H::Parsed>() <= 8) };
    let Definition { name, short, long, context, flags } = definition;
    // SAFETY: the hooks are #[pg_guard]ed functions that read their arguments as PostgreSQL
    // documents them for string settings' hooks.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            name,
            short,
            long,
            setting,
            context,
            flags,
            Some(check_string::<H>),
            Some(assign_string::<H>),
            if H::SHOWS { Some(show_string::<H>) } else { None },
        );
    }
}

/// # Safety
///
/// Only PostgreSQL calls this, as an integer setting's check hook.
#[pg_guard]
unsafe extern "C-unwind" fn check_int<H: IntHooks>(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a pointer to the proposed integer.
    let proposed = unsafe { *newval };
    H::check(proposed).map_or_else(|error| reject(&error), |()| true)
}

/// # Safety
///
/// Only PostgreSQL calls this, as a string setting's check hook.
#[pg_guard]
unsafe extern "C-unwind" fn check_string<H: StringHooks>(
    newval: *mut *mut c_char,
    extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes null or a pointer to null or to the proposed NUL-terminated
    // string, which lives for the call.
    let proposed = unsafe { newval.as_ref().map(|value| *value) }
        .filter(|value| !value.is_null())
        // SAFETY: as above, a non-null proposed value is a NUL-terminated string.
        .map(|value| unsafe { CStr::from_ptr(value) })
        .filter(|value| !value.is_empty());
    match H::check(proposed, Source::of(source)) {
        Ok(None) => true,
        // SAFETY: `extra` is this check hook's own argument.
        Ok(Some(parsed)) => unsafe { store_extra(extra, parsed) },
        Err(error) => reject(&error),
    }
}

/// Hands what a check hook parsed to the assign hook through PostgreSQL's "extra" pointer.
/// PostgreSQL frees that with its GUC allocator, so the copy must come from it too: malloc() up
/// to 15; from 16 on, guc_malloc() (GUC memory, freed with pfree(), which rejects a malloc()ed
/// pointer, and does so in every parallel worker, which resets the settings).
///
/// # Safety
///
/// `extra` is the `extra` argument PostgreSQL passed to the calling check hook.
unsafe fn store_extra<T: Copy>(extra: *mut *mut c_void, parsed: T) -> bool {
    // SAFETY: an allocation of T's size; both allocators return memory aligned for any type
    // and, at LOG level, guc_malloc() returns NULL rather than raising an ERROR when memory runs
    // out, as malloc() does.
    #[cfg(feature = "pg15")]
    let copy = unsafe { libc::malloc(size_of::<T>()) }.cast::<T>();
    #[cfg(not(feature = "pg15"))]
    // SAFETY: as above.
    let copy = unsafe { pg_sys::guc_malloc(pg_sys::LOG as c_int, size_of::<T>()) }.cast::<T>();
    if copy.is_null() {
        return reject(&Error::SettingOutOfMemory {});
    }
    // SAFETY: `copy` is a fresh allocation for one T; `extra` is writable, as the caller
    // guarantees.
    unsafe {
        copy.write(parsed);
        *extra = copy.cast();
    }
    true
}

/// # Safety
///
/// Only PostgreSQL calls this, as a string setting's assign hook.
#[pg_guard]
unsafe extern "C-unwind" fn assign_string<H: StringHooks>(_newval: *const c_char, extra: *mut c_void) {
    // SAFETY: `extra` is null, or what `check_string::<H>` stored for the value being assigned:
    // one H::Parsed.
    let parsed = unsafe { extra.cast::<H::Parsed>().as_ref() }.copied();
    H::assign(parsed);
}

/// # Safety
///
/// Only PostgreSQL calls this, as a string setting's show hook.
#[pg_guard]
unsafe extern "C-unwind" fn show_string<H: StringHooks>() -> *const c_char {
    H::show().unwrap_or(c"").as_ptr()
}

/// The name of an enum setting's value, read from the very table PostgreSQL parses the setting
/// with, so that messages and randflake_status() cannot spell it differently.
pub fn enum_name<T: GucEnum>(value: T) -> &'static str {
    let mut entry = T::CONFIG_ENUM_ENTRY;
    // SAFETY: GucEnum's contract, kept by pgrx's derive: a static array of entries with static
    // NUL-terminated names, ended by an entry whose name is null.
    unsafe {
        while let Some(name) = (*entry).name.as_ref() {
            if (*entry).val == value.to_ordinal() {
                return CStr::from_ptr(name).to_str().unwrap_or_default();
            }
            entry = entry.add(1);
        }
    }
    ""
}

/// Set when a check hook rejects a value while the library is being preloaded. PostgreSQL
/// reports such a rejection only as a WARNING and keeps the default, and a default node range
/// or a missing secret is not what the DBA asked for: `_PG_init` refuses to start instead.
static REJECTED_WHILE_LOADING: AtomicBool = AtomicBool::new(false);

/// Whether any check hook rejected a value while the library was being preloaded.
pub fn rejected_while_loading() -> bool {
    REJECTED_WHILE_LOADING.load(Ordering::Relaxed)
}

/// Rejects a proposed setting from inside a check hook, and returns the hook's `false`.
/// PostgreSQL then reports the error's message and hint in place of its default text, which
/// would quote the rejected value, and that value may be a secret.
fn reject(error: &Error) -> bool {
    if backend::preloading() {
        REJECTED_WHILE_LOADING.store(true, Ordering::Relaxed);
    }
    let (code, message, hint) = error.parts();
    // SAFETY: check hooks run in a PostgreSQL process, on its only thread, with ErrorContext set
    // up; setting the three check-hook error globals is what PostgreSQL's own GUC_check_errmsg()
    // does, and the strings are copied into ErrorContext, which outlives the report.
    unsafe {
        pg_sys::GUC_check_errcode(code as i32);
        pg_sys::GUC_check_errmsg_string = copy_to_error_context(&message);
        pg_sys::GUC_check_errhint_string = copy_to_error_context(&hint);
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

/// Reserves `prefix` for the settings this library defined: a misspelt `prefix.*` line is then
/// reported and removed instead of lingering as a placeholder, and no later SET can create one.
/// Once, after every setting is defined.
pub fn reserve_prefix(prefix: &CStr) {
    // SAFETY: called from _PG_init, on the postmaster's only thread, with a NUL-terminated name.
    unsafe { pg_sys::MarkGUCPrefixReserved(prefix.as_ptr()) };
}

/// The current value of any setting, as SHOW would give it; `None` if there is no such setting.
pub fn current(name: &CStr) -> Option<String> {
    // SAFETY: reading a setting from the process's main thread; missing_ok, so no ERROR, and
    // PostgreSQL owns the returned string, copied here at once.
    unsafe {
        let value = pg_sys::GetConfigOption(name.as_ptr(), true, false);
        (!value.is_null()).then(|| CStr::from_ptr(value).to_string_lossy().into_owned())
    }
}

/// Sets `name` to `value` for the rest of this process, over anything `ALTER DATABASE ... SET`
/// or `ALTER ROLE ... SET` applied at connection. Outside a transaction.
pub fn set_for_process(name: &CStr, value: &str) {
    let value = CString::new(value).unwrap_or_default();
    // SAFETY: setting a GUC from the process's main thread with NUL-terminated strings;
    // PGC_S_OVERRIDE outranks the database and role settings.
    unsafe {
        pg_sys::SetConfigOption(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        );
    }
}

/// Runs `work` with `name` set to `value`, as a function's `SET` clause does: the value before
/// comes back when `work` returns, or when the transaction `work` failed in aborts. Inside a
/// transaction.
pub fn with_setting<R>(name: &CStr, value: &str, work: impl FnOnce() -> R) -> R {
    let value = CString::new(value).unwrap_or_default();
    // SAFETY: a new GUC nesting level and a setting saved in it, from the backend's main thread
    // inside a transaction, with NUL-terminated strings; an invalid value raises an ERROR.
    let level = unsafe {
        let level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        level
    };
    let result = work();
    // SAFETY: closing the level opened above, which restores the value saved in it.
    unsafe { pg_sys::AtEOXact_GUC(true, level) };
    result
}

/// Reads the configuration files again, as a backend does on SIGHUP. Between transactions.
pub fn reload_configuration_file() {
    // SAFETY: what PostgreSQL's own processes do when ConfigReloadPending is set.
    unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
}
