//! The settings of application leases: the pool of nodes leased to application processes, and
//! how many of them one role may hold.
#![forbid(unsafe_code)]

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use randflake::MAX_NODE;

use crate::errors::Error;
use crate::node_config;

static APP_NODE_ID_MIN: GucSetting<i32> = GucSetting::<i32>::new(-1);
static APP_NODE_ID_MAX: GucSetting<i32> = GucSetting::<i32>::new(-1);
static APP_LEASES_PER_ROLE: GucSetting<i32> = GucSetting::<i32>::new(0);

pub fn define() {
    for (name, short, setting) in [
        (
            c"randflake.app_node_id_min",
            c"Lowest node id that randflake_lease_acquire() leases to application processes; -1: none.",
            &APP_NODE_ID_MIN,
        ),
        (
            c"randflake.app_node_id_max",
            c"Highest node id that randflake_lease_acquire() leases to application processes; -1: none.",
            &APP_NODE_ID_MAX,
        ),
    ] {
        GucRegistry::define_int_guc(
            name,
            short,
            c"The application pool: nodes leased one at a time, in the same lease table as this server's own (in fleet mode, the fleet's), to processes that make IDs with a Randflake port. It must not overlap randflake.node_id_min..randflake.node_id_max (the server does not start otherwise), and must be the same on every member of a fleet.",
            setting,
            -1,
            MAX_NODE as i32,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    GucRegistry::define_int_guc(
        c"randflake.app_leases_per_role",
        c"Most application leases one role may hold at once; 0: no limit.",
        c"A role granted randflake_lease_acquire() could otherwise lease the whole application pool and starve every other service.",
        &APP_LEASES_PER_ROLE,
        0,
        MAX_NODE as i32 + 1,
        GucContext::Sighup,
        GucFlags::default(),
    );
}

/// The pool must be unset (both bounds -1), or an ascending range outside the server's nodes:
/// a node both leased to applications and used by the server's backends would issue duplicates.
pub fn check_at_startup() -> Result<(), Error> {
    let (app, nodes) = ((APP_NODE_ID_MIN.get(), APP_NODE_ID_MAX.get()), node_config::node_range());
    if pool_is_valid(app, nodes) {
        Ok(())
    } else {
        Err(Error::AppPoolInvalid { app, nodes })
    }
}

fn pool_is_valid(app: (i32, i32), nodes: (u32, u32)) -> bool {
    match app {
        (-1, -1) => true,
        (first, last) if 0 <= first && first <= last => (last as u32) < nodes.0 || first as u32 > nodes.1,
        _ => false,
    }
}

/// The application pool, `first..=last`, if one is configured (checked at start-up).
pub fn pool() -> Option<(u32, u32)> {
    let (first, last) = (APP_NODE_ID_MIN.get(), APP_NODE_ID_MAX.get());
    (first >= 0 && first <= last).then_some((first as u32, last as u32))
}

/// How many live application leases one role may hold; `None`: no limit.
pub fn leases_per_role() -> Option<u32> {
    u32::try_from(APP_LEASES_PER_ROLE.get()).ok().filter(|&limit| limit > 0)
}

#[cfg(test)]
mod tests {
    use super::pool_is_valid;

    #[test]
    fn the_pool_is_unset_or_outside_the_servers_nodes() {
        let nodes = (100, 199);
        assert!(pool_is_valid((-1, -1), nodes));
        assert!(pool_is_valid((0, 99), nodes));
        assert!(pool_is_valid((200, 300), nodes));
        for invalid in [(99, 100), (150, 160), (199, 250), (0, 1000), (-1, 5), (5, -1), (10, 9)] {
            assert!(!pool_is_valid(invalid, nodes), "{invalid:?}");
        }
    }
}
