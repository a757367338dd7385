//! How the keeper names the server in the lease table: the identity that decides which leases
//! are its own, and the readable name shown to the DBA.
#![forbid(unsafe_code)]

use crate::pg::{backend, guc};

/// Who holds a lease: the server's system identifier and WAL timeline. A restarted server keeps
/// both and resumes its own leases; a promoted standby starts a new timeline, so it does not
/// take over its old primary's.
pub fn identity() -> String {
    let (system, timeline) = backend::system_identity();
    format!("{system}/{timeline}")
}

/// `cluster_name`, or `host:port` when it is not set.
pub fn server_name() -> String {
    match guc::current(c"cluster_name").filter(|name| !name.is_empty()) {
        Some(name) => name,
        None => format!("{}:{}", backend::host_name(), guc::current(c"port").unwrap_or_default()),
    }
}

/// FNV-1a: a stable hash, the same in every build, for spreading servers over blocks.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}
