//! What the fleet simulation (`fleet_simulation.rs`) and the capacity simulation
//! (`fleet_capacity.rs`) share: the rows of a lease table, the rules its constraints enforce,
//! and a server's shared memory as the shipped keeper and backends see it (the published lease
//! and the server's one position).
//!
//! Each simulation keeps its own model of the server holding the table (a coordinator that fails
//! over, or one that only counts its load) and of the transactions run on it; the rows and their
//! rules are the same in both. Declared by each of the two with `#[path]`, beside `common`, so
//! that the application lease simulation does not compile what it does not use.

use std::collections::BTreeMap;

use randflake::decisions::keeper::{Board, LeaseKey, LeasedBlock, StoreError, StoredLease};
use randflake::decisions::refill::{Event, Published, Server};
use randflake::shared::lease_board_protocol::UNCONFIRMED_SLOTS;
use randflake::shared::server_position::{NodeSpan, ServerPosition, Take};
use randflake::shared::StdAtomics;
use randflake::{Lease, Renewal};

use crate::common::TableWrite;

// ---------------------------------------------------------------- the lease table

/// A lease row's key: the lease as its holder names it, then the holder. Ordered by first node,
/// so that the leases of a stretch of nodes are a range of the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RowKey {
    pub lease: LeaseKey,
    pub holder: u64,
}

impl RowKey {
    pub fn new(holder: u64, lease: LeaseKey) -> Self {
        Self { lease, holder }
    }
}

/// The lease rows by key, and the most nodes past its first that any row ever reached: a row
/// that overlaps the nodes `first..` begins at most that many nodes before `first`, so that the
/// rows of a stretch of nodes are read from a range of the map, not from the whole table (a
/// coordinator of 10,000 members holds as many rows).
#[derive(Clone, Debug, Default)]
pub struct Rows {
    map: BTreeMap<RowKey, StoredLease>,
    widest: u32,
}

impl Rows {
    pub fn get(&self, key: &RowKey) -> Option<&StoredLease> {
        self.map.get(key)
    }

    fn insert(&mut self, key: RowKey, row: StoredLease) {
        self.widest = self.widest.max(row.last_node.saturating_sub(key.lease.first_node));
        self.map.insert(key, row);
    }

    /// Every row of a lease of nodes overlapping `first..=last`.
    pub fn overlapping(&self, first: u32, last: u32) -> impl Iterator<Item = (&RowKey, &StoredLease)> {
        let from = RowKey::new(0, LeaseKey { first_node: first.saturating_sub(self.widest), start: 0 });
        let past = RowKey::new(0, LeaseKey { first_node: last.saturating_add(1), start: 0 });
        self.map.range(from..past).filter(move |(key, row)| key.lease.first_node <= last && row.last_node >= first)
    }
}

/// One write of a transaction, applied to each copy of the table it reaches.
#[derive(Clone, Debug)]
pub enum Write {
    Insert {
        holder: u64,
        lease: Lease,
    },
    Renew {
        holder: u64,
        key: LeaseKey,
        renewal: Renewal,
        now: u64,
    },
    Delete {
        holder: u64,
        key: LeaseKey,
    },
    /// Deletes the leases of nodes wholly inside `first..=last` that ended before `before`.
    Prune {
        first: u32,
        last: u32,
        before: u64,
    },
    /// A range-mode server's start: its leases of `first..=last` end at their high-water marks,
    /// and those never used go.
    EndOwn {
        holder: u64,
        first: u32,
        last: u32,
    },
}

impl TableWrite for Write {
    type Rows = Rows;

    fn apply(&self, rows: &mut Rows) {
        match *self {
            Write::Insert { holder, lease } => {
                let stored =
                    StoredLease { last_node: lease.last_node, end: lease.end, used_through: lease.used_through };
                rows.insert(RowKey::new(holder, LeaseKey::from(&lease)), stored);
            }
            Write::Renew { holder, key, renewal, now } => {
                if let Some(row) = rows.map.get_mut(&RowKey::new(holder, key)).filter(|row| row.end >= now) {
                    row.end = row.end.max(renewal.end);
                    row.used_through = row.used_through.max(renewal.used_through);
                }
            }
            Write::Delete { holder, key } => {
                rows.map.remove(&RowKey::new(holder, key));
            }
            Write::Prune { first, last, before } => {
                let pruned: Vec<RowKey> = rows
                    .overlapping(first, last)
                    .filter(|(key, row)| key.lease.first_node >= first && row.last_node <= last && row.end < before)
                    .map(|(&key, _)| key)
                    .collect();
                pruned.iter().for_each(|key| _ = rows.map.remove(key));
            }
            Write::EndOwn { holder, first, last } => {
                let own = |key: &RowKey, row: &StoredLease| {
                    key.holder == holder && key.lease.first_node <= last && row.last_node >= first
                };
                rows.map.retain(|key, row| !own(key, row) || row.used_through >= key.lease.start);
                for (key, row) in rows.map.iter_mut() {
                    if own(key, row) {
                        row.end = row.end.min(row.used_through);
                    }
                }
            }
        }
    }
}

/// The row of `holder`'s lease `key`.
pub fn stored(rows: &Rows, holder: u64, key: LeaseKey) -> Option<StoredLease> {
    rows.get(&RowKey::new(holder, key)).copied()
}

/// The row of `holder`'s lease `key` as a renewal leaves it: its end and high-water mark, if it
/// had not ended before `now`.
pub fn renewed(rows: &Rows, holder: u64, key: LeaseKey, now: u64) -> Option<Renewal> {
    stored(rows, holder, key)
        .filter(|row| row.end >= now)
        .map(|row| Renewal { end: row.end, used_through: row.used_through })
}

/// Every lease, whoever holds it, of nodes overlapping `first..=last`.
pub fn leases_of(rows: &Rows, first: u32, last: u32) -> Vec<LeasedBlock> {
    rows.overlapping(first, last)
        .map(|(key, row)| LeasedBlock { first_node: key.lease.first_node, last_node: row.last_node, end: row.end })
        .collect()
}

/// The table's rule for a new lease: it starts after every earlier lease of its nodes ended.
pub fn check_insert(rows: &Rows, lease: &Lease) -> Result<(), StoreError> {
    if rows.overlapping(lease.first_node, lease.last_node).any(|(_, row)| row.end >= lease.start) {
        return Err(StoreError("23P01: the lease overlaps or precedes an existing one".into()));
    }
    Ok(())
}

/// The table's exclusion constraint for a renewal of `holder`'s lease `key`: no two leases share
/// a node and a second.
pub fn check_renewal(rows: &Rows, holder: u64, key: LeaseKey, renewal: Renewal, now: u64) -> Result<(), StoreError> {
    let row_key = RowKey::new(holder, key);
    if let Some(&stored) = rows.get(&row_key).filter(|row| row.end >= now) {
        let new_end = stored.end.max(renewal.end);
        let overlaps = rows
            .overlapping(key.first_node, stored.last_node)
            .any(|(&other, row)| other != row_key && other.lease.start <= new_end && row.end >= key.start);
        if overlaps {
            return Err(StoreError("23P01: the renewal overlaps another lease".into()));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- a server's shared memory

/// A server's shared memory: the published lease (the keeper's board) and the server's position,
/// which every backend takes its IDs from. A crash or restart loses it: the server then starts
/// with a new, empty position, and the keeper's next lease starts past every second the old one
/// may have used (a fleet member's, after the end of every earlier lease of its block).
#[derive(Default)]
pub struct SharedMemory {
    pub version: u64,
    pub leases_taken: u64,
    pub published: Option<Published>,
    pub last_published: Option<Lease>,
    pub unconfirmed: Vec<LeaseKey>,
    /// The shipped position: the same code randflake_pg places in shared memory.
    pub position: ServerPosition<StdAtomics>,
    /// What the backends counted for monitoring: refusals because of the clock, and because of
    /// the lease; waits for the next second with every node of the lease used up.
    pub clock_refusals: u64,
    pub lease_refusals: u64,
    pub seconds_used_up: u64,
    pub node_switches: u64,
}

impl Board for SharedMemory {
    fn published(&self) -> Option<Lease> {
        self.published.map(|published| published.lease)
    }

    fn last_published(&self) -> Option<Lease> {
        self.last_published
    }

    fn publish(&mut self, lease: Lease, renewal: bool) {
        if !renewal {
            self.leases_taken += 1;
        }
        self.version += 1;
        self.published = Some(Published { number: self.leases_taken, lease });
        self.last_published = Some(lease);
    }

    fn withdraw(&mut self) {
        self.version += 1;
        self.published = None;
    }

    fn unconfirmed(&self) -> Vec<LeaseKey> {
        self.unconfirmed.clone()
    }

    fn remember_unconfirmed(&mut self, key: LeaseKey) {
        if self.unconfirmed.len() == UNCONFIRMED_SLOTS {
            self.unconfirmed.remove(0);
        }
        self.unconfirmed.push(key);
    }

    fn forget_unconfirmed(&mut self) {
        self.unconfirmed.clear();
    }
}

/// The shared memory as the server's backends see it. A backend holds no node of its own, so
/// every backend of a server sees the same: each calls the shipped
/// [`randflake::decisions::refill::Backend`] through a view of the one shared memory.
pub struct BackendView<'a> {
    pub memory: &'a mut SharedMemory,
}

impl Server for BackendView<'_> {
    fn lease_version(&self) -> u64 {
        self.memory.version
    }

    fn published(&self) -> (u64, Option<Published>) {
        (self.memory.version, self.memory.published)
    }

    fn leases_taken(&self) -> u64 {
        self.memory.leases_taken
    }

    fn take(&mut self, now: u64, span: NodeSpan, run: u32) -> Take {
        self.memory.position.take(now, span, run)
    }

    fn count(&mut self, event: Event) {
        match event {
            Event::ClockRefusal => self.memory.clock_refusals += 1,
            Event::LeaseRefusal => self.memory.lease_refusals += 1,
            Event::SecondUsedUp => self.memory.seconds_used_up += 1,
            Event::NodeSwitch => self.memory.node_switches += 1,
        }
    }
}
