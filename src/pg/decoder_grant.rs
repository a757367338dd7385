//! Who may turn a public ID into a `randflake_key`: superusers, and roles that may execute
//! `randflake_decode(bigint)` of the extension's schema (the decoder grant).
//!
//! A key holds the plain value, which sorts by creation; whoever can make a key of any public ID
//! can sort any IDs by creation, second by second, which is most of what decoding tells. So the
//! key's input and receive functions and its casts from `bigint` and `randflake_id` ask this
//! module first, and refuse a role without the grant.
//!
//! The answer is remembered for the current user until the catalogs it rests on change: a
//! function's privileges (pg_proc), a role's membership (pg_auth_members) or a role's
//! superuser flag (pg_authid). PostgreSQL reports each such change, made by this backend or any
//! other, through the syscache invalidation callbacks registered here, before the next catalog
//! read that could see it. A `COPY` of a million keys then asks the catalogs once.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::ffi::CStr;

use pgrx::pg_sys;

use super::identity::Role;

/// The verdict for one user: its oid shifted left once, with the low bit set if it may decode;
/// 0 when nothing is remembered (no role has oid 0).
static VERDICT: AtomicU64 = AtomicU64::new(0);
static CALLBACKS_REGISTERED: AtomicBool = AtomicBool::new(false);

const DECODER: &CStr = c"randflake_decode";

fn remembered(user: pg_sys::Oid, may_decode: bool) -> u64 {
    u64::from(user.to_u32()) << 1 | u64::from(may_decode)
}

/// Refuses the current user, with an ERROR naming the grant it lacks, unless it may turn a
/// public ID into a key. `calling_function` is the SQL function being run (its `fn_oid`): the
/// decoder is looked up in that function's schema, the extension's. Like every safe function of
/// `pg`, it raises an ERROR as a Rust panic, never by a longjmp.
pub fn require(calling_function: pg_sys::Oid) {
    let user = Role::current();
    if VERDICT.load(Ordering::Relaxed) == remembered(user.oid(), true) {
        return;
    }
    register_callbacks();
    // SAFETY: a catalog lookup of a function by oid, inside the transaction of the call being
    // run; InvalidOid for a function that is not there.
    let namespace = unsafe { pg_sys::get_func_namespace(calling_function) };
    let may_decode = user.is_superuser() || decoder(namespace).is_some_and(|decoder| may_execute(user, decoder));
    VERDICT.store(remembered(user.oid(), may_decode), Ordering::Relaxed);
    if !may_decode {
        crate::errors::Error::DecoderGrantMissing { role: user.name(), schema: namespace_name(namespace) }.raise();
    }
}

/// `randflake_decode(bigint)` of `namespace`, if it exists.
fn decoder(namespace: pg_sys::Oid) -> Option<pg_sys::Oid> {
    if namespace == pg_sys::InvalidOid {
        return None;
    }
    let argument = pg_sys::INT8OID;
    // SAFETY: buildoidvector copies the one oid into a palloc'd vector; the syscache lookup
    // takes the name, that vector and the namespace as PROCNAMEARGSNSP's keys, and returns
    // InvalidOid when no such function exists.
    let oid = unsafe {
        let arguments = pg_sys::buildoidvector(&argument, 1);
        pg_sys::GetSysCacheOid(
            pg_sys::SysCacheIdentifier::PROCNAMEARGSNSP as i32,
            pg_sys::Anum_pg_proc_oid as pg_sys::AttrNumber,
            pg_sys::Datum::from(DECODER.as_ptr()),
            pg_sys::Datum::from(arguments),
            pg_sys::Datum::from(namespace),
            pg_sys::Datum::from(0),
        )
    };
    (oid != pg_sys::InvalidOid).then_some(oid)
}

fn may_execute(user: Role, function: pg_sys::Oid) -> bool {
    // SAFETY: a privilege check of an existing function for an existing role.
    let result = unsafe {
        #[cfg(feature = "pg15")]
        {
            pg_sys::pg_proc_aclcheck(function, user.oid(), pg_sys::ACL_EXECUTE as pg_sys::AclMode)
        }
        #[cfg(not(feature = "pg15"))]
        {
            pg_sys::object_aclcheck(
                pg_sys::ProcedureRelationId,
                function,
                user.oid(),
                pg_sys::ACL_EXECUTE as pg_sys::AclMode,
            )
        }
    };
    result == pg_sys::AclResult::ACLCHECK_OK
}

fn namespace_name(namespace: pg_sys::Oid) -> String {
    // SAFETY: a catalog lookup returning a palloc'd name, or null for a namespace that is gone.
    let name = unsafe { pg_sys::get_namespace_name(namespace) };
    if name.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated, as PostgreSQL's name lookups return them.
    unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
}

/// Forgets the verdict: a catalog it rests on changed.
unsafe extern "C-unwind" fn forget(_argument: pg_sys::Datum, _cache: i32, _hash: u32) {
    VERDICT.store(0, Ordering::Relaxed);
}

fn register_callbacks() {
    if CALLBACKS_REGISTERED.swap(true, Ordering::Relaxed) {
        return;
    }
    for cache in [
        pg_sys::SysCacheIdentifier::PROCOID,
        pg_sys::SysCacheIdentifier::AUTHMEMROLEMEM,
        pg_sys::SysCacheIdentifier::AUTHOID,
    ] {
        // SAFETY: registers a callback that only clears an atomic, for the life of the backend,
        // as extensions do from their first use; PostgreSQL allows dozens per backend.
        unsafe { pg_sys::CacheRegisterSyscacheCallback(cache as i32, Some(forget), pg_sys::Datum::from(0)) };
    }
}
