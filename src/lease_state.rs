//! What the lease keeper tells every backend, through shared memory: the lease this server
//! holds now, the keeper's own state, and the counters that randflake_status() reports.
//!
//! The keeper is the only writer of the lease. Backends read it on every refill of their ID
//! cache, so the read is a sequence lock: a few plain loads and no shared lock.

use std::mem::size_of;
use std::ptr::null_mut;
use std::sync::atomic::{fence, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use randflake::Lease;

use crate::shared_memory;

#[repr(C)]
struct Shared {
    /// Odd while the keeper is writing the lease fields below.
    version: AtomicU64,
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
    keeper_state: AtomicU32,
    keeper_pid: AtomicI32,
    node_switches: AtomicU64,
    clock_refusals: AtomicU64,
    lease_refusals: AtomicU64,
}

pub const SHARED_SIZE: usize = size_of::<Shared>();

static SHARED: AtomicPtr<Shared> = AtomicPtr::new(null_mut());

/// What the lease keeper is doing; shown by randflake_status() and in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeeperState {
    /// Not started yet, or not at all (on a standby the keeper starts at promotion).
    NotStarted = 0,
    /// The extension (or, in fleet mode, the fleet lease table) is missing in its database.
    WaitingForLeaseTable = 1,
    /// Holding and renewing a lease.
    Holding = 2,
    /// Its last attempt to take or renew the lease failed; the server log says why.
    Failing = 3,
}

impl KeeperState {
    pub fn describe(self) -> &'static str {
        match self {
            Self::NotStarted => "not started",
            Self::WaitingForLeaseTable => "waiting for the lease table",
            Self::Holding => "holding a lease",
            Self::Failing => "failing to take or renew the lease",
        }
    }
}

/// A lease as published, with its number: a backend that sees a new number starts over.
#[derive(Clone, Copy, Debug)]
pub struct Published {
    pub number: u64,
    pub lease: Lease,
}

/// Things randflake_status() counts since shared memory was created.
#[derive(Clone, Copy)]
pub enum Counter {
    /// A backend used up a node's second and took another node.
    NodeSwitch,
    /// A call was refused because the clock read before a used second or the lease's start.
    ClockRefusal,
    /// A call was refused because the server had no current lease.
    LeaseRefusal,
}

/// # Safety
/// Called from the shared memory start-up hook, with `AddinShmemInitLock` held.
pub unsafe fn attach() {
    let shared = unsafe {
        shared_memory::find_or_create(c"randflake_pg lease", |shared: *mut Shared| {
            shared.write(Shared {
                version: AtomicU64::new(0),
                taken: AtomicU64::new(0),
                number: AtomicU64::new(0),
                first_node: AtomicU32::new(0),
                last_node: AtomicU32::new(0),
                start: AtomicU64::new(0),
                end: AtomicU64::new(0),
                used_through: AtomicU64::new(0),
                renewed_at: AtomicU64::new(0),
                keeper_state: AtomicU32::new(KeeperState::NotStarted as u32),
                keeper_pid: AtomicI32::new(0),
                node_switches: AtomicU64::new(0),
                clock_refusals: AtomicU64::new(0),
                lease_refusals: AtomicU64::new(0),
            })
        })
    };
    SHARED.store(shared, Ordering::Release);
}

fn shared() -> &'static Shared {
    // SAFETY: set by `attach` before any backend exists; shared memory outlives every backend.
    unsafe { SHARED.load(Ordering::Acquire).as_ref() }.expect("randflake_pg shared memory is attached when preloaded")
}

/// Changes whenever the published lease does; cheap enough to read on every cache refill.
#[inline]
pub fn version() -> u64 {
    shared().version.load(Ordering::Acquire)
}

/// The published lease and the version it was read at.
pub fn read() -> (u64, Option<Published>) {
    let shared = shared();
    loop {
        let before = shared.version.load(Ordering::Acquire);
        if before % 2 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let number = shared.number.load(Ordering::Relaxed);
        let lease = Lease {
            first_node: shared.first_node.load(Ordering::Relaxed),
            last_node: shared.last_node.load(Ordering::Relaxed),
            start: shared.start.load(Ordering::Relaxed),
            end: shared.end.load(Ordering::Relaxed),
            used_through: shared.used_through.load(Ordering::Relaxed),
        };
        fence(Ordering::Acquire);
        if shared.version.load(Ordering::Relaxed) == before {
            return (before, (number != 0).then_some(Published { number, lease }));
        }
    }
}

/// Publishes `lease`, committed to the lease table, as this server's. `renewal`: it is the
/// published lease with a later end or high-water mark, so backends keep their nodes.
pub fn publish(lease: &Lease, renewal: bool, renewed_at: u64) {
    write(|shared| {
        if !renewal {
            let number = shared.taken.fetch_add(1, Ordering::Relaxed) + 1;
            shared.number.store(number, Ordering::Relaxed);
        }
        shared.first_node.store(lease.first_node, Ordering::Relaxed);
        shared.last_node.store(lease.last_node, Ordering::Relaxed);
        shared.start.store(lease.start, Ordering::Relaxed);
        shared.end.store(lease.end, Ordering::Relaxed);
        shared.used_through.store(lease.used_through, Ordering::Relaxed);
        shared.renewed_at.store(renewed_at, Ordering::Relaxed);
    });
}

/// The high-water mark of the last lease published since shared memory was created, even if
/// withdrawn since: backends may have issued IDs up to it, whatever the lease table now says.
pub fn last_used_through() -> Option<u64> {
    let shared = shared();
    (shared.taken.load(Ordering::Relaxed) > 0).then(|| shared.used_through.load(Ordering::Relaxed))
}

/// Stops backends from issuing under the published lease: it is no longer in the table.
pub fn withdraw() {
    write(|shared| shared.number.store(0, Ordering::Relaxed));
}

fn write(change: impl FnOnce(&Shared)) {
    let shared = shared();
    let version = shared.version.load(Ordering::Relaxed);
    shared.version.store(version + 1, Ordering::Relaxed);
    fence(Ordering::Release);
    change(shared);
    shared.version.store(version + 2, Ordering::Release);
}

pub fn set_keeper(state: KeeperState, pid: i32) {
    let shared = shared();
    shared.keeper_state.store(state as u32, Ordering::Relaxed);
    shared.keeper_pid.store(pid, Ordering::Relaxed);
}

/// The keeper's state and process id (0 when not running).
pub fn keeper() -> (KeeperState, i32) {
    let shared = shared();
    let state = match shared.keeper_state.load(Ordering::Relaxed) {
        1 => KeeperState::WaitingForLeaseTable,
        2 => KeeperState::Holding,
        3 => KeeperState::Failing,
        _ => KeeperState::NotStarted,
    };
    (state, shared.keeper_pid.load(Ordering::Relaxed))
}

pub fn renewed_at() -> u64 {
    shared().renewed_at.load(Ordering::Relaxed)
}

pub fn count(counter: Counter) {
    let shared = shared();
    let cell = match counter {
        Counter::NodeSwitch => &shared.node_switches,
        Counter::ClockRefusal => &shared.clock_refusals,
        Counter::LeaseRefusal => &shared.lease_refusals,
    };
    cell.fetch_add(1, Ordering::Relaxed);
}

/// `(node switches, clock refusals, lease refusals)`.
pub fn counters() -> (u64, u64, u64) {
    let shared = shared();
    (
        shared.node_switches.load(Ordering::Relaxed),
        shared.clock_refusals.load(Ordering::Relaxed),
        shared.lease_refusals.load(Ordering::Relaxed),
    )
}
