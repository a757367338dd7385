//! Capacity at internet scale: how many nodes a fleet uses, what its coordinator carries, and how
//! long a member waits for its first lease, from a deterministic simulation of 10,000 members
//! that runs the shipped machines, and a model of 100,000 checked against it.
//!
//! **Simulated**, every member and every second, in simulated time from one seed:
//! - each member's lease keeper ([`Keeper`]) ticks once a second (`randflake.keeper_tick`),
//!   against one lease table on one coordinator, on the default terms (`randflake.lease_seconds`
//!   = 600): it takes a block at start-up, renews it once a third of the lease has passed, and
//!   after a restart (a crash, or a standby promoted: a new holder with empty shared memory) takes
//!   another block while its old lease runs out;
//! - each keeper transaction runs on the coordinator for [`TRANSACTION_MS`]: it reads what was
//!   committed before it began, and an insert of a block that another transaction still in flight
//!   inserted fails, as the table's exclusion constraint fails it once the other commits (23P01:
//!   the keeper tries again at its next tick);
//! - each member's IDs come from the shipped refill policy ([`Backend`]) over the shipped server
//!   position ([`randflake::shared::server_position::ServerPosition`]), which its keeper's lease
//!   bounds: every second the member takes what its backends use from the position, in runs of up
//!   to a node's 131,072 values rather than one by one, and the position says how many nodes that
//!   took;
//! - application processes acquire single nodes of an application pool in the same table, extend
//!   them when a third is left and release them (some exit and others start), through the shipped
//!   decisions ([`randflake::decisions::app_lease`]).
//!
//! **Modelled** rather than simulated: members' rates, drawn from [`draw_member`] (nine in ten
//! below 5,000 IDs a second, one in a hundred from 120,000 to 800,000) with 5 to 400 backends
//! each; the IDs a member's backends use in a second (its peak rate once every [`PEAK_EVERY`]
//! seconds, a fraction of it otherwise); the rest of each backend's last run of 64
//! ([`randflake::BATCH`]), which it drops when the second turns: in a peak second every backend
//! drops 63 values, the most it can; the coordinator's network and disks, as the fixed
//! [`TRANSACTION_MS`]; a coordinator that never fails (`fleet_simulation.rs` has the failures).
//!
//! Members of one block size are cut into pools of at most [`POOL_MEMBERS`], each with its
//! spares: a take reads every lease of its pool, so a pool of 10,000 would make every take read
//! 10,000 rows. Sized by the rule, the test asserts that no member waits or is refused, that none
//! uses more nodes in a second than the rule gives it, that every member's first lease comes
//! before its backends' first calls would give up waiting (5 s), and that the coordinator carries
//! one transaction per member a second and exactly the renewals the lease's terms make. Sized by
//! the peak alone, without the margin, a second test asserts that exactly the members the margin
//! is for wait, at their peak, for the next second.
//!
//! **The 100,000-member figures are a model** ([`Model`]): the same draws and pool layout for
//! 100,000 members, with the coordinator's load from the rules the 10,000-member run follows (one
//! transaction per member a second, a renewal per member every third of a lease, a take reading
//! its pool's leases). The test checks the model against the 10,000-member run before it prints
//! the 100,000-member figures. The full run of 100,000 is an ignored test, about 30 s of CPU in the
//! release build (`cargo test --release -p randflake --test fleet_capacity -- --ignored
//! --nocapture`) and some minutes in the debug build.
//!
//! `cargo test -p randflake --test fleet_capacity -- --nocapture` prints the figures that
//! docs/fleets-and-replicas.md quotes.

// Of what the simulations share, this one uses the random numbers and the table writes only.
#[allow(dead_code)]
mod common;
#[path = "common/fleet.rs"]
mod fleet;

use std::collections::VecDeque;

use common::{Random, TableWrite};
use fleet::{BackendView, Rows, SharedMemory, Write};

use randflake::decisions::app_lease::{self, AppLeaseStore, AppWindow, CommitEvidence as AppCommit};
use randflake::decisions::durability::{CommitEvidence, WalReading, WalServer};
use randflake::decisions::keeper::{
    Board, Keeper, LeaseKey, LeaseStore, LeasedBlock, NodeSource, Outcome, StoreError, StoredLease, TableCheck,
};
use randflake::decisions::refill::{Backend, Refill, FIRST_LEASE_WAIT};
use randflake::shared::server_position::NodeSpan;
use randflake::{Lease, Renewal, Terms, BATCH, MAX_NODE, MAX_SEQUENCE};

const T0: u64 = 1_800_000_000;
/// IDs one node issues in one second.
const NODE_SECOND: u64 = MAX_SEQUENCE as u64 + 1;
/// The most values a backend drops when the second turns: the rest of its last run.
const DROPPED_PER_BACKEND: u64 = BATCH as u64 - 1;
/// randflake.lease_seconds and randflake.keeper_tick, at their defaults.
const LEASE_SECONDS: u64 = 600;
const TICK_MS: u64 = 1_000;
/// How long one keeper transaction runs on the coordinator: a few round trips and the wait for
/// the synchronous standby. An assumption, not a measurement.
const TRANSACTION_MS: u64 = 10;
/// Members start within this many seconds of each other (a rolling start of the whole fleet).
const START_SPREAD: u64 = 30;
/// A member's peak second comes once in this many seconds.
const PEAK_EVERY: u64 = 10;
/// The most members of one pool. A member taking a lease reads every lease of its pool, one row
/// a member: a fleet's members of one block size are cut into pools of at most this many (each
/// its own `randflake.node_id_min..max`), all leasing from the coordinator's one table.
const POOL_MEMBERS: usize = 1_000;
/// Restarts, per million members a second, after the start: 60 is about one in 80 members in
/// the 200 s of a run after the start.
const RESTARTS: u64 = 60;
/// Spare blocks a pool holds beyond its members, per thousand, plus one: a restarted member's
/// old block stays leased until its lease ends (at most a lease), so a pool needs one spare for
/// each member that may restart within a lease.
const SPARE_PER_THOUSAND: usize = 50;
/// Application processes beside the fleet, their leases (extended when a third is left, as the
/// example client does; 300 s, so that each extends once in the third of a fleet lease the run
/// measures), and how often one exits and another starts, per million a second.
const APPS: usize = 2_000;
const APP_LEASE_SECONDS: u64 = 300;
const APP_CHURN: u64 = 300;
/// Nodes of the application pool: the processes, plus those released within the last minute
/// (a released node stays out of use for a minute, [`app_lease::CLOCK_TOLERANCE`]), plus spares.
const APP_POOL: u32 = 2_200;
/// Holders: members count up from 1 (a restart is a new holder); applications and their
/// released leases have numbers of their own.
const APP_HOLDERS: u64 = 1 << 40;
const RELEASED_HOLDERS: u64 = 2 << 40;

// ---------------------------------------------------------------- members and how they are sized

/// What a member is sized for: its peak IDs in one second, and how many backends make IDs.
#[derive(Clone, Copy, Debug)]
struct Rate {
    peak: u64,
    backends: u64,
}

/// How blocks are sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sizing {
    /// The rule: the peak, plus the 63 values each backend may drop when the second turns.
    Rule,
    /// The peak alone, with no margin: below the rule for a member whose peak comes within
    /// 63 × backends of filling its last node.
    PeakOnly,
}

impl Sizing {
    fn nodes(self, rate: Rate) -> u32 {
        let used = match self {
            Sizing::Rule => rate.peak + DROPPED_PER_BACKEND * rate.backends,
            Sizing::PeakOnly => rate.peak,
        };
        used.div_ceil(NODE_SECOND) as u32
    }
}

/// A value of `low..=high`, spread evenly over the octaves between them (so log-uniform, in
/// whole numbers: the same on every machine).
fn spread(random: &mut Random, low: u64, high: u64) -> u64 {
    let octaves = (high / low).ilog2() + 1;
    let floor = low << random.below(u64::from(octaves));
    (floor + random.below(floor)).min(high)
}

/// A member's rate: nine in ten make 10 to 5,000 IDs a second at their peak, nine in a hundred
/// 5,000 to 120,000, one in a hundred 120,000 to 800,000; each has 5 to 400 backends making IDs.
fn draw_member(random: &mut Random) -> Rate {
    let peak = match random.below(1_000) {
        0..=899 => spread(random, 10, 5_000),
        900..=989 => spread(random, 5_000, 120_000),
        _ => spread(random, 120_000, 800_000),
    };
    Rate { peak, backends: spread(random, 5, 400) }
}

/// One pool of the fleet: blocks of one size, for the members that need that many nodes.
#[derive(Clone, Copy, Debug)]
struct Pool {
    block: u32,
    first: u32,
    last: u32,
    members: usize,
}

impl Pool {
    fn blocks(&self) -> u32 {
        (self.last - self.first + 1) / self.block
    }
}

/// The fleet's pools, laid out from node 0: for each block size, as few pools as keep each to
/// at most `pool_members` members, each with its spares. With them, the pool of each member,
/// and the application pool's first node.
fn lay_out(rates: &[Rate], sizing: Sizing, pool_members: usize) -> (Vec<Pool>, Vec<usize>, u32) {
    let largest = rates.iter().map(|&rate| sizing.nodes(rate)).max().unwrap_or(1);
    let (mut pools, mut pool_of, mut next) = (Vec::new(), vec![0; rates.len()], 0u32);
    for block in 1..=largest {
        let members: Vec<usize> = (0..rates.len()).filter(|&index| sizing.nodes(rates[index]) == block).collect();
        if members.is_empty() {
            continue;
        }
        let per_pool = members.len().div_ceil(members.len().div_ceil(pool_members));
        for chunk in members.chunks(per_pool) {
            chunk.iter().for_each(|&index| pool_of[index] = pools.len());
            let blocks = (chunk.len() + chunk.len() * SPARE_PER_THOUSAND / 1_000 + 1) as u32;
            pools.push(Pool { block, first: next, last: next + blocks * block - 1, members: chunk.len() });
            next += blocks * block;
        }
    }
    (pools, pool_of, next)
}

// ---------------------------------------------------------------- the coordinator

/// A transaction's writes, visible to others once it commits.
struct InFlight {
    visible_at_ms: u64,
    writes: Vec<Write>,
}

/// What the coordinator carried in one second.
#[derive(Clone, Copy, Debug, Default)]
struct Load {
    /// Keeper transactions: one per member and tick, whatever it does.
    transactions: u64,
    /// Keeper transactions that wrote: leases taken, leases renewed.
    takes: u64,
    renewals: u64,
    /// Takes that lost a race for a block to another member's (23P01).
    races: u64,
    /// Lease rows read by takes: a take reads every lease of its pool.
    rows_read: u64,
    /// Application lease calls, each a transaction that writes.
    app_calls: u64,
}

impl Load {
    fn writes(&self) -> u64 {
        self.takes + self.renewals + self.app_calls
    }
}

/// The coordinator: the lease table, the commits still in flight, and its load second by second.
struct Coordinator {
    rows: Rows,
    in_flight: VecDeque<InFlight>,
    load: Vec<Load>,
    wal_inserted: u64,
}

impl Coordinator {
    /// The commits that have ended by `now_ms`, made visible.
    fn catch_up(&mut self, now_ms: u64) {
        while self.in_flight.front().is_some_and(|commit| commit.visible_at_ms <= now_ms) {
            let commit = self.in_flight.pop_front().expect("just seen");
            commit.writes.iter().for_each(|write| write.apply(&mut self.rows));
        }
    }

    fn load_at(&mut self, now_ms: u64) -> &mut Load {
        let second = (now_ms / 1_000) as usize;
        if self.load.len() <= second {
            self.load.resize(second + 1, Load::default());
        }
        &mut self.load[second]
    }

    /// Whether a commit in flight inserts a lease of a node of `lease` for a second of it.
    fn inserting(&self, lease: &Lease) -> bool {
        self.in_flight.iter().flat_map(|commit| &commit.writes).any(|write| match write {
            Write::Insert { lease: other, .. } => {
                other.first_node <= lease.last_node
                    && lease.first_node <= other.last_node
                    && other.start <= lease.end
                    && lease.start <= other.end
            }
            _ => false,
        })
    }
}

const COORDINATOR: WalServer = WalServer { system_identifier: 1, timeline: 1 };

/// One keeper transaction, begun at `now_ms`: it reads the rows committed before it began, and
/// its writes become visible when it commits, [`TRANSACTION_MS`] later.
struct Transaction<'a> {
    coordinator: &'a mut Coordinator,
    holder: u64,
    now_ms: u64,
    writes: Vec<Write>,
}

impl LeaseStore for Transaction<'_> {
    fn check_table(&mut self) -> Result<TableCheck, StoreError> {
        Ok(TableCheck::Trusted)
    }

    fn stored(&mut self, key: LeaseKey) -> Result<Option<StoredLease>, StoreError> {
        Ok(fleet::stored(&self.coordinator.rows, self.holder, key))
    }

    fn renew(&mut self, key: LeaseKey, renewal: Renewal, now: u64) -> Result<Option<Renewal>, StoreError> {
        fleet::check_renewal(&self.coordinator.rows, self.holder, key, renewal, now)?;
        let write = Write::Renew { holder: self.holder, key, renewal, now };
        // The row as the write leaves it: the transaction reads its own write.
        let mut row = Rows::default();
        if let Some(stored) = fleet::stored(&self.coordinator.rows, self.holder, key) {
            let lease = Lease {
                first_node: key.first_node,
                last_node: stored.last_node,
                start: key.start,
                end: stored.end,
                used_through: stored.used_through,
            };
            Write::Insert { holder: self.holder, lease }.apply(&mut row);
        }
        write.apply(&mut row);
        self.writes.push(write);
        Ok(fleet::renewed(&row, self.holder, key, now))
    }

    fn delete(&mut self, key: LeaseKey) -> Result<(), StoreError> {
        self.writes.push(Write::Delete { holder: self.holder, key });
        Ok(())
    }

    fn end_own_leases(&mut self, first: u32, last: u32) -> Result<(), StoreError> {
        self.writes.push(Write::EndOwn { holder: self.holder, first, last });
        Ok(())
    }

    fn leases_of(&mut self, first: u32, last: u32) -> Result<Vec<LeasedBlock>, StoreError> {
        let leases = fleet::leases_of(&self.coordinator.rows, first, last);
        self.coordinator.load_at(self.now_ms).rows_read += leases.len() as u64;
        Ok(leases)
    }

    fn insert(&mut self, lease: &Lease) -> Result<(), StoreError> {
        fleet::check_insert(&self.coordinator.rows, lease)?;
        if self.coordinator.inserting(lease) {
            return Err(StoreError("23P01: a concurrent transaction inserted an overlapping lease".into()));
        }
        self.writes.push(Write::Insert { holder: self.holder, lease: *lease });
        Ok(())
    }

    fn prune_inside(&mut self, lease: &Lease, before: u64) -> Result<(), StoreError> {
        self.writes.push(Write::Prune { first: lease.first_node, last: lease.last_node, before });
        Ok(())
    }

    /// Commits durably (the coordinator's synchronous standby confirms), visible to transactions
    /// that begin after it ends.
    fn commit(&mut self, needs_evidence: bool) -> Result<CommitEvidence, StoreError> {
        let coordinator = &mut *self.coordinator;
        if !self.writes.is_empty() {
            coordinator.wal_inserted += 1;
            let writes = std::mem::take(&mut self.writes);
            coordinator.in_flight.push_back(InFlight { visible_at_ms: self.now_ms + TRANSACTION_MS, writes });
        }
        if !needs_evidence {
            return Ok(CommitEvidence::NotRead);
        }
        let reading = WalReading {
            server: COORDINATOR,
            insert: coordinator.wal_inserted,
            durable: Some(coordinator.wal_inserted),
        };
        Ok(CommitEvidence::Read { written_on: COORDINATOR, first: reading, latest: reading })
    }
}

/// One application lease call, in a transaction of its own that holds the table's lock (calls
/// are serialised), committed durably at once.
struct AppCall<'a> {
    rows: &'a mut Rows,
    holder: u64,
    released_as: u64,
}

impl AppCall<'_> {
    /// The holder's windows of `node`: (start, last second), oldest first.
    fn own(&self, node: u32) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.rows
            .overlapping(node, node)
            .filter(move |(key, _)| key.holder == self.holder && key.lease.first_node == node)
            .map(|(key, row)| (key.lease.start, row.end))
    }

    fn write(&mut self, write: Write) {
        write.apply(self.rows);
    }
}

fn node_lease(node: u32, start: u64, last: u64) -> Lease {
    Lease { first_node: node, last_node: node, start, end: last, used_through: last }
}

impl AppLeaseStore for AppCall<'_> {
    fn windows(&mut self, first: u32, last: u32) -> Vec<(u32, u64)> {
        fleet::leases_of(self.rows, first, last).iter().map(|block| (block.first_node, block.end)).collect()
    }

    fn remove_ended(&mut self, node: u32, now: u64) {
        self.write(Write::Prune { first: node, last: node, before: now });
    }

    fn insert(&mut self, window: AppWindow) -> bool {
        let lease = node_lease(window.node, window.start, window.last());
        if fleet::check_insert(self.rows, &lease).is_err() {
            return false;
        }
        self.write(Write::Insert { holder: self.holder, lease });
        true
    }

    fn lengthen(&mut self, node: u32, last: u64, now: u64) -> Option<(u64, u64)> {
        let (start, end) = self.own(node).filter(|&(_, end)| end >= now).last()?;
        let key = LeaseKey { first_node: node, start };
        self.write(Write::Renew { holder: self.holder, key, renewal: Renewal { end: last, used_through: last }, now });
        Some((start, end.max(last)))
    }

    fn latest(&mut self, node: u32) -> Option<(u64, u64)> {
        self.own(node).last()
    }

    fn replace_released(&mut self, node: u32, start: u64, last: u64) -> bool {
        if !self.own(node).any(|(own_start, _)| own_start == start) {
            return false;
        }
        self.write(Write::Delete { holder: self.holder, key: LeaseKey { first_node: node, start } });
        self.write(Write::Insert { holder: self.released_as, lease: node_lease(node, start, last) });
        true
    }

    fn commit(&mut self) -> AppCommit {
        AppCommit::Durable
    }
}

// ---------------------------------------------------------------- the fleet

/// A fleet member: its rate, its pool, and the server it runs, which a restart replaces.
struct Member {
    rate: Rate,
    pool: Pool,
    holder: u64,
    keeper: Keeper,
    memory: SharedMemory,
    backend: Backend,
    /// When the server (re)started, in simulated ms; its keeper ticks then and every second on.
    up_at_ms: u64,
    /// When its first lease since then was published, if it has been.
    leased_at_ms: Option<u64>,
    /// The second its peak comes in, of every [`PEAK_EVERY`].
    peak_phase: u64,
    /// Its first lease since it (re)started, in [`Run::leases`].
    lease: Option<usize>,
}

impl Member {
    fn keeper(pool: Pool, random: &mut Random) -> Keeper {
        let source = NodeSource::Fleet {
            pool_first: pool.first,
            pool_last: pool.last,
            block_size: pool.block,
            preference: random.next(),
        };
        Keeper::new(source, Terms { length: LEASE_SECONDS, high_water_lead: None })
    }

    /// The server starts again at `up_at_ms` as a new holder (a restart, or a standby promoted),
    /// with empty shared memory: a new position, no lease.
    fn restart(&mut self, holder: u64, up_at_ms: u64, random: &mut Random) {
        self.lease = None;
        self.holder = holder;
        self.keeper = Self::keeper(self.pool, random);
        self.memory = SharedMemory::default();
        self.backend = Backend::new();
        self.up_at_ms = up_at_ms;
        self.leased_at_ms = None;
    }

    /// The values its backends take from the position in second `second` of the run: at its peak,
    /// its peak rate and 63 dropped by every backend; otherwise a quarter to all of that.
    fn demand(&self, second: u64, random: &mut Random) -> u64 {
        let most = self.rate.peak + DROPPED_PER_BACKEND * self.rate.backends;
        if second % PEAK_EVERY == self.peak_phase {
            most
        } else {
            most * (250 + random.below(750)) / 1_000
        }
    }
}

/// What one run found.
#[derive(Debug, Default)]
struct Run {
    members: usize,
    seconds: u64,
    pools: Vec<Pool>,
    fleet_nodes: u32,
    ids: u64,
    /// The most nodes any member used in one second, and the most by which a member's nodes in a
    /// second exceeded what the rule gives it (negative: below it).
    most_nodes_in_a_second: u32,
    most_over_the_rule: i64,
    /// Member-seconds in which the lease's nodes were used up before the demand was met, the
    /// members that waited, the values that waited, and the members whose margin (the rule's
    /// nodes beyond the peak's) is a node.
    waits: u64,
    waited: Vec<usize>,
    ids_waited: u64,
    with_margin: Vec<usize>,
    refusals: u64,
    first_refusal: Option<String>,
    restarts: u64,
    /// The second each server's first lease began, and the second the server restarted, if it did.
    leases: Vec<(u64, Option<u64>)>,
    /// Milliseconds from a start, or a restart, to the first lease published.
    start_latency_ms: Vec<u64>,
    restart_latency_ms: Vec<u64>,
    load: Vec<Load>,
    app_nodes_in_use: u64,
    app_acquired: u64,
}

impl Run {
    /// The coordinator's load over the seconds `from..to`: per second on average, and at most.
    fn load_over(&self, from: u64, to: u64) -> (f64, Load, u64) {
        let seconds = &self.load[from as usize..(to as usize).min(self.load.len())];
        let mut total = Load::default();
        for load in seconds {
            total.transactions += load.transactions;
            total.takes += load.takes;
            total.renewals += load.renewals;
            total.races += load.races;
            total.rows_read += load.rows_read;
            total.app_calls += load.app_calls;
        }
        let most_writes = seconds.iter().map(Load::writes).max().unwrap_or(0);
        (seconds.len() as f64, total, most_writes)
    }
}

impl Run {
    /// The renewals the rule makes in the seconds `from..to`: each server's first lease is
    /// renewed a third of a lease after it began, unless the server restarted before.
    fn renewals_due(&self, from: u64, to: u64) -> u64 {
        let due = |&&(start, restarted): &&(u64, Option<u64>)| {
            let renewal = start + LEASE_SECONDS / 3;
            (from..to).contains(&renewal) && restarted.is_none_or(|restart| restart > renewal)
        };
        self.leases.iter().filter(due).count() as u64
    }
}

/// The percentile `p` (of 100) of `values`.
fn percentile(values: &[u64], p: usize) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get((sorted.len().saturating_sub(1)) * p / 100).copied().unwrap_or(0)
}

/// Runs `members` members (and [`APPS`] applications) for `seconds` seconds, their blocks sized
/// by `sizing`.
fn simulate(seed: u64, members: usize, seconds: u64, sizing: Sizing) -> Result<Run, String> {
    let mut random = Random(seed);
    let rates: Vec<Rate> = (0..members).map(|_| draw_member(&mut random)).collect();
    let (pools, pool_of, app_first) = lay_out(&rates, sizing, POOL_MEMBERS);
    let app_pool = (app_first, app_first + APP_POOL - 1);
    if app_pool.1 > MAX_NODE {
        return Err(format!("{members} members and {APP_POOL} application nodes need {} nodes", app_pool.1 + 1));
    }
    let mut run = Run { members, seconds, pools: pools.clone(), fleet_nodes: app_first, ..Run::default() };
    let mut fleet: Vec<Member> = rates
        .iter()
        .enumerate()
        .map(|(index, &rate)| {
            let pool = pools[pool_of[index]];
            Member {
                rate,
                pool,
                holder: index as u64 + 1,
                keeper: Member::keeper(pool, &mut random),
                memory: SharedMemory::default(),
                backend: Backend::new(),
                up_at_ms: random.below(START_SPREAD * 1_000),
                leased_at_ms: None,
                peak_phase: random.below(PEAK_EVERY),
                lease: None,
            }
        })
        .collect();
    run.with_margin =
        (0..members).filter(|&index| Sizing::Rule.nodes(rates[index]) > Sizing::PeakOnly.nodes(rates[index])).collect();
    let mut next_holder = members as u64 + 1;
    // Applications: their lease, if they hold one, and when they start.
    let mut apps: Vec<(Option<AppWindow>, u64)> =
        (0..APPS).map(|_| (None, random.below(START_SPREAD * 1_000))).collect();
    let mut app_holders: Vec<u64> = (0..APPS as u64).map(|index| APP_HOLDERS + index).collect();
    let mut next_app_holder = APP_HOLDERS + APPS as u64;
    let mut coordinator =
        Coordinator { rows: Rows::default(), in_flight: VecDeque::new(), load: Vec::new(), wal_inserted: 0 };
    // The members in the order their keepers tick within a second.
    let mut order: Vec<usize> = (0..members).collect();
    let mut used_nodes: Vec<(u32, u32, u64)> = Vec::with_capacity(members + APPS);

    for second in 0..seconds {
        let now = T0 + second;
        order.sort_by_key(|&index| fleet[index].up_at_ms % TICK_MS);
        // Restarts, after the start: down for up to 10 s (a restart, or a standby's promotion).
        if second > START_SPREAD {
            for member in &mut fleet {
                if random.chance(RESTARTS) {
                    if let Some(lease) = member.lease {
                        run.leases[lease].1 = Some(second);
                    }
                    let up_at = (second + 1 + random.below(10)) * 1_000 + random.below(1_000);
                    member.restart(next_holder, up_at, &mut random);
                    next_holder += 1;
                    run.restarts += 1;
                }
            }
        }
        // The keepers' ticks, in the order of the moments they come.
        for &index in &order {
            let member = &mut fleet[index];
            let at_ms = second * 1_000 + member.up_at_ms % TICK_MS;
            if at_ms < member.up_at_ms {
                continue;
            }
            coordinator.catch_up(at_ms);
            coordinator.load_at(at_ms).transactions += 1;
            let mut transaction =
                Transaction { coordinator: &mut coordinator, holder: member.holder, now_ms: at_ms, writes: Vec::new() };
            let tick = member.keeper.tick(now, &mut transaction, &mut member.memory);
            if let Some((lease, why)) = tick.withdrawn {
                return Err(format!("member {index} withdrew {lease:?} ({why:?}) at {at_ms} ms"));
            }
            let load = coordinator.load_at(at_ms);
            match tick.outcome {
                Outcome::Taken(lease) => {
                    load.takes += 1;
                    if member.leased_at_ms.is_none() {
                        member.lease = Some(run.leases.len());
                        run.leases.push((lease.start - T0, None));
                        let latency = at_ms + TRANSACTION_MS - member.up_at_ms;
                        let first = member.holder as usize <= members;
                        if first { &mut run.start_latency_ms } else { &mut run.restart_latency_ms }.push(latency);
                        member.leased_at_ms = Some(at_ms + TRANSACTION_MS);
                    }
                }
                Outcome::Renewed(_) => load.renewals += 1,
                Outcome::Holding => {}
                Outcome::Failed(error) if error.0.starts_with("23P01") => load.races += 1,
                other => return Err(format!("member {index}'s keeper at {at_ms} ms: {other:?}")),
            }
        }
        // Applications: acquire, extend when a third is left, exit now and then.
        used_nodes.clear();
        for (app, (lease, starts_at)) in apps.iter_mut().enumerate() {
            if second * 1_000 < *starts_at {
                continue;
            }
            let mut call = AppCall {
                rows: &mut coordinator.rows,
                holder: app_holders[app],
                released_as: RELEASED_HOLDERS + next_app_holder,
            };
            match *lease {
                None => {
                    let window =
                        app_lease::acquire(&mut call, app_pool, now, now + APP_LEASE_SECONDS - 1, random.next())
                            .map_err(|refusal| format!("application {app} at second {second}: {refusal:?}"))?;
                    *lease = Some(window);
                    run.app_acquired += 1;
                }
                Some(window) if random.chance(APP_CHURN) => {
                    app_lease::release(&mut call, window.node, now)
                        .map_err(|refusal| format!("application {app} at second {second}: {refusal:?}"))?;
                    *lease = None;
                    app_holders[app] = next_app_holder;
                    next_app_holder += 1;
                }
                Some(window) if window.end_exclusive - now <= APP_LEASE_SECONDS / 3 => {
                    *lease = Some(
                        app_lease::extend(&mut call, window.node, now, now + APP_LEASE_SECONDS - 1)
                            .map_err(|refusal| format!("application {app} at second {second}: {refusal:?}"))?,
                    );
                }
                Some(_) => continue,
            }
            coordinator.load_at(second * 1_000).app_calls += 1;
        }
        for (app, (lease, _)) in apps.iter().enumerate() {
            if let Some(window) = lease.filter(|window| window.start <= now && now < window.end_exclusive) {
                used_nodes.push((window.node, window.node, APP_HOLDERS + app as u64));
            }
        }
        run.app_nodes_in_use = run.app_nodes_in_use.max(
            fleet::leases_of(&coordinator.rows, app_pool.0, app_pool.1).iter().filter(|block| block.end >= now).count()
                as u64,
        );
        // The members' IDs of this second, from the second after their lease was published.
        for (index, member) in fleet.iter_mut().enumerate() {
            if member.leased_at_ms.is_none_or(|at| at >= second * 1_000) {
                continue;
            }
            let Some(lease) = member.memory.published().filter(|lease| lease.allows(now)) else {
                return Err(format!("member {index} has no lease for second {now}"));
            };
            let demand = member.demand(second, &mut random);
            let mut taken = 0;
            while taken < demand {
                let ask = (demand - taken).min(NODE_SECOND) as u32;
                match member.backend.refill(now, ask, &mut BackendView { memory: &mut member.memory }) {
                    Refill::Issued { first, count } => {
                        if first.timestamp != now || first.node_id < lease.first_node {
                            return Err(format!("member {index} was issued {first:?} at {now} under {lease:?}"));
                        }
                        taken += u64::from(count);
                    }
                    Refill::WaitForSecond(next) if next == now + 1 => {
                        run.waits += 1;
                        run.ids_waited += demand - taken;
                        if run.waited.last() != Some(&index) {
                            run.waited.push(index);
                        }
                        break;
                    }
                    other => {
                        run.refusals += 1;
                        run.first_refusal.get_or_insert_with(|| format!("member {index} at {now}: {other:?}"));
                        break;
                    }
                }
            }
            run.ids += taken;
            let span = NodeSpan { first: lease.first_node, last: lease.last_node };
            let nodes = member.memory.position.report().nodes_used_now(span);
            if u64::from(nodes) != taken.div_ceil(NODE_SECOND) {
                return Err(format!("member {index} took {taken} values from {nodes} nodes in second {now}"));
            }
            run.most_nodes_in_a_second = run.most_nodes_in_a_second.max(nodes);
            run.most_over_the_rule =
                run.most_over_the_rule.max(i64::from(nodes) - i64::from(Sizing::Rule.nodes(member.rate)));
            used_nodes.push((lease.first_node, lease.first_node + nodes - 1, member.holder));
        }
        // No node issues for two holders in one second.
        used_nodes.sort_unstable();
        if let Some(pair) = used_nodes.windows(2).find(|pair| pair[1].0 <= pair[0].1) {
            return Err(format!("second {now}: nodes {:?} and {:?} used at once", pair[0], pair[1]));
        }
    }
    run.waited.sort_unstable();
    run.waited.dedup();
    run.load = coordinator.load;
    Ok(run)
}

// ---------------------------------------------------------------- the model

/// What the rules give for a fleet of `members` drawn as the simulation draws them, sized by the
/// rule, with [`APPS`] applications: the nodes its pools and the application pool take, and the
/// coordinator's load in a steady second (every member past its first third of a lease).
#[derive(Debug)]
struct Model {
    members: usize,
    nodes: u32,
    /// Members whose margin is a node: their peak comes within 63 × backends of a full node.
    with_margin: usize,
    /// One keeper transaction per member and second.
    transactions_per_second: f64,
    /// A renewal per member every third of a lease, and a take per restart.
    fleet_writes_per_second: f64,
    /// An application call per extension (one every two thirds of its lease), acquire and release.
    app_calls_per_second: f64,
    /// The leases a take reads: its pool's, one a member, on average over the members; and as
    /// many with one pool for each block size, however many members it has.
    rows_per_take: f64,
    rows_per_take_one_pool_per_size: f64,
}

impl Model {
    fn of(seed: u64, members: usize) -> Self {
        let mut random = Random(seed);
        let rates: Vec<Rate> = (0..members).map(|_| draw_member(&mut random)).collect();
        let (pools, _, fleet_nodes) = lay_out(&rates, Sizing::Rule, POOL_MEMBERS);
        let (one_per_size, _, _) = lay_out(&rates, Sizing::Rule, usize::MAX);
        let rows_per_take = |pools: &[Pool]| {
            pools.iter().map(|pool| (pool.members * pool.members) as f64).sum::<f64>() / members as f64
        };
        let apps = APPS as f64;
        Self {
            members,
            nodes: fleet_nodes + APP_POOL,
            with_margin: rates.iter().filter(|&&rate| Sizing::Rule.nodes(rate) > Sizing::PeakOnly.nodes(rate)).count(),
            transactions_per_second: members as f64,
            fleet_writes_per_second: members as f64 * (3.0 / LEASE_SECONDS as f64 + RESTARTS as f64 / 1e6),
            app_calls_per_second: apps / (APP_LEASE_SECONDS as f64 * 2.0 / 3.0) + 2.0 * apps * APP_CHURN as f64 / 1e6,
            rows_per_take: rows_per_take(&pools),
            rows_per_take_one_pool_per_size: rows_per_take(&one_per_size),
        }
    }

    fn writes_per_second(&self) -> f64 {
        self.fleet_writes_per_second + self.app_calls_per_second
    }

    /// The most members drawn so whose pools, with the application pool, fit in the ID space.
    fn most_that_fit(seed: u64) -> usize {
        let (mut fits, mut not) = (1, 1 << 18);
        while not - fits > 1 {
            let members = (fits + not) / 2;
            if Self::of(seed, members).nodes <= MAX_NODE + 1 {
                fits = members;
            } else {
                not = members;
            }
        }
        fits
    }

    fn print(&self) {
        println!(
            "model of {} members ({} of them with a node of margin): {} nodes of 131072; coordinator {:.0} keeper \
             transactions/s, {:.1} writes/s ({:.1} the fleet's, {:.1} applications'); {:.0} rows read per take \
             ({:.0} with one pool per block size)",
            self.members,
            self.with_margin,
            self.nodes,
            self.transactions_per_second,
            self.writes_per_second(),
            self.fleet_writes_per_second,
            self.app_calls_per_second,
            self.rows_per_take,
            self.rows_per_take_one_pool_per_size,
        );
    }
}

// ---------------------------------------------------------------- the tests

const SEED: u64 = 1;
const MEMBERS: usize = 10_000;
/// The start, then one third of a lease, in which every member renews once.
const SECONDS: u64 = START_SPREAD + LEASE_SECONDS / 3 + 1;

fn print_run(run: &Run, elapsed: f64) {
    let steady = (START_SPREAD, (START_SPREAD + LEASE_SECONDS / 3).min(run.seconds - 1));
    let (seconds, total, most_writes) = run.load_over(steady.0, steady.1);
    let (_, start, most_at_start) = run.load_over(0, START_SPREAD);
    println!("{} members, {} s simulated in {elapsed:.1} s", run.members, run.seconds);
    println!("  pools, by nodes per block: members, pools, blocks, nodes");
    let largest = run.pools.iter().map(|pool| pool.block).max().unwrap_or(0);
    for block in 1..=largest {
        let pools: Vec<&Pool> = run.pools.iter().filter(|pool| pool.block == block).collect();
        let members: usize = pools.iter().map(|pool| pool.members).sum();
        let blocks: u32 = pools.iter().map(|pool| pool.blocks()).sum();
        println!(
            "    {block:>2}: {members:>6} members, {:>3} pools, {blocks:>6} blocks, {:>6} nodes",
            pools.len(),
            blocks * block
        );
    }
    println!(
        "  nodes: {} for the fleet, {APP_POOL} for {APPS} applications (at most {} in use), of 131072",
        run.fleet_nodes, run.app_nodes_in_use
    );
    println!(
        "  IDs: {}; most nodes one member used in a second: {} (the rule's at most {:+}); {} waits for the next second ({} members, {} IDs), {} refusals",
        run.ids,
        run.most_nodes_in_a_second,
        run.most_over_the_rule,
        run.waits,
        run.waited.len(),
        run.ids_waited,
        run.refusals
    );
    println!(
        "  coordinator, steady ({}..{} s): {:.0} keeper transactions/s; writes/s {:.1} on average, at most {} (renewals {:.1}/s, takes {:.2}/s, application calls {:.1}/s; no high-water writes: a fleet lease's mark is its end)",
        steady.0,
        steady.1,
        total.transactions as f64 / seconds,
        total.writes() as f64 / seconds,
        most_writes,
        total.renewals as f64 / seconds,
        total.takes as f64 / seconds,
        total.app_calls as f64 / seconds,
    );
    println!(
        "  coordinator, start (0..{} s): {} takes, at most {most_at_start} writes in a second, {} races lost (23P01); rows read per take: {:.0} at the start, {:.0} after it",
        START_SPREAD,
        start.takes,
        start.races,
        start.rows_read as f64 / start.takes.max(1) as f64,
        total.rows_read as f64 / total.takes.max(1) as f64,
    );
    for (what, latency) in [("start", &run.start_latency_ms), ("restart", &run.restart_latency_ms)] {
        println!(
            "  lease latency from a {what} ({} of them): median {} ms, 99th percentile {} ms, at most {} ms",
            latency.len(),
            percentile(latency, 50),
            percentile(latency, 99),
            latency.iter().max().unwrap_or(&0)
        );
    }
}

/// The checks of a fleet sized by the rule, and the model against it.
fn check_sized_by_the_rule(run: &Run) {
    let members = run.members;
    assert_eq!(
        (run.waits, run.refusals),
        (0, 0),
        "sized by the rule, a member waited or was refused: {:?}",
        run.first_refusal
    );
    assert!(run.most_over_the_rule <= 0, "a member used more nodes in a second than the rule gives it");
    assert!(run.most_nodes_in_a_second >= 6, "the hottest members were not hot: {}", run.most_nodes_in_a_second);
    assert_eq!(run.start_latency_ms.len(), members, "every member took a lease");
    assert!(run.restarts * 1_000 >= members as u64 * 8, "too few restarts: {}", run.restarts);
    // A server that restarted in the last 10 s of the run may not be up yet.
    assert!(run.restart_latency_ms.len() as u64 + run.restarts / 10 >= run.restarts, "{} restarts", run.restarts);
    let latency = run.start_latency_ms.iter().chain(&run.restart_latency_ms).max().copied().unwrap_or(0);
    assert!(latency < FIRST_LEASE_WAIT.as_millis() as u64, "a member waited {latency} ms for its first lease");
    // Every member ticks once a second, and renews each lease a third of a lease after it began.
    let (from, to) = (START_SPREAD, START_SPREAD + LEASE_SECONDS / 3);
    let (seconds, steady, _) = run.load_over(from, to);
    let every_tick = seconds as u64 * members as u64;
    assert!(steady.transactions <= every_tick && steady.transactions >= every_tick * 99 / 100, "{steady:?}");
    assert_eq!(steady.renewals, run.renewals_due(from, to), "{steady:?}");
    // The model, against the run.
    let model = Model::of(SEED, members);
    assert_eq!(model.nodes, run.fleet_nodes + APP_POOL);
    let writes = steady.writes() as f64 / seconds;
    assert!((writes / model.writes_per_second() - 1.0).abs() < 0.05, "{model:?} against {writes:.1} writes/s");
    assert_eq!(model.with_margin, run.with_margin.len());
    let rows = steady.rows_read as f64 / steady.takes.max(1) as f64;
    assert!((rows / model.rows_per_take - 1.0).abs() < 0.2, "{model:?} against {rows:.0} rows a take");
}

#[test]
fn a_fleet_of_10000_sized_by_the_rule_never_waits_and_its_coordinator_carries_a_renewal_per_member_every_third_of_a_lease(
) {
    let started = std::time::Instant::now();
    let run = simulate(SEED, MEMBERS, SECONDS, Sizing::Rule).unwrap_or_else(|failure| panic!("{failure}"));
    print_run(&run, started.elapsed().as_secs_f64());
    check_sized_by_the_rule(&run);
    for members in [MEMBERS, 100_000] {
        Model::of(SEED, members).print();
    }
    let fit = Model::most_that_fit(SEED);
    println!(
        "model: at most {fit} members so drawn fit in the ID space, with their spares and {APP_POOL} application nodes"
    );
    assert!(fit > 100_000);
}

/// Sized by the peak alone, without the margin for the values a backend drops when the second
/// turns, exactly the members that the rule gives a node more wait for the next second at their
/// peak, and no other member: the margin is needed, and enough.
#[test]
fn sized_without_the_margin_exactly_the_members_it_is_for_wait() {
    let started = std::time::Instant::now();
    let seconds = START_SPREAD + 2 * PEAK_EVERY + 3;
    let run = simulate(SEED, MEMBERS, seconds, Sizing::PeakOnly).unwrap_or_else(|failure| panic!("{failure}"));
    print_run(&run, started.elapsed().as_secs_f64());
    assert!(
        run.waits > 0 && run.refusals == 0,
        "{} waits, {} refusals: {:?}",
        run.waits,
        run.refusals,
        run.first_refusal
    );
    assert_eq!(run.waited, run.with_margin, "the members that waited, against those the margin is for");
}

/// The full run of 100,000 members that the model stands for: some minutes in the debug build,
/// so left out of the suites (`cargo test --release -p randflake --test fleet_capacity --
/// --ignored --nocapture`).
#[test]
#[ignore]
fn a_fleet_of_100000_sized_by_the_rule_never_waits() {
    let started = std::time::Instant::now();
    let run = simulate(SEED, 100_000, SECONDS, Sizing::Rule).unwrap_or_else(|failure| panic!("{failure}"));
    print_run(&run, started.elapsed().as_secs_f64());
    check_sized_by_the_rule(&run);
    Model::of(SEED, 100_000).print();
}
