//! The lease keeper: a background worker that takes this server's node lease, renews it, keeps
//! its high-water mark ahead of the clock, and publishes it to the backends.
//!
//! All of its SQL runs in its own short transactions, never in a caller's, so a user's
//! rollback can neither lose nor duplicate a lease. A lease reaches the backends only after the
//! transaction that wrote it has committed, durably.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::spi::quote_qualified_identifier;
use randflake::{Lease, Terms};

use crate::clock;
use crate::gucs::{self, NodeSource};
use crate::lease_state::{self, KeeperState};

/// How far ahead of the clock a range-mode server records its high-water mark. After a restart
/// or crash the server resumes within this many seconds (calls wait meanwhile); the mark is
/// written about every half of it.
pub const HIGH_WATER_LEAD: u64 = 10;

/// How often the keeper looks at the clock and the lease.
const TICK: Duration = Duration::from_secs(1);

/// Registers the worker. Called from `_PG_init` while preloading, after the settings exist.
pub fn register() {
    if gucs::node_source() == NodeSource::Off {
        return;
    }
    // Starts only once recovery has finished: a standby cannot write leases, and promotion is
    // exactly when it must begin to.
    BackgroundWorkerBuilder::new("randflake_pg lease keeper")
        .set_type("randflake_pg lease keeper")
        .set_library("randflake_pg")
        .set_function("randflake_lease_keeper_main")
        .enable_spi_access()
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn randflake_lease_keeper_main(_argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(Some(&gucs::database()), None);
    // SAFETY: reading PostgreSQL globals from the worker's thread.
    lease_state::set_keeper(KeeperState::NotStarted, unsafe { pg_sys::MyProcPid });
    let mut keeper = Keeper::new();
    loop {
        keeper.tick();
        if !BackgroundWorker::wait_latch(Some(TICK)) {
            break;
        }
        if BackgroundWorker::sighup_received() {
            // SAFETY: the documented way for a background worker to reload its configuration.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
    }
    lease_state::set_keeper(KeeperState::NotStarted, 0);
}

struct Keeper {
    source: NodeSource,
    /// The lease table, quoted for SQL.
    table: String,
    /// This server's identity in the lease table: system identifier and timeline.
    holder: String,
    server_name: String,
    /// The last failure logged, so that a lasting outage is logged once, not every second.
    last_failure: Option<String>,
}

impl Keeper {
    fn new() -> Self {
        let source = gucs::node_source();
        let table = match (source, gucs::fleet_lease_table()) {
            (NodeSource::Fleet, Some((schema, table))) => quote_qualified_identifier(schema, table),
            _ => quote_qualified_identifier("randflake", "node_leases"),
        };
        Self { source, table, holder: holder_identity(), server_name: server_name(), last_failure: None }
    }

    fn terms(&self) -> Terms {
        Terms {
            length: gucs::lease_seconds(),
            // A fleet member never resumes a lease after a restart (it takes a free block), so
            // it needs no high-water mark short of the lease's end.
            high_water_lead: (self.source == NodeSource::Range).then_some(HIGH_WATER_LEAD),
        }
    }

    fn tick(&mut self) {
        let now = clock::unix_time().as_secs();
        let terms = self.terms();
        let outcome = match lease_state::read().1 {
            Some(published) => match terms.renewal(&published.lease, now) {
                None => return,
                Some((end, used_through)) => {
                    let renewed = Lease { end, used_through, ..published.lease };
                    match in_transaction(|| self.store_renewal(&renewed, now)) {
                        Ok(true) => {
                            lease_state::publish(&renewed, true, now);
                            Ok(KeeperState::Holding)
                        }
                        Ok(false) => {
                            lease_state::withdraw();
                            log!(
                                "randflake_pg lease keeper: the lease of nodes {}..{} is gone from {} or expired; taking a new one",
                                renewed.first_node, renewed.last_node, self.table
                            );
                            // With nothing published now, this tick takes the new lease.
                            return self.tick();
                        }
                        Err(failure) => Err(failure),
                    }
                }
            },
            None => in_transaction(|| self.take_lease(now, &terms)).map(|taken| match taken {
                Some(lease) => {
                    lease_state::publish(&lease, false, now);
                    log!(
                        "randflake_pg lease keeper: leased nodes {}..{} for seconds {}..{} as {}",
                        lease.first_node, lease.last_node, lease.start, lease.end, self.holder
                    );
                    KeeperState::Holding
                }
                None => KeeperState::WaitingForLeaseTable,
            }),
        };
        let state = match outcome {
            Ok(state) => {
                self.last_failure = None;
                state
            }
            Err(failure) => {
                if self.last_failure.as_ref() != Some(&failure) {
                    warning!("randflake_pg lease keeper: {failure}; retrying every second");
                    self.last_failure = Some(failure);
                }
                KeeperState::Failing
            }
        };
        // SAFETY: reading a PostgreSQL global from the worker's thread.
        lease_state::set_keeper(state, unsafe { pg_sys::MyProcPid });
    }

    /// Takes a new lease and returns it, or `None` while the lease table does not exist.
    fn take_lease(&self, now: u64, terms: &Terms) -> Option<Lease> {
        let table_exists = Spi::get_one_with_args::<bool>(
            "SELECT pg_catalog.to_regclass($1) IS NOT NULL",
            &[self.table.as_str().into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false);
        if !table_exists {
            return None;
        }
        let (first_node, last_node, latest_end) = match self.source {
            NodeSource::Fleet => self.free_block(now),
            _ => {
                let (first, last) = gucs::node_range();
                (first, last, self.end_own_leases(first, last))
            }
        };
        // A lease withdrawn earlier in this server's life (its row deleted, or the extension
        // dropped and created again) still bounds the seconds its nodes may have used.
        let latest_end = latest_end.max(lease_state::last_used_through());
        let Some(lease) = terms.new_lease(first_node, last_node, now, latest_end) else {
            error!("randflake_pg lease keeper: no lease can start at or before 2803741823, the last second an ID can carry");
        };
        Spi::run_with_args(
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
        )
        .expect("INSERT runs");
        // Older leases wholly inside the new block end before it starts: the new row keeps
        // every bound they imposed, so they only make the table grow.
        Spi::run_with_args(
            &format!(
                "DELETE FROM {} WHERE first_node >= $1 AND last_node <= $2 AND lease_end < $3",
                self.table
            ),
            &[(lease.first_node as i32).into(), (lease.last_node as i32).into(), (lease.start as i64).into()],
        )
        .expect("DELETE runs");
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
        Spi::run_with_args(
            &format!(
                "UPDATE {} SET lease_end = used_through, renewed_at = pg_catalog.now()
                  WHERE holder = $1 AND {overlapping} AND lease_end > used_through AND used_through >= lease_start",
                self.table
            ),
            &args(),
        )
        .expect("UPDATE runs");
        Spi::run_with_args(
            &format!("DELETE FROM {} WHERE holder = $1 AND {overlapping} AND used_through < lease_start", self.table),
            &args(),
        )
        .expect("DELETE runs");
        Spi::get_one_with_args::<i64>(
            &format!("SELECT max(lease_end) FROM {} WHERE first_node <= $2 AND last_node >= $1", self.table),
            &[(first as i32).into(), (last as i32).into()],
        )
        .expect("SELECT runs")
        .map(|end| end as u64)
    }

    /// In fleet mode: the block of the pool that can start soonest, and the latest end of any
    /// lease of its nodes. Ties go to a block chosen by this server's identity, so servers
    /// starting together rarely race for the same one.
    fn free_block(&self, now: u64) -> (u32, u32, Option<u64>) {
        let (pool_first, pool_last) = gucs::node_range();
        let size = gucs::fleet_block_size().min(pool_last - pool_first + 1);
        let blocks = (pool_last - pool_first) / size + 1;
        let preference = fnv1a(self.holder.as_bytes()) % u64::from(blocks);
        let query = format!(
            "SELECT b.first_node, b.last_node, max(l.lease_end)
               FROM (SELECT $1::int + i * $2::int AS first_node,
                            least($1::int + i * $2::int + $2::int - 1, $3::int) AS last_node, i
                       FROM pg_catalog.generate_series(0, $4::int - 1) AS i) AS b
               LEFT JOIN {} AS l ON l.first_node <= b.last_node AND l.last_node >= b.first_node
              GROUP BY b.first_node, b.last_node, b.i
              ORDER BY greatest($5::bigint, coalesce(max(l.lease_end) + 1, 0)), (b.i + $6::int) % $4::int
              LIMIT 1",
            self.table
        );
        Spi::connect(|client| {
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
                    ],
                )
                .expect("SELECT runs")
                .first();
            let first = row.get::<i32>(1).expect("column 1").expect("not null");
            let last = row.get::<i32>(2).expect("column 2").expect("not null");
            let latest_end = row.get::<i64>(3).expect("column 3");
            (first as u32, last as u32, latest_end.map(|end| end as u64))
        })
    }

    /// Writes a renewal of the published lease; false if the lease is gone or has expired.
    fn store_renewal(&self, lease: &Lease, now: u64) -> bool {
        let renewed = Spi::connect_mut(|client| {
            client
                .update(
                    format!(
                        "UPDATE {} SET lease_end = $1, used_through = $2, renewed_at = pg_catalog.now()
                          WHERE first_node = $3 AND lease_start = $4 AND holder = $5 AND lease_end >= $6",
                        self.table
                    )
                    .as_str(),
                    None,
                    &[
                        (lease.end as i64).into(),
                        (lease.used_through as i64).into(),
                        (lease.first_node as i32).into(),
                        (lease.start as i64).into(),
                        self.holder.as_str().into(),
                        (now as i64).into(),
                    ],
                )
                .expect("UPDATE runs")
                .len()
        });
        renewed == 1
    }
}

/// Runs `body` in a transaction of its own and commits it durably. An error inside rolls the
/// transaction back and comes back as its message; the keeper stays up and tries again.
fn in_transaction<R>(body: impl FnOnce() -> R) -> Result<R, String> {
    // SAFETY: the keeper is a background worker connected to a database, between transactions.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    PgTryBuilder::new(AssertUnwindSafe(|| {
        // The high-water mark must survive a crash even where commits are asynchronous, and a
        // stalled coordination server must not hold the keeper forever.
        Spi::run(
            "SELECT pg_catalog.set_config('synchronous_commit', 'local', true),
                    pg_catalog.set_config('statement_timeout', '10s', true),
                    pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)",
        )
        .expect("settings apply");
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

fn holder_identity() -> String {
    // SAFETY: plain reads of shared state; recovery has finished before the keeper starts.
    let system = unsafe { pg_sys::GetSystemIdentifier() };
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    let timeline = unsafe { pg_sys::GetWALInsertionTimeLine() };
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    let timeline = unsafe { pg_sys::ThisTimeLineID };
    format!("{system}/{timeline}")
}

/// `cluster_name`, or `host:port` when it is not set.
fn server_name() -> String {
    // SAFETY: reading settings from the worker's thread; PostgreSQL owns the strings.
    let setting = |name: &std::ffi::CStr| unsafe {
        let value = pg_sys::GetConfigOption(name.as_ptr(), true, false);
        (!value.is_null()).then(|| std::ffi::CStr::from_ptr(value).to_string_lossy().into_owned())
    };
    match setting(c"cluster_name").filter(|name| !name.is_empty()) {
        Some(name) => name,
        None => {
            let mut host = [0u8; 256];
            // SAFETY: the buffer is writable for its whole length.
            unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) };
            let host = std::ffi::CStr::from_bytes_until_nul(&host).map_or("localhost".into(), |h| h.to_string_lossy());
            format!("{host}:{}", setting(c"port").unwrap_or_default())
        }
    }
}

/// FNV-1a: a stable hash, the same in every build, for spreading servers over blocks.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}
