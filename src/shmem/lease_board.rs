//! The lease this server holds, as the keeper publishes it to every backend, and the leases the
//! keeper wrote but never published.
//!
//! The keeper is the only writer. Backends read the lease on every refill of their ID cache,
//! under a sequence lock: a few plain loads and no shared lock.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use randflake::backend::Published;
use randflake::keeper::LeaseKey;
use randflake::Lease;

use super::seqlock::SeqLock;
use crate::pg::shmem::Shared;

/// How many unconfirmed leases are remembered; an older one is forgotten, which costs only the
/// seconds its row keeps its nodes from being leased again.
const UNCONFIRMED_SLOTS: usize = 8;

#[derive(Default)]
pub struct LeaseBoard {
    /// Guards the lease fields below.
    lock: SeqLock,
    /// Leases taken since shared memory was created.
    taken: AtomicU64,
    /// The published lease's number (its place in `taken`), or 0 while there is none.
    number: AtomicU64,
    first_node: AtomicU32,
    last_node: AtomicU32,
    start: AtomicU64,
    end: AtomicU64,
    used_through: AtomicU64,
    renewed_at: AtomicU64,
    /// Leases the keeper wrote whose commits were not known durable and which it never
    /// published, for the next keeper to delete.
    unconfirmed_count: AtomicU32,
    unconfirmed_first_node: [AtomicU32; UNCONFIRMED_SLOTS],
    unconfirmed_start: [AtomicU64; UNCONFIRMED_SLOTS],
}

pub static BOARD: Shared<LeaseBoard> = Shared::new(c"randflake_pg lease board");

/// Changes whenever the published lease does; cheap enough to read on every cache refill.
#[inline]
pub fn version() -> u64 {
    BOARD.get().lock.version()
}

/// The published lease and the version it was read at.
pub fn read() -> (u64, Option<Published>) {
    let (version, number, lease) = read_fields();
    (version, (number != 0).then_some(Published { number, lease }))
}

/// The lease fields, whether published or withdrawn, with the version and number read with them.
fn read_fields() -> (u64, u64, Lease) {
    let board = BOARD.get();
    let (version, (number, lease)) = board.lock.read(|| {
        let lease = Lease {
            first_node: board.first_node.load(Ordering::Relaxed),
            last_node: board.last_node.load(Ordering::Relaxed),
            start: board.start.load(Ordering::Relaxed),
            end: board.end.load(Ordering::Relaxed),
            used_through: board.used_through.load(Ordering::Relaxed),
        };
        (board.number.load(Ordering::Relaxed), lease)
    });
    (version, number, lease)
}

/// Publishes `lease`, committed to the lease table, as this server's. `renewal`: it is the
/// published lease with a later end or high-water mark, so backends keep their nodes.
pub fn publish(lease: &Lease, renewal: bool, renewed_at: u64) {
    let board = BOARD.get();
    board.lock.write(|| {
        if !renewal {
            let number = board.taken.fetch_add(1, Ordering::Relaxed) + 1;
            board.number.store(number, Ordering::Relaxed);
        }
        board.first_node.store(lease.first_node, Ordering::Relaxed);
        board.last_node.store(lease.last_node, Ordering::Relaxed);
        board.start.store(lease.start, Ordering::Relaxed);
        board.end.store(lease.end, Ordering::Relaxed);
        board.used_through.store(lease.used_through, Ordering::Relaxed);
        board.renewed_at.store(renewed_at, Ordering::Relaxed);
    });
}

/// How many leases the keeper has taken since shared memory was created.
pub fn leases_taken() -> u64 {
    BOARD.get().taken.load(Ordering::Acquire)
}

/// The last lease published since shared memory was created, even if withdrawn since:
/// backends may have issued IDs with its nodes up to its high-water mark, whatever the lease
/// table now says.
pub fn last_published() -> Option<Lease> {
    (leases_taken() > 0).then(|| read_fields().2)
}

/// Stops backends from issuing under the published lease: it is no longer in the table.
pub fn withdraw() {
    let board = BOARD.get();
    board.lock.write(|| board.number.store(0, Ordering::Relaxed));
}

/// When the keeper last published the lease, by its clock.
pub fn renewed_at() -> u64 {
    BOARD.get().renewed_at.load(Ordering::Relaxed)
}

/// The leases the keeper wrote but never confirmed durable.
pub fn unconfirmed() -> Vec<LeaseKey> {
    let board = BOARD.get();
    let count = (board.unconfirmed_count.load(Ordering::Acquire) as usize).min(UNCONFIRMED_SLOTS);
    (0..count)
        .map(|slot| LeaseKey {
            first_node: board.unconfirmed_first_node[slot].load(Ordering::Relaxed),
            start: board.unconfirmed_start[slot].load(Ordering::Relaxed),
        })
        .collect()
}

/// Remembers one more unconfirmed lease, forgetting the oldest when all slots are taken.
/// Only the keeper writes these, and only one keeper runs.
pub fn remember_unconfirmed(key: LeaseKey) {
    let board = BOARD.get();
    let mut keys = unconfirmed();
    if keys.len() == UNCONFIRMED_SLOTS {
        keys.remove(0);
    }
    keys.push(key);
    for (slot, key) in keys.iter().enumerate() {
        board.unconfirmed_first_node[slot].store(key.first_node, Ordering::Relaxed);
        board.unconfirmed_start[slot].store(key.start, Ordering::Relaxed);
    }
    board.unconfirmed_count.store(keys.len() as u32, Ordering::Release);
}

/// Forgets every unconfirmed lease: the keeper has deleted their rows.
pub fn forget_unconfirmed() {
    BOARD.get().unconfirmed_count.store(0, Ordering::Release);
}
