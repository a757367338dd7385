//! The lease a server holds, as its keeper publishes it to every backend, and the leases the
//! keeper wrote but never published.
//!
//! The keeper is the only writer. Backends read the lease on every refill of their ID cache,
//! under a sequence lock: a few plain loads and no shared lock.

use core::sync::atomic::Ordering;

use super::seqlock::SeqLock;
use super::{Atomic, Atomics, StdAtomics};
use crate::decisions::keeper::LeaseKey;
use crate::decisions::lease::Lease;
use crate::decisions::refill::Published;

/// How many unconfirmed leases are remembered; an older one is forgotten, which costs only the
/// seconds its row keeps its nodes from being leased again.
pub const UNCONFIRMED_SLOTS: usize = 8;

/// The board: made only of atomics, so that it can live in shared memory.
#[derive(Default)]
pub struct LeaseBoard<A: Atomics = StdAtomics> {
    /// Guards the lease fields below.
    lock: SeqLock<A>,
    /// Leases taken since the board was created.
    taken: A::U64,
    /// The published lease's number (its place in `taken`), or 0 while there is none.
    number: A::U64,
    first_node: A::U32,
    last_node: A::U32,
    start: A::U64,
    end: A::U64,
    used_through: A::U64,
    renewed_at: A::U64,
    /// Leases the keeper wrote whose commits were not known durable and which it never
    /// published, for the next keeper to delete.
    unconfirmed_count: A::U32,
    unconfirmed_first_node: [A::U32; UNCONFIRMED_SLOTS],
    unconfirmed_start: [A::U64; UNCONFIRMED_SLOTS],
}

impl<A: Atomics> LeaseBoard<A> {
    /// Changes whenever the published lease does; cheap enough to read on every cache refill.
    #[inline]
    pub fn version(&self) -> u64 {
        self.lock.version()
    }

    /// The published lease and the version it was read at.
    pub fn read(&self) -> (u64, Option<Published>) {
        let (version, number, lease) = self.read_fields();
        (version, (number != 0).then_some(Published { number, lease }))
    }

    /// The lease fields, whether published or withdrawn, with the version and number read with
    /// them.
    fn read_fields(&self) -> (u64, u64, Lease) {
        let (version, (number, lease)) = self.lock.read(|| {
            let lease = Lease {
                first_node: self.first_node.load(Ordering::Relaxed),
                last_node: self.last_node.load(Ordering::Relaxed),
                start: self.start.load(Ordering::Relaxed),
                end: self.end.load(Ordering::Relaxed),
                used_through: self.used_through.load(Ordering::Relaxed),
            };
            (self.number.load(Ordering::Relaxed), lease)
        });
        (version, number, lease)
    }

    /// Publishes `lease`, committed to the lease table, as the server's. `renewal`: it is the
    /// published lease with a later end or high-water mark, so backends keep their nodes.
    pub fn publish(&self, lease: &Lease, renewal: bool, renewed_at: u64) {
        self.lock.write(|| {
            if !renewal {
                let number = self.taken.fetch_add(1, Ordering::Relaxed) + 1;
                self.number.store(number, Ordering::Relaxed);
            }
            self.first_node.store(lease.first_node, Ordering::Relaxed);
            self.last_node.store(lease.last_node, Ordering::Relaxed);
            self.start.store(lease.start, Ordering::Relaxed);
            self.end.store(lease.end, Ordering::Relaxed);
            self.used_through.store(lease.used_through, Ordering::Relaxed);
            self.renewed_at.store(renewed_at, Ordering::Relaxed);
        });
    }

    /// How many leases the keeper has taken since the board was created.
    pub fn leases_taken(&self) -> u64 {
        self.taken.load(Ordering::Acquire)
    }

    /// The last lease published since the board was created, even if withdrawn since:
    /// backends may have issued IDs with its nodes up to its high-water mark, whatever the
    /// lease table now says.
    pub fn last_published(&self) -> Option<Lease> {
        (self.leases_taken() > 0).then(|| self.read_fields().2)
    }

    /// Stops backends from issuing under the published lease: it is no longer in the table.
    pub fn withdraw(&self) {
        self.lock.write(|| self.number.store(0, Ordering::Relaxed));
    }

    /// When the keeper last published the lease, by its clock.
    pub fn renewed_at(&self) -> u64 {
        self.renewed_at.load(Ordering::Relaxed)
    }

    /// The leases the keeper wrote but never confirmed durable.
    pub fn unconfirmed(&self) -> Vec<LeaseKey> {
        let count = (self.unconfirmed_count.load(Ordering::Acquire) as usize).min(UNCONFIRMED_SLOTS);
        (0..count)
            .map(|slot| LeaseKey {
                first_node: self.unconfirmed_first_node[slot].load(Ordering::Relaxed),
                start: self.unconfirmed_start[slot].load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Remembers one more unconfirmed lease, forgetting the oldest when all slots are taken.
    /// Only the keeper writes these, and only one keeper runs.
    pub fn remember_unconfirmed(&self, key: LeaseKey) {
        let mut keys = self.unconfirmed();
        if keys.len() == UNCONFIRMED_SLOTS {
            keys.remove(0);
        }
        keys.push(key);
        for (slot, key) in keys.iter().enumerate() {
            self.unconfirmed_first_node[slot].store(key.first_node, Ordering::Relaxed);
            self.unconfirmed_start[slot].store(key.start, Ordering::Relaxed);
        }
        self.unconfirmed_count.store(keys.len() as u32, Ordering::Release);
    }

    /// Forgets every unconfirmed lease: the keeper has deleted their rows.
    pub fn forget_unconfirmed(&self) {
        self.unconfirmed_count.store(0, Ordering::Release);
    }
}
