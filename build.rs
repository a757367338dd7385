//! Facts about PostgreSQL that its headers state but pgrx's bindings do not carry, read from the
//! headers of the very installation the bindings are generated from (pgrx's own choice of
//! `pg_config` for the enabled `pgNN` feature), so that no number is copied by hand and a major
//! that changes one fails the build here instead of misbehaving at run time.
//!
//! Writes `$OUT_DIR/header_facts.rs`, included by `src/pg/headers.rs`.

use std::path::Path;
use std::{env, fs};

fn main() {
    let configs =
        pgrx_bindgen::detect_pg_config().unwrap_or_else(|error| panic!("no pg_config for this build: {error}"));
    let [(_, config)] = configs.as_slice() else { panic!("one PostgreSQL major per build, found {}", configs.len()) };
    let include = config.includedir_server().unwrap_or_else(|error| panic!("pg_config --includedir-server: {error}"));
    let timeout_h = read(&include.join("utils/timeout.h"));
    let lwlocknames_h = read(&include.join("storage/lwlocknames.h"));
    let timeouts = enum_entries(&timeout_h, "TimeoutId");
    let position = |name: &str| {
        timeouts.iter().position(|entry| entry == name).unwrap_or_else(|| panic!("utils/timeout.h has no {name}"))
    };
    let facts = format!(
        "/// `STATEMENT_TIMEOUT`'s place in `TimeoutId` (utils/timeout.h).\n\
         pub const STATEMENT_TIMEOUT: i32 = {};\n\
         /// `USER_TIMEOUT`, the first `TimeoutId` an extension may register (utils/timeout.h).\n\
         pub const USER_TIMEOUT: i32 = {};\n\
         /// `AddinShmemInitLock`'s place in `MainLWLockArray` (storage/lwlocknames.h).\n\
         pub const ADDIN_SHMEM_INIT_LOCK: usize = {};\n\
         /// `SyncRepLock`'s place in `MainLWLockArray` (storage/lwlocknames.h).\n\
         pub const SYNC_REP_LOCK: usize = {};\n",
        position("STATEMENT_TIMEOUT"),
        position("USER_TIMEOUT"),
        main_lwlock_index(&lwlocknames_h, "AddinShmemInitLock"),
        main_lwlock_index(&lwlocknames_h, "SyncRepLock"),
    );
    let out = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("header_facts.rs");
    fs::write(out, facts).expect("OUT_DIR is writable");
}

fn read(path: &Path) -> String {
    println!("cargo:rerun-if-changed={}", path.display());
    fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The entries of `typedef enum <name> { ... }`, in order. Every entry must take the next value:
/// one with an explicit value (other than the last, a count) would make positions meaningless.
fn enum_entries(header: &str, name: &str) -> Vec<String> {
    let code = without_comments(header);
    let start = code.find(&format!("typedef enum {name}")).unwrap_or_else(|| panic!("no enum {name}"));
    let body = &code[start..];
    let body = &body[body.find('{').expect("an enum body") + 1..body.find('}').expect("an enum's end")];
    let entries: Vec<&str> = body.split(',').map(str::trim).filter(|entry| !entry.is_empty()).collect();
    let (last, ordinary) = entries.split_last().expect("a non-empty enum");
    assert!(
        ordinary.iter().all(|entry| !entry.contains('=')),
        "an entry of {name} before the last has an explicit value: {ordinary:?}"
    );
    ordinary
        .iter()
        .map(|entry| entry.to_string())
        .chain([last.split('=').next().unwrap_or(last).trim().to_owned()])
        .collect()
}

/// `N` of `#define <lock> (&MainLWLockArray[N].lock)`.
fn main_lwlock_index(header: &str, lock: &str) -> usize {
    header
        .lines()
        .filter_map(|line| line.trim().strip_prefix("#define "))
        .filter_map(|line| line.trim().strip_prefix(lock))
        .filter_map(|rest| rest.trim().strip_prefix("(&MainLWLockArray[")?.split(']').next()?.parse().ok())
        .next()
        .unwrap_or_else(|| panic!("storage/lwlocknames.h does not define {lock} as a MainLWLockArray entry"))
}

fn without_comments(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        rest = rest[start..].find("*/").map_or("", |end| &rest[start + end + 2..]);
    }
    out.push_str(rest);
    out.lines().map(|line| line.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}
