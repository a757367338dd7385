//! A deterministic simulation of a fleet, driving the shipped state machines.
//!
//! Members lease blocks of a pool from a coordinator through the crate's keeper machine
//! ([`randflake::keeper::Keeper`]) and issue IDs through the crate's backend policy
//! ([`randflake::backend::Backend`]), exactly as randflake_pg's keeper and backends do over SQL
//! and shared memory. Around them everything fails: the coordinator's primary is killed and its
//! standby promoted, losing what was not replicated; its standby goes away and the formation
//! drops to asynchronous replication; commits are left on the primary alone (their wait for the
//! synchronous standby cut short, by the member's own deadline or by a cancel on the
//! coordinator's side that the member never hears of: either way its COMMIT returns success) or
//! succeed with the reply lost; a member learns whether a commit is durable only from what the
//! coordinator shows of its WAL positions afterwards (`randflake::durability`); members are cut off from the coordinator,
//! crash and restart with empty shared memory, or lose only their keeper; their clocks are
//! skewed and stepped back and forth. After every run of IDs the simulation checks that no
//! (second, node, sequence) has been issued twice.
//!
//! A run is reproducible from its seed, which a failure prints. With the keeper's durability
//! rule switched off (`--features fault-grant-uncertain-commits`), the default budget must find
//! a duplicate: the test that says so proves the simulation can fail.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::{History, Pending, Random, ReplicatedTable, TableWrite};

use randflake::backend::{Backend, Event, NoNode, Published, Refill, Server};
use randflake::durability::{CommitEvidence, WalReading, WalServer};
use randflake::keeper::{
    Board, Keeper, LeaseKey, LeaseStore, LeasedBlock, NodeSource, Outcome, StoreError, StoredLease, TableCheck,
};
use randflake::shared::lease_board::UNCONFIRMED_SLOTS;
use randflake::{Lease, Renewal, Terms};

const T0: u64 = 1_800_000_000;
const POOL: (u32, u32) = (0, 11);
const BLOCK: u32 = 3;
const MEMBERS: usize = 6;
const BACKENDS: usize = 3;
const LEASE_SECONDS: u64 = 20;
/// How many recent seconds of issued IDs are kept for the check; no clock in the simulation
/// reads further back than this from the fleet's latest second.
const SECONDS_KEPT: u64 = 3_000;

/// The default budget: this many seeds, each this many steps.
const SEEDS: u64 = 8;
const STEPS: u64 = 1_000_000;

// ---------------------------------------------------------------- the coordinator

/// A lease row's key in the coordinator's table: its holder, and the lease as the holder names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct RowKey {
    holder: u64,
    lease: LeaseKey,
}

impl RowKey {
    fn new(holder: u64, lease: LeaseKey) -> Self {
        Self { holder, lease }
    }
}

/// The lease rows.
type Rows = BTreeMap<RowKey, StoredLease>;

/// One write of a member's transaction, applied to each copy of the table it reaches.
#[derive(Clone, Debug)]
enum Write {
    Insert { holder: u64, lease: Lease },
    Renew { holder: u64, key: LeaseKey, renewal: Renewal, now: u64 },
    Delete { holder: u64, key: LeaseKey },
    Prune { first: u32, last: u32, before: u64 },
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
                if let Some(row) = rows.get_mut(&RowKey::new(holder, key)).filter(|row| row.end >= now) {
                    row.end = row.end.max(renewal.end);
                    row.used_through = row.used_through.max(renewal.used_through);
                }
            }
            Write::Delete { holder, key } => {
                rows.remove(&RowKey::new(holder, key));
            }
            Write::Prune { first, last, before } => {
                rows.retain(|key, row| !(key.lease.first_node >= first && row.last_node <= last && row.end < before));
            }
        }
    }
}

/// The coordinator: a primary, and a standby that replays what the primary committed, in order.
/// WAL positions count commits: the primary's insert position, and how far the standby has
/// flushed; a promotion starts a new timeline from the standby's position.
struct Coordinator {
    table: ReplicatedTable<Write>,
    timeline: u32,
    wal_inserted: u64,
    standby_flushed: u64,
    primary_up: bool,
    standby_attached: bool,
    /// synchronous_standby_names names the standby: lease commits wait for it, and the
    /// commit-time check fails them while it is away.
    synchronous: bool,
    /// Commits made while asynchronous, not yet on the standby: no failover until it has them.
    async_commits_pending: bool,
    failovers: u64,
}

impl Coordinator {
    fn new() -> Self {
        Self {
            table: ReplicatedTable::new(),
            timeline: 1,
            wal_inserted: 0,
            standby_flushed: 0,
            primary_up: true,
            standby_attached: true,
            synchronous: true,
            async_commits_pending: false,
            failovers: 0,
        }
    }

    /// The standby catches up with everything the primary committed.
    fn replicate(&mut self) {
        self.table.replicate();
        self.standby_flushed = self.wal_inserted;
        self.async_commits_pending = false;
    }

    /// A commit on the primary: its writes, and its end position.
    fn commit_on_primary(&mut self, writes: Vec<Write>) {
        self.table.commit_on_primary(writes);
        self.wal_inserted += 1;
    }

    /// The standby, caught up, attaches again.
    fn attach_standby(&mut self) {
        self.replicate();
        self.standby_attached = true;
    }

    fn server(&self) -> WalServer {
        WalServer { system_identifier: 42, timeline: self.timeline }
    }

    /// What randflake.commit_evidence shows on the primary: durable through the standby's
    /// flush while synchronous, through its own flush while not, and nothing while the standby
    /// it waits for is away.
    fn reading(&self) -> WalReading {
        let durable = match (self.synchronous, self.standby_attached) {
            (false, _) => Some(self.wal_inserted),
            (true, true) => Some(self.standby_flushed),
            (true, false) => None,
        };
        WalReading { server: self.server(), insert: self.wal_inserted, durable }
    }

    /// The primary dies and the monitor promotes the standby, if it has every commit a client
    /// was told was durable (it always has, while synchronous) and every asynchronous one.
    /// What the primary committed beyond that is lost.
    fn fail_over(&mut self) -> bool {
        if !self.standby_attached || self.async_commits_pending {
            return false;
        }
        self.table.promote_standby();
        self.wal_inserted = self.standby_flushed;
        self.timeline += 1;
        self.standby_attached = false;
        self.primary_up = true;
        self.failovers += 1;
        true
    }
}

/// How a member's next commit ends, beyond what the coordinator decides.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Committed and confirmed.
    Plain,
    /// Committed on the primary, but the wait for the synchronous standby was cut short: by the
    /// member's deadline, or by a cancel on the coordinator's side. The member's COMMIT returns
    /// success either way, and only what the coordinator shows afterwards tells.
    LocalOnly,
    /// Committed as durably as the coordinator is configured, but the reply was lost.
    ReplyLost,
}

/// One tick's transaction of a member against the coordinator.
struct Transaction<'a> {
    coordinator: &'a mut Coordinator,
    holder: u64,
    pending: Pending<Write>,
    reachable: bool,
    fate: Fate,
    /// Whether the standby catches up while the member polls for evidence.
    standby_catches_up: bool,
}

impl Transaction<'_> {
    fn reach(&self) -> Result<(), StoreError> {
        if self.reachable && self.coordinator.primary_up {
            Ok(())
        } else {
            Err(StoreError("could not connect to the coordinator".into()))
        }
    }
}

impl LeaseStore for Transaction<'_> {
    fn check_table(&mut self) -> Result<TableCheck, StoreError> {
        self.reach()?;
        Ok(TableCheck::Trusted)
    }

    fn stored(&mut self, key: LeaseKey) -> Result<Option<StoredLease>, StoreError> {
        self.reach()?;
        Ok(self.pending.rows.get(&RowKey::new(self.holder, key)).copied())
    }

    /// The table's exclusion constraint holds for a renewal too: no two leases share a node
    /// and a second.
    fn renew(&mut self, key: LeaseKey, renewal: Renewal, now: u64) -> Result<Option<Renewal>, StoreError> {
        self.reach()?;
        let row_key = RowKey::new(self.holder, key);
        if let Some(&stored) = self.pending.rows.get(&row_key).filter(|row| row.end >= now) {
            let new_end = stored.end.max(renewal.end);
            let overlaps = self.pending.rows.iter().any(|(&other, row)| {
                other != row_key
                    && other.lease.first_node <= stored.last_node
                    && row.last_node >= key.first_node
                    && other.lease.start <= new_end
                    && row.end >= key.start
            });
            if overlaps {
                return Err(StoreError("23P01: the renewal overlaps another lease".into()));
            }
        }
        self.pending.write(Write::Renew { holder: self.holder, key, renewal, now });
        Ok(self
            .pending
            .rows
            .get(&row_key)
            .filter(|row| row.end >= now)
            .map(|row| Renewal { end: row.end, used_through: row.used_through }))
    }

    fn delete(&mut self, key: LeaseKey) -> Result<(), StoreError> {
        self.reach()?;
        self.pending.write(Write::Delete { holder: self.holder, key });
        Ok(())
    }

    fn end_own_leases(&mut self, _first: u32, _last: u32) -> Result<(), StoreError> {
        unreachable!("fleet members do not resume their own leases")
    }

    fn leases_of(&mut self, first: u32, last: u32) -> Result<Vec<LeasedBlock>, StoreError> {
        self.reach()?;
        Ok(self
            .pending
            .rows
            .iter()
            .filter(|&(key, row)| key.lease.first_node <= last && row.last_node >= first)
            .map(|(key, row)| LeasedBlock { first_node: key.lease.first_node, last_node: row.last_node, end: row.end })
            .collect())
    }

    /// The table's rule: a new lease of a node starts after every earlier lease of it ended.
    fn insert(&mut self, lease: &Lease) -> Result<(), StoreError> {
        self.reach()?;
        let overlaps = self.pending.rows.iter().any(|(key, row)| {
            key.lease.first_node <= lease.last_node && row.last_node >= lease.first_node && row.end >= lease.start
        });
        if overlaps {
            return Err(StoreError("23P01: the lease overlaps or precedes an existing one".into()));
        }
        self.pending.write(Write::Insert { holder: self.holder, lease: *lease });
        Ok(())
    }

    fn prune_inside(&mut self, lease: &Lease, before: u64) -> Result<(), StoreError> {
        self.reach()?;
        self.pending.write(Write::Prune { first: lease.first_node, last: lease.last_node, before });
        Ok(())
    }

    fn commit(&mut self, needs_evidence: bool) -> Result<CommitEvidence, StoreError> {
        self.reach()?;
        let writes = self.pending.take_writes();
        let coordinator = &mut *self.coordinator;
        let written_on = coordinator.server();
        if !writes.is_empty() {
            if coordinator.synchronous && !coordinator.standby_attached {
                return Err(StoreError("randflake_pg: 0 of the 1 synchronous standbys are connected".into()));
            }
            coordinator.commit_on_primary(writes);
            if !coordinator.synchronous {
                coordinator.async_commits_pending = true;
            }
            match self.fate {
                // Left on the primary alone; it replicates later, or dies with the primary.
                Fate::LocalOnly => {}
                Fate::Plain if coordinator.synchronous => coordinator.replicate(),
                Fate::Plain => {}
                Fate::ReplyLost => {
                    if coordinator.synchronous {
                        coordinator.replicate();
                    }
                    return Err(StoreError("server closed the connection unexpectedly".into()));
                }
            }
        }
        if !needs_evidence {
            return Ok(CommitEvidence::NotRead);
        }
        // Read in a new transaction after the commit returned, and polled while it is short.
        let first = coordinator.reading();
        if self.standby_catches_up && coordinator.standby_attached {
            coordinator.replicate();
        }
        Ok(CommitEvidence::Read { written_on, first, latest: coordinator.reading() })
    }
}

// ---------------------------------------------------------------- the members

/// A member's shared memory: the published lease and the node table. A crash wipes it.
#[derive(Default)]
struct SharedMemory {
    version: u64,
    leases_taken: u64,
    published: Option<Published>,
    last_published: Option<Lease>,
    unconfirmed: Vec<LeaseKey>,
    node_holder: HashMap<u32, usize>,
    node_used_through: HashMap<u32, u64>,
    latest_used: u64,
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

/// The shared memory as one backend sees it.
struct BackendView<'a> {
    memory: &'a mut SharedMemory,
    backend: usize,
}

impl Server for BackendView<'_> {
    fn latest_used(&self) -> u64 {
        self.memory.latest_used
    }

    fn lease_version(&self) -> u64 {
        self.memory.version
    }

    fn published(&self) -> (u64, Option<Published>) {
        (self.memory.version, self.memory.published)
    }

    fn leases_taken(&self) -> u64 {
        self.memory.leases_taken
    }

    fn acquire(&mut self, first: u32, last: u32, now: u64) -> Result<(u32, u64), NoNode> {
        let mut saw_free = false;
        for node in first..=last {
            if self.memory.node_holder.contains_key(&node) {
                continue;
            }
            saw_free = true;
            let used_through = self.memory.node_used_through.get(&node).copied().unwrap_or(0);
            if used_through < now {
                self.memory.node_holder.insert(node, self.backend);
                return Ok((node, used_through));
            }
        }
        Err(if saw_free { NoNode::AllUsedThisSecond } else { NoNode::AllHeld })
    }

    fn record_used(&mut self, node: u32, second: u64) {
        self.memory.node_used_through.insert(node, second);
        self.memory.latest_used = self.memory.latest_used.max(second);
    }

    fn release(&mut self, node: u32) {
        self.memory.node_holder.remove(&node);
    }

    fn count(&mut self, _event: Event) {}
}

struct Member {
    holder: u64,
    /// Seconds this member's clock reads ahead of (or, negative, behind) real time.
    clock_offset: i64,
    keeper: Keeper,
    memory: SharedMemory,
    backends: Vec<Backend>,
    /// Real time (ms) before which each backend is waiting.
    backend_waits: Vec<u64>,
    /// Real time (ms) until which the member is down (crashed) or cut off from the coordinator.
    down_until: u64,
    cut_off_until: u64,
    next_tick_at: u64,
}

impl Member {
    fn new(holder: u64, blocks: u64, now_ms: u64) -> Self {
        let source =
            NodeSource::Fleet { pool_first: POOL.0, pool_last: POOL.1, block_size: BLOCK, preference: holder % blocks };
        Self {
            holder,
            clock_offset: 0,
            keeper: Keeper::new(source, Terms { length: LEASE_SECONDS, high_water_lead: None }),
            memory: SharedMemory::default(),
            backends: (0..BACKENDS).map(|_| Backend::new()).collect(),
            backend_waits: vec![0; BACKENDS],
            down_until: 0,
            cut_off_until: 0,
            next_tick_at: now_ms,
        }
    }

    fn clock(&self, now_ms: u64) -> u64 {
        (T0 as i64 + (now_ms / 1000) as i64 + self.clock_offset) as u64
    }

    /// A crash: shared memory and every backend gone; the keeper starts over.
    fn crash(&mut self, until_ms: u64) {
        self.memory = SharedMemory::default();
        self.backends = (0..BACKENDS).map(|_| Backend::new()).collect();
        self.down_until = until_ms;
    }
}

// ---------------------------------------------------------------- the simulation

/// A run of sequences `start..stop` issued by a member.
#[derive(Clone, Copy)]
struct Run {
    start: u32,
    stop: u32,
    member: usize,
}

/// Every run of IDs issued, by (second, node), to find any overlap.
#[derive(Default)]
struct Issued {
    runs: HashMap<(u64, u32), Vec<Run>>,
    count: u64,
}

impl Issued {
    /// Records a run; the other member that issued the same triple, if any.
    fn record(&mut self, second: u64, node: u32, first: u32, count: u32, member: usize) -> Option<usize> {
        let runs = self.runs.entry((second, node)).or_default();
        let stop = first + count;
        let clash = runs.iter().find(|run| first < run.stop && run.start < stop).map(|run| run.member);
        runs.push(Run { start: first, stop, member });
        self.count += u64::from(count);
        clash
    }

    fn forget_before(&mut self, second: u64) {
        self.runs.retain(|&(run_second, _), _| run_second >= second);
    }
}

/// What the simulation did: the figures a run reports.
#[derive(Debug, Default)]
struct Summary {
    steps: u64,
    ids: u64,
    leases_taken: u64,
    uncertain_commits: u64,
    failovers: u64,
    refusals: u64,
}

/// Runs one seed for `steps` steps; the first duplicate found, described.
fn simulate(seed: u64, steps: u64) -> Result<Summary, String> {
    let mut random = Random(seed);
    let blocks = u64::from((POOL.1 - POOL.0) / BLOCK + 1);
    let mut now_ms = 0u64;
    let mut coordinator = Coordinator::new();
    let mut members: Vec<Member> = (0..MEMBERS).map(|index| Member::new(1000 + index as u64, blocks, now_ms)).collect();
    let mut issued = Issued::default();
    let mut summary = Summary::default();
    let mut standby_away_since: Option<u64> = None;
    let mut history = History::new(40, "ms");

    for step in 0..steps {
        summary.steps = step + 1;
        now_ms += random.below(40);
        // The coordinator's formation.
        if random.chance(600) && coordinator.primary_up {
            if coordinator.fail_over() {
                history.note(now_ms, "coordinator primary killed; standby promoted");
            } else {
                coordinator.primary_up = false;
                history.note(now_ms, "coordinator primary down, no standby to promote");
            }
        }
        if !coordinator.primary_up && random.chance(4_000) {
            coordinator.primary_up = true;
            history.note(now_ms, "coordinator primary back");
        }
        if coordinator.standby_attached && random.chance(300) {
            coordinator.standby_attached = false;
            standby_away_since = Some(now_ms);
            history.note(now_ms, "standby went away");
        }
        if !coordinator.standby_attached && random.chance(2_000) {
            coordinator.attach_standby();
            coordinator.synchronous = true;
            standby_away_since = None;
            history.note(now_ms, "standby attached, caught up, synchronous again");
        }
        // As pg_auto_failover does, some seconds after the standby left: asynchronous.
        if standby_away_since.is_some_and(|since| now_ms > since + 5_000) && coordinator.synchronous {
            coordinator.synchronous = false;
            history.note(now_ms, "replication asynchronous");
        }
        if coordinator.standby_attached && random.chance(3_000) {
            coordinator.replicate();
        }

        let index = random.below(MEMBERS as u64) as usize;
        let member = &mut members[index];
        if now_ms < member.down_until {
            continue;
        }
        // Faults of one member.
        match random.below(1_000_000) {
            0..=199 => {
                member.crash(now_ms + random.below(5_000));
                history.note(now_ms, format_args!("member {index} crashed"));
                continue;
            }
            200..=499 => member.cut_off_until = now_ms + random.below(20_000),
            500..=799 => {
                // A clock stepped back or forward, by up to a minute.
                member.clock_offset += random.offset(60);
                history.note(now_ms, format_args!("member {index} clock offset now {}", member.clock_offset));
            }
            800..=1_099 => member.clock_offset += random.offset(1),
            _ => {}
        }
        let now = member.clock(now_ms);
        if now_ms >= member.next_tick_at {
            member.next_tick_at = now_ms + 1_000;
            let fate = match random.below(100) {
                0..=7 => Fate::LocalOnly,
                8..=10 => Fate::ReplyLost,
                _ => Fate::Plain,
            };
            let mut transaction = Transaction {
                holder: member.holder,
                pending: Pending::begin(&coordinator.table),
                reachable: now_ms >= member.cut_off_until,
                fate,
                standby_catches_up: random.chance(250_000),
                coordinator: &mut coordinator,
            };
            let tick = member.keeper.tick(now, &mut transaction, &mut member.memory);
            match tick.outcome {
                Outcome::Taken(lease) => {
                    summary.leases_taken += 1;
                    history.note(now_ms, format_args!("member {index} took {lease:?} at clock {now}"));
                }
                Outcome::Unconfirmed => summary.uncertain_commits += 1,
                _ => {}
            }
            if let Some((lease, why)) = tick.withdrawn {
                history.note(now_ms, format_args!("member {index} withdrew {lease:?}: {why:?}"));
            }
            continue;
        }
        // One of its backends wants IDs.
        let backend = random.below(BACKENDS as u64) as usize;
        if now_ms < member.backend_waits[backend] {
            continue;
        }
        if random.chance(2_000) {
            // The session ends: its node goes back.
            member.backends[backend].release(&mut BackendView { memory: &mut member.memory, backend });
            member.backends[backend] = Backend::new();
            continue;
        }
        let mut view = BackendView { memory: &mut member.memory, backend };
        match member.backends[backend].refill(now, 2, 1 + random.below(8) as u32, &mut view) {
            Refill::Issued { first, count } => {
                if let Some(other) = issued.record(first.timestamp, first.node_id, first.sequence, count, index) {
                    return Err(format!(
                        "seed {seed}, step {step}: second {} node {} sequences {}..{} issued by member {index} and member {other} (coordinator failovers {})\nlast events:\n{history}",
                        first.timestamp,
                        first.node_id,
                        first.sequence,
                        first.sequence + count,
                        coordinator.failovers,
                    ));
                }
            }
            Refill::WaitForSecond(second) => {
                let ahead = second.saturating_sub(now).min(60);
                member.backend_waits[backend] = now_ms + ahead * 1000 - now_ms % 1000;
            }
            Refill::AwaitLease { limit } => member.backend_waits[backend] = now_ms + limit.as_millis() as u64 / 4,
            Refill::Refused(_) => {
                summary.refusals += 1;
                member.backend_waits[backend] = now_ms + 200;
            }
        }
        if step % 50_000 == 0 {
            let latest = members.iter().map(|member| member.clock(now_ms)).max().unwrap_or(T0);
            issued.forget_before(latest.saturating_sub(SECONDS_KEPT));
        }
    }
    summary.ids = issued.count;
    summary.failovers = coordinator.failovers;
    Ok(summary)
}

#[cfg(not(feature = "fault-grant-uncertain-commits"))]
#[test]
fn no_id_is_issued_twice_through_failovers_lost_commits_partitions_crashes_and_clock_steps() {
    let started = std::time::Instant::now();
    let mut total = Summary::default();
    let summaries =
        common::run_seeds(SEEDS, |seed| simulate(seed, STEPS)).unwrap_or_else(|duplicate| panic!("{duplicate}"));
    for (seed, summary) in summaries {
        assert!(summary.leases_taken > 100, "seed {seed}: too few leases to prove anything: {summary:?}");
        assert!(summary.ids > 100_000, "seed {seed}: too few IDs to prove anything: {summary:?}");
        assert!(summary.failovers > 10 && summary.uncertain_commits > 30, "seed {seed}: faults too rare: {summary:?}");
        total.steps += summary.steps;
        total.ids += summary.ids;
        total.leases_taken += summary.leases_taken;
        total.uncertain_commits += summary.uncertain_commits;
        total.failovers += summary.failovers;
        total.refusals += summary.refusals;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{} steps in {seconds:.1} s ({:.0} steps/s): {} IDs, {} leases, {} uncertain commits, {} failovers, {} refusals; no duplicate",
        total.steps,
        total.steps as f64 / seconds,
        total.ids,
        total.leases_taken,
        total.uncertain_commits,
        total.failovers,
        total.refusals
    );
}

#[cfg(feature = "fault-grant-uncertain-commits")]
#[test]
fn with_uncertain_commits_granted_the_simulation_finds_a_duplicate() {
    let duplicate = common::run_seeds(SEEDS, |seed| simulate(seed, STEPS))
        .expect_err("the keeper granted uncertain commits, and the default budget found no duplicate");
    println!("found, as it must be:\n{duplicate}");
}
