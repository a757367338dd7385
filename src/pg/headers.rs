//! Numbers from PostgreSQL's headers that pgrx's bindings do not carry (macros and enums of
//! headers it does not bind), read by `build.rs` from the headers of the major being built.

include!(concat!(env!("OUT_DIR"), "/header_facts.rs"));
