//! How the keeper names the server in the lease table: the identity that decides which leases
//! are its own, and the readable name shown to the DBA.

use pgrx::pg_sys;

/// Who holds a lease: the server's system identifier and WAL timeline. A restarted server keeps
/// both and resumes its own leases; a promoted standby starts a new timeline, so it does not
/// take over its old primary's.
pub fn identity() -> String {
    // SAFETY: plain reads of shared state; recovery has finished before the keeper starts.
    let (system, timeline) = unsafe { (pg_sys::GetSystemIdentifier(), pg_sys::GetWALInsertionTimeLine()) };
    format!("{system}/{timeline}")
}

/// `cluster_name`, or `host:port` when it is not set.
pub fn server_name() -> String {
    // SAFETY: reading settings from the worker's thread; PostgreSQL owns the strings.
    let setting = |name: &std::ffi::CStr| unsafe {
        let value = pg_sys::GetConfigOption(name.as_ptr(), true, false);
        (!value.is_null()).then(|| std::ffi::CStr::from_ptr(value).to_string_lossy().into_owned())
    };
    match setting(c"cluster_name").filter(|name| !name.is_empty()) {
        Some(name) => name,
        None => {
            let mut host = [0u8; 256];
            // SAFETY: the buffer is writable for its whole length.
            unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) };
            let host = std::ffi::CStr::from_bytes_until_nul(&host).map_or("localhost".into(), |h| h.to_string_lossy());
            format!("{host}:{}", setting(c"port").unwrap_or_default())
        }
    }
}

/// FNV-1a: a stable hash, the same in every build, for spreading servers over blocks.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}
