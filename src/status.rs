//! What randflake_status() reports: the lease as published, in words a DBA can act on.

use pgrx::pg_sys;
use randflake::Lease;

use crate::clock;
use crate::gucs::{self, NodeSource};
use crate::shmem::published_lease::{self, KeeperState};

pub struct Status {
    pub node_source: &'static str,
    pub state: String,
    pub lease: Option<Lease>,
    pub renewed_at: Option<u64>,
    pub node_switches: u64,
    pub clock_refusals: u64,
    pub lease_refusals: u64,
    pub keeper_pid: Option<i32>,
}

pub fn current() -> Status {
    let source = gucs::node_source();
    let lease = published_lease::read().1.map(|published| published.lease);
    let keeper = published_lease::keeper();
    let now = clock::unix_time().as_secs();
    // SAFETY: a plain read of shared state.
    let standby = unsafe { pg_sys::RecoveryInProgress() };
    // With a lease published, what the keeper is doing matters only when it is not holding it.
    let keeper_trouble = (keeper.state != KeeperState::Holding).then(|| keeper.describe());
    let state = match (source, lease) {
        (NodeSource::Off, _) => "off".to_owned(),
        _ if standby => "standby".to_owned(),
        (_, Some(lease)) if now < lease.start => "waiting for the clock to reach the lease".to_owned(),
        (_, Some(lease)) if now > lease.issuable_through() => match keeper_trouble {
            Some(trouble) => format!("lease lapsed: keeper {trouble}"),
            None => "lease lapsed".to_owned(),
        },
        (_, Some(_)) => match keeper_trouble {
            Some(trouble) => format!("renewal failing: keeper {trouble}"),
            None => "active".to_owned(),
        },
        (_, None) => keeper.describe(),
    };
    let (node_switches, clock_refusals, lease_refusals) = published_lease::counters();
    Status {
        node_source: source.name(),
        state,
        lease,
        renewed_at: lease.map(|_| published_lease::renewed_at()),
        node_switches,
        clock_refusals,
        lease_refusals,
        keeper_pid: (keeper.pid != 0).then_some(keeper.pid),
    }
}
