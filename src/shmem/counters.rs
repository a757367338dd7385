//! What generation met since shared memory was created, for randflake_status(): each counter
//! a single atomic that any process adds to.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use randflake::decisions::refill::Event;

use crate::pg::shmem_segments::Shared;

#[derive(Default)]
pub struct Counters {
    node_switches: AtomicU64,
    waits_for_next_second: AtomicU64,
    clock_refusals: AtomicU64,
    lease_refusals: AtomicU64,
}

/// The counters as read.
pub struct Counted {
    pub node_switches: u64,
    pub waits_for_next_second: u64,
    pub clock_refusals: u64,
    pub lease_refusals: u64,
}

pub static BOARD: Shared<Counters> = Shared::new(c"randflake_pg counters");

/// Counts one `event`.
pub fn count(event: Event) {
    let counters = BOARD.get();
    let cell = match event {
        Event::NodeSwitch => &counters.node_switches,
        Event::SecondUsedUp => &counters.waits_for_next_second,
        Event::ClockRefusal => &counters.clock_refusals,
        Event::LeaseRefusal => &counters.lease_refusals,
    };
    cell.fetch_add(1, Ordering::Relaxed);
}

pub fn read() -> Counted {
    let counters = BOARD.get();
    Counted {
        node_switches: counters.node_switches.load(Ordering::Relaxed),
        waits_for_next_second: counters.waits_for_next_second.load(Ordering::Relaxed),
        clock_refusals: counters.clock_refusals.load(Ordering::Relaxed),
        lease_refusals: counters.lease_refusals.load(Ordering::Relaxed),
    }
}
