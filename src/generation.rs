//! This backend's generator: clock readings in, node table bookkeeping, IDs out.

use std::time::Duration;

use pgrx::pg_sys;
use pgrx::prelude::*;
use randflake::{Generator, IdCipher, Refusal, Step, Window, EPOCH_SECOND, LANES, MAX_SECOND};

use crate::backend_local::BackendLocal;
use crate::errors::Error;
use crate::node_table::{self, NoNode};
use crate::{clock, gucs, secret};

/// Created on the first call in a process, so that sessions that never generate IDs take no
/// node and register no exit callback.
static BACKEND: BackendLocal<Option<BackendGenerator>> = BackendLocal::new(None);

struct BackendGenerator {
    generator: Generator,
    ready: ReadyIds,
}

/// IDs reserved and encrypted ahead, handed out in order while the clock still reads their
/// second and the secret is unchanged. Reserving [`LANES`] at a time lets them be encrypted
/// side by side, for a fraction of the cost of one by one; unused ones are simply skipped.
struct ReadyIds {
    second: u64,
    secret_version: u64,
    ids: [i64; LANES],
    next: usize,
    len: usize,
}

impl ReadyIds {
    const NONE: Self = Self { second: 0, secret_version: 0, ids: [0; LANES], next: 0, len: 0 };

    #[inline]
    fn take(&mut self, now: u64, secret_version: u64) -> Option<i64> {
        let usable = self.next < self.len && self.second == now && self.secret_version == secret_version;
        usable.then(|| {
            self.next += 1;
            self.ids[self.next - 1]
        })
    }
}

/// Returns the next ID of this backend.
#[inline]
pub fn next_id() -> i64 {
    BACKEND
        .with(|slot| {
            let backend = match slot {
                Some(backend) => backend,
                None => slot.insert(BackendGenerator::start()?),
            };
            let now = clock::unix_time().as_secs();
            let secret_version = secret::version();
            match backend.ready.take(now, secret_version) {
                Some(id) => Ok(id),
                // The secret is checked before a node is taken, so a misconfigured server
                // consumes none.
                None => secret::with_cipher(|cipher| backend.refill(cipher, secret_version))?,
            }
        })
        .unwrap_or_else(|error| error.raise())
}

impl BackendGenerator {
    fn start() -> Result<Self, Error> {
        // The start-up second may already have IDs from before a crash or a quick restart.
        let startup_second = node_table::startup_second();
        let window = Window::new((startup_second + 1).max(EPOCH_SECOND), MAX_SECOND)
            .map_err(|_| Error::ClockPastLastSecond { now: startup_second })?;
        // SAFETY: registering an exit callback from the backend's thread, once per process.
        unsafe { pg_sys::on_shmem_exit(Some(release_nodes_at_exit), pg_sys::Datum::from(0)) };
        Ok(Self { generator: Generator::new(window), ready: ReadyIds::NONE })
    }

    /// Reserves and encrypts the next run of IDs, returning the first and keeping the rest.
    fn refill(&mut self, cipher: &IdCipher, secret_version: u64) -> Result<i64, Error> {
        let generator = &mut self.generator;
        loop {
            let now = clock::unix_time().as_secs();
            match generator.next(now, gucs::max_nodes_per_backend(), LANES as u32) {
                Ok(Step::Issued { first, count, opened_second }) => {
                    if opened_second {
                        node_table::record_used(first.node_id, first.timestamp);
                    }
                    // Sequence is the lowest field and the run stays within the second's
                    // sequences, so consecutive raw values are consecutive sequences. Lanes
                    // past `count` are encrypted too, and never handed out.
                    let raw = first.to_raw();
                    let ids = cipher.encrypt_raw_batch(std::array::from_fn(|lane| raw.wrapping_add(lane as u64)));
                    self.ready = ReadyIds {
                        second: first.timestamp,
                        secret_version,
                        ids,
                        next: 1,
                        len: count as usize,
                    };
                    return Ok(ids[0]);
                }
                Ok(Step::NeedNode { release }) => {
                    if let Some(node) = release {
                        node_table::release(node);
                    }
                    let (first, last) = gucs::node_range();
                    match node_table::acquire(first, last, now) {
                        Ok((node, used_through)) => generator.adopt(node, used_through, now),
                        Err(NoNode::AllUsedThisSecond) => wait_for_second(now + 1),
                        Err(NoNode::AllHeld) => return Err(Error::NoFreeNode { first, last }),
                    }
                }
                Ok(Step::WaitUntil { second }) => wait_for_second(second),
                // Only the server's own start-up second is worth waiting out; any earlier
                // reading means the clock was stepped back.
                Err(Refusal::BeforeWindow { now, first }) if now + 1 == first => wait_for_second(first),
                Err(refusal) => return Err(refusal.into()),
            }
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn release_nodes_at_exit(_code: i32, _arg: pg_sys::Datum) {
    node_table::release_all_held();
}

/// Sleeps until the clock should read `second`, or until interrupted. The caller reads the
/// clock again afterwards, so a clock stepped back meanwhile is refused rather than waited out.
fn wait_for_second(second: u64) {
    let remaining = Duration::from_secs(second).saturating_sub(clock::unix_time());
    let timeout_ms = remaining.as_millis().clamp(1, 1000) as std::ffi::c_long;
    // SAFETY: waiting on this process's own latch from its main thread.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            timeout_ms,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    check_for_interrupts!();
}
