//! The keeper's statements on the lease table, in one transaction of the keeper at a time.
#![forbid(unsafe_code)]

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::spi::SpiError;
use randflake::decisions::keeper::{
    CommitEvidence, LeaseKey, LeaseStore, LeasedBlock, Outcome, StoreError, StoredLease, TableCheck,
};
use randflake::{Lease, Renewal};

use super::commit_evidence::{self, EvidenceReader};
use super::vetting::{self, Verdict};
use super::{as_extension, lock_table};
use crate::pg::lock::TableLock;
use crate::pg::transaction;

/// The lease table, through SQL, in one transaction of the keeper at a time.
pub struct KeeperStore {
    pub schema: String,
    pub table_name: String,
    /// The lease table, quoted for SQL.
    pub table: String,
    /// Fleet mode: the table may be a foreign table.
    pub foreign_allowed: bool,
    /// Where the commits' evidence is read, beside the table.
    pub evidence: EvidenceReader,
    /// This server's identity in the lease table: system identifier and timeline.
    pub holder: String,
    pub server_name: String,
}

impl KeeperStore {
    /// Runs `body` in a transaction of its own; a transaction that `body` did not commit (it
    /// failed, or panicked) is rolled back, and the keeper stays up and tries again. `time_limit`
    /// is the tick's deadline.
    pub fn transaction(
        &mut self,
        time_limit: Duration,
        body: impl FnOnce(&mut Self) -> randflake::decisions::keeper::Tick,
    ) -> randflake::decisions::keeper::Tick {
        // Readings after the commit end well inside the tick's deadline.
        self.evidence.start_tick(time_limit * 3 / 4);
        transaction::start();
        let tick = PgTryBuilder::new(AssertUnwindSafe(|| body(self)))
            .catch_others(|caught| randflake::decisions::keeper::Tick {
                withdrawn: None,
                outcome: Outcome::Failed(StoreError(format!("internal error: {}", message_of(caught)))),
            })
            .execute();
        // What `body` did not commit (it failed, or panicked) is rolled back here.
        transaction::abort();
        tick
    }

    fn args_of(&self, key: LeaseKey) -> [pgrx::datum::DatumWithOid<'_>; 3] {
        [(key.first_node as i32).into(), (key.start as i64).into(), self.holder.as_str().into()]
    }
}

impl LeaseStore for KeeperStore {
    /// Also takes the lock the tick's statements need, waiting a bounded time: a table whose
    /// lock another session holds or awaits fails the tick, with the sessions named.
    fn check_table(&mut self) -> Result<TableCheck, StoreError> {
        let verdict = caught(|| Ok(vetting::vet(&self.schema, &self.table_name, self.foreign_allowed)))?;
        Ok(match verdict {
            Verdict::Missing => TableCheck::Missing,
            Verdict::Trusted(relation) => {
                // A cancel (the tick's deadline) during the wait is caught as the tick's failure.
                caught(|| Ok(lock_table(relation, TableLock::RowExclusive)))?
                    .map_err(|not_granted| StoreError(not_granted.to_string()))?;
                caught(|| Ok(commit_evidence::check(&self.schema, self.foreign_allowed)))?
            }
            Verdict::Refused(reason) => TableCheck::Refused(reason),
        })
    }

    fn stored(&mut self, key: LeaseKey) -> Result<Option<StoredLease>, StoreError> {
        let query = format!(
            "SELECT last_node, lease_end, used_through FROM {} WHERE first_node = $1 AND lease_start = $2 AND holder = $3",
            self.table
        );
        caught(|| {
            Spi::connect(|client| {
                let rows = client.select(&query, Some(1), &self.args_of(key))?;
                if rows.is_empty() {
                    return Ok(None);
                }
                let row = rows.first();
                Ok(match (row.get::<i32>(1)?, row.get::<i64>(2)?, row.get::<i64>(3)?) {
                    (Some(last_node), Some(end), Some(used_through)) => Some(StoredLease {
                        last_node: last_node as u32,
                        end: end as u64,
                        used_through: used_through as u64,
                    }),
                    _ => None,
                })
            })
        })
    }

    fn renew(&mut self, key: LeaseKey, renewal: Renewal, now: u64) -> Result<Option<Renewal>, StoreError> {
        // Stored values never move back, even past a renewal whose commit was uncertain.
        let query = format!(
            "UPDATE {} SET lease_end = greatest(lease_end, $4), used_through = greatest(used_through, $5),
                           renewed_at = pg_catalog.now()
              WHERE first_node = $1 AND lease_start = $2 AND holder = $3 AND lease_end >= $6
          RETURNING lease_end, used_through",
            self.table
        );
        caught(|| {
            Spi::connect_mut(|client| {
                let [first, start, holder] = self.args_of(key);
                let args = [
                    first,
                    start,
                    holder,
                    (renewal.end as i64).into(),
                    (renewal.used_through as i64).into(),
                    (now as i64).into(),
                ];
                let rows = client.update(&query, Some(1), &args)?;
                if rows.is_empty() {
                    return Ok(None);
                }
                let row = rows.first();
                Ok(row
                    .get::<i64>(1)?
                    .zip(row.get::<i64>(2)?)
                    .map(|(end, used)| Renewal { end: end as u64, used_through: used as u64 }))
            })
        })
    }

    fn delete(&mut self, key: LeaseKey) -> Result<(), StoreError> {
        let query = format!("DELETE FROM {} WHERE first_node = $1 AND lease_start = $2 AND holder = $3", self.table);
        caught(|| Spi::run_with_args(&query, &self.args_of(key)))
    }

    /// Leases of another holder are never shortened: that may be the primary this server was
    /// promoted from, whose marks may not all have been replicated here.
    fn end_own_leases(&mut self, first: u32, last: u32) -> Result<(), StoreError> {
        let overlapping = "holder = $1 AND first_node <= $3 AND last_node >= $2";
        let end = format!(
            "UPDATE {} SET lease_end = used_through, renewed_at = pg_catalog.now()
              WHERE {overlapping} AND lease_end > used_through AND used_through >= lease_start",
            self.table
        );
        let unused = format!("DELETE FROM {} WHERE {overlapping} AND used_through < lease_start", self.table);
        caught(|| {
            let args = || [self.holder.as_str().into(), (first as i32).into(), (last as i32).into()];
            Spi::run_with_args(&end, &args())?;
            Spi::run_with_args(&unused, &args())
        })
    }

    fn leases_of(&mut self, first: u32, last: u32) -> Result<Vec<LeasedBlock>, StoreError> {
        let query = format!(
            "SELECT first_node, last_node, lease_end FROM {} WHERE first_node <= $2 AND last_node >= $1",
            self.table
        );
        caught(|| {
            Spi::connect(|client| {
                let rows = client.select(&query, None, &[(first as i32).into(), (last as i32).into()])?;
                let mut leases = Vec::with_capacity(rows.len());
                for row in rows {
                    if let (Some(first), Some(last), Some(end)) =
                        (row.get::<i32>(1)?, row.get::<i32>(2)?, row.get::<i64>(3)?)
                    {
                        leases.push(LeasedBlock { first_node: first as u32, last_node: last as u32, end: end as u64 });
                    }
                }
                Ok(leases)
            })
        })
    }

    fn insert(&mut self, lease: &Lease) -> Result<(), StoreError> {
        let query = format!(
            // renewed_at is explicit: through postgres_fdw, a remote default does not apply.
            "INSERT INTO {} (first_node, last_node, holder, server_name, lease_start, lease_end, used_through, renewed_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, pg_catalog.now())",
            self.table
        );
        caught(|| {
            Spi::run_with_args(
                &query,
                &[
                    (lease.first_node as i32).into(),
                    (lease.last_node as i32).into(),
                    self.holder.as_str().into(),
                    self.server_name.as_str().into(),
                    (lease.start as i64).into(),
                    (lease.end as i64).into(),
                    (lease.used_through as i64).into(),
                ],
            )
        })
    }

    fn prune_inside(&mut self, lease: &Lease, before: u64) -> Result<(), StoreError> {
        let query = format!("DELETE FROM {} WHERE first_node >= $1 AND last_node <= $2 AND lease_end < $3", self.table);
        caught(|| {
            Spi::run_with_args(
                &query,
                &[(lease.first_node as i32).into(), (lease.last_node as i32).into(), (before as i64).into()],
            )
        })
    }

    fn commit(&mut self, needs_evidence: bool) -> Result<CommitEvidence, StoreError> {
        let written_on = if needs_evidence { Some(caught(|| self.evidence.server())?) } else { None };
        // An ERROR at commit (a remote COMMIT that failed, a deferred check) is caught, and the
        // transaction then aborted by `transaction`. A commit whose wait for synchronous standbys
        // was cancelled returns here with a WARNING only: what it shows afterwards decides.
        caught(|| {
            transaction::commit();
            Ok(())
        })?;
        match written_on {
            Some(server) => caught(|| self.evidence.after_commit(server, &mut transaction::Worker)),
            None => Ok(CommitEvidence::NotRead),
        }
    }
}

/// The value of `work`, run marked as the extension's own, or the error PostgreSQL or SPI
/// raised in it, as a store error.
fn caught<T>(work: impl FnOnce() -> Result<T, SpiError>) -> Result<T, StoreError> {
    PgTryBuilder::new(AssertUnwindSafe(|| as_extension(work).map_err(|error| StoreError(error.to_string()))))
        .catch_others(|caught| Err(StoreError(message_of(caught))))
        .execute()
}

/// An error's message, with its DETAIL where it has one: postgres_fdw says there which host
/// refused and why.
fn message_of(caught: CaughtError) -> String {
    match caught {
        CaughtError::PostgresError(report)
        | CaughtError::ErrorReport(report)
        | CaughtError::RustPanic { ereport: report, .. } => match report.detail() {
            Some(detail) => format!("{} ({})", report.message(), detail.replace('\n', " ")),
            None => report.message().to_owned(),
        },
    }
}
