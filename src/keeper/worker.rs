//! The lease keeper: a background worker, started by the launcher, that takes this server's
//! node lease, checks and renews it every second, keeps its high-water mark ahead of the clock,
//! and publishes it to the backends.
//!
//! All of its SQL runs in its own short, bounded transactions, never in a caller's, so a user's
//! rollback can neither lose nor duplicate a lease. A lease reaches the backends only after the
//! transaction that wrote it has committed durably; a lease whose row is found gone or cut
//! short is withdrawn from them at once. The keeper never panics on what it reads: every
//! failure is logged once, shown by randflake_status(), and tried again on the next tick.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use pgrx::bgworkers::BackgroundWorker;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::spi::{quote_qualified_identifier, SpiError};
use randflake::{Lease, Terms, HIGH_WATER_LEAD, MAX_SECOND};

use super::vetting::{self, Verdict};
use super::{bounds, holder, TICK};
use crate::clock;
use crate::gucs::{self, NodeSource};
use crate::shmem::published_lease::{self, KeeperState};

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn randflake_lease_keeper_main(_argument: pg_sys::Datum) {
    bounds::install_signal_handlers();
    // SAFETY: reading a PostgreSQL global from the worker's thread.
    let pid = unsafe { pg_sys::MyProcPid };
    // A keeper terminated a moment ago may still be finishing its last transaction: two must
    // never write leases at once. The launcher starts this one again shortly.
    if !published_lease::claim_keeper(pid) {
        return;
    }
    // SAFETY: registering an exit callback from the worker's thread; it runs after the
    // transaction clean-up, so the place is free only once this keeper has stopped writing.
    unsafe { pg_sys::on_shmem_exit(Some(give_up_keeper_place), pg_sys::Datum::from(pid)) };
    BackgroundWorker::connect_worker_to_spi(Some(&gucs::database()), gucs::keeper_role().as_deref());
    bounds::pin_settings();
    bounds::register_hard_deadline();
    let mut keeper = Keeper::new();
    loop {
        keeper.tick();
        bounds::idle(TICK);
    }
}

/// Frees the keeper's place. Its last reported state stays, so that the launcher can tell a
/// keeper that ran from one that never got going.
///
/// # Safety
///
/// Only PostgreSQL calls this, as an `on_shmem_exit` callback.
#[pg_guard]
unsafe extern "C-unwind" fn give_up_keeper_place(_code: i32, pid: pg_sys::Datum) {
    published_lease::release_keeper(pid.value() as i32);
}

struct Keeper {
    source: NodeSource,
    schema: String,
    table_name: String,
    /// The lease table, quoted for SQL.
    table: String,
    /// This server's identity in the lease table: system identifier and timeline.
    holder: String,
    server_name: String,
    /// The last failure logged, so that a lasting one is logged once, not every second.
    last_failure: Option<String>,
}

/// What one tick did.
enum Outcome {
    /// The published lease is intact and needs no write yet.
    Unchanged,
    /// The published lease, renewed as stored.
    Renewed(Lease),
    /// A new lease, taken (after withdrawing the old one, if any).
    Taken(Lease),
    /// The lease table does not exist (yet).
    NoTable,
    /// The lease table exists but the keeper may not use it; why.
    Refused(String),
}

impl Keeper {
    fn new() -> Self {
        let source = gucs::node_source();
        let (schema, table_name) = match (source, gucs::fleet_lease_table()) {
            (NodeSource::Fleet, Some(name)) => name,
            _ => ("randflake".to_owned(), "node_leases".to_owned()),
        };
        Self {
            source,
            table: quote_qualified_identifier(schema.as_str(), table_name.as_str()),
            schema,
            table_name,
            holder: holder::identity(),
            server_name: holder::server_name(),
            last_failure: None,
        }
    }

    fn terms(&self) -> Terms {
        Terms {
            length: gucs::lease_seconds(),
            // A fleet member never resumes a lease after a restart (it takes a free block), so
            // it needs no high-water mark short of the lease's end.
            high_water_lead: (self.source == NodeSource::Range).then_some(HIGH_WATER_LEAD),
        }
    }

    /// How long one tick's transaction may take: well inside the margin a renewal leaves (a
    /// third of the lease, and half the high-water lead), and never more than a few seconds.
    fn time_limit(&self) -> Duration {
        let lease_share = Duration::from_millis(gucs::lease_seconds() * 1000 / 6);
        lease_share.clamp(Duration::from_secs(1), Duration::from_secs(4))
    }

    fn tick(&mut self) {
        let now = clock::unix_time().as_secs();
        let published = published_lease::read().1.map(|published| published.lease);
        let terms = self.terms();
        let outcome = bounds::bounded(self.time_limit(), || in_transaction(|| self.step(now, published, &terms)));
        let (state, cause) = match outcome {
            Ok(Outcome::Unchanged) => (KeeperState::Holding, None),
            Ok(Outcome::Renewed(lease)) => {
                published_lease::publish(&lease, true, now);
                (KeeperState::Holding, None)
            }
            Ok(Outcome::Taken(lease)) => {
                published_lease::publish(&lease, false, now);
                log!(
                    "randflake_pg lease keeper: leased nodes {}..{} for seconds {}..{} as {} in {}",
                    lease.first_node,
                    lease.last_node,
                    lease.start,
                    lease.end,
                    self.holder,
                    self.table
                );
                (KeeperState::Holding, None)
            }
            Ok(Outcome::NoTable) => (KeeperState::WaitingForLeaseTable, None),
            Ok(Outcome::Refused(reason)) => (
                KeeperState::RefusingLeaseTable,
                Some((format!("refusing the lease table: {reason}; no SQL runs on it"), reason)),
            ),
            Err(failure) => {
                let action = if published.is_some() { "check or renew" } else { "take" };
                (
                    KeeperState::Failing,
                    Some((format!("could not {action} the lease in {}: {failure}", self.table), failure)),
                )
            }
        };
        match cause {
            None => {
                self.last_failure = None;
                published_lease::report_keeper(state, "");
            }
            Some((warning, cause)) => {
                if self.last_failure.as_ref() != Some(&warning) {
                    warning!("randflake_pg lease keeper: {warning}; retrying every second");
                    self.last_failure = Some(warning);
                }
                published_lease::report_keeper(state, &cause);
            }
        }
    }

    /// One tick's work, inside its transaction.
    fn step(&self, now: u64, published: Option<Lease>, terms: &Terms) -> Outcome {
        match vetting::vet(&self.schema, &self.table_name, self.source == NodeSource::Fleet) {
            Verdict::Missing => return Outcome::NoTable,
            Verdict::Refused(reason) => return Outcome::Refused(reason),
            Verdict::Trusted => {}
        }
        if let Some(lease) = published {
            match self.stored(&lease) {
                Stored::Intact => match terms.renewal(&lease, now) {
                    None => return Outcome::Unchanged,
                    Some((end, used_through)) => match self.store_renewal(&lease, end, used_through, now) {
                        Some(renewed) => return Outcome::Renewed(renewed),
                        None => self.withdraw(&lease, "expired in", " before it could be renewed"),
                    },
                },
                Stored::Gone => self.withdraw(&lease, "is gone from", ""),
                Stored::CutShort => {
                    self.withdraw(&lease, "was cut short in", " (its end or high-water mark moved back)")
                }
            }
        }
        match self.take_lease(now, terms) {
            Some(lease) => Outcome::Taken(lease),
            None => error!("no lease can start at or before {MAX_SECOND}, the last second an ID can carry"),
        }
    }

    /// Stops the backends from issuing under `lease` before anything else happens: its row no
    /// longer stands behind it. Another server may take its nodes from now on.
    fn withdraw(&self, lease: &Lease, what: &str, detail: &str) {
        published_lease::withdraw();
        warning!(
            "randflake_pg lease keeper: the lease of nodes {}..{} from second {} {what} {}{detail}; withdrawn, taking a new one",
            lease.first_node, lease.last_node, lease.start, self.table
        );
    }

    /// Whether the published lease's row still says what this keeper last wrote.
    fn stored(&self, lease: &Lease) -> Stored {
        let row = Spi::connect(|client| {
            let rows = client.select(
                &format!(
                    "SELECT last_node, lease_end, used_through FROM {}
                      WHERE first_node = $1 AND lease_start = $2 AND holder = $3",
                    self.table
                ),
                Some(1),
                &[(lease.first_node as i32).into(), (lease.start as i64).into(), self.holder.as_str().into()],
            )?;
            if rows.is_empty() {
                return Ok(None);
            }
            let row = rows.first();
            Ok::<_, SpiError>(Some((row.get::<i32>(1)?, row.get::<i64>(2)?, row.get::<i64>(3)?)))
        });
        match sql(row) {
            None => Stored::Gone,
            Some((Some(last_node), Some(end), Some(used_through)))
                if last_node as u32 == lease.last_node
                    && end as u64 >= lease.end
                    && used_through as u64 >= lease.used_through =>
            {
                Stored::Intact
            }
            Some(_) => Stored::CutShort,
        }
    }

    /// Takes a new lease and returns it; `None` past the last second an ID can carry.
    fn take_lease(&self, now: u64, terms: &Terms) -> Option<Lease> {
        // A lease withdrawn earlier in this server's life (its row deleted, the extension
        // dropped and created again, a coordinator that lost it) still bounds the seconds its
        // nodes may have used; it says nothing about other nodes.
        let withdrawn = published_lease::last_published();
        let (first_node, last_node, latest_end) = match self.source {
            NodeSource::Fleet => self.free_block(now, withdrawn),
            _ => {
                let (first, last) = gucs::node_range();
                (first, last, self.end_own_leases(first, last))
            }
        };
        let withdrawn_bound = withdrawn
            .filter(|old| old.first_node <= last_node && first_node <= old.last_node)
            .map(|old| old.used_through);
        let lease = terms.new_lease(first_node, last_node, now, latest_end.max(withdrawn_bound))?;
        sql(Spi::run_with_args(
            &format!(
                // renewed_at is explicit: through postgres_fdw, a remote default does not apply.
                "INSERT INTO {} (first_node, last_node, holder, server_name, lease_start, lease_end, used_through, renewed_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, pg_catalog.now())",
                self.table
            ),
            &[
                (lease.first_node as i32).into(),
                (lease.last_node as i32).into(),
                self.holder.as_str().into(),
                self.server_name.as_str().into(),
                (lease.start as i64).into(),
                (lease.end as i64).into(),
                (lease.used_through as i64).into(),
            ],
        ));
        // Older leases wholly inside the new block end before it starts: the new row keeps
        // every bound they imposed, so they only make the table grow.
        sql(Spi::run_with_args(
            &format!("DELETE FROM {} WHERE first_node >= $1 AND last_node <= $2 AND lease_end < $3", self.table),
            &[(lease.first_node as i32).into(), (lease.last_node as i32).into(), (lease.start as i64).into()],
        ));
        Some(lease)
    }

    /// In range mode: ends this server's own earlier leases of `first..=last` at their
    /// high-water marks, since no process that used them survives a restart, and returns the
    /// latest end of any lease of those nodes.
    ///
    /// Leases of another holder are never shortened: that may be the primary this server was
    /// promoted from, whose marks may not all have been replicated here.
    fn end_own_leases(&self, first: u32, last: u32) -> Option<u64> {
        let overlapping = "first_node <= $3 AND last_node >= $2";
        let args = || [self.holder.as_str().into(), (first as i32).into(), (last as i32).into()];
        sql(Spi::run_with_args(
            &format!(
                "UPDATE {} SET lease_end = used_through, renewed_at = pg_catalog.now()
                  WHERE holder = $1 AND {overlapping} AND lease_end > used_through AND used_through >= lease_start",
                self.table
            ),
            &args(),
        ));
        sql(Spi::run_with_args(
            &format!("DELETE FROM {} WHERE holder = $1 AND {overlapping} AND used_through < lease_start", self.table),
            &args(),
        ));
        sql(Spi::get_one_with_args::<i64>(
            &format!("SELECT max(lease_end) FROM {} WHERE first_node <= $2 AND last_node >= $1", self.table),
            &[(first as i32).into(), (last as i32).into()],
        ))
        .map(|end| end as u64)
    }

    /// In fleet mode: the block of the pool that can start soonest, and the latest end of any
    /// lease of its nodes; `withdrawn`, this server's last lease, counts as ending at its
    /// high-water mark even if its row is gone. Ties go to a block chosen by this server's
    /// identity, so servers starting together rarely race for the same one.
    fn free_block(&self, now: u64, withdrawn: Option<Lease>) -> (u32, u32, Option<u64>) {
        let (pool_first, pool_last) = gucs::node_range();
        let size = gucs::fleet_block_size().min(pool_last - pool_first + 1);
        let blocks = (pool_last - pool_first) / size + 1;
        let preference = holder::fnv1a(self.holder.as_bytes()) % u64::from(blocks);
        let query = format!(
            "SELECT b.first_node, b.last_node, max(l.lease_end)
               FROM (SELECT $1::int + i * $2::int AS first_node,
                            least($1::int + i * $2::int + $2::int - 1, $3::int) AS last_node, i
                       FROM pg_catalog.generate_series(0, $4::int - 1) AS i) AS b
               LEFT JOIN {} AS l ON l.first_node <= b.last_node AND l.last_node >= b.first_node
              GROUP BY b.first_node, b.last_node, b.i
              ORDER BY greatest($5::bigint, coalesce(max(l.lease_end) + 1, 0),
                                CASE WHEN b.first_node <= $8::int AND b.last_node >= $7::int THEN $9::bigint + 1 ELSE 0 END),
                       (b.i + $6::int) % $4::int
              LIMIT 1",
            self.table
        );
        let block = Spi::connect(|client| {
            let row = client
                .select(
                    query.as_str(),
                    Some(1),
                    &[
                        (pool_first as i32).into(),
                        (size as i32).into(),
                        (pool_last as i32).into(),
                        (blocks as i32).into(),
                        (now as i64).into(),
                        (preference as i32).into(),
                        withdrawn.map(|old| old.first_node as i32).into(),
                        withdrawn.map(|old| old.last_node as i32).into(),
                        withdrawn.map(|old| old.used_through as i64).into(),
                    ],
                )?
                .first();
            Ok::<_, SpiError>((row.get::<i32>(1)?, row.get::<i32>(2)?, row.get::<i64>(3)?))
        });
        match sql(block) {
            (Some(first), Some(last), latest_end) => (first as u32, last as u32, latest_end.map(|end| end as u64)),
            _ => error!("the free block query returned no block"),
        }
    }

    /// Writes a renewal of `lease`; the lease as stored afterwards, or `None` if it is gone or
    /// has expired. Stored values never move back, even past a renewal whose commit this
    /// keeper did not see.
    fn store_renewal(&self, lease: &Lease, end: u64, used_through: u64, now: u64) -> Option<Lease> {
        let stored = Spi::connect_mut(|client| {
            let rows = client.update(
                &format!(
                    "UPDATE {} SET lease_end = greatest(lease_end, $1), used_through = greatest(used_through, $2),
                                   renewed_at = pg_catalog.now()
                      WHERE first_node = $3 AND lease_start = $4 AND holder = $5 AND lease_end >= $6
                  RETURNING lease_end, used_through",
                    self.table
                ),
                Some(1),
                &[
                    (end as i64).into(),
                    (used_through as i64).into(),
                    (lease.first_node as i32).into(),
                    (lease.start as i64).into(),
                    self.holder.as_str().into(),
                    (now as i64).into(),
                ],
            )?;
            if rows.is_empty() {
                return Ok(None);
            }
            let row = rows.first();
            Ok::<_, SpiError>(Some((row.get::<i64>(1)?, row.get::<i64>(2)?)))
        });
        match sql(stored)? {
            (Some(end), Some(used_through)) => {
                Some(Lease { end: end as u64, used_through: used_through as u64, ..*lease })
            }
            _ => error!("the renewed lease row has no end or high-water mark"),
        }
    }
}

enum Stored {
    Intact,
    Gone,
    /// Its end or high-water mark is below what this keeper published: a renewal was lost.
    CutShort,
}

/// The value of an SPI call; a failure ends the keeper's transaction with an ERROR, which
/// `in_transaction` turns into a logged, retried failure.
fn sql<T>(result: Result<T, SpiError>) -> T {
    result.unwrap_or_else(|error| error!("{error}"))
}

/// Runs `body` in a transaction of its own and commits it. An error inside rolls the
/// transaction back and comes back as its message; the keeper stays up and tries again.
fn in_transaction<R>(body: impl FnOnce() -> R) -> Result<R, String> {
    // SAFETY: the keeper is a background worker connected to a database, between transactions.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    PgTryBuilder::new(AssertUnwindSafe(|| {
        let result = body();
        // SAFETY: closing the transaction opened above.
        unsafe {
            pg_sys::PopActiveSnapshot();
            pg_sys::CommitTransactionCommand();
        }
        Ok(result)
    }))
    .catch_others(|caught| {
        // SAFETY: PostgreSQL's error state was flushed when the error was caught; aborting is
        // how a background worker recovers from an error inside a transaction.
        unsafe { pg_sys::AbortCurrentTransaction() };
        Err(match caught {
            CaughtError::PostgresError(report)
            | CaughtError::ErrorReport(report)
            | CaughtError::RustPanic { ereport: report, .. } => report.message().to_owned(),
        })
    })
    .execute()
}
