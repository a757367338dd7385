//! Reading back whether the keeper's commit is durable, from the server that holds the lease table:
//! `randflake.commit_evidence` there (for a fleet member, the foreign table imported beside the
//! lease table). This file only reads positions; `randflake::decisions::durability` decides.
//!
//! The server the tick's transaction writes to is read in that transaction, before the commit
//! (through postgres_fdw, on the same remote connection as the writes). After the commit
//! returned, readings are taken in transactions of their own, each a new remote transaction,
//! until one shows the commit durable or the tick's time for it is up: the commit is then
//! uncertain, and the keeper publishes nothing it wrote.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use pgrx::prelude::*;
use pgrx::spi::{quote_qualified_identifier, SpiError};
use randflake::decisions::durability::{Commit, CommitEvidence, WalReading, WalServer};
use randflake::decisions::keeper::TableCheck;

use super::vetting::{self, Verdict};
use crate::pg::backend;
use crate::pg::transaction::Alone;

/// The name of the evidence relation, in the lease table's schema.
pub const RELATION: &str = "commit_evidence";

/// How long to wait between two readings while a commit is not yet shown durable.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Whether the keeper may use the lease table in `schema`, already trusted, as far as its
/// evidence relation goes: without one it could confirm no commit, so it writes nothing.
pub fn check(schema: &str, foreign_allowed: bool) -> TableCheck {
    match vetting::vet_commit_evidence(schema, RELATION, foreign_allowed) {
        Verdict::Trusted(_) => TableCheck::Trusted,
        Verdict::Refused(reason) => TableCheck::Refused(reason),
        Verdict::Missing => TableCheck::Refused(format!(
            "{} is missing, so no commit could be confirmed durable (in range mode: ALTER EXTENSION randflake_pg UPDATE; on a fleet member: import it from the coordinator beside the lease table)",
            quote_qualified_identifier(schema, RELATION)
        )),
    }
}

/// The evidence relation of one lease table.
pub struct EvidenceReader {
    /// The relation, quoted for SQL.
    relation: String,
    query: String,
    /// Until when readings may be taken after a commit: inside the tick's deadline.
    poll_until: Instant,
}

impl EvidenceReader {
    /// The reader of `commit_evidence` in `schema`, the lease table's.
    pub fn new(schema: &str) -> Self {
        let relation = quote_qualified_identifier(schema, RELATION);
        let lsn = |column: &str| format!("pg_catalog.int8({column} OPERATOR(pg_catalog.-) '0/0'::pg_catalog.pg_lsn)");
        let query = format!(
            "SELECT system_identifier, timeline, {}, {} FROM {relation}",
            lsn("insert_lsn"),
            lsn("durable_lsn")
        );
        Self { relation, query, poll_until: Instant::now() }
    }

    /// Starts a tick (or a procedure's call) that may spend up to `limit` polling after its commit.
    pub fn start_tick(&mut self, limit: Duration) {
        self.poll_until = Instant::now() + limit;
    }

    /// The server the current transaction writes to, read in it.
    pub fn server(&self) -> Result<WalServer, SpiError> {
        self.read().map(|reading| reading.server)
    }

    /// After a commit made on `written_on` returned: readings, each in a transaction of its own
    /// that `transactions` gives it (for a foreign table, a new remote transaction), until one
    /// shows it durable or the time set for them is up.
    pub fn after_commit(
        &self,
        written_on: WalServer,
        transactions: &mut impl Alone,
    ) -> Result<CommitEvidence, SpiError> {
        let first = transactions.alone(|| self.read())?;
        let mut evidence = CommitEvidence::Read { written_on, first, latest: first };
        while evidence.commit() == Commit::Uncertain && first.server == written_on && Instant::now() < self.poll_until {
            backend::wait_on_latch(POLL_INTERVAL);
            check_for_interrupts!();
            evidence = CommitEvidence::Read { written_on, first, latest: transactions.alone(|| self.read())? };
        }
        Ok(evidence)
    }

    fn read(&self) -> Result<WalReading, SpiError> {
        Spi::connect(|client| {
            let rows = client.select(&self.query, Some(1), &[])?;
            let row = rows.first();
            let read = (row.get::<i64>(1)?, row.get::<i64>(2)?, row.get::<i64>(3)?);
            let (Some(system_identifier), Some(timeline), Some(insert)) = read else {
                error!("{} returned no position", self.relation);
            };
            Ok(WalReading {
                server: WalServer { system_identifier: system_identifier as u64, timeline: timeline as u32 },
                insert: insert as u64,
                durable: row.get::<i64>(4)?.map(|durable| durable as u64),
            })
        })
    }
}
