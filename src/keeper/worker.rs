//! The lease keeper: a background worker, started by the launcher, that runs the crate's keeper
//! machine (`randflake::decisions::keeper`) once a second over this server's lease table, through
//! SQL, and its shared memory, and reports what it did.
//!
//! All of its SQL runs in its own short, bounded transactions, never in a caller's, so a user's
//! rollback can neither lose nor duplicate a lease. A commit counts as durable only when the
//! server holding the lease table shows it so afterwards (`lease_table::commit_evidence`
//! reads, the crate judges); otherwise it is uncertain, and the machine uses nothing it wrote. The keeper never
//! panics on what it reads: every failure is logged once, shown by randflake_status(), and
//! tried again on the next tick.

#![forbid(unsafe_code)]

use std::time::Duration;

use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;
use pgrx::spi::quote_qualified_identifier;
use randflake::decisions::keeper::{Board, Keeper, LeaseKey, NodeSource, Outcome, StoreError, Withdrawal};
use randflake::decisions::keeper_report::KeeperState;
use randflake::{Lease, Terms, HIGH_WATER_LEAD, MAX_SECOND};

use super::{runtime, server_identity};
use crate::lease_table::{EvidenceReader, KeeperStore};
use crate::node_config;
use crate::pg::{backend, bgworker, clock};
use crate::shmem::{keeper_board, lease_board};

pub fn main() {
    bgworker::install_signal_handlers();
    // A keeper terminated a moment ago may still be finishing its last transaction: two must
    // never write leases at once. The launcher starts this one again shortly.
    if !keeper_board::claim(backend::pid()) {
        return;
    }
    // After the transaction clean-up, so the place is free only once this keeper has stopped
    // writing.
    backend::at_exit(give_up_keeper_place);
    BackgroundWorker::connect_worker_to_spi(Some(&node_config::database()), node_config::keeper_role().as_deref());
    runtime::prepare();
    let mut keeper = KeeperWorker::new();
    loop {
        keeper.tick();
        bgworker::idle(node_config::tick());
    }
}

/// Frees the keeper's place. Its last reported state stays, so that the launcher can tell a
/// keeper that ran from one that never got going.
fn give_up_keeper_place() {
    keeper_board::release(backend::pid());
}

struct KeeperWorker {
    machine: Keeper,
    store: KeeperStore,
    /// The last failure logged, so that a lasting one is logged once, not every second.
    last_failure: Option<String>,
}

impl KeeperWorker {
    fn new() -> Self {
        let identity = server_identity::identity();
        let (schema, table_name) = node_config::lease_table();
        let source = node_config::node_source(server_identity::fnv1a(identity.as_bytes()));
        let terms = Terms {
            length: node_config::lease_seconds(),
            // A fleet member never resumes a lease after a restart (it takes a free block), so
            // it needs no high-water mark short of the lease's end.
            high_water_lead: matches!(source, NodeSource::Range { .. }).then_some(HIGH_WATER_LEAD),
        };
        Self {
            machine: Keeper::new(source, terms),
            store: KeeperStore {
                table: quote_qualified_identifier(schema.as_str(), table_name.as_str()),
                evidence: EvidenceReader::new(&schema),
                schema,
                table_name,
                foreign_allowed: matches!(source, NodeSource::Fleet { .. }),
                holder: identity,
                server_name: server_identity::server_name(),
            },
            last_failure: None,
        }
    }

    /// How long one tick's transaction may take: well inside the margin a renewal leaves (a
    /// third of the lease, and half the high-water lead), and never more than a few seconds.
    fn time_limit() -> Duration {
        let lease_share = Duration::from_millis(node_config::lease_seconds() * 1000 / 6);
        lease_share.clamp(Duration::from_secs(1), Duration::from_secs(4))
    }

    fn tick(&mut self) {
        let now = clock::unix_time().as_secs();
        let action = if lease_board::read().1.is_some() { "check or renew" } else { "take" };
        let mut board = SharedBoard { now };
        let (machine, store) = (&self.machine, &mut self.store);
        let tick = runtime::bounded(Self::time_limit(), || {
            store.transaction(Self::time_limit(), |store| machine.tick(now, store, &mut board))
        });
        if let Some((lease, withdrawal)) = tick.withdrawn {
            self.log_withdrawal(&lease, withdrawal);
        }
        let verdict = self.judge(tick.outcome, action);
        match verdict.failure {
            None => {
                self.last_failure = None;
                keeper_board::report(verdict.state, "");
            }
            Some(Failure { warning, cause }) => {
                if self.last_failure.as_ref() != Some(&warning) {
                    warning!("randflake_pg lease keeper: {warning}; retrying every second");
                    self.last_failure = Some(warning);
                }
                keeper_board::report(verdict.state, &cause);
            }
        }
        keeper_board::count_tick();
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

    /// What a tick's outcome leaves the keeper reporting.
    fn judge(&self, outcome: Outcome, action: &str) -> Verdict {
        let table = &self.store.table;
        match outcome {
            Outcome::Holding | Outcome::Renewed(_) => Verdict::fine(KeeperState::Holding),
            Outcome::Taken(lease) => {
                log!(
                    "randflake_pg lease keeper: leased nodes {}..{} for seconds {}..{} as {} in {table}",
                    lease.first_node,
                    lease.last_node,
                    lease.start,
                    lease.end,
                    self.store.holder,
                );
                Verdict::fine(KeeperState::Holding)
            }
            Outcome::NoTable => Verdict::fine(KeeperState::WaitingForLeaseTable),
            Outcome::Refused(reason) => Verdict::failed(
                KeeperState::RefusingLeaseTable,
                format!("refusing the lease table: {reason}; no SQL runs on it"),
                reason,
            ),
            Outcome::Unconfirmed => {
                let cause = format!(
                    "the commit of its write to {table} was not known durable within {} s: the server holding the table did not show it durable (a synchronous standby that did not confirm it? its wait cancelled there?); nothing it wrote is used",
                    Self::time_limit().as_secs()
                );
                Verdict::failed(KeeperState::Failing, format!("could not {action} the lease: {cause}"), cause)
            }
            Outcome::PastLastSecond => {
                let cause = format!("no lease can start at or before {MAX_SECOND}, the last second an ID can carry");
                Verdict::failed(KeeperState::Failing, cause.clone(), cause)
            }
            Outcome::Failed(StoreError(failure)) => Verdict::failed(
                KeeperState::Failing,
                format!("could not {action} the lease in {table}: {failure}"),
                failure,
            ),
        }
    }
}

/// What a tick leaves the keeper reporting.
struct Verdict {
    state: KeeperState,
    /// What went wrong, if anything.
    failure: Option<Failure>,
}

/// A tick's failure, in two forms.
struct Failure {
    /// Logged, once while the same failure lasts.
    warning: String,
    /// Reported in randflake_status() and in errors that name the keeper.
    cause: String,
}

impl Verdict {
    fn fine(state: KeeperState) -> Self {
        Self { state, failure: None }
    }

    fn failed(state: KeeperState, warning: String, cause: String) -> Self {
        Self { state, failure: Some(Failure { warning, cause }) }
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
