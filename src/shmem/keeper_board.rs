//! What the lease keeper is doing and why, and which process it is: written by the keeper, and
//! by the launcher while no keeper runs; read by randflake_status() and by errors.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

use randflake::decisions::keeper_report::{KeeperReport, KeeperState};
use randflake::shared::seqlock::SeqLock;

use crate::pg::shmem_segments::Shared;

/// Room for the cause; a longer one is cut at a character boundary.
const CAUSE_BYTES: usize = 480;

pub struct KeeperBoard {
    /// Guards the state and the cause, which change together.
    lock: SeqLock,
    state: AtomicU32,
    cause_len: AtomicU32,
    cause: [AtomicU8; CAUSE_BYTES],
    /// The running keeper's process id, or 0: also what keeps a second keeper from starting
    /// while an old one is still on its way out.
    pid: AtomicI32,
    /// Ticks the keepers completed since shared memory was created: what tests and monitoring
    /// wait on to see the keeper act, rather than on the clock.
    ticks: AtomicU64,
}

impl Default for KeeperBoard {
    fn default() -> Self {
        Self {
            lock: SeqLock::default(),
            state: AtomicU32::new(KeeperState::NotStarted as u32),
            cause_len: AtomicU32::new(0),
            cause: std::array::from_fn(|_| AtomicU8::new(0)),
            pid: AtomicI32::new(0),
            ticks: AtomicU64::new(0),
        }
    }
}

pub static BOARD: Shared<KeeperBoard> = Shared::new(c"randflake_pg keeper report");

/// Records what the keeper is doing and why.
pub fn report(state: KeeperState, cause: &str) {
    let board = BOARD.get();
    let mut length = cause.len().min(CAUSE_BYTES);
    while !cause.is_char_boundary(length) {
        length -= 1;
    }
    board.lock.write(|| {
        board.state.store(state as u32, Ordering::Relaxed);
        for (cell, byte) in board.cause.iter().zip(&cause.as_bytes()[..length]) {
            cell.store(*byte, Ordering::Relaxed);
        }
        board.cause_len.store(length as u32, Ordering::Relaxed);
    });
}

/// Counts one more tick completed, after its report.
pub fn count_tick() {
    BOARD.get().ticks.fetch_add(1, Ordering::Release);
}

/// Ticks completed since start-up.
pub fn ticks() -> u64 {
    BOARD.get().ticks.load(Ordering::Acquire)
}

/// The keeper's state, cause and process id.
pub fn read() -> KeeperReport {
    let board = BOARD.get();
    let (_, (code, bytes)) = board.lock.read(|| {
        let length = (board.cause_len.load(Ordering::Relaxed) as usize).min(CAUSE_BYTES);
        let bytes: Vec<u8> = board.cause[..length].iter().map(|cell| cell.load(Ordering::Relaxed)).collect();
        (board.state.load(Ordering::Relaxed), bytes)
    });
    KeeperReport {
        state: KeeperState::from_code(code),
        cause: String::from_utf8_lossy(&bytes).into_owned(),
        pid: board.pid.load(Ordering::Relaxed),
    }
}

/// Makes `pid` the one running keeper; false while another one has not exited yet.
pub fn claim(pid: i32) -> bool {
    BOARD.get().pid.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

/// Gives up the keeper's place, when the process holding it exits.
pub fn release(pid: i32) {
    let _ = BOARD.get().pid.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
}
