//! What the fleet and application lease simulations share: their random numbers, a table kept
//! on a primary and replayed by its standby, a transaction's view of it, the last events of a
//! run for the report of a duplicate, and the run of seeds.
//!
//! Each simulation keeps its own model of the rows, the server around the table and the clients;
//! only what is the same logic in both lives here.

use std::collections::VecDeque;
use std::fmt;

/// splitmix64: small, fast, and the same sequence on every machine.
pub struct Random(pub u64);

impl Random {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    /// True with probability `per_million` / 1 000 000.
    pub fn chance(&mut self, per_million: u64) -> bool {
        self.below(1_000_000) < per_million
    }

    /// A value of `-bound..=bound`.
    pub fn offset(&mut self, bound: u64) -> i64 {
        self.below(2 * bound + 1) as i64 - bound as i64
    }
}

/// One write of a transaction, applied to each copy of the table it reaches.
pub trait TableWrite {
    /// The table's rows.
    type Rows: Clone + Default;

    fn apply(&self, rows: &mut Self::Rows);
}

/// A table on a primary, and on a standby that replays the primary's commits in order. The
/// standby's rows are always the primary's without the writes it has not replayed yet.
pub struct ReplicatedTable<W: TableWrite> {
    pub primary: W::Rows,
    pub standby: W::Rows,
    /// Committed on the primary, not yet replayed on the standby, in commit order (as WAL is).
    unreplicated: Vec<W>,
}

impl<W: TableWrite> ReplicatedTable<W> {
    pub fn new() -> Self {
        Self { primary: W::Rows::default(), standby: W::Rows::default(), unreplicated: Vec::new() }
    }

    /// A commit on the primary alone, for now.
    pub fn commit_on_primary(&mut self, writes: Vec<W>) {
        writes.iter().for_each(|write| write.apply(&mut self.primary));
        self.unreplicated.extend(writes);
    }

    /// The standby replays everything the primary committed.
    pub fn replicate(&mut self) {
        self.unreplicated.drain(..).for_each(|write| write.apply(&mut self.standby));
    }

    /// The standby becomes the primary: what it had not replayed is lost. How many writes were.
    pub fn promote_standby(&mut self) -> usize {
        let lost = self.unreplicated.len();
        self.unreplicated.clear();
        self.primary = self.standby.clone();
        lost
    }
}

/// A transaction's writes, and the rows as it sees them: the primary's, with its own writes.
pub struct Pending<W: TableWrite> {
    pub rows: W::Rows,
    writes: Vec<W>,
}

impl<W: TableWrite> Pending<W> {
    /// A transaction that begins on the table's primary.
    pub fn begin(table: &ReplicatedTable<W>) -> Self {
        Self { rows: table.primary.clone(), writes: Vec::new() }
    }

    pub fn write(&mut self, write: W) {
        write.apply(&mut self.rows);
        self.writes.push(write);
    }

    /// The writes to commit, taken out of the transaction.
    pub fn take_writes(&mut self) -> Vec<W> {
        std::mem::take(&mut self.writes)
    }
}

/// The last events of a run, oldest first, each with its time since the run began, for the
/// report of a duplicate.
pub struct History {
    events: VecDeque<(u64, String)>,
    kept: usize,
    unit: &'static str,
}

impl History {
    /// A history that keeps the last `kept` events, their times counted in `unit`.
    pub fn new(kept: usize, unit: &'static str) -> Self {
        Self { events: VecDeque::with_capacity(kept), kept, unit }
    }

    pub fn note(&mut self, when: u64, what: impl fmt::Display) {
        if self.events.len() == self.kept {
            self.events.pop_front();
        }
        self.events.push_back((when, what.to_string()));
    }
}

/// One event a line.
impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.events.iter().try_for_each(|(when, what)| writeln!(f, "{when:>9} {}: {what}", self.unit))
    }
}

/// Runs seeds `1..=seeds` in order, each with `simulate`: their summaries, or the first
/// duplicate found, described.
pub fn run_seeds<S>(seeds: u64, mut simulate: impl FnMut(u64) -> Result<S, String>) -> Result<Vec<(u64, S)>, String> {
    (1..=seeds).map(|seed| simulate(seed).map(|summary| (seed, summary))).collect()
}
