//! The setting of how a backend uses the nodes of the lease.
#![forbid(unsafe_code)]

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};

static MAX_NODES_PER_BACKEND: GucSetting<i32> = GucSetting::<i32>::new(128);

pub fn define() {
    GucRegistry::define_int_guc(
        c"randflake.max_nodes_per_backend",
        c"Most nodes one backend may take within a single second.",
        c"A node issues at most 131072 IDs per second; a backend that uses them up takes another free node. Past this many nodes in one second, it waits for the next second instead, so one busy session cannot drain the node range.",
        &MAX_NODES_PER_BACKEND,
        1,
        randflake::MAX_NODE as i32 + 1,
        GucContext::Sighup,
        GucFlags::default(),
    );
}

pub fn max_nodes_per_backend() -> u32 {
    MAX_NODES_PER_BACKEND.get() as u32
}
