//! What randflake_status() reports: the lease as published, in words a DBA can act on.
#![forbid(unsafe_code)]

use randflake::decisions::keeper_report::KeeperState;
use randflake::shared::server_position::NodeSpan;
use randflake::Lease;

use crate::node_config::{self, Mode};
use crate::pg::{backend, clock};
use crate::secret;
use crate::shmem::counters::{self, Counted};
use crate::shmem::{keeper_board, lease_board, server_position};

pub struct Status {
    pub node_source: &'static str,
    pub state: String,
    pub lease: Option<Lease>,
    pub renewed_at: Option<u64>,
    /// How the server uses the lease's nodes; `None` without a lease.
    pub nodes: Option<NodeUse>,
    pub counted: Counted,
    pub keeper_pid: Option<i32>,
    pub keeper_ticks: u64,
}

pub fn current() -> Status {
    let mode = node_config::mode();
    let lease = lease_board::read().1.map(|published| published.lease);
    let keeper = keeper_board::read();
    let now = clock::unix_time().as_secs();
    let standby = backend::in_recovery();
    // With a lease published, what the keeper is doing matters only when it is not holding it.
    let keeper_trouble = (keeper.state != KeeperState::Holding).then(|| keeper.describe());
    // A lease is of no use without a secret to encrypt with: every call would fail.
    let state = match (mode, lease, secret::cannot_issue_because()) {
        (Mode::Off, _, _) => "off".to_owned(),
        _ if standby => "standby".to_owned(),
        (_, _, Some(cause)) => format!("cannot issue: {cause}"),
        (_, Some(lease), _) if now < lease.start => "waiting for the clock to reach the lease".to_owned(),
        (_, Some(lease), _) if now > lease.issuable_through() => match keeper_trouble {
            Some(trouble) => format!("lease lapsed: keeper {trouble}"),
            None => "lease lapsed".to_owned(),
        },
        (_, Some(_), _) => match keeper_trouble {
            Some(trouble) => format!("renewal failing: keeper {trouble}"),
            None => "active".to_owned(),
        },
        (_, None, _) => keeper.describe(),
    };
    Status {
        node_source: mode.name(),
        state,
        lease,
        renewed_at: lease.map(|_| lease_board::renewed_at()),
        nodes: lease.map(|lease| NodeUse::of(&lease, now)),
        counted: counters::read(),
        keeper_pid: (keeper.pid != 0).then_some(keeper.pid),
        keeper_ticks: keeper_board::ticks(),
    }
}

/// How many of a lease's nodes the server used in the current second and the one before, by the
/// clock; in use are those of either, free the others.
pub struct NodeUse {
    pub in_use: u32,
    pub free: u32,
    pub used_this_second: u32,
    pub used_last_second: u32,
}

impl NodeUse {
    fn of(lease: &Lease, now: u64) -> Self {
        let span = NodeSpan { first: lease.first_node, last: lease.last_node };
        let report = server_position::report();
        // The position's own second and the one before it, seen from the clock's.
        let (now_count, before_count) = (report.nodes_used_now(span), report.nodes_used_before(span));
        let (used_this_second, used_last_second) = match report.second() {
            second if second == now => (now_count, before_count),
            second if second + 1 == now => (0, now_count),
            _ => (0, 0),
        };
        // Every second begins at the span's first node, so the nodes of either second are those
        // of the busier one.
        let in_use = used_this_second.max(used_last_second);
        Self { in_use, free: lease.last_node - lease.first_node + 1 - in_use, used_this_second, used_last_second }
    }
}
