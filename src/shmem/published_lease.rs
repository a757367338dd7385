//! What the lease keeper tells every backend, through shared memory: the lease this server
//! holds now, the keeper's own state, and the counters that randflake_status() reports.
//!
//! The keeper is the only writer of the lease. Backends read it on every refill of their ID
//! cache, so the read is a sequence lock: a few plain loads and no shared lock.

use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

use randflake::backend::{Event, Published};
use randflake::keeper::LeaseKey;
use randflake::Lease;

use super::segment::SharedStruct;

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
    /// The running lease keeper's process id, or 0: also what keeps a second keeper from
    /// starting while an old one is still on its way out.
    keeper_pid: AtomicI32,
    /// Why the keeper is in its state, for randflake_status(): a sequence lock for readers,
    /// a flag that serialises the two writers (the launcher and the keeper).
    cause_version: AtomicU64,
    cause_writer: AtomicBool,
    cause_len: AtomicU32,
    cause: [AtomicU8; CAUSE_BYTES],
    node_switches: AtomicU64,
    clock_refusals: AtomicU64,
    lease_refusals: AtomicU64,
    /// Leases the keeper wrote whose commits were not known durable and which it never
    /// published, for the next keeper to delete; written by the keeper only.
    unconfirmed_count: AtomicU32,
    unconfirmed_first_node: [AtomicU32; UNCONFIRMED_SLOTS],
    unconfirmed_start: [AtomicU64; UNCONFIRMED_SLOTS],
}

/// How many unconfirmed leases are remembered; an older one is forgotten, which costs only the
/// seconds its row keeps its nodes from being leased again.
const UNCONFIRMED_SLOTS: usize = 8;

/// Room for the keeper's cause; a longer one is cut at a character boundary.
const CAUSE_BYTES: usize = 480;

pub const SHARED_SIZE: usize = SharedStruct::<Shared>::SIZE;

static SHARED: SharedStruct<Shared> = SharedStruct::new(c"randflake_pg lease");

/// What the lease keeper is doing; shown by randflake_status() and in errors, with its cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeeperState {
    /// Not started yet, or not at all (on a standby the keeper starts at promotion).
    NotStarted = 0,
    /// `randflake.database` does not exist, or the keeper cannot connect to it.
    WaitingForDatabase = 1,
    /// The extension (or, in fleet mode, the fleet lease table) is missing in its database.
    WaitingForLeaseTable = 2,
    /// A table of the lease table's name exists but is not one the keeper may trust.
    RefusingLeaseTable = 3,
    /// Holding and renewing a lease.
    Holding = 4,
    /// Its last attempt to take, check or renew the lease failed.
    Failing = 5,
}

impl KeeperState {
    const ALL: [Self; 6] = [
        Self::NotStarted,
        Self::WaitingForDatabase,
        Self::WaitingForLeaseTable,
        Self::RefusingLeaseTable,
        Self::Holding,
        Self::Failing,
    ];

    /// The state in words, with its cause where it has one.
    pub fn describe(self, cause: &str) -> String {
        match self {
            Self::NotStarted => "not started".into(),
            Self::WaitingForDatabase => format!("waiting for its database: {cause}"),
            Self::WaitingForLeaseTable => "waiting for the lease table".into(),
            Self::RefusingLeaseTable => format!("refusing the lease table: {cause}"),
            Self::Holding => "holding a lease".into(),
            Self::Failing => format!("failing: {cause}"),
        }
    }
}

/// The keeper as randflake_status() and errors report it.
#[derive(Clone, Debug)]
pub struct KeeperReport {
    pub state: KeeperState,
    pub cause: String,
    /// 0 when no keeper runs.
    pub pid: i32,
}

impl KeeperReport {
    pub fn describe(&self) -> String {
        self.state.describe(&self.cause)
    }
}

/// # Safety
/// Called from the shared memory start-up hook, with `AddinShmemInitLock` held.
pub unsafe fn attach() {
    let initialise = |shared: *mut Shared| {
        // SAFETY: `shared` points to size_of::<Shared>() bytes of fresh shared memory, which
        // `write` fills without reading.
        unsafe {
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
                cause_version: AtomicU64::new(0),
                cause_writer: AtomicBool::new(false),
                cause_len: AtomicU32::new(0),
                cause: [const { AtomicU8::new(0) }; CAUSE_BYTES],
                node_switches: AtomicU64::new(0),
                clock_refusals: AtomicU64::new(0),
                lease_refusals: AtomicU64::new(0),
                unconfirmed_count: AtomicU32::new(0),
                unconfirmed_first_node: [const { AtomicU32::new(0) }; UNCONFIRMED_SLOTS],
                unconfirmed_start: [const { AtomicU64::new(0) }; UNCONFIRMED_SLOTS],
            })
        }
    };
    // SAFETY: the caller keeps attach's promise; `initialise` writes every field.
    unsafe { SHARED.attach(initialise) };
}

fn shared() -> &'static Shared {
    SHARED.get()
}

/// Changes whenever the published lease does; cheap enough to read on every cache refill.
#[inline]
pub fn version() -> u64 {
    shared().version.load(Ordering::Acquire)
}

/// The published lease and the version it was read at.
pub fn read() -> (u64, Option<Published>) {
    let (version, number, lease) = read_fields();
    (version, (number != 0).then_some(Published { number, lease }))
}

/// The lease fields, whether published or withdrawn, with the version and number read with them.
fn read_fields() -> (u64, u64, Lease) {
    let shared = shared();
    let (version, (number, lease)) = read_consistent(&shared.version, || {
        let lease = Lease {
            first_node: shared.first_node.load(Ordering::Relaxed),
            last_node: shared.last_node.load(Ordering::Relaxed),
            start: shared.start.load(Ordering::Relaxed),
            end: shared.end.load(Ordering::Relaxed),
            used_through: shared.used_through.load(Ordering::Relaxed),
        };
        (shared.number.load(Ordering::Relaxed), lease)
    });
    (version, number, lease)
}

/// What `read` returns, read under the sequence lock `version`: again until no write overlapped.
fn read_consistent<T>(version: &AtomicU64, read: impl Fn() -> T) -> (u64, T) {
    loop {
        let before = version.load(Ordering::Acquire);
        if before % 2 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let value = read();
        fence(Ordering::Acquire);
        if version.load(Ordering::Relaxed) == before {
            return (before, value);
        }
    }
}

/// Makes `change` under the sequence lock `version`; the caller is its only writer.
fn write_consistent(version: &AtomicU64, change: impl FnOnce()) {
    let before = version.load(Ordering::Relaxed);
    version.store(before + 1, Ordering::Relaxed);
    fence(Ordering::Release);
    change();
    version.store(before + 2, Ordering::Release);
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

/// How many leases the keeper has taken since shared memory was created.
pub fn leases_taken() -> u64 {
    shared().taken.load(Ordering::Acquire)
}

/// The last lease published since shared memory was created, even if withdrawn since:
/// backends may have issued IDs with its nodes up to its high-water mark, whatever the lease
/// table now says.
pub fn last_published() -> Option<Lease> {
    (leases_taken() > 0).then(|| read_fields().2)
}

/// Stops backends from issuing under the published lease: it is no longer in the table.
pub fn withdraw() {
    write(|shared| shared.number.store(0, Ordering::Relaxed));
}

/// Changes the lease fields; the keeper is their only writer.
fn write(change: impl FnOnce(&Shared)) {
    let shared = shared();
    write_consistent(&shared.version, || change(shared));
}

/// Records what the keeper is doing and why. Written by the keeper, and by the launcher while
/// no keeper runs.
pub fn report_keeper(state: KeeperState, cause: &str) {
    let shared = shared();
    while shared.cause_writer.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        std::hint::spin_loop();
    }
    let mut length = cause.len().min(CAUSE_BYTES);
    while !cause.is_char_boundary(length) {
        length -= 1;
    }
    write_consistent(&shared.cause_version, || {
        shared.keeper_state.store(state as u32, Ordering::Relaxed);
        for (cell, byte) in shared.cause.iter().zip(&cause.as_bytes()[..length]) {
            cell.store(*byte, Ordering::Relaxed);
        }
        shared.cause_len.store(length as u32, Ordering::Relaxed);
    });
    shared.cause_writer.store(false, Ordering::Release);
}

/// The keeper's state, cause and process id.
pub fn keeper() -> KeeperReport {
    let shared = shared();
    let (_, (code, bytes)) = read_consistent(&shared.cause_version, || {
        let length = (shared.cause_len.load(Ordering::Relaxed) as usize).min(CAUSE_BYTES);
        let bytes: Vec<u8> = shared.cause[..length].iter().map(|cell| cell.load(Ordering::Relaxed)).collect();
        (shared.keeper_state.load(Ordering::Relaxed), bytes)
    });
    KeeperReport {
        state: KeeperState::ALL.into_iter().find(|state| *state as u32 == code).unwrap_or(KeeperState::NotStarted),
        cause: String::from_utf8_lossy(&bytes).into_owned(),
        pid: shared.keeper_pid.load(Ordering::Relaxed),
    }
}

/// Makes `pid` the one running keeper; false while another one has not exited yet.
pub fn claim_keeper(pid: i32) -> bool {
    shared().keeper_pid.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

/// Gives up the keeper's place, when the process holding it exits.
pub fn release_keeper(pid: i32) {
    let _ = shared().keeper_pid.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
}

pub fn renewed_at() -> u64 {
    shared().renewed_at.load(Ordering::Relaxed)
}

/// Counts what randflake_status() reports since shared memory was created.
pub fn count(event: Event) {
    let shared = shared();
    let cell = match event {
        Event::NodeSwitch => &shared.node_switches,
        Event::ClockRefusal => &shared.clock_refusals,
        Event::LeaseRefusal => &shared.lease_refusals,
    };
    cell.fetch_add(1, Ordering::Relaxed);
}

/// The leases the keeper wrote but never confirmed durable.
pub fn unconfirmed() -> Vec<LeaseKey> {
    let shared = shared();
    let count = (shared.unconfirmed_count.load(Ordering::Acquire) as usize).min(UNCONFIRMED_SLOTS);
    (0..count)
        .map(|slot| LeaseKey {
            first_node: shared.unconfirmed_first_node[slot].load(Ordering::Relaxed),
            start: shared.unconfirmed_start[slot].load(Ordering::Relaxed),
        })
        .collect()
}

/// Remembers one more unconfirmed lease, forgetting the oldest when all slots are taken.
/// Only the keeper writes these, and only one keeper runs.
pub fn remember_unconfirmed(key: LeaseKey) {
    let shared = shared();
    let mut keys = unconfirmed();
    if keys.len() == UNCONFIRMED_SLOTS {
        keys.remove(0);
    }
    keys.push(key);
    for (slot, key) in keys.iter().enumerate() {
        shared.unconfirmed_first_node[slot].store(key.first_node, Ordering::Relaxed);
        shared.unconfirmed_start[slot].store(key.start, Ordering::Relaxed);
    }
    shared.unconfirmed_count.store(keys.len() as u32, Ordering::Release);
}

pub fn forget_unconfirmed() {
    shared().unconfirmed_count.store(0, Ordering::Release);
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
