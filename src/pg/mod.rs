//! PostgreSQL's internals behind one boundary: every hook randflake_pg installs, every call into
//! PostgreSQL that pgrx does not make safe, every fact copied from its headers (read from the
//! headers of the major being built, by build.rs) and every difference between majors, offered to
//! the rest of the extension as safe Rust values and calls. This is the only module with
//! hand-written `unsafe`; the C entry points other modules declare are written by `entry`'s
//! macro.

pub mod backend;
pub mod bgworker;
pub mod clock;
pub mod decoder_grant;
pub mod entry;
pub mod guc;
pub mod hash;
mod headers;
pub mod identity;
pub mod lock;
pub mod log_hook;
pub mod parse_tree;
pub mod procedure;
pub mod shmem_segments;
pub mod sort_support;
pub mod statement;
pub mod timeout;
pub mod transaction;
mod unguarded;
pub mod utility_hook;

/// Tells PostgreSQL that each function named uses the version-1 calling convention.
macro_rules! version_1 {
    ($($finfo:ident),+) => {$(
        #[allow(unsafe_code)]
        #[no_mangle]
        pub extern "C" fn $finfo() -> &'static ::pgrx::pg_sys::Pg_finfo_record {
            const VERSION_1: ::pgrx::pg_sys::Pg_finfo_record = ::pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &VERSION_1
        }
    )+};
}
pub(crate) use version_1;
