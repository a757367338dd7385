//! Who is running what, where: the current role and database, acting as another role for a
//! while, and whether the statement runs inside an explicit transaction block.

use std::ffi::{CStr, CString};

use pgrx::pg_sys;

/// A role, by its oid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role(pg_sys::Oid);

impl Role {
    /// The role whose privileges apply now (`current_user`).
    pub fn current() -> Self {
        // SAFETY: a plain read of this backend's user id, from its main thread.
        Self(unsafe { pg_sys::GetUserId() })
    }

    /// The role of that name; `None` if there is none. The bootstrap superuser without a name.
    pub fn named(name: Option<&str>) -> Option<Self> {
        let Some(name) = name else { return Some(Self(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID))) };
        let name = CString::new(name).ok()?;
        // SAFETY: a catalog lookup with a NUL-terminated name; missing_ok, so no ERROR.
        let oid = unsafe { pg_sys::get_role_oid(name.as_ptr(), true) };
        (oid != pg_sys::InvalidOid).then_some(Self(oid))
    }

    pub fn oid(self) -> pg_sys::Oid {
        self.0
    }

    /// Whether the role is a superuser now.
    pub fn is_superuser(self) -> bool {
        // SAFETY: a catalog lookup of the role's superuser flag; false for a role that is gone.
        unsafe { pg_sys::superuser_arg(self.0) }
    }

    /// The role's name.
    pub fn name(self) -> String {
        // SAFETY: a catalog lookup that returns a palloc'd NUL-terminated name, or null (noerr).
        text(unsafe { pg_sys::GetUserNameFromId(self.0, true) })
    }

    /// Runs `work` with this role's privileges, as a SECURITY DEFINER function would (SET ROLE
    /// cannot undo the change meanwhile). The caller's role comes back afterwards, and also if
    /// `work` fails: PostgreSQL restores it when the transaction aborts. Not a security-restricted
    /// operation, in which PostgreSQL refuses to queue deferred triggers, such as the lease
    /// table's check at commit.
    pub fn acting<R>(self, work: impl FnOnce() -> R) -> R {
        struct Restore(pg_sys::Oid, i32);
        impl Drop for Restore {
            fn drop(&mut self) {
                // SAFETY: putting back the user id and context read below, from the same thread.
                unsafe { pg_sys::SetUserIdAndSecContext(self.0, self.1) };
            }
        }
        let (mut user, mut context) = (pg_sys::InvalidOid, 0);
        // SAFETY: reading and setting this backend's user id and security context, from its main
        // thread, as PostgreSQL's own SECURITY DEFINER calls do.
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
            pg_sys::SetUserIdAndSecContext(self.0, context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
        }
        let _restore = Restore(user, context);
        work()
    }
}

/// Whether the role this session logged in as is a superuser, whatever role it acts as now.
pub fn session_user_is_superuser() -> bool {
    // SAFETY: a read of this backend's session user id and a catalog lookup of that role.
    unsafe { pg_sys::superuser_arg(pg_sys::GetSessionUserId()) }
}

/// The name of the database this backend is connected to.
pub fn database_name() -> String {
    // SAFETY: a catalog lookup of this backend's own database, which exists while it is
    // connected; it returns a palloc'd NUL-terminated name.
    text(unsafe { pg_sys::get_database_name(pg_sys::MyDatabaseId) })
}

/// A palloc'd C string as text; empty for null.
fn text(name: *const std::ffi::c_char) -> String {
    if name.is_null() {
        return String::new();
    }
    // SAFETY: non-null, and NUL-terminated, as PostgreSQL's name lookups return them.
    unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
}

/// Whether the statement runs inside an explicit transaction block (BEGIN ... COMMIT), whose
/// locks last until the client ends it.
pub fn in_transaction_block() -> bool {
    // SAFETY: a plain read of this backend's transaction state.
    unsafe { pg_sys::IsTransactionBlock() }
}
