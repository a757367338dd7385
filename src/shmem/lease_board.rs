//! The lease this server holds, as the keeper publishes it to every backend, and the leases the
//! keeper wrote but never published: `randflake::shared::lease_board_protocol`, placed in shared
//! memory.
#![forbid(unsafe_code)]

use randflake::decisions::keeper::LeaseKey;
use randflake::decisions::refill::Published;
use randflake::shared::lease_board_protocol::LeaseBoard;
use randflake::Lease;

use crate::pg::shmem_segments::Shared;

pub static BOARD: Shared<LeaseBoard> = Shared::new(c"randflake_pg lease board");

/// Changes whenever the published lease does; cheap enough to read on every cache refill.
#[inline]
pub fn version() -> u64 {
    BOARD.get().version()
}

/// The published lease and the version it was read at.
pub fn read() -> (u64, Option<Published>) {
    BOARD.get().read()
}

/// Publishes `lease`, committed to the lease table, as this server's. `renewal`: it is the
/// published lease with a later end or high-water mark, so backends keep their nodes.
pub fn publish(lease: &Lease, renewal: bool, renewed_at: u64) {
    BOARD.get().publish(lease, renewal, renewed_at);
}

/// How many leases the keeper has taken since shared memory was created.
pub fn leases_taken() -> u64 {
    BOARD.get().leases_taken()
}

/// The last lease published since shared memory was created, even if withdrawn since.
pub fn last_published() -> Option<Lease> {
    BOARD.get().last_published()
}

/// Stops backends from issuing under the published lease: it is no longer in the table.
pub fn withdraw() {
    BOARD.get().withdraw();
}

/// When the keeper last published the lease, by its clock.
pub fn renewed_at() -> u64 {
    BOARD.get().renewed_at()
}

/// The leases the keeper wrote but never confirmed durable.
pub fn unconfirmed() -> Vec<LeaseKey> {
    BOARD.get().unconfirmed()
}

/// Remembers one more unconfirmed lease, forgetting the oldest when all slots are taken.
pub fn remember_unconfirmed(key: LeaseKey) {
    BOARD.get().remember_unconfirmed(key);
}

/// Forgets every unconfirmed lease: the keeper has deleted their rows.
pub fn forget_unconfirmed() {
    BOARD.get().forget_unconfirmed();
}
