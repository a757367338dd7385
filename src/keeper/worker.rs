//! The lease keeper: a background worker, started by the launcher, that runs the crate's keeper
//! machine (`randflake::keeper`) once a second over this server's lease table, through SQL, and
//! its shared memory, and reports what it did.
//!
//! All of its SQL runs in its own short, bounded transactions, never in a caller's, so a user's
//! rollback can neither lose nor duplicate a lease. A commit counts as durable only when the
//! server holding the lease table shows it so afterwards (`commit_evidence.rs` reads, the crate
//! judges); otherwise it is uncertain, and the machine uses nothing it wrote. The keeper never
//! panics on what it reads: every failure is logged once, shown by randflake_status(), and
//! tried again on the next tick.

#![forbid(unsafe_code)]

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use pgrx::bgworkers::BackgroundWorker;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::spi::{quote_qualified_identifier, SpiError};
use randflake::keeper::{
    Board, CommitEvidence, Keeper, LeaseKey, LeaseStore, NodeSource as Source, Outcome, StoreError, StoredLease,
    TableCheck, Withdrawal,
};
use randflake::{Lease, Terms, HIGH_WATER_LEAD, MAX_SECOND};

use super::commit_evidence::{self, EvidenceReader};
use super::settings::{self, NodeSource};
use super::vetting::{self, Verdict};
use super::{holder, runtime};
use crate::keeper_state::KeeperState;
use crate::pg::{backend, bgworker, clock, transaction};
use crate::shmem::{keeper_report, lease_board};

pub fn main() {
    bgworker::install_signal_handlers();
    // A keeper terminated a moment ago may still be finishing its last transaction: two must
    // never write leases at once. The launcher starts this one again shortly.
    if !keeper_report::claim(backend::pid()) {
        return;
    }
    // After the transaction clean-up, so the place is free only once this keeper has stopped
    // writing.
    backend::at_exit(give_up_keeper_place);
    BackgroundWorker::connect_worker_to_spi(Some(&settings::database()), settings::keeper_role().as_deref());
    runtime::prepare();
    let mut keeper = KeeperWorker::new();
    loop {
        keeper.tick();
        bgworker::idle(settings::tick());
    }
}

/// Frees the keeper's place. Its last reported state stays, so that the launcher can tell a
/// keeper that ran from one that never got going.
fn give_up_keeper_place() {
    keeper_report::release(backend::pid());
}

struct KeeperWorker {
    machine: Keeper,
    store: SqlStore,
    /// The last failure logged, so that a lasting one is logged once, not every second.
    last_failure: Option<String>,
}

impl KeeperWorker {
    fn new() -> Self {
        let node_source = settings::node_source();
        let (first, last) = settings::node_range();
        let identity = holder::identity();
        let (schema, table_name) = settings::lease_table();
        let source = match node_source {
            NodeSource::Fleet => {
                let size = settings::fleet_block_size();
                let blocks = u64::from((last - first) / size.clamp(1, last - first + 1) + 1);
                let preference = holder::fnv1a(identity.as_bytes()) % blocks;
                Source::Fleet { pool_first: first, pool_last: last, block_size: size, preference }
            }
            _ => Source::Range { first, last },
        };
        let terms = Terms {
            length: settings::lease_seconds(),
            // A fleet member never resumes a lease after a restart (it takes a free block), so
            // it needs no high-water mark short of the lease's end.
            high_water_lead: matches!(source, Source::Range { .. }).then_some(HIGH_WATER_LEAD),
        };
        Self {
            machine: Keeper::new(source, terms),
            store: SqlStore {
                table: quote_qualified_identifier(schema.as_str(), table_name.as_str()),
                evidence: EvidenceReader::new(&schema),
                schema,
                table_name,
                foreign_allowed: matches!(source, Source::Fleet { .. }),
                holder: identity,
                server_name: holder::server_name(),
            },
            last_failure: None,
        }
    }

    /// How long one tick's transaction may take: well inside the margin a renewal leaves (a
    /// third of the lease, and half the high-water lead), and never more than a few seconds.
    fn time_limit() -> Duration {
        let lease_share = Duration::from_millis(settings::lease_seconds() * 1000 / 6);
        lease_share.clamp(Duration::from_secs(1), Duration::from_secs(4))
    }

    fn tick(&mut self) {
        let now = clock::unix_time().as_secs();
        let action = if lease_board::read().1.is_some() { "check or renew" } else { "take" };
        let mut board = SharedBoard { now };
        let (machine, store) = (&self.machine, &mut self.store);
        let tick =
            runtime::bounded(Self::time_limit(), || store.transaction(|store| machine.tick(now, store, &mut board)));
        if let Some((lease, withdrawal)) = tick.withdrawn {
            self.log_withdrawal(&lease, withdrawal);
        }
        let (state, cause) = self.judge(tick.outcome, action);
        match cause {
            None => {
                self.last_failure = None;
                keeper_report::report(state, "");
            }
            Some((warning, cause)) => {
                if self.last_failure.as_ref() != Some(&warning) {
                    warning!("randflake_pg lease keeper: {warning}; retrying every second");
                    self.last_failure = Some(warning);
                }
                keeper_report::report(state, &cause);
            }
        }
        keeper_report::count_tick();
    }

    fn log_withdrawal(&self, lease: &Lease, withdrawal: Withdrawal) {
        let (what, detail) = match withdrawal {
            Withdrawal::Gone => ("is gone from", ""),
            Withdrawal::CutShort => ("was cut short in", " (its end or high-water mark moved back)"),
            Withdrawal::Expired => ("expired in", " before it could be renewed"),
        };
        warning!(
            "randflake_pg lease keeper: the lease of nodes {}..{} from second {} {what} {}{detail}; withdrawn, taking a new one",
            lease.first_node, lease.last_node, lease.start, self.store.table
        );
    }

    /// The state a tick's outcome leaves the keeper in, and for a failure the warning to log
    /// and the cause to report.
    fn judge(&self, outcome: Outcome, action: &str) -> (KeeperState, Option<(String, String)>) {
        let table = &self.store.table;
        match outcome {
            Outcome::Holding | Outcome::Renewed(_) => (KeeperState::Holding, None),
            Outcome::Taken(lease) => {
                log!(
                    "randflake_pg lease keeper: leased nodes {}..{} for seconds {}..{} as {} in {table}",
                    lease.first_node,
                    lease.last_node,
                    lease.start,
                    lease.end,
                    self.store.holder,
                );
                (KeeperState::Holding, None)
            }
            Outcome::NoTable => (KeeperState::WaitingForLeaseTable, None),
            Outcome::Refused(reason) => (
                KeeperState::RefusingLeaseTable,
                Some((format!("refusing the lease table: {reason}; no SQL runs on it"), reason)),
            ),
            Outcome::Unconfirmed => {
                let cause = format!(
                    "the commit of its write to {table} was not known durable within {} s: the server holding the table did not show it durable (a synchronous standby that did not confirm it? its wait cancelled there?); nothing it wrote is used",
                    Self::time_limit().as_secs()
                );
                (KeeperState::Failing, Some((format!("could not {action} the lease: {cause}"), cause)))
            }
            Outcome::PastLastSecond => {
                let cause = format!("no lease can start at or before {MAX_SECOND}, the last second an ID can carry");
                (KeeperState::Failing, Some((cause.clone(), cause)))
            }
            Outcome::Failed(StoreError(failure)) => {
                (KeeperState::Failing, Some((format!("could not {action} the lease in {table}: {failure}"), failure)))
            }
        }
    }
}

/// This server's shared memory, as the keeper machine sees it.
struct SharedBoard {
    /// The tick's clock reading, recorded as the time of a renewal.
    now: u64,
}

impl Board for SharedBoard {
    fn published(&self) -> Option<Lease> {
        lease_board::read().1.map(|published| published.lease)
    }

    fn last_published(&self) -> Option<Lease> {
        lease_board::last_published()
    }

    fn publish(&mut self, lease: Lease, renewal: bool) {
        lease_board::publish(&lease, renewal, self.now);
    }

    fn withdraw(&mut self) {
        lease_board::withdraw();
    }

    fn unconfirmed(&self) -> Vec<LeaseKey> {
        lease_board::unconfirmed()
    }

    fn remember_unconfirmed(&mut self, key: LeaseKey) {
        lease_board::remember_unconfirmed(key);
    }

    fn forget_unconfirmed(&mut self) {
        lease_board::forget_unconfirmed();
    }
}

/// The lease table, through SQL, in one transaction of the keeper at a time.
struct SqlStore {
    schema: String,
    table_name: String,
    /// The lease table, quoted for SQL.
    table: String,
    /// Fleet mode: the table may be a foreign table.
    foreign_allowed: bool,
    /// Where the commits' evidence is read, beside the table.
    evidence: EvidenceReader,
    /// This server's identity in the lease table: system identifier and timeline.
    holder: String,
    server_name: String,
}

impl SqlStore {
    /// Runs `body` in a transaction of its own; a transaction that `body` did not commit (it
    /// failed, or panicked) is rolled back, and the keeper stays up and tries again.
    fn transaction(&mut self, body: impl FnOnce(&mut Self) -> randflake::keeper::Tick) -> randflake::keeper::Tick {
        // Readings after the commit end well inside the tick's deadline.
        self.evidence.start_tick(KeeperWorker::time_limit() * 3 / 4);
        transaction::start();
        let tick = PgTryBuilder::new(AssertUnwindSafe(|| body(self)))
            .catch_others(|caught| randflake::keeper::Tick {
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

impl LeaseStore for SqlStore {
    fn check_table(&mut self) -> Result<TableCheck, StoreError> {
        caught(|| {
            Ok(match vetting::vet(&self.schema, &self.table_name, self.foreign_allowed) {
                Verdict::Missing => TableCheck::Missing,
                Verdict::Trusted => commit_evidence::check(&self.schema, self.foreign_allowed),
                Verdict::Refused(reason) => TableCheck::Refused(reason),
            })
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

    fn renew(
        &mut self,
        key: LeaseKey,
        end: u64,
        used_through: u64,
        now: u64,
    ) -> Result<Option<(u64, u64)>, StoreError> {
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
                let args =
                    [first, start, holder, (end as i64).into(), (used_through as i64).into(), (now as i64).into()];
                let rows = client.update(&query, Some(1), &args)?;
                if rows.is_empty() {
                    return Ok(None);
                }
                let row = rows.first();
                Ok(row.get::<i64>(1)?.zip(row.get::<i64>(2)?).map(|(end, used)| (end as u64, used as u64)))
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

    fn leases_of(&mut self, first: u32, last: u32) -> Result<Vec<(u32, u32, u64)>, StoreError> {
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
                        leases.push((first as u32, last as u32, end as u64));
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
            Some(server) => caught(|| self.evidence.after_commit(server)),
            None => Ok(CommitEvidence::NotRead),
        }
    }
}

/// The value of `work`, or the error PostgreSQL or SPI raised in it, as a store error.
fn caught<T>(work: impl FnOnce() -> Result<T, SpiError>) -> Result<T, StoreError> {
    PgTryBuilder::new(AssertUnwindSafe(|| work().map_err(|error| StoreError(error.to_string()))))
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
