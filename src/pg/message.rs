//! Binary input: the bytes PostgreSQL hands a type's receive function, in a message buffer.

use pgrx::{pg_sys, Internal};

/// The bytes of `buffer` not read yet, which are then marked read. `buffer` must be the first
/// argument of a type's receive function.
pub fn take_unread(mut buffer: Internal) -> Vec<u8> {
    // SAFETY: PostgreSQL calls a type's receive function (binary COPY, a bind message's binary
    // parameter, record_recv and array_recv for their elements) with a pointer to a StringInfo
    // as its first argument, valid for the call, and the function may advance its cursor.
    let info = unsafe { buffer.get_mut::<pg_sys::StringInfoData>() }.expect("a receive function is given a buffer");
    let (start, end) = (info.cursor.max(0) as usize, info.len.max(0) as usize);
    let unread = if start < end && !info.data.is_null() {
        // SAFETY: `data` holds `len` initialized bytes, and `start..end` lies within them.
        unsafe { std::slice::from_raw_parts(info.data.cast::<u8>().add(start), end - start) }.to_vec()
    } else {
        Vec::new()
    };
    info.cursor = info.len;
    unread
}
