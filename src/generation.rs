//! This backend's generator: clock readings in, node table bookkeeping, IDs out.

use std::time::Duration;

use pgrx::pg_sys;
use pgrx::prelude::*;
use randflake::{Generator, Parts, Refusal, Step, Window, EPOCH_SECOND, MAX_SECOND};

use crate::backend_local::BackendLocal;
use crate::errors::Error;
use crate::node_table::{self, NoNode};
use crate::{clock, gucs, secret};

/// Created on the first call in a process, so that sessions that never generate IDs take no
/// node and register no exit callback.
static GENERATOR: BackendLocal<Option<Generator>> = BackendLocal::new(None);

/// Returns the next ID of this backend.
pub fn next_id() -> i64 {
    secret::with_cipher(|cipher| {
        GENERATOR.with(|slot| {
            let generator = match slot {
                Some(generator) => generator,
                None => slot.insert(start_generator()?),
            };
            next_parts(generator).map(|parts| cipher.encrypt(parts))
        })
    })
    .and_then(|id| id)
    .unwrap_or_else(|error| error.raise())
}

fn start_generator() -> Result<Generator, Error> {
    // The start-up second may already have IDs from before a crash or a quick restart.
    let startup_second = node_table::startup_second();
    let window = Window::new((startup_second + 1).max(EPOCH_SECOND), MAX_SECOND)
        .map_err(|_| Error::ClockPastLastSecond { now: startup_second })?;
    // SAFETY: registering an exit callback from the backend's thread, once per process.
    unsafe { pg_sys::on_shmem_exit(Some(release_nodes_at_exit), pg_sys::Datum::from(0)) };
    Ok(Generator::new(window))
}

#[pg_guard]
unsafe extern "C-unwind" fn release_nodes_at_exit(_code: i32, _arg: pg_sys::Datum) {
    node_table::release_all_held();
}

fn next_parts(generator: &mut Generator) -> Result<Parts, Error> {
    loop {
        let now = clock::unix_time().as_secs();
        match generator.next(now, gucs::max_nodes_per_backend()) {
            Ok(Step::Issued { parts, opened_second }) => {
                if opened_second {
                    node_table::record_used(parts.node_id, parts.timestamp);
                }
                return Ok(parts);
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
            // Only the server's own start-up second is worth waiting out; any earlier reading
            // means the clock was stepped back.
            Err(Refusal::BeforeWindow { now, first }) if now + 1 == first => wait_for_second(first),
            Err(refusal) => return Err(refusal.into()),
        }
    }
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
