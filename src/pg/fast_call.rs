//! The arguments and results of C functions written by hand for speed: `randflake_key`'s input
//! and output functions, called once per value printed or parsed (a `COPY ... TO` of a million
//! keys calls the output function a million times). Arguments are read straight from the call
//! and each result is one palloc, where pgrx's wrapper would box them and Rust's `String` and
//! `CString` would allocate twice more before copying into PostgreSQL's memory.
//!
//! The results are allocated without pgrx's guard: if palloc raises an ERROR (out of memory), it
//! longjmps over the calling frames, which must hold nothing to drop.

use std::ffi::{c_void, CStr};

use pgrx::pg_sys;

use super::unguarded;

/// The call of a C function whose arguments are all non-null (a STRICT function, or a type's
/// input, output, send or receive function).
pub struct FastCall {
    fcinfo: pg_sys::FunctionCallInfo,
}

impl FastCall {
    /// # Safety
    ///
    /// `fcinfo` is what PostgreSQL's function manager passed to such a function, and the
    /// `FastCall` is used only during that call.
    pub unsafe fn new(fcinfo: pg_sys::FunctionCallInfo) -> Self {
        Self { fcinfo }
    }

    /// The SQL function being called (its oid); `InvalidOid` for a direct call from C, which
    /// has no function manager entry.
    pub fn function(&self) -> pg_sys::Oid {
        // SAFETY: fcinfo is live for the call (see `new`); flinfo, where set, is the function
        // manager's lookup of the function being called.
        unsafe {
            let flinfo = (*self.fcinfo).flinfo;
            if flinfo.is_null() {
                pg_sys::InvalidOid
            } else {
                (*flinfo).fn_oid
            }
        }
    }

    fn argument(&self, index: usize) -> pg_sys::Datum {
        // SAFETY: fcinfo is live for the call (see `new`); the callers below name an argument
        // their SQL declaration has, and none is null (see `FastCall`).
        unsafe { (*self.fcinfo).args.as_slice(index + 1)[index].value }
    }

    /// Argument `index`, declared `bigint` or of a type passed by value like it
    /// (`randflake_key`).
    pub fn int8(&self, index: usize) -> i64 {
        self.argument(index).value() as i64
    }

    /// Argument `index`, declared `cstring` (a type's input function's first argument).
    pub fn cstring(&self, index: usize) -> &CStr {
        // SAFETY: a cstring argument points to a NUL-terminated string that lives at least for
        // the call, which `self` does not outlive.
        unsafe { CStr::from_ptr(self.argument(index).cast_mut_ptr()) }
    }

    /// The unread bytes of argument `index`, declared `internal` and given a `StringInfo` (a
    /// type's receive function's first argument): exactly `N` of them, which are then marked
    /// read; or, if there are not exactly `N`, how many there are.
    pub fn message<const N: usize>(&self, index: usize) -> Result<[u8; N], usize> {
        // SAFETY: PostgreSQL calls a receive function (binary COPY, a bind message's binary
        // parameter, record_recv and array_recv for their elements) with a pointer to a
        // StringInfo, valid for the call, whose cursor the function may advance.
        let info = unsafe { &mut *self.argument(index).cast_mut_ptr::<pg_sys::StringInfoData>() };
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
}

/// `text` as a `cstring` result, in one palloc of the current memory context.
///
/// # Safety
///
/// The calling frames hold nothing to drop (see the module's comment).
pub unsafe fn cstring_result(text: &str) -> pg_sys::Datum {
    // SAFETY: palloc returns at least the size asked for, or raises; the caller accepts the
    // longjmp.
    let buffer = unsafe { unguarded::palloc(text.len() + 1) }.cast::<u8>();
    // SAFETY: `buffer` holds len + 1 bytes, none of them `text`'s.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buffer, text.len());
        *buffer.add(text.len()) = 0;
    }
    pg_sys::Datum::from(buffer)
}

/// `bytes` as a `bytea` result, in one palloc of the current memory context.
///
/// # Safety
///
/// As for [`cstring_result`].
pub unsafe fn bytea_result(bytes: &[u8]) -> pg_sys::Datum {
    let size = pg_sys::VARHDRSZ + bytes.len();
    // SAFETY: as in `cstring_result`.
    let varlena = unsafe { unguarded::palloc(size) }.cast::<pg_sys::varlena>();
    // SAFETY: `varlena` holds `size` bytes: a four-byte header, which set_varsize_4b writes,
    // then room for `bytes`.
    unsafe {
        pgrx::set_varsize_4b(varlena, size as i32);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), varlena.cast::<u8>().add(pg_sys::VARHDRSZ), bytes.len());
    }
    pg_sys::Datum::from(varlena.cast::<c_void>())
}
