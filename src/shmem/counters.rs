//! What generation met since shared memory was created, for randflake_status(): each counter
//! a single atomic that any process adds to.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use randflake::decisions::refill::Event;

use crate::pg::shmem_segments::Shared;

#[derive(Default)]
pub struct Counters {
    node_switches: AtomicU64,
    clock_refusals: AtomicU64,
    lease_refusals: AtomicU64,
}

pub static BOARD: Shared<Counters> = Shared::new(c"randflake_pg counters");

/// Counts one `event`.
pub fn count(event: Event) {
    let counters = BOARD.get();
    let cell = match event {
        Event::NodeSwitch => &counters.node_switches,
        Event::ClockRefusal => &counters.clock_refusals,
        Event::LeaseRefusal => &counters.lease_refusals,
    };
    cell.fetch_add(1, Ordering::Relaxed);
}

/// `(node switches, clock refusals, lease refusals)`.
pub fn read() -> (u64, u64, u64) {
    let counters = BOARD.get();
    (
        counters.node_switches.load(Ordering::Relaxed),
        counters.clock_refusals.load(Ordering::Relaxed),
        counters.lease_refusals.load(Ordering::Relaxed),
    )
}
