//! The one way into the extension's hand-written C functions: `randflake_next()`, and
//! `randflake_key`'s input, output, receive and send functions, casts in, comparison functions
//! and sort support, whose calls are too short for pgrx's generic wrapper (its memory-context switch, argument and result boxing and
//! guard would be a large share of them; docs/performance.md has the figures).
//!
//! [`entry_points!`] declares each C symbol with its body, a plain `fn(&Arguments) -> R` outside
//! this module, and [`enter`] runs the body:
//!
//! * **Arguments are read checked**: [`Arguments`] compares each index with the call's count and
//!   refuses a NULL (a C function declared with the wrong signature, or called directly), with
//!   an ERROR rather than a read past the arguments.
//! * **Nothing can longjmp over the body.** The body cannot hold `unsafe` code (every module
//!   outside `pg` forbids it, which `tools/module-deps.py` checks), so everything it calls into
//!   PostgreSQL goes through pgrx's bindings or this module's safe functions, which turn an ERROR
//!   into a Rust panic instead of a longjmp. The body may therefore own anything that needs
//!   dropping: a panic unwinds it, dropping as it goes.
//! * **Every error is raised through the guarded path.** The body runs under `catch_unwind`,
//!   which costs nothing until something panics; a caught panic (an ERROR raised with
//!   `Error::raise`, one from PostgreSQL, or a bug) is handed, by value, to a function under
//!   pgrx's guard, which reports it to PostgreSQL as an ERROR. The entry point's own frame holds
//!   nothing then, so the longjmp that follows skips nothing that needs dropping.
//! * **Results are made without a longjmp too**: a string or bytes result is allocated with
//!   `palloc_extended(…, MCXT_ALLOC_NO_OOM)`, which returns NULL rather than raising when memory
//!   runs out, and that becomes an ERROR like any other.

use std::any::Any;
use std::ffi::{c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use pgrx::pg_sys;

use super::unguarded;
use crate::errors::Error;

/// The arguments of one call of a hand-written C function.
pub struct Arguments<'call> {
    call: &'call pg_sys::FunctionCallInfoBaseData,
}

impl Arguments<'_> {
    /// Argument `index`'s Datum: there, and not NULL.
    fn datum(&self, index: usize) -> pg_sys::Datum {
        let count = usize::try_from(self.call.nargs).unwrap_or(0);
        if index >= count {
            Error::EntryArgumentMissing { index, count }.raise();
        }
        // SAFETY: the call holds `nargs` arguments after its header (PostgreSQL allocates them
        // with the call, SizeForFunctionCallInfo), and `index` is below that count.
        let argument = unsafe { self.call.args.as_slice(count)[index] };
        if argument.isnull {
            Error::EntryArgumentNull { index }.raise();
        }
        argument.value
    }

    /// Argument `index`, declared `bigint` or of a type passed by value like it (`randflake_key`,
    /// `randflake_id`).
    pub fn int8(&self, index: usize) -> i64 {
        self.datum(index).value() as i64
    }

    /// Argument `index`, declared `internal`: the pointer PostgreSQL passed.
    pub(super) fn internal(&self, index: usize) -> *mut c_void {
        self.datum(index).cast_mut_ptr()
    }

    /// Argument `index`, declared `cstring` (a type's input function's first argument).
    pub fn cstring(&self, index: usize) -> &CStr {
        // SAFETY: a cstring argument points to a NUL-terminated string that lives at least for
        // the call, which `self` does not outlive.
        unsafe { CStr::from_ptr(self.datum(index).cast_mut_ptr()) }
    }

    /// The unread bytes of argument `index`, declared `internal` and given a `StringInfo` (a
    /// type's receive function's first argument): exactly `N` of them, which are then marked
    /// read; or, if there are not exactly `N`, how many there are.
    pub fn message<const N: usize>(&self, index: usize) -> Result<[u8; N], usize> {
        // SAFETY: PostgreSQL calls a receive function (binary COPY, a bind message's binary
        // parameter, record_recv and array_recv for their elements) with a pointer to a
        // StringInfo, valid for the call, whose cursor the function may advance.
        let info = unsafe { &mut *self.datum(index).cast_mut_ptr::<pg_sys::StringInfoData>() };
        let (start, end) = (info.cursor.max(0) as usize, info.len.max(0) as usize);
        let unread = if start < end && !info.data.is_null() {
            // SAFETY: `data` holds `len` initialized bytes, and `start..end` lies within them.
            unsafe { std::slice::from_raw_parts(info.data.cast::<u8>().add(start), end - start) }
        } else {
            &[]
        };
        let bytes = unread.try_into().map_err(|_| unread.len())?;
        info.cursor = info.len;
        Ok(bytes)
    }

    /// The SQL function being called (its oid); `InvalidOid` for a direct call from C, which
    /// has no function manager entry.
    pub fn function(&self) -> pg_sys::Oid {
        // SAFETY: flinfo, where set, is the function manager's lookup of the function being
        // called, live for the call.
        unsafe { self.call.flinfo.as_ref() }.map_or(pg_sys::InvalidOid, |flinfo| flinfo.fn_oid)
    }
}

/// A body's result, as the Datum PostgreSQL gets: made inside the guarded run, without a longjmp.
pub trait Returned {
    fn into_datum(self) -> pg_sys::Datum;
}

impl Returned for i64 {
    fn into_datum(self) -> pg_sys::Datum {
        pg_sys::Datum::from(self)
    }
}

impl Returned for i32 {
    fn into_datum(self) -> pg_sys::Datum {
        pg_sys::Datum::from(self)
    }
}

impl Returned for bool {
    fn into_datum(self) -> pg_sys::Datum {
        pg_sys::Datum::from(self)
    }
}

/// A `void` result.
impl Returned for () {
    fn into_datum(self) -> pg_sys::Datum {
        pg_sys::Datum::from(0)
    }
}

/// A `cstring` result: the text, copied into memory of the current memory context.
pub struct CStringResult<T: AsRef<str>>(pub T);

/// A `bytea` result: the bytes, copied into a varlena of the current memory context.
pub struct ByteaResult<T: AsRef<[u8]>>(pub T);

impl<T: AsRef<str>> Returned for CStringResult<T> {
    fn into_datum(self) -> pg_sys::Datum {
        let text = self.0.as_ref().as_bytes();
        let buffer = allocated(text.len() + 1).cast::<u8>();
        // SAFETY: `buffer` holds len + 1 bytes, none of them `text`'s.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buffer, text.len());
            *buffer.add(text.len()) = 0;
        }
        pg_sys::Datum::from(buffer)
    }
}

impl<T: AsRef<[u8]>> Returned for ByteaResult<T> {
    fn into_datum(self) -> pg_sys::Datum {
        let bytes = self.0.as_ref();
        let size = pg_sys::VARHDRSZ + bytes.len();
        let varlena = allocated(size).cast::<pg_sys::varlena>();
        // SAFETY: `varlena` holds `size` bytes: a four-byte header, which set_varsize_4b writes,
        // then room for `bytes`.
        unsafe {
            pgrx::set_varsize_4b(varlena, size as i32);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), varlena.cast::<u8>().add(pg_sys::VARHDRSZ), bytes.len());
        }
        pg_sys::Datum::from(varlena.cast::<c_void>())
    }
}

/// `size` bytes of the current memory context; an ERROR (a panic here) when memory runs out.
fn allocated(size: usize) -> *mut c_void {
    // SAFETY: palloc_extended with MCXT_ALLOC_NO_OOM returns NULL instead of raising when memory
    // runs out; it raises only for a size over 1 GB, which no result here comes near.
    let memory = unsafe { unguarded::palloc_extended(size, pg_sys::MCXT_ALLOC_NO_OOM as i32) };
    if memory.is_null() {
        Error::OutOfMemory { bytes: size }.raise();
    }
    memory
}

/// Runs `body` for the call PostgreSQL passed, as the module's comment says.
///
/// Generic over the body and inlined, so that each entry point is one function with its body
/// inside. Taking a `fn` pointer instead, one `enter` per result type served every entry point
/// returning it, out of line: a call of `randflake_next()` that hands out a reserved ID jumped
/// into it, set up its frame and called the body through the pointer, 7 of the call's 150
/// instructions (callgrind, the per-call statement of `make bench`).
///
/// # Safety
///
/// `fcinfo` is what PostgreSQL's function manager passed to the C function being run, for this
/// call.
#[inline(always)]
pub unsafe fn enter<R: Returned>(
    fcinfo: pg_sys::FunctionCallInfo,
    body: impl FnOnce(&Arguments) -> R,
) -> pg_sys::Datum {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: fcinfo is live and unaliased for the call (see above).
        let arguments = Arguments { call: unsafe { &*fcinfo } };
        body(&arguments).into_datum()
    }));
    match outcome {
        Ok(datum) => datum,
        // SAFETY: the payload is moved into the guarded function, boxed once more to pass as a
        // thin pointer; this frame holds nothing.
        Err(payload) => unsafe { raise_caught(Box::into_raw(Box::new(payload))) },
    }
}

/// Reports a caught panic to PostgreSQL: pgrx's guard turns an ERROR raised in Rust into that
/// ERROR, and any other panic into an ERROR naming it.
///
/// # Safety
///
/// `payload` comes from `Box::into_raw`, and is taken over here. Leaves by PostgreSQL's longjmp:
/// the calling frames hold nothing that needs dropping.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn raise_caught(payload: *mut Box<dyn Any + Send>) -> pg_sys::Datum {
    // SAFETY: as the function's contract says.
    let payload = unsafe { Box::from_raw(payload) };
    std::panic::resume_unwind(*payload)
}

/// Declares hand-written C functions: each symbol, run by [`enter`] with its body, and the
/// `pg_finfo_` record that tells PostgreSQL it uses the version-1 calling convention. The items
/// it writes are the only `unsafe` the calling module holds, allowed on each of them.
macro_rules! entry_points {
    ($($(#[doc = $doc:literal])* $symbol:ident, $finfo:ident => $body:path;)+) => {$(
        $(#[doc = $doc])*
        ///
        /// # Safety
        ///
        /// Called only by PostgreSQL's function manager, as the C function of that name.
        #[allow(unsafe_code)]
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $symbol(fcinfo: ::pgrx::pg_sys::FunctionCallInfo) -> ::pgrx::pg_sys::Datum {
            // SAFETY: fcinfo is what the function manager passed, for this call.
            unsafe { $crate::pg::entry::enter(fcinfo, $body) }
        }

        $crate::pg::version_1!($finfo);
    )+};
}
pub(crate) use entry_points;
