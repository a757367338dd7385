//! PostgreSQL's own hash of a `bigint` (`hashint8`, `hashint8extended`), for the hash functions of
//! `randflake_key`, which hash a key's public ID exactly as bigint's operator class hashes it.

unsafe extern "C" {
    // common/hashfn.h's hash of four bytes, which hashint8 and hashint8extended end with; pgrx
    // does not bind them. Pure functions: they allocate nothing and cannot raise.
    fn hash_bytes_uint32(k: u32) -> u32;
    fn hash_bytes_uint32_extended(k: u32, seed: u64) -> u64;
}

/// The low half of a bigint folded with its high half, as `hashint8` does, so that a bigint
/// holding an integer's value hashes as that integer does.
fn folded(value: i64) -> u32 {
    let (low, high) = (value as u32, (value >> 32) as u32);
    low ^ if value >= 0 { high } else { !high }
}

/// `hashint8(value)`.
pub fn int8(value: i64) -> i32 {
    // SAFETY: a pure function of its argument, which allocates nothing and cannot fail.
    unsafe { hash_bytes_uint32(folded(value)) as i32 }
}

/// `hashint8extended(value, seed)`.
pub fn int8_extended(value: i64, seed: i64) -> i64 {
    // SAFETY: as in `int8`.
    unsafe { hash_bytes_uint32_extended(folded(value), seed as u64) as i64 }
}
