//! The lease keeper's decisions: checking, renewing, withdrawing and taking a server's lease of
//! nodes, one tick at a time.
//!
//! The lease table and the server's shared memory stand behind two traits, [`LeaseStore`] and
//! [`Board`], so that the same machine runs inside PostgreSQL (randflake_pg's keeper, over SQL
//! and shared memory) and in the fleet simulation (over a simulated coordinator that fails over
//! and loses commits), and every decision here is tested in both.
//!
//! The rules that keep leases safe:
//! 1. a lease, a renewal or a high-water mark reaches the [`Board`] (and so the backends that
//!    issue IDs) only after the transaction that wrote it committed *durably*, as the server
//!    holding the table shows ([`crate::decisions::durability`]): a commit it does not show durable
//!    ([`Commit::Uncertain`]) counts as not granted;
//! 2. a lease found gone, cut short or expired in the table is withdrawn from the board before
//!    anything else happens;
//! 3. a new lease of a node starts after every earlier lease of that node ended (the table
//!    enforces it too), and after the high-water mark of any lease this server published, even
//!    one whose row is gone;
//! 4. a lease written but never confirmed durable was never used, so its row, if it survived,
//!    is deleted rather than counted as used;
//! 5. an old lease row is deleted only when the row of a published lease that starts after it
//!    keeps its bound: a row deleted by rule 4 must never have been the one keeping a bound.

use core::fmt;

pub use crate::decisions::durability::{Commit, CommitEvidence};
use crate::decisions::lease::{Lease, Renewal, Terms};
use crate::decisions::table_rules;
use crate::format::layout::MAX_NODE;

/// Where a server's nodes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeSource {
    /// The server's own range `first..=last`, leased in its own table. After a restart the
    /// server resumes right after its own leases' high-water marks.
    Range {
        /// First node of the range.
        first: u32,
        /// Last node of the range (inclusive).
        last: u32,
    },
    /// One block of a pool shared by a fleet, leased from the fleet's one table. A block is
    /// never resumed: a restarted server takes whatever block is free.
    Fleet {
        /// First node of the pool.
        pool_first: u32,
        /// Last node of the pool (inclusive).
        pool_last: u32,
        /// Nodes per block; the last block may be shorter.
        block_size: u32,
        /// Spreads servers that start together over the blocks: among blocks free equally soon,
        /// the one this many places after the first is taken (a hash of the server's identity).
        preference: u64,
    },
}

/// A lease row in the table, as this server names it (the table also keys it by holder).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseKey {
    /// First node of the leased block.
    pub first_node: u32,
    /// First second of the lease.
    pub start: u64,
}

impl From<&Lease> for LeaseKey {
    fn from(lease: &Lease) -> Self {
        Self { first_node: lease.first_node, start: lease.start }
    }
}

/// A lease row's values that can change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredLease {
    /// Last node of the block.
    pub last_node: u32,
    /// Last second of the lease.
    pub end: u64,
    /// The high-water mark.
    pub used_through: u64,
}

/// The nodes and end of a lease in the table, whoever holds it: what bounds the next lease of
/// those nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeasedBlock {
    /// First node of the block.
    pub first_node: u32,
    /// Last node of the block (inclusive).
    pub last_node: u32,
    /// Last second of the lease.
    pub end: u64,
}

/// What is under the lease table's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableCheck {
    /// No table of that name: nothing to refuse, nothing to use.
    Missing,
    /// The table is one the keeper may use.
    Trusted,
    /// A table the keeper must not touch; why.
    Refused(String),
}

/// A failure of the lease table or the way to it; the tick's transaction is then abandoned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreError(pub String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The lease table as one transaction of the keeper sees it: every call runs in the tick's one
/// transaction, which [`LeaseStore::commit`] ends. A store knows which holder it writes for.
pub trait LeaseStore {
    /// Whether the keeper may use the table.
    fn check_table(&mut self) -> Result<TableCheck, StoreError>;
    /// The row of this holder's lease `key`, or `None` if it is gone.
    fn stored(&mut self, key: LeaseKey) -> Result<Option<StoredLease>, StoreError>;
    /// Moves the end and high-water mark of this holder's lease `key` to at least those of
    /// `renewal` (never back), if it has not ended before `now`; its values afterwards, or
    /// `None` if the row is gone or ended.
    fn renew(&mut self, key: LeaseKey, renewal: Renewal, now: u64) -> Result<Option<Renewal>, StoreError>;
    /// Deletes this holder's lease `key`, if there.
    fn delete(&mut self, key: LeaseKey) -> Result<(), StoreError>;
    /// Ends this holder's leases of nodes overlapping `first..=last` at their high-water marks,
    /// and deletes those that were never used: no process that used them survives a restart.
    fn end_own_leases(&mut self, first: u32, last: u32) -> Result<(), StoreError>;
    /// Every lease, whoever holds it, of nodes overlapping `first..=last`.
    fn leases_of(&mut self, first: u32, last: u32) -> Result<Vec<LeasedBlock>, StoreError>;
    /// Writes a new lease of this holder.
    fn insert(&mut self, lease: &Lease) -> Result<(), StoreError>;
    /// Deletes the leases, whoever holds them, of nodes wholly inside `lease`'s block that ended
    /// before `before`: older leases whose every bound `lease`'s row keeps, since it starts
    /// after them. They only make the table grow.
    fn prune_inside(&mut self, lease: &Lease, before: u64) -> Result<(), StoreError>;
    /// Commits the transaction and, if `needs_evidence`, reads back from the server holding the
    /// table whether the commit is durable ([`crate::decisions::durability`]); otherwise nothing is
    /// read.
    fn commit(&mut self, needs_evidence: bool) -> Result<CommitEvidence, StoreError>;
}

/// What the server remembers of its lease across restarts of the keeper, and shows its
/// backends: PostgreSQL's shared memory in randflake_pg. Lost only with the whole server.
pub trait Board {
    /// The lease backends may issue under, if any.
    fn published(&self) -> Option<Lease>;
    /// The last lease published since the server started, even if withdrawn since: its nodes
    /// may have issued IDs up to its high-water mark, whatever the table now says.
    fn last_published(&self) -> Option<Lease>;
    /// Publishes `lease`; `renewal`: the published lease with a later end or mark, whose
    /// backends keep their nodes.
    fn publish(&mut self, lease: Lease, renewal: bool);
    /// Stops backends from issuing under the published lease.
    fn withdraw(&mut self);
    /// Leases written whose commits were not known durable, and which were never published.
    fn unconfirmed(&self) -> Vec<LeaseKey>;
    /// Remembers one more such lease; the board may forget the oldest when full, which costs
    /// only the seconds that lease blocks.
    fn remember_unconfirmed(&mut self, key: LeaseKey);
    /// Forgets them all: their rows are known deleted.
    fn forget_unconfirmed(&mut self);
}

/// Why a published lease was withdrawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withdrawal {
    /// Its row is gone from the table.
    Gone,
    /// Its row's end or high-water mark moved back: a renewal was lost.
    CutShort,
    /// It ended before it could be renewed.
    Expired,
}

/// What one tick did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The published lease is intact and needed no write.
    Holding,
    /// The published lease, renewed as stored.
    Renewed(Lease),
    /// A new lease, taken and published.
    Taken(Lease),
    /// The lease table does not exist (yet).
    NoTable,
    /// The lease table exists but must not be used; why.
    Refused(String),
    /// A write was committed, but not known durably: nothing was published.
    Unconfirmed,
    /// No lease can start at or before the last second an ID can carry.
    PastLastSecond,
    /// The lease table, or the way to it, failed.
    Failed(StoreError),
}

/// What one tick did, and the lease it withdrew first, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tick {
    /// A published lease withdrawn during the tick, and why.
    pub withdrawn: Option<(Lease, Withdrawal)>,
    /// How the tick ended.
    pub outcome: Outcome,
}

/// The keeper of one server's lease.
#[derive(Clone, Debug)]
pub struct Keeper {
    source: NodeSource,
    terms: Terms,
}

impl Keeper {
    /// A keeper for nodes from `source`, leased on `terms`.
    pub fn new(source: NodeSource, terms: Terms) -> Self {
        Self { source, terms }
    }

    /// One tick at clock reading `now`: checks the table, renews or withdraws the published
    /// lease, takes a new one if there is none, commits, and publishes only what committed
    /// durably. The caller abandons the transaction if the tick failed.
    pub fn tick(&self, now: u64, store: &mut impl LeaseStore, board: &mut impl Board) -> Tick {
        let mut run = TickRun { keeper: self, now, store, board, withdrawn: None };
        let outcome = run.step().unwrap_or_else(Outcome::Failed);
        Tick { withdrawn: run.withdrawn, outcome }
    }

    /// The rows of other holders ending before this may be pruned at clock reading `now`.
    fn prune_bound(&self, now: u64) -> u64 {
        match self.source {
            NodeSource::Range { .. } => now,
            NodeSource::Fleet { .. } => table_rules::prune_bound(now),
        }
    }
}

/// One tick: its clock reading, the table and the shared memory it runs over, and what it
/// learns on the way.
struct TickRun<'a, S, B> {
    keeper: &'a Keeper,
    now: u64,
    store: &'a mut S,
    board: &'a mut B,
    /// The published lease withdrawn, and why.
    withdrawn: Option<(Lease, Withdrawal)>,
}

impl<S: LeaseStore, B: Board> TickRun<'_, S, B> {
    /// The table first: nothing runs on a table that is missing or not to be trusted.
    fn step(&mut self) -> Result<Outcome, StoreError> {
        match self.store.check_table()? {
            TableCheck::Missing => Ok(Outcome::NoTable),
            TableCheck::Refused(reason) => Ok(Outcome::Refused(reason)),
            TableCheck::Trusted => self.keep(),
        }
    }

    /// Settles the unconfirmed leases, keeps the published lease if the table still grants
    /// it, and takes a new one if there is none (any more).
    fn keep(&mut self) -> Result<Outcome, StoreError> {
        self.settle_unconfirmed()?;
        let kept = match self.board.published() {
            Some(lease) => self.keep_published(lease)?,
            None => None,
        };
        match kept {
            Some(outcome) => Ok(outcome),
            None => self.take(),
        }
    }

    /// Rule 4: leases written but never confirmed were never used, so in range mode they are
    /// deleted. A coordinator refuses to delete a fleet's rows before they end (another member
    /// cannot tell an unconfirmed row from a used one), so there they are left to end, and
    /// count as used meanwhile.
    fn settle_unconfirmed(&mut self) -> Result<(), StoreError> {
        let unconfirmed = self.board.unconfirmed();
        match self.keeper.source {
            NodeSource::Fleet { .. } => self.board.forget_unconfirmed(),
            NodeSource::Range { .. } => unconfirmed.iter().try_for_each(|key| self.store.delete(*key))?,
        }
        Ok(())
    }

    /// The published lease held or renewed, or `None` once it is withdrawn.
    fn keep_published(&mut self, lease: Lease) -> Result<Option<Outcome>, StoreError> {
        match self.standing(lease)? {
            Standing::Intact => self.hold().map(Some),
            Standing::Renewed(renewed) => self.renew(renewed).map(Some),
            Standing::Lost(withdrawal) => {
                // Rule 2: the backends stop before anything else is tried.
                self.board.withdraw();
                self.withdrawn = Some((lease, withdrawal));
                Ok(None)
            }
        }
    }

    /// What the table grants of the published `lease` now, renewing it if a renewal is due.
    fn standing(&mut self, lease: Lease) -> Result<Standing, StoreError> {
        let key = LeaseKey::from(&lease);
        let Some(stored) = self.store.stored(key)? else { return Ok(Standing::Lost(Withdrawal::Gone)) };
        if !intact(&stored, &lease) {
            return Ok(Standing::Lost(Withdrawal::CutShort));
        }
        let Some(due) = self.keeper.terms.renewal(&lease, self.now) else { return Ok(Standing::Intact) };
        Ok(self
            .store
            .renew(key, due, self.now)?
            .map_or(Standing::Lost(Withdrawal::Expired), |renewal| Standing::Renewed(lease.renewed(renewal))))
    }

    /// An intact lease with no renewal due: nothing was written (leases are remembered as
    /// unconfirmed only while none is published, and forgotten before one is, so there were
    /// none to delete), so the commit needs no evidence. The lease stands either way.
    fn hold(&mut self) -> Result<Outcome, StoreError> {
        self.store.commit(false)?;
        Ok(Outcome::Holding)
    }

    /// Rule 5: older leases of the block go only in the shadow of a published lease, whose row
    /// is durable and never deleted as unconfirmed; and only those that ended before now, since
    /// one ending later, before this lease starts, may still be in use. In a fleet, "now" is the
    /// earliest any member's clock may read.
    fn renew(&mut self, renewed: Lease) -> Result<Outcome, StoreError> {
        self.store.prune_inside(&renewed, self.keeper.prune_bound(self.now).min(renewed.start))?;
        self.publish_if_granted(Written::Renewed(renewed))
    }

    /// A new lease, written and published if its commit is durable.
    fn take(&mut self) -> Result<Outcome, StoreError> {
        let Some(lease) = self.new_lease()? else { return Ok(Outcome::PastLastSecond) };
        // Remembered before the insert: a keeper that dies before knowing the commit's outcome
        // leaves the next one the row to delete.
        self.board.remember_unconfirmed(LeaseKey::from(&lease));
        self.store.insert(&lease)?;
        self.publish_if_granted(Written::Taken(lease))
    }

    /// Rule 1: commits, and publishes what was written only if the commit is durable.
    fn publish_if_granted(&mut self, written: Written) -> Result<Outcome, StoreError> {
        if !granted(self.store.commit(true)?.commit()) {
            return Ok(Outcome::Unconfirmed);
        }
        Ok(match written {
            Written::Renewed(lease) => {
                self.board.publish(lease, true);
                Outcome::Renewed(lease)
            }
            Written::Taken(lease) => {
                // The new row is durable: no longer unconfirmed, and no more are the rows whose
                // deletion the same commit made durable.
                self.board.forget_unconfirmed();
                self.board.publish(lease, false);
                Outcome::Taken(lease)
            }
        })
    }

    /// The lease to take now, or `None` past the last second an ID can carry.
    fn new_lease(&mut self) -> Result<Option<Lease>, StoreError> {
        // Rule 3: a lease published earlier in this server's life (its row deleted, the
        // extension dropped and created again, a coordinator that lost it) still bounds the
        // seconds its nodes may have used; it says nothing about other nodes.
        let withdrawn = self.board.last_published();
        let (first, last, latest_end) = match self.keeper.source {
            NodeSource::Range { first, last } => {
                self.store.end_own_leases(first, last)?;
                (first, last, latest_end(&self.store.leases_of(first, last)?))
            }
            NodeSource::Fleet { pool_first, pool_last, block_size, preference } => {
                let blocks = Blocks::new(pool_first, pool_last, block_size);
                let leases = self.store.leases_of(pool_first, pool_last)?;
                blocks.soonest_free(&leases, self.now, withdrawn, preference)
            }
        };
        let withdrawn_bound =
            withdrawn.filter(|old| old.first_node <= last && first <= old.last_node).map(|old| old.used_through);
        Ok(self.keeper.terms.new_lease(first, last, self.now, latest_end.max(withdrawn_bound)))
    }
}

/// What the table grants of the published lease at a tick.
enum Standing {
    /// Its row is intact and no renewal is due.
    Intact,
    /// Its row is renewed as stored, in the tick's transaction.
    Renewed(Lease),
    /// It must be withdrawn.
    Lost(Withdrawal),
}

/// A lease written in the tick's transaction, to publish once its commit is durable.
enum Written {
    /// The published lease with a later end or high-water mark.
    Renewed(Lease),
    /// A new lease.
    Taken(Lease),
}

/// Rule 1: whether a commit grants what it wrote. The `fault-grant-uncertain-commits` feature
/// breaks the rule on purpose (every commit that returned counts, evidence or not), for the fleet simulation's proof that it finds the duplicates
/// this rule prevents; no build of randflake_pg enables it.
fn granted(commit: Commit) -> bool {
    commit == Commit::Durable || cfg!(feature = "fault-grant-uncertain-commits")
}

/// Whether a stored row still says at least what was published.
fn intact(stored: &StoredLease, lease: &Lease) -> bool {
    stored.last_node == lease.last_node && stored.end >= lease.end && stored.used_through >= lease.used_through
}

fn latest_end(leases: &[LeasedBlock]) -> Option<u64> {
    leases.iter().map(|lease| lease.end).max()
}

/// A fleet's pool cut into blocks.
struct Blocks {
    pool_first: u32,
    pool_last: u32,
    size: u32,
    count: u32,
}

impl Blocks {
    fn new(pool_first: u32, pool_last: u32, block_size: u32) -> Self {
        let pool_last = pool_last.min(MAX_NODE).max(pool_first);
        let size = block_size.clamp(1, pool_last - pool_first + 1);
        Self { pool_first, pool_last, size, count: (pool_last - pool_first) / size + 1 }
    }

    fn block(&self, index: u32) -> (u32, u32) {
        let first = self.pool_first + index * self.size;
        (first, (first + self.size - 1).min(self.pool_last))
    }

    fn index_of(&self, node: u32) -> u32 {
        (node.clamp(self.pool_first, self.pool_last) - self.pool_first) / self.size
    }

    /// The block that can start soonest, and the latest end of any lease of its nodes, given
    /// the leases of nodes overlapping the pool ([`LeaseStore::leases_of`]). A block's start is
    /// after its latest lease, and after `withdrawn`'s high-water mark if it overlaps it; ties go
    /// to the block `preference` places on.
    fn soonest_free(
        &self,
        leases: &[LeasedBlock],
        now: u64,
        withdrawn: Option<Lease>,
        preference: u64,
    ) -> (u32, u32, Option<u64>) {
        let mut latest: Vec<Option<u64>> = vec![None; self.count as usize];
        for lease in leases {
            for index in self.index_of(lease.first_node)..=self.index_of(lease.last_node) {
                let slot = &mut latest[index as usize];
                *slot = Some(slot.map_or(lease.end, |known| known.max(lease.end)));
            }
        }
        let start = |index: u32| {
            let (first, last) = self.block(index);
            let after_withdrawn = withdrawn
                .filter(|old| old.first_node <= last && first <= old.last_node)
                .map_or(0, |old| old.used_through + 1);
            now.max(latest[index as usize].map_or(0, |end| end + 1)).max(after_withdrawn)
        };
        let rank = |index: u32| {
            (
                start(index),
                (u64::from(index) + u64::from(self.count) - preference % u64::from(self.count)) % u64::from(self.count),
            )
        };
        let best = (0..self.count).min_by_key(|&index| rank(index)).unwrap_or(0);
        let (first, last) = self.block(best);
        (first, last, latest[best as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decisions::durability::{WalReading, WalServer};
    use crate::decisions::lease::HIGH_WATER_LEAD;
    use std::collections::BTreeMap;

    const T: u64 = 1_800_000_000;

    /// One server's own lease table, with commits that can be made uncertain.
    #[derive(Default)]
    struct Table {
        rows: BTreeMap<LeaseKey, (u32, u64, u64)>,
        next_commit: Option<Commit>,
    }

    /// One server's shared memory.
    #[derive(Default)]
    struct Shm {
        published: Option<Lease>,
        last_published: Option<Lease>,
        unconfirmed: Vec<LeaseKey>,
    }

    impl LeaseStore for Table {
        fn check_table(&mut self) -> Result<TableCheck, StoreError> {
            Ok(TableCheck::Trusted)
        }
        fn stored(&mut self, key: LeaseKey) -> Result<Option<StoredLease>, StoreError> {
            Ok(self.rows.get(&key).map(|&(last_node, end, used_through)| StoredLease { last_node, end, used_through }))
        }
        fn renew(&mut self, key: LeaseKey, renewal: Renewal, now: u64) -> Result<Option<Renewal>, StoreError> {
            Ok(self.rows.get_mut(&key).filter(|row| row.1 >= now).map(|row| {
                row.1 = row.1.max(renewal.end);
                row.2 = row.2.max(renewal.used_through);
                Renewal { end: row.1, used_through: row.2 }
            }))
        }
        fn delete(&mut self, key: LeaseKey) -> Result<(), StoreError> {
            self.rows.remove(&key);
            Ok(())
        }
        fn end_own_leases(&mut self, _first: u32, _last: u32) -> Result<(), StoreError> {
            self.rows.retain(|key, row| row.2 >= key.start);
            for row in self.rows.values_mut() {
                row.1 = row.1.min(row.2);
            }
            Ok(())
        }
        fn leases_of(&mut self, first: u32, last: u32) -> Result<Vec<LeasedBlock>, StoreError> {
            Ok(self
                .rows
                .iter()
                .filter(|(key, row)| key.first_node <= last && row.0 >= first)
                .map(|(key, row)| LeasedBlock { first_node: key.first_node, last_node: row.0, end: row.1 })
                .collect())
        }
        fn insert(&mut self, lease: &Lease) -> Result<(), StoreError> {
            self.rows.insert(lease.into(), (lease.last_node, lease.end, lease.used_through));
            Ok(())
        }
        fn prune_inside(&mut self, lease: &Lease, before: u64) -> Result<(), StoreError> {
            self.rows
                .retain(|key, row| !(key.first_node >= lease.first_node && row.0 <= lease.last_node && row.1 < before));
            Ok(())
        }
        /// The server shows the commit durable, unless the test made it uncertain: then its
        /// standby stays one position short.
        fn commit(&mut self, _needs_evidence: bool) -> Result<CommitEvidence, StoreError> {
            let server = WalServer { system_identifier: 1, timeline: 1 };
            let durable = if self.next_commit.take() == Some(Commit::Uncertain) { 99 } else { 100 };
            let reading = WalReading { server, insert: 100, durable: Some(durable) };
            Ok(CommitEvidence::Read { written_on: server, first: reading, latest: reading })
        }
    }

    impl Board for Shm {
        fn published(&self) -> Option<Lease> {
            self.published
        }
        fn last_published(&self) -> Option<Lease> {
            self.last_published
        }
        fn publish(&mut self, lease: Lease, _renewal: bool) {
            self.published = Some(lease);
            self.last_published = Some(lease);
        }
        fn withdraw(&mut self) {
            self.published = None;
        }
        fn unconfirmed(&self) -> Vec<LeaseKey> {
            self.unconfirmed.clone()
        }
        fn remember_unconfirmed(&mut self, key: LeaseKey) {
            self.unconfirmed.push(key);
        }
        fn forget_unconfirmed(&mut self) {
            self.unconfirmed.clear();
        }
    }

    fn range_keeper() -> Keeper {
        Keeper::new(
            NodeSource::Range { first: 0, last: 9 },
            Terms { length: 60, high_water_lead: Some(HIGH_WATER_LEAD) },
        )
    }

    #[cfg(not(feature = "fault-grant-uncertain-commits"))]
    #[test]
    fn a_lease_is_published_only_once_its_commit_is_durable() {
        let keeper = range_keeper();
        let (mut table, mut shm) = (Table { next_commit: Some(Commit::Uncertain), ..Table::default() }, Shm::default());
        assert_eq!(keeper.tick(T, &mut table, &mut shm).outcome, Outcome::Unconfirmed);
        assert_eq!(shm.published, None, "an uncertain commit is not granted");
        assert_eq!(shm.unconfirmed.len(), 1);
        // The next tick deletes the unconfirmed row, so its seconds are not counted as used.
        let Outcome::Taken(lease) = keeper.tick(T + 1, &mut table, &mut shm).outcome else { panic!("no lease taken") };
        assert_eq!(lease.start, T + 1, "the unconfirmed lease pushed the next one back");
        assert_eq!(shm.published, Some(lease));
        assert!(shm.unconfirmed.is_empty());
        assert_eq!(table.rows.len(), 1);
    }

    #[cfg(not(feature = "fault-grant-uncertain-commits"))]
    #[test]
    fn an_uncertain_renewal_keeps_the_published_lease() {
        let keeper = range_keeper();
        let (mut table, mut shm) = (Table::default(), Shm::default());
        let Outcome::Taken(lease) = keeper.tick(T, &mut table, &mut shm).outcome else { panic!("no lease taken") };
        table.next_commit = Some(Commit::Uncertain);
        assert_eq!(keeper.tick(T + 6, &mut table, &mut shm).outcome, Outcome::Unconfirmed);
        assert_eq!(shm.published, Some(lease), "the uncertain mark was not published");
        let Outcome::Renewed(renewed) = keeper.tick(T + 7, &mut table, &mut shm).outcome else { panic!("not renewed") };
        assert_eq!(renewed.used_through, T + 7 + HIGH_WATER_LEAD);
    }

    #[test]
    fn a_lease_whose_row_moved_back_is_withdrawn_before_another_is_taken() {
        let keeper = range_keeper();
        let (mut table, mut shm) = (Table::default(), Shm::default());
        let Outcome::Taken(lease) = keeper.tick(T, &mut table, &mut shm).outcome else { panic!("no lease taken") };
        table.rows.get_mut(&LeaseKey::from(&lease)).unwrap().2 -= 1;
        let tick = keeper.tick(T + 1, &mut table, &mut shm);
        assert_eq!(tick.withdrawn, Some((lease, Withdrawal::CutShort)));
        let Outcome::Taken(next) = tick.outcome else { panic!("no lease taken") };
        assert!(next.start > lease.used_through, "the withdrawn lease's seconds are not reused");
    }

    #[test]
    fn a_lease_taken_for_later_leaves_the_current_one_of_its_block_alone() {
        let fleet = Keeper::new(
            NodeSource::Fleet { pool_first: 0, pool_last: 9, block_size: 10, preference: 0 },
            Terms { length: 60, high_water_lead: None },
        );
        let (mut table, mut holder, mut waiting) = (Table::default(), Shm::default(), Shm::default());
        let Outcome::Taken(current) = fleet.tick(T, &mut table, &mut holder).outcome else { panic!("no lease taken") };
        // Another server, the pool's only block busy, leases it from the end of the current lease.
        let Outcome::Taken(next) = fleet.tick(T + 1, &mut table, &mut waiting).outcome else { panic!("no lease") };
        assert_eq!(next.start, current.end + 1);
        assert!(table.rows.contains_key(&LeaseKey::from(&current)), "a live lease was pruned");
        assert_eq!(fleet.tick(T + 2, &mut table, &mut holder), Tick { withdrawn: None, outcome: Outcome::Holding });
    }

    #[test]
    fn older_leases_of_a_block_go_once_the_lease_after_them_is_renewed() {
        let fleet = Keeper::new(
            NodeSource::Fleet { pool_first: 0, pool_last: 9, block_size: 10, preference: 0 },
            Terms { length: 60, high_water_lead: None },
        );
        let old = LeaseKey { first_node: 0, start: T - 300 };
        let mut table = Table::default();
        table.rows.insert(old, (9, T - 150, T - 150));
        let mut shm = Shm::default();
        let Outcome::Taken(lease) = fleet.tick(T, &mut table, &mut shm).outcome else { panic!("no lease taken") };
        assert!(table.rows.contains_key(&old), "taking a lease prunes nothing");
        assert!(matches!(fleet.tick(lease.start + 41, &mut table, &mut shm).outcome, Outcome::Renewed(_)));
        assert!(!table.rows.contains_key(&old), "the renewal pruned the older lease");
        assert_eq!(table.rows.len(), 1);
    }

    fn fleet_keeper() -> Keeper {
        Keeper::new(
            NodeSource::Fleet { pool_first: 0, pool_last: 9, block_size: 10, preference: 0 },
            Terms { length: 60, high_water_lead: None },
        )
    }

    #[test]
    fn a_fleet_member_whose_clock_is_ahead_prunes_no_live_lease() {
        let fleet = fleet_keeper();
        // Another member's lease of the pool's only block ends at T + 25 by the coordinator's
        // clock, which reads T; this member's clock reads 30 s ahead of it.
        let other = LeaseKey { first_node: 0, start: T - 50 };
        let mut table = Table::default();
        table.rows.insert(other, (9, T + 25, T + 25));
        let mut shm = Shm::default();
        let Outcome::Taken(lease) = fleet.tick(T + 30, &mut table, &mut shm).outcome else { panic!("no lease taken") };
        assert_eq!(lease.start, T + 30);
        // Its renewal, 20 s later (T + 20 by the coordinator's clock, before the other lease ends).
        assert!(matches!(fleet.tick(T + 50, &mut table, &mut shm).outcome, Outcome::Renewed(_)));
        assert!(table.rows.contains_key(&other), "a lease the other member may still use was pruned");
    }

    #[cfg(not(feature = "fault-grant-uncertain-commits"))]
    #[test]
    fn a_fleet_member_leaves_an_unconfirmed_lease_to_end() {
        let fleet = fleet_keeper();
        let (mut table, mut shm) = (Table { next_commit: Some(Commit::Uncertain), ..Table::default() }, Shm::default());
        assert_eq!(fleet.tick(T, &mut table, &mut shm).outcome, Outcome::Unconfirmed);
        let unconfirmed = shm.unconfirmed[0];
        let Outcome::Taken(lease) = fleet.tick(T + 1, &mut table, &mut shm).outcome else { panic!("no lease taken") };
        assert!(table.rows.contains_key(&unconfirmed), "the coordinator would refuse the deletion");
        assert!(lease.start > table.rows[&unconfirmed].1, "the unconfirmed lease counts as used");
        assert!(shm.unconfirmed.is_empty());
    }

    #[test]
    fn fleet_blocks_are_taken_soonest_free_then_by_preference() {
        let blocks = Blocks::new(0, 99, 10);
        assert_eq!(blocks.count, 10);
        // Block 0 leased until T + 5, block 1 free: block 1 first, whatever the preference.
        let leased = |first_node, last_node, end| LeasedBlock { first_node, last_node, end };
        assert_eq!(blocks.soonest_free(&[leased(0, 9, T + 5)], T, None, 0), (10, 19, None));
        // All free: the preferred one.
        assert_eq!(blocks.soonest_free(&[], T, None, 3), (30, 39, None));
        // All leased: the one whose lease ends first, with its end.
        let leases: Vec<LeasedBlock> = (0..10).map(|b| leased(b * 10, b * 10 + 9, T + 100 - u64::from(b))).collect();
        assert_eq!(blocks.soonest_free(&leases, T, None, 0), (90, 99, Some(T + 91)));
        // A lease spanning two blocks counts for both.
        assert_eq!(blocks.soonest_free(&[leased(5, 14, T + 9)], T, None, 0), (20, 29, None));
        // The last block is shorter.
        assert_eq!(Blocks::new(0, 24, 10).block(2), (20, 24));
    }
}
