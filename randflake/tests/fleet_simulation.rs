//! A deterministic simulation of a fleet, driving the shipped state machines.
//!
//! Members lease blocks of a pool from a coordinator through the crate's keeper machine
//! ([`randflake::decisions::keeper::Keeper`]) and issue IDs through the crate's backend policy
//! ([`randflake::decisions::refill::Backend`]) over the crate's server position
//! ([`randflake::shared::server_position::ServerPosition`]), exactly as randflake_pg's keeper and
//! backends do over SQL and shared memory: every backend of a member takes its runs from the
//! member's one position, so the backends of a member share its nodes within each second. Around
//! them everything fails: the coordinator's primary is killed
//! and its standby promoted, losing what was not replicated; its standby goes away and the
//! formation drops to asynchronous replication; commits are left on the primary alone (their wait
//! for the synchronous standby cut short, by the member's own deadline or by a cancel on the
//! coordinator's side that the member never hears of: either way its COMMIT returns success) or
//! succeed with the reply lost; a member learns whether a commit is durable only from what the
//! coordinator shows of its WAL positions afterwards (`randflake::decisions::durability`); members
//! are cut off from the coordinator, crash and restart with empty shared memory (a new, empty
//! position), or lose only their keeper; their clocks are skewed and stepped back and forth.
//! Beside the fleet, range-mode servers
//! lease their own nodes from a table on themselves, through the same keeper machine: they restart
//! (shared memory lost, the table kept) with clocks stepped back, a DBA deletes their rows, and
//! their extension is dropped and created again, each while the server runs (a row deleted and then
//! a restart is the one loss operating.md says a server does not survive). Backends ask for runs
//! of a few IDs, and now and then for a bulk run of up to [`BULK_RUN`], so that runs go on from
//! one node into the next and members use up every node of their block in a second.
//!
//! After every run of IDs the simulation checks that none of its plain values (second, node and
//! sequence; a run may cross from one node's last sequence into the next node's first) has been
//! issued before, and that no member used more nodes of a lease in one second than its IDs of
//! that second fill (⌈IDs ÷ 131,072⌉). After every call of a backend it checks the answer against
//! the server's state before the call, in the order the rules apply: no lease (a wait, then a
//! refusal), a clock before the lease beyond the high-water lead, a lease lapsed; then the
//! position's second, the server's clock floor (a clock one second behind it waits for it, one
//! further behind is refused); then the exact run the position hands out, or a wait for the next
//! second once the lease's nodes are used up in this one. And it checks
//! liveness: the faults stop for a while every [`CYCLE_STEPS`] steps, the coordinator comes back
//! with its standby, every member and server comes up, reachable, its clock stepped forward to
//! the fleet's latest; then every one of them must issue IDs again within [`LIVENESS_BOUND_MS`].
//!
//! A run is reproducible from its seed, which a failure prints. With the keeper's durability
//! rule switched off (`--features fault-grant-uncertain-commits`), or the position's clock rule
//! (`--features fault-position-rewinds`: a position ahead of a backend's clock moves back to the
//! clock's second), the default budget must find a duplicate: the tests that say so prove the
//! simulation can fail.

mod common;
#[path = "common/fleet.rs"]
mod fleet;

use std::collections::{BTreeSet, HashMap};

use common::{History, Pending, Random, ReplicatedTable};
use fleet::{BackendView, SharedMemory, Write};

use randflake::decisions::durability::{CommitEvidence, WalReading, WalServer};
use randflake::decisions::keeper::{
    Board, Keeper, LeaseKey, LeaseStore, LeasedBlock, NodeSource, Outcome, StoreError, StoredLease, TableCheck, Tick,
    Withdrawal,
};
use randflake::decisions::lease::HIGH_WATER_LEAD;
use randflake::decisions::refill::{Backend, Published, Refill, FIRST_LEASE_WAIT, RENEWAL_WAIT};
use randflake::{Lease, Parts, Refusal, Renewal, Terms, MAX_NODE, MAX_SECOND, MAX_SEQUENCE};

const T0: u64 = 1_800_000_000;
/// The fleet's pool, after the range-mode servers' nodes: a pool that starts at node 0 would hide
/// block arithmetic that forgets its first node.
const POOL: (u32, u32) = (6, 17);
const BLOCK: u32 = 3;
const MEMBERS: usize = 6;
/// Backends per member and per range-mode server, all taking their runs from its one position.
const BACKENDS: usize = 3;
/// The largest run a backend asks for in one call: more than a node's 131,072 sequences, so that
/// a run can go on into the next node, and a few of them use a block of 3 nodes up in a second.
/// randflake_pg's backends ask for 64 ([`randflake::BATCH`]); a bulk run stands for many of
/// them in a row.
const BULK_RUN: u64 = 200_000;
/// How often, per million calls, a backend asks for a bulk run.
const BULK_CHANCE: u64 = 250_000;
/// IDs a node issues in one second.
const NODE_SECOND: u64 = MAX_SEQUENCE as u64 + 1;
const LEASE_SECONDS: u64 = 20;
/// How many recent seconds of issued IDs are kept for the check; no clock in the simulation
/// reads further back than this from the fleet's latest second.
const SECONDS_KEPT: u64 = 3_000;

/// The range-mode servers' own nodes, below the fleet's pool, and their terms.
const RANGE_SERVERS: [(u32, u32); 2] = [(0, 2), (3, 5)];
const RANGE_TERMS: Terms = Terms { length: 60, high_water_lead: Some(HIGH_WATER_LEAD) };

/// Every this many steps (about half an hour of simulated time), the last [`HEALED_STEPS`] run
/// without faults.
const CYCLE_STEPS: u64 = 100_000;
const HEALED_STEPS: u64 = 20_000;
/// Once the faults stop and the clocks agree, every member and server issues again within this
/// much real time. A member without a block takes the one that frees soonest: the pool's 4
/// blocks have 6 members, so at most two wait, each for at most the lease that holds its block
/// and one taken for later behind it (2 x 20 s), plus a tick for its own lease to be written
/// (1 s); a range server waits at most its high-water lead (10 s) after a restart. Measured:
/// see the summary's `slowest_recovery_ms`.
const LIVENESS_BOUND_MS: u64 = 45_000;

/// The default budget: this many seeds, each this many steps.
const SEEDS: u64 = 8;
const STEPS: u64 = 1_000_000;

// ---------------------------------------------------------------- the coordinator

/// The coordinator: a primary, and a standby that replays what the primary committed, in order.
/// WAL positions count commits: the primary's insert position, and how far the standby has
/// flushed; a promotion starts a new timeline from the standby's position. A range-mode server's
/// own database is one too, which never fails over.
struct Coordinator {
    table: ReplicatedTable<Write>,
    /// False between DROP EXTENSION and CREATE EXTENSION.
    table_exists: bool,
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
            table_exists: true,
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

    /// A write of a DBA's, committed durably.
    fn commit_durably(&mut self, write: Write) {
        self.commit_on_primary(vec![write]);
        self.replicate();
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
        Ok(if self.coordinator.table_exists { TableCheck::Trusted } else { TableCheck::Missing })
    }

    fn stored(&mut self, key: LeaseKey) -> Result<Option<StoredLease>, StoreError> {
        self.reach()?;
        Ok(fleet::stored(&self.pending.rows, self.holder, key))
    }

    fn renew(&mut self, key: LeaseKey, renewal: Renewal, now: u64) -> Result<Option<Renewal>, StoreError> {
        self.reach()?;
        fleet::check_renewal(&self.pending.rows, self.holder, key, renewal, now)?;
        self.pending.write(Write::Renew { holder: self.holder, key, renewal, now });
        Ok(fleet::renewed(&self.pending.rows, self.holder, key, now))
    }

    fn delete(&mut self, key: LeaseKey) -> Result<(), StoreError> {
        self.reach()?;
        self.pending.write(Write::Delete { holder: self.holder, key });
        Ok(())
    }

    fn end_own_leases(&mut self, first: u32, last: u32) -> Result<(), StoreError> {
        self.reach()?;
        self.pending.write(Write::EndOwn { holder: self.holder, first, last });
        Ok(())
    }

    fn leases_of(&mut self, first: u32, last: u32) -> Result<Vec<LeasedBlock>, StoreError> {
        self.reach()?;
        Ok(fleet::leases_of(&self.pending.rows, first, last))
    }

    fn insert(&mut self, lease: &Lease) -> Result<(), StoreError> {
        self.reach()?;
        fleet::check_insert(&self.pending.rows, lease)?;
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

/// A fleet member, or a range-mode server.
struct Member {
    holder: u64,
    /// A range-mode server's own database, holding its lease table; `None` for a fleet member,
    /// whose table is on the coordinator.
    own_database: Option<Coordinator>,
    /// A range-mode server whose rows were deleted, or whose table was dropped, and which has
    /// not published a lease since: the bound on its seconds is in its shared memory alone.
    bound_in_memory_only: bool,
    /// Seconds this member's clock reads ahead of (or, negative, behind) real time.
    clock_offset: i64,
    keeper: Keeper,
    memory: SharedMemory,
    backends: Vec<Backend>,
    /// Real time (ms) before which each backend is waiting.
    backend_waits: Vec<u64>,
    /// The position's second when each backend last asked for the clock to be read again, until
    /// it issues or refuses the clock: what its next answer to a clock still behind depends on.
    backend_rereads: Vec<Option<u64>>,
    /// What the member issued in the latest second it issued in, under the lease it issued under.
    used: Option<SecondUse>,
    /// Real time (ms) until which the member is down (crashed) or cut off from the coordinator.
    down_until: u64,
    cut_off_until: u64,
    next_tick_at: u64,
}

impl Member {
    fn new(holder: u64, blocks: u64, now_ms: u64) -> Self {
        let source =
            NodeSource::Fleet { pool_first: POOL.0, pool_last: POOL.1, block_size: BLOCK, preference: holder % blocks };
        Self::with_keeper(holder, Keeper::new(source, Terms { length: LEASE_SECONDS, high_water_lead: None }), now_ms)
    }

    /// A range-mode server of nodes `first..=last`.
    fn new_range(holder: u64, (first, last): (u32, u32), now_ms: u64) -> Self {
        let keeper = Keeper::new(NodeSource::Range { first, last }, RANGE_TERMS);
        Self { own_database: Some(Coordinator::new()), ..Self::with_keeper(holder, keeper, now_ms) }
    }

    fn with_keeper(holder: u64, keeper: Keeper, now_ms: u64) -> Self {
        Self {
            holder,
            own_database: None,
            bound_in_memory_only: false,
            clock_offset: 0,
            keeper,
            memory: SharedMemory::default(),
            backends: (0..BACKENDS).map(|_| Backend::new()).collect(),
            backend_waits: vec![0; BACKENDS],
            backend_rereads: vec![None; BACKENDS],
            used: None,
            down_until: 0,
            cut_off_until: 0,
            next_tick_at: now_ms,
        }
    }

    fn clock(&self, now_ms: u64) -> u64 {
        (T0 as i64 + (now_ms / 1000) as i64 + self.clock_offset) as u64
    }

    /// One tick of its keeper at clock reading `now`, over the coordinator (a fleet member's
    /// table) or its own database (a range-mode server's, always reachable).
    fn tick(
        &mut self,
        now: u64,
        coordinator: &mut Coordinator,
        reachable: bool,
        fate: Fate,
        standby_catches_up: bool,
    ) -> Tick {
        let mut transaction = Transaction {
            holder: self.holder,
            pending: Pending::begin(&self.own_database.as_ref().unwrap_or(coordinator).table),
            reachable: reachable || self.own_database.is_some(),
            fate,
            standby_catches_up,
            coordinator: self.own_database.as_mut().unwrap_or(coordinator),
        };
        self.keeper.tick(now, &mut transaction, &mut self.memory)
    }

    /// A call of backend `backend` for a run of at most `run` IDs at clock reading `now`.
    fn refill(&mut self, backend: usize, now: u64, run: u32) -> Refill {
        self.backends[backend].refill(now, run, &mut BackendView { memory: &mut self.memory })
    }

    /// A crash: shared memory (the published lease and the position) and every backend gone;
    /// the keeper starts over.
    fn crash(&mut self, until_ms: u64) {
        self.memory = SharedMemory::default();
        self.backends = (0..BACKENDS).map(|_| Backend::new()).collect();
        self.backend_rereads.fill(None);
        self.used = None;
        self.down_until = until_ms;
    }

    /// Counts `count` IDs from `first` (plain values, consecutive) toward what the member used in
    /// that second under the lease whose first node is `lease_first`: the number of distinct
    /// nodes it has used in that second under that lease, and the IDs it issued there.
    fn count_use(&mut self, lease_first: u32, first: Parts, count: u32) -> (usize, u64) {
        let last = Parts::from_raw(first.to_raw() + u64::from(count) - 1);
        let used = match &mut self.used {
            Some(used) if (used.second, used.lease_first) == (first.timestamp, lease_first) => used,
            slot => slot.insert(SecondUse { second: first.timestamp, lease_first, ids: 0, nodes: BTreeSet::new() }),
        };
        used.ids += u64::from(count);
        used.nodes.extend(first.node_id..=last.node_id);
        (used.nodes.len(), used.ids)
    }
}

/// What a member issued in one second under one lease: how many IDs, from which nodes.
struct SecondUse {
    second: u64,
    lease_first: u32,
    ids: u64,
    nodes: BTreeSet<u32>,
}

/// A DBA's DELETE of every row, or DROP EXTENSION's loss of the table.
fn every_row_deleted() -> Write {
    Write::Prune { first: 0, last: MAX_NODE, before: u64::MAX }
}

// ---------------------------------------------------------------- the simulation

/// Every run of IDs issued, as the plain values `first.to_raw()..first.to_raw() + count` with the
/// member that issued them, to find any value issued twice. A run's values are consecutive: within
/// its second it may go on from one node's last sequence into the next node's first, so a run is
/// checked value by value along the layout, not as sequences of one node. Filed under each
/// (second, node) it reaches, so that a check reads the few runs of those nodes in that second.
#[derive(Default)]
struct Issued {
    runs: HashMap<(u64, u32), Vec<Run>>,
    count: u64,
}

/// The plain values `start..stop`, issued by `member`.
#[derive(Clone, Copy)]
struct Run {
    start: u64,
    stop: u64,
    member: usize,
}

impl Issued {
    /// Records the run of `count` values from `first`; the member that issued one of them
    /// before, if any.
    fn record(&mut self, first: Parts, count: u32, member: usize) -> Option<usize> {
        let (start, stop) = (first.to_raw(), first.to_raw() + u64::from(count));
        let mut clash = None;
        for node in first.node_id..=Parts::from_raw(stop - 1).node_id {
            let runs = self.runs.entry((first.timestamp, node)).or_default();
            clash = clash.or(runs.iter().find(|run| start < run.stop && run.start < stop).map(|run| run.member));
            runs.push(Run { start, stop, member });
        }
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
    /// Runs that went on from one node's last sequence into the next node's first.
    node_crossings: u64,
    /// Waits for the next second because every node of the lease had used up the current one.
    seconds_used_up: u64,
    /// The most distinct nodes any member or server used in one second (under one lease).
    most_nodes_in_a_second: usize,
    /// Of the range-mode servers: restarts, DBA deletions of their rows, DROP EXTENSIONs.
    range_restarts: u64,
    rows_deleted: u64,
    extension_drops: u64,
    /// Times the faults stopped, and the longest any member or server then took to issue again.
    heals: u64,
    slowest_recovery_ms: u64,
}

/// The faults stop: the coordinator's primary up, its standby attached and synchronous, every
/// member and server up and reachable, every range-mode server's table there, and every clock
/// stepped forward to the latest (a step forward is no fault: nothing is refused for it).
fn heal(coordinator: &mut Coordinator, members: &mut [Member], now_ms: u64) {
    coordinator.primary_up = true;
    coordinator.attach_standby();
    coordinator.synchronous = true;
    let latest = members.iter().map(|member| member.clock_offset).max().unwrap_or(0);
    for member in members {
        member.clock_offset = latest;
        member.down_until = member.down_until.min(now_ms);
        member.cut_off_until = 0;
        member.backend_waits.fill(0);
        if let Some(database) = &mut member.own_database {
            database.table_exists = true;
        }
    }
}

/// What a backend's answer is checked against: its server's shared memory before the call.
struct Before {
    /// The server's position: the next plain value it hands out.
    position: u64,
    leases_taken: u64,
    published: Option<Published>,
    /// Refusals counted as the clock's and as the lease's, seconds counted as used up, and node
    /// switches.
    counted: (u64, u64, u64, u64),
}

impl Before {
    fn read(memory: &SharedMemory) -> Self {
        Self {
            position: memory.position.report().next,
            leases_taken: memory.leases_taken,
            published: memory.published,
            counted: (memory.clock_refusals, memory.lease_refusals, memory.seconds_used_up, memory.node_switches),
        }
    }
}

/// What a call for a run of `run` IDs at clock reading `now`, inside `lease`'s seconds, gets from
/// the position `position`, and whether it counts a second used up. The position's second is the
/// server's clock floor: a clock one second behind it is read again once (unless the backend did
/// for that second, `reread_for`), and one further behind is refused (with
/// `fault-position-rewinds`, the position moves back to the clock's second instead). At or past
/// it, the run is the position's next values in `now`, from the lease's first node if the
/// position is below it, cut at the lease's last value; past that value, the second is used up.
fn from_the_position(now: u64, run: u32, position: u64, reread_for: Option<u64>, lease: &Lease) -> (Refill, bool) {
    let second = Parts::from_raw(position).timestamp;
    let start = Parts { timestamp: now, node_id: lease.first_node, sequence: 0 }.to_raw();
    let last = Parts { timestamp: now, node_id: lease.last_node, sequence: MAX_SEQUENCE }.to_raw().min(u64::MAX - 1);
    let first = match second {
        _ if second > now && cfg!(feature = "fault-position-rewinds") => start,
        _ if second == now + 1 && reread_for != Some(second) => return (Refill::ReadClockAgain, false),
        _ if second > now => return (Refill::Refused(Refusal::ClockBehind { now, used: second }), false),
        _ if position > last => return (Refill::WaitForSecond(now + 1), true),
        _ => position.max(start),
    };
    (Refill::Issued { first: Parts::from_raw(first), count: (last - first + 1).min(u64::from(run)) as u32 }, false)
}

/// Checks a backend's answer to a call for a run of `run` IDs at clock reading `now` against its
/// server's state before the call (its position, the leases it has taken since it started and
/// the lease it published) and after it (the refusals and used-up seconds counted). The rules, in
/// the order they apply: without a lease the backend waits (for the first, longer) or refuses; a
/// clock past the last second an ID can carry is refused; a clock before the lease's start waits
/// if the start is at most the high-water lead (and the second being written) ahead, else it is
/// refused; the second after the lease waits for its renewal, later ones are refused; within the
/// lease, the position decides ([`from_the_position`]). Each refusal is counted once, as the
/// clock's or the lease's, and each second used up once.
fn check_answer(
    now: u64,
    run: u32,
    before: &Before,
    reread_for: Option<u64>,
    after: &SharedMemory,
    answer: &Refill,
) -> Result<(), String> {
    let Before { position, leases_taken, published, counted } = *before;
    let (right, used_up) = match published.map(|published| published.lease) {
        None => {
            let limit = if leases_taken == 0 { FIRST_LEASE_WAIT } else { RENEWAL_WAIT };
            (*answer == Refill::AwaitLease { limit } || *answer == Refill::Refused(Refusal::NoLease), false)
        }
        Some(_) if now > MAX_SECOND => (*answer == Refill::Refused(Refusal::PastLastSecond { now }), false),
        Some(lease) if now < lease.start && lease.start - now <= HIGH_WATER_LEAD + 1 => {
            (*answer == Refill::WaitForSecond(lease.start), false)
        }
        Some(lease) if now < lease.start => {
            (*answer == Refill::Refused(Refusal::BeforeWindow { now, first: lease.start }), false)
        }
        Some(lease) if now == lease.issuable_through().min(MAX_SECOND) + 1 => {
            (*answer == Refill::AwaitLease { limit: RENEWAL_WAIT }, false)
        }
        Some(lease) if now > lease.issuable_through().min(MAX_SECOND) => {
            let last = lease.issuable_through().min(MAX_SECOND);
            (*answer == Refill::Refused(Refusal::AfterWindow { now, last }), false)
        }
        Some(lease) => {
            let (expected, used_up) = from_the_position(now, run, position, reread_for, &lease);
            (*answer == expected, used_up)
        }
    };
    let (clock, lease, seconds, switches) = counted;
    // A run switches node when it enters one past the lease's first: it crosses from one node
    // into the next, or begins at a later node's first value.
    let switched = match (answer, published) {
        (Refill::Issued { first, count }, Some(published)) => {
            let last = Parts::from_raw(first.to_raw() + u64::from(*count) - 1);
            last.node_id != first.node_id || (first.sequence == 0 && first.node_id != published.lease.first_node)
        }
        _ => false,
    };
    let expected_counts = match answer {
        Refill::Refused(Refusal::AfterWindow { .. } | Refusal::NoLease) => (clock, lease + 1, seconds, switches),
        Refill::Refused(_) => (clock + 1, lease, seconds, switches),
        _ => (clock, lease, seconds + u64::from(used_up), switches + u64::from(switched)),
    };
    let counts = (after.clock_refusals, after.lease_refusals, after.seconds_used_up, after.node_switches);
    if !right {
        Err(format!(
            "position {:?}, {leases_taken} leases taken, published {published:?}: answered {answer:?}",
            Parts::from_raw(position)
        ))
    } else if counts != expected_counts {
        Err(format!(
            "{answer:?} counted as {} clock and {} lease refusals, {} seconds used up and {} node switches",
            counts.0 - clock,
            counts.1 - lease,
            counts.2 - seconds,
            counts.3 - switches
        ))
    } else {
        Ok(())
    }
}

/// Runs one seed for `steps` steps; the first duplicate, wrong answer or member that does not
/// recover, described.
fn simulate(seed: u64, steps: u64) -> Result<Summary, String> {
    let mut random = Random(seed);
    let blocks = u64::from((POOL.1 - POOL.0) / BLOCK + 1);
    let mut now_ms = 0u64;
    let mut coordinator = Coordinator::new();
    let fleet = (0..MEMBERS).map(|index| Member::new(1000 + index as u64, blocks, now_ms));
    let range =
        RANGE_SERVERS.iter().enumerate().map(|(index, &nodes)| Member::new_range(2000 + index as u64, nodes, now_ms));
    let mut members: Vec<Member> = fleet.chain(range).collect();
    let mut issued = Issued::default();
    let mut summary = Summary::default();
    let mut standby_away_since: Option<u64> = None;
    let mut history = History::new(40, "ms");
    // While the faults are healed: since when, and when each member first issued since.
    let mut healed: Option<(u64, Vec<Option<u64>>)> = None;

    for step in 0..steps {
        summary.steps = step + 1;
        now_ms += random.below(40);
        let faults = step % CYCLE_STEPS < CYCLE_STEPS - HEALED_STEPS;
        if faults {
            healed = None;
        } else if healed.is_none() {
            heal(&mut coordinator, &mut members, now_ms);
            standby_away_since = None;
            history.note(now_ms, "faults healed, clocks agree");
            summary.heals += 1;
            healed = Some((now_ms, vec![None; members.len()]));
        }
        if let Some((since, recovered)) = &healed {
            if now_ms > since + LIVENESS_BOUND_MS {
                if let Some(late) = recovered.iter().position(Option::is_none) {
                    return Err(format!(
                        "not live: seed {seed}, step {step}: member {late} issued nothing in the {LIVENESS_BOUND_MS} ms since the faults were healed at {since} ms\nlast events:\n{history}"
                    ));
                }
            }
        }
        // The coordinator's formation.
        if faults && random.chance(600) && coordinator.primary_up {
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
        if faults && coordinator.standby_attached && random.chance(300) {
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

        let index = random.below(members.len() as u64) as usize;
        let member = &mut members[index];
        if now_ms < member.down_until {
            continue;
        }
        // Faults of one member or server.
        match random.below(1_000_000) {
            _ if !faults => {}
            // A range-mode server whose rows are gone must not restart before it published a
            // lease again: its shared memory alone then bounds the seconds it used.
            0..=199 if !member.bound_in_memory_only => {
                member.crash(now_ms + random.below(5_000));
                history.note(now_ms, format_args!("member {index} crashed"));
                summary.range_restarts += u64::from(member.own_database.is_some());
                continue;
            }
            200..=499 => member.cut_off_until = now_ms + random.below(20_000),
            500..=799 => {
                // A clock stepped back or forward, by up to a minute.
                member.clock_offset += random.offset(60);
                history.note(now_ms, format_args!("member {index} clock offset now {}", member.clock_offset));
            }
            800..=1_099 => member.clock_offset += random.offset(1),
            1_100..=1_199 => {
                if let Some(database) = member.own_database.as_mut().filter(|database| database.table_exists) {
                    database.commit_durably(every_row_deleted());
                    member.bound_in_memory_only = true;
                    summary.rows_deleted += 1;
                    history.note(now_ms, format_args!("member {index}: a DBA deleted its rows"));
                }
            }
            1_200..=1_249 => {
                if let Some(database) = member.own_database.as_mut().filter(|database| database.table_exists) {
                    database.commit_durably(every_row_deleted());
                    database.table_exists = false;
                    member.bound_in_memory_only = true;
                    summary.extension_drops += 1;
                    history.note(now_ms, format_args!("member {index}: DROP EXTENSION"));
                }
            }
            1_250..=2_999 => {
                if let Some(database) = member.own_database.as_mut().filter(|database| !database.table_exists) {
                    database.table_exists = true;
                    history.note(now_ms, format_args!("member {index}: CREATE EXTENSION"));
                }
            }
            _ => {}
        }
        let now = member.clock(now_ms);
        if now_ms >= member.next_tick_at {
            member.next_tick_at = now_ms + 1_000;
            let fate = match random.below(100) {
                _ if !faults => Fate::Plain,
                0..=7 => Fate::LocalOnly,
                8..=10 => Fate::ReplyLost,
                _ => Fate::Plain,
            };
            let reachable = now_ms >= member.cut_off_until;
            let tick = member.tick(now, &mut coordinator, reachable, fate, random.chance(250_000));
            match tick.outcome {
                Outcome::Taken(lease) => {
                    summary.leases_taken += 1;
                    member.bound_in_memory_only = false;
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
            // The session ends, and another begins: a backend holds no node, so nothing goes back.
            member.backends[backend] = Backend::new();
            member.backend_rereads[backend] = None;
            continue;
        }
        let run = if random.chance(BULK_CHANCE) { 1 + random.below(BULK_RUN) } else { 1 + random.below(8) } as u32;
        let lease_first = member.memory.published.map(|published| published.lease.first_node);
        let before = Before::read(&member.memory);
        let answer = member.refill(backend, now, run);
        let reread_for = member.backend_rereads[backend];
        if let Err(wrong) = check_answer(now, run, &before, reread_for, &member.memory, &answer) {
            return Err(format!(
                "wrong answer: seed {seed}, step {step}: member {index}'s backend {backend} at clock {now}, a run of {run}: {wrong}\nlast events:\n{history}"
            ));
        }
        summary.seconds_used_up += member.memory.seconds_used_up - before.counted.2;
        member.backend_rereads[backend] = match answer {
            Refill::ReadClockAgain => Some(Parts::from_raw(before.position).timestamp),
            Refill::Issued { .. } | Refill::Refused(Refusal::ClockBehind { .. }) => None,
            _ => reread_for,
        };
        match answer {
            Refill::Issued { first, count } => {
                if let Some(other) = issued.record(first, count, index) {
                    let last = Parts::from_raw(first.to_raw() + u64::from(count) - 1);
                    return Err(format!(
                        "duplicate: seed {seed}, step {step}: plain values {first:?} to {last:?} issued by member {index} and member {other} (coordinator failovers {})\nlast events:\n{history}",
                        coordinator.failovers,
                    ));
                }
                let (nodes, ids) = member.count_use(lease_first.unwrap_or(first.node_id), first, count);
                if nodes as u64 > ids.div_ceil(NODE_SECOND) {
                    return Err(format!(
                        "too many nodes: seed {seed}, step {step}: member {index} used {nodes} nodes for {ids} IDs in second {}\nlast events:\n{history}",
                        first.timestamp
                    ));
                }
                summary.most_nodes_in_a_second = summary.most_nodes_in_a_second.max(nodes);
                summary.node_crossings +=
                    u64::from(first.node_id != Parts::from_raw(first.to_raw() + u64::from(count) - 1).node_id);
                if let Some((since, recovered)) = &mut healed {
                    if recovered[index].is_none() {
                        recovered[index] = Some(now_ms);
                        summary.slowest_recovery_ms = summary.slowest_recovery_ms.max(now_ms - *since);
                    }
                }
            }
            Refill::WaitForSecond(second) => {
                let ahead = second.saturating_sub(now).min(60);
                member.backend_waits[backend] = now_ms + ahead * 1000 - now_ms % 1000;
            }
            Refill::ReadClockAgain => {}
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

#[cfg(not(any(feature = "fault-grant-uncertain-commits", feature = "fault-position-rewinds")))]
#[test]
fn no_id_is_issued_twice_and_every_member_recovers_through_failovers_lost_commits_crashes_and_clock_steps() {
    let started = std::time::Instant::now();
    let mut total = Summary::default();
    let summaries =
        common::run_seeds(SEEDS, |seed| simulate(seed, STEPS)).unwrap_or_else(|failure| panic!("{failure}"));
    for (seed, summary) in summaries {
        assert!(summary.leases_taken > 100, "seed {seed}: too few leases to prove anything: {summary:?}");
        assert!(summary.ids > 100_000, "seed {seed}: too few IDs to prove anything: {summary:?}");
        assert!(summary.failovers > 10 && summary.uncertain_commits > 30, "seed {seed}: faults too rare: {summary:?}");
        assert!(
            summary.range_restarts > 5 && summary.rows_deleted > 2 && summary.extension_drops > 0,
            "seed {seed}: range-mode faults too rare: {summary:?}"
        );
        assert!(
            summary.node_crossings > 100 && summary.seconds_used_up > 10 && summary.most_nodes_in_a_second == 3,
            "seed {seed}: runs too short to cross nodes and use blocks up: {summary:?}"
        );
        assert_eq!(summary.heals, STEPS / CYCLE_STEPS, "seed {seed}: {summary:?}");
        total.steps += summary.steps;
        total.ids += summary.ids;
        total.leases_taken += summary.leases_taken;
        total.uncertain_commits += summary.uncertain_commits;
        total.failovers += summary.failovers;
        total.refusals += summary.refusals;
        total.node_crossings += summary.node_crossings;
        total.seconds_used_up += summary.seconds_used_up;
        total.most_nodes_in_a_second = total.most_nodes_in_a_second.max(summary.most_nodes_in_a_second);
        total.range_restarts += summary.range_restarts;
        total.rows_deleted += summary.rows_deleted;
        total.extension_drops += summary.extension_drops;
        total.heals += summary.heals;
        total.slowest_recovery_ms = total.slowest_recovery_ms.max(summary.slowest_recovery_ms);
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{} steps in {seconds:.1} s ({:.0} steps/s): {} IDs, {} leases, {} uncertain commits, {} failovers, {} refusals, \
         each for its reason; {} runs went on into the next node, {} waits for the next second with a block used up, \
         at most {} nodes used by one member in one second; range-mode servers: {} restarts, {} deletions of their \
         rows, {} DROP EXTENSIONs; no duplicate; after each of {} heals every member issued again, the slowest after \
         {} ms",
        total.steps,
        total.steps as f64 / seconds,
        total.ids,
        total.leases_taken,
        total.uncertain_commits,
        total.failovers,
        total.refusals,
        total.node_crossings,
        total.seconds_used_up,
        total.most_nodes_in_a_second,
        total.range_restarts,
        total.rows_deleted,
        total.extension_drops,
        total.heals,
        total.slowest_recovery_ms,
    );
}

/// Range mode's own rule, which the simulation meets only by chance: after a restart the server
/// resumes right after its leases' high-water marks, not after their ends, and its backends wait
/// for that second only when it is at most the lead (and the second being written) away.
#[test]
fn a_range_server_restarted_with_its_clock_stepped_back_resumes_after_its_high_water_mark() {
    let mut server = Member::new_range(2000, RANGE_SERVERS[0], 0);
    let mut fleet_coordinator = Coordinator::new();
    let mut tick =
        |server: &mut Member, now| server.tick(now, &mut fleet_coordinator, true, Fate::Plain, false).outcome;
    let Outcome::Taken(lease) = tick(&mut server, T0) else { panic!("no lease taken") };
    assert_eq!((lease.start, lease.end, lease.used_through), (T0, T0 + 59, T0 + HIGH_WATER_LEAD));
    assert!(matches!(server.refill(0, T0 + 5, 1), Refill::Issued { .. }));
    let Outcome::Renewed(renewed) = tick(&mut server, T0 + 6) else { panic!("the high-water mark was not moved") };
    assert_eq!((renewed.end, renewed.used_through), (T0 + 59, T0 + 6 + HIGH_WATER_LEAD));
    server.crash(0);
    let Outcome::Taken(resumed) = tick(&mut server, T0 - 30) else { panic!("no lease taken after the restart") };
    assert_eq!(resumed.start, renewed.used_through + 1, "resumed right after the high-water mark");
    assert_eq!(server.refill(0, T0 - 30, 1), Refill::Refused(Refusal::BeforeWindow { now: T0 - 30, first: T0 + 17 }));
    assert_eq!(server.refill(0, T0 + 5, 1), Refill::Refused(Refusal::BeforeWindow { now: T0 + 5, first: T0 + 17 }));
    assert_eq!(server.refill(0, T0 + 6, 1), Refill::WaitForSecond(T0 + 17));
    assert!(matches!(server.refill(0, T0 + 17, 1), Refill::Issued { .. }));
}

/// The lease `member` takes at `T0`, its commit durable on a reachable coordinator.
fn takes_a_lease(member: &mut Member, coordinator: &mut Coordinator) -> Lease {
    let Outcome::Taken(lease) = member.tick(T0, coordinator, true, Fate::Plain, false).outcome else {
        panic!("no lease taken")
    };
    lease
}

/// A tick that cannot reach the coordinator changes nothing: the published lease stays, and
/// its backends issue under it until it lapses; the failure says why, for the server's log.
#[test]
fn a_member_cut_off_from_the_coordinator_keeps_issuing_under_its_lease_and_says_why() {
    let mut member = Member::new(1000, 4, 0);
    let mut coordinator = Coordinator::new();
    let lease = takes_a_lease(&mut member, &mut coordinator);
    let tick = member.tick(T0 + 10, &mut coordinator, false, Fate::Plain, false);
    let Outcome::Failed(error) = tick.outcome else { panic!("the tick reached the coordinator: {tick:?}") };
    assert_eq!(error.to_string(), "could not connect to the coordinator");
    assert_eq!((tick.withdrawn, member.memory.published()), (None, Some(lease)));
    assert!(matches!(member.refill(0, lease.end, 1), Refill::Issued { .. }));
    assert_eq!(
        member.refill(0, lease.end + 2, 1),
        Refill::Refused(Refusal::AfterWindow { now: lease.end + 2, last: lease.end })
    );
}

/// Rule 3's bound is per node: a member whose row is gone (a coordinator lost it) waits out the
/// seconds it may have used on those nodes only, and takes another block that is free at once,
/// even in the last second it used, when its own block would be free one second later.
#[test]
fn a_member_whose_row_is_gone_takes_a_free_block_at_once() {
    let mut member = Member::new(1000, 4, 0);
    let mut coordinator = Coordinator::new();
    let lease = takes_a_lease(&mut member, &mut coordinator);
    coordinator.commit_durably(Write::Delete { holder: member.holder, key: LeaseKey::from(&lease) });
    let tick = member.tick(lease.used_through, &mut coordinator, true, Fate::Plain, false);
    assert_eq!(tick.withdrawn, Some((lease, Withdrawal::Gone)));
    let Outcome::Taken(next) = tick.outcome else { panic!("no lease taken: {tick:?}") };
    assert_ne!(next.first_node, lease.first_node, "the block it may have used is not taken again");
    assert_eq!(next.start, lease.used_through, "another block is free now");
}

/// A block is free the second after its latest lease ends: in that lease's last second, a block
/// free now goes first, even against the member's preference.
#[test]
fn a_block_free_now_goes_before_one_whose_lease_ends_now() {
    let mut member = Member::new(1000, 4, 0);
    let mut coordinator = Coordinator::new();
    let preferred =
        Lease { first_node: POOL.0, last_node: POOL.0 + BLOCK - 1, start: T0 - 10, end: T0, used_through: T0 };
    coordinator.commit_durably(Write::Insert { holder: 1001, lease: preferred });
    let lease = takes_a_lease(&mut member, &mut coordinator);
    assert_eq!((lease.first_node, lease.start), (POOL.0 + BLOCK, T0));
}

/// A preference names a block counted round the pool, however large (randflake_pg passes a hash
/// of the server's identity reduced to the pool, but the keeper takes any).
#[test]
fn a_preference_past_the_last_block_counts_on_from_the_first() {
    let source =
        NodeSource::Fleet { pool_first: POOL.0, pool_last: POOL.1, block_size: BLOCK, preference: 4 * 1000 + 2 };
    let mut member =
        Member::with_keeper(1000, Keeper::new(source, Terms { length: LEASE_SECONDS, high_water_lead: None }), 0);
    let Outcome::Taken(lease) = member.tick(T0, &mut Coordinator::new(), true, Fate::Plain, false).outcome else {
        panic!("no lease taken")
    };
    assert_eq!(lease.first_node, POOL.0 + 2 * BLOCK);
}

/// A renewal moves the end of the lease the backends follow and leaves the server's position
/// alone: the next run, whichever backend takes it, goes on from the last value handed out.
#[test]
fn a_renewal_keeps_the_servers_position() {
    let mut member = Member::new(1000, 4, 0);
    let mut coordinator = Coordinator::new();
    let lease = takes_a_lease(&mut member, &mut coordinator);
    let Refill::Issued { first, count } = member.refill(0, T0 + 7, 4) else { panic!("nothing issued") };
    let Outcome::Renewed(renewed) = member.tick(T0 + 7, &mut coordinator, true, Fate::Plain, false).outcome else {
        panic!("not renewed")
    };
    assert!(renewed.end > lease.end);
    let Refill::Issued { first: next, .. } = member.refill(1, T0 + 7, 4) else { panic!("nothing issued") };
    assert_eq!(next.to_raw(), first.to_raw() + u64::from(count));
}

/// The plain values a member's backends were handed, in order, and how many nodes they came from.
fn runs_of(member: &mut Member, calls: &[(usize, u64, u32)]) -> (Vec<(u64, u32)>, usize) {
    let runs: Vec<(u64, u32)> = calls
        .iter()
        .map(|&(backend, now, run)| match member.refill(backend, now, run) {
            Refill::Issued { first, count } => (first.to_raw(), count),
            other => panic!("backend {backend} was not issued a run of {run} at {now}: {other:?}"),
        })
        .collect();
    let nodes: BTreeSet<u32> = runs
        .iter()
        .flat_map(|&(first, count)| {
            Parts::from_raw(first).node_id..=Parts::from_raw(first + u64::from(count) - 1).node_id
        })
        .collect();
    (runs, nodes.len())
}

/// Every backend of a member takes its runs from the member's one position: within a second
/// they share the block's first node until it is used up, a run goes on into the next node, and
/// the member uses no more nodes than its IDs of the second fill. Once the block is used up, every
/// backend waits for the next second, which begins again at the block's first node.
#[test]
fn backends_of_one_member_share_its_nodes_within_a_second() {
    let mut member = Member::new(1000, 4, 0);
    let lease = takes_a_lease(&mut member, &mut Coordinator::new());
    let (runs, nodes) = runs_of(&mut member, &[(0, T0, 100), (1, T0, 5), (2, T0, 64), (0, T0, 7)]);
    let start = Parts { timestamp: T0, node_id: lease.first_node, sequence: 0 }.to_raw();
    assert_eq!(runs, [(start, 100), (start + 100, 5), (start + 105, 64), (start + 169, 7)]);
    assert_eq!(nodes, 1, "176 IDs from one node, whichever backend took them");
    let (runs, nodes) = runs_of(&mut member, &[(1, T0, 131_000)]);
    assert_eq!(runs, [(start + 176, 131_000)]);
    assert_eq!(Parts::from_raw(start + 176 + 131_000 - 1).node_id, lease.first_node + 1, "the run went on");
    assert_eq!(nodes, 2, "131,176 IDs fill ⌈131,176 ÷ 131,072⌉ = 2 nodes");
    // The rest of the block, then the wait: for every backend.
    let rest = BLOCK * (MAX_SEQUENCE + 1) - 131_176;
    assert_eq!(runs_of(&mut member, &[(2, T0, rest + 10)]).0, [(start + 131_176, rest)], "cut at the block's end");
    for backend in 0..BACKENDS {
        assert_eq!(member.refill(backend, T0, 1), Refill::WaitForSecond(T0 + 1));
    }
    assert_eq!(member.memory.seconds_used_up, BACKENDS as u64);
    let next = Parts { timestamp: T0 + 1, node_id: lease.first_node, sequence: 0 }.to_raw();
    assert_eq!(runs_of(&mut member, &[(1, T0 + 1, 3), (0, T0 + 1, 3)]).0, [(next, 3), (next + 3, 3)]);
}

/// A crash loses the position with the rest of shared memory. The restarted member's keeper takes
/// another block (its old lease still holds the old one until its end), whose runs begin at its
/// first node, in the very second of the crash: nothing the old position handed out comes again.
#[test]
fn a_restarted_member_starts_a_new_position_on_another_block() {
    let mut member = Member::new(1000, 4, 0);
    let mut coordinator = Coordinator::new();
    let old = takes_a_lease(&mut member, &mut coordinator);
    let (before, _) = runs_of(&mut member, &[(0, T0 + 3, 50)]);
    member.crash(0);
    let Outcome::Taken(new) = member.tick(T0 + 3, &mut coordinator, true, Fate::Plain, false).outcome else {
        panic!("no lease taken after the restart")
    };
    assert_ne!(new.first_node, old.first_node);
    assert_eq!(new.start, T0 + 3);
    let (after, _) = runs_of(&mut member, &[(0, T0 + 3, 50)]);
    assert_eq!(after, [(Parts { timestamp: T0 + 3, node_id: new.first_node, sequence: 0 }.to_raw(), 50)]);
    assert_ne!(Parts::from_raw(before[0].0).node_id, Parts::from_raw(after[0].0).node_id);
}

/// The lease's window is checked before the position's second: a clock before the lease's start
/// (beyond the high-water lead) is refused as such, even behind the position. Within the window, a
/// clock one second behind the position is read again once, then refused, as is one further behind.
#[cfg(not(feature = "fault-position-rewinds"))]
#[test]
fn the_leases_window_comes_before_the_positions_second() {
    let mut member = Member::new(1000, 4, 0);
    let lease = takes_a_lease(&mut member, &mut Coordinator::new());
    runs_of(&mut member, &[(0, T0 + 5, 1)]);
    let early = T0 - HIGH_WATER_LEAD - 2;
    assert_eq!(member.refill(1, early, 1), Refill::Refused(Refusal::BeforeWindow { now: early, first: lease.start }));
    assert_eq!(member.refill(1, T0 + 4, 1), Refill::ReadClockAgain);
    assert_eq!(member.refill(1, T0 + 4, 1), Refill::Refused(Refusal::ClockBehind { now: T0 + 4, used: T0 + 5 }));
    assert_eq!(member.refill(1, T0 + 3, 1), Refill::Refused(Refusal::ClockBehind { now: T0 + 3, used: T0 + 5 }));
    assert_eq!((member.memory.clock_refusals, member.memory.lease_refusals), (3, 0));
}

/// The last second an ID can carry ends every lease: a clock past it is refused as such, and a
/// clock before it, past a lease that ended earlier, as a lapsed lease.
#[test]
fn past_the_last_second_an_id_can_carry_nothing_is_issued() {
    let mut member = Member::new(1000, 4, 0);
    let last_lease = Lease {
        first_node: POOL.0,
        last_node: POOL.0 + BLOCK - 1,
        start: MAX_SECOND - 10,
        end: MAX_SECOND,
        used_through: MAX_SECOND,
    };
    member.memory.publish(last_lease, false);
    assert!(matches!(member.refill(0, MAX_SECOND, 1), Refill::Issued { .. }));
    let past = Refusal::PastLastSecond { now: MAX_SECOND + 1 };
    assert_eq!(member.refill(0, MAX_SECOND + 1, 1), Refill::Refused(past));
    assert_eq!(past.to_string(), format!("second {} is past the last an ID can carry", MAX_SECOND + 1));
    assert_eq!(member.refill(0, MAX_SECOND + 5, 1), Refill::Refused(Refusal::PastLastSecond { now: MAX_SECOND + 5 }));
    let mut member = Member::new(1000, 4, 0);
    member.memory.publish(Lease { end: MAX_SECOND - 5, used_through: MAX_SECOND - 5, ..last_lease }, false);
    assert_eq!(
        member.refill(0, MAX_SECOND, 1),
        Refill::Refused(Refusal::AfterWindow { now: MAX_SECOND, last: MAX_SECOND - 5 })
    );
}

/// Runs the default budget with a rule switched off (`broken` says which): it must end in a
/// duplicate, and in nothing else first.
#[cfg(any(feature = "fault-grant-uncertain-commits", feature = "fault-position-rewinds"))]
fn finds_a_duplicate(broken: &str) {
    let failure = common::run_seeds(SEEDS, |seed| simulate(seed, STEPS))
        .expect_err(&format!("{broken}, and the default budget found no duplicate"));
    assert!(failure.starts_with("duplicate"), "the simulation failed otherwise first:\n{failure}");
    println!("found, as it must be:\n{failure}");
}

#[cfg(feature = "fault-grant-uncertain-commits")]
#[test]
fn with_uncertain_commits_granted_the_simulation_finds_a_duplicate() {
    finds_a_duplicate("the keeper granted uncertain commits");
}

#[cfg(feature = "fault-position-rewinds")]
#[test]
fn with_the_positions_clock_rule_off_the_simulation_finds_a_duplicate() {
    finds_a_duplicate("the position moved back to clocks stepped back");
}
