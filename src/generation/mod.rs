//! This backend's IDs: the crate's refill policy (`randflake::decisions::refill`) run over shared
//! memory, its waits, and the IDs it reserves and encrypts ahead.
#![forbid(unsafe_code)]

use std::cell::Cell;
use std::time::{Duration, Instant};

use pgrx::prelude::*;
use randflake::decisions::refill::{Backend, Event, Published, Refill, Server};
use randflake::shared::server_position::{NodeSpan, Take};
use randflake::{IdCipher, Refusal, BATCH};

use crate::errors::Error;
use crate::node_config::{self, Mode};
use crate::pg::backend::{self, BackendLocal, BackendShared};
use crate::pg::clock;
use crate::secret;
use crate::shmem::{counters, keeper_board, lease_board, server_position};

/// Created on the first call in a process, so that sessions that never generate IDs set nothing
/// up. A process-local static rather than a `thread_local!`,
/// whose every access is a call in a library loaded with dlopen() (see `BackendLocal`).
static BACKEND: BackendLocal<Option<BackendIds>> = BackendLocal::new(None);

/// The IDs this backend reserved ahead, apart from [`BACKEND`]: the hot path reads them without
/// a borrow to mark and clear, as each field is a `Cell`. Empty until the first refill, so a first
/// call goes to [`next`], which starts the backend's state.
static READY: BackendShared<ReadyIds> = BackendShared::new(ReadyIds::empty());

struct BackendIds {
    backend: Backend,
}

/// IDs reserved ahead for `randflake_next()`, encrypted, handed out in order while the clock
/// still reads their second and the secret is unchanged. Reserving [`BATCH`] at a time lets them
/// be encrypted side by side, for a fraction of the cost of one by one, and spreads the
/// bookkeeping of a reservation over as many calls; unused ones are simply skipped.
struct ReadyIds {
    second: Cell<u64>,
    secret_version: Cell<u64>,
    ids: [Cell<i64>; BATCH],
    next: Cell<usize>,
    len: Cell<usize>,
}

/// What a caller wants.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// An encrypted ID, as `randflake_next()` returns it.
    Id,
    /// A plain value, as `randflake_next_key()` returns it.
    Key,
}

impl Output {
    /// How many values a refill takes from the server's position. Encrypted IDs are random, so
    /// a run of [`BATCH`] costs their index nothing and lets them be encrypted side by side.
    /// Keys are ordered: taken one at a time, the keys of every backend of the server follow
    /// one another in the key's order as they are made, so their index appends as identity's
    /// does (in runs, each backend's run would fill a stretch of the index's last pages on its
    /// own, and nbtree splits those pages in half).
    fn run(self) -> u32 {
        match self {
            Output::Id => BATCH as u32,
            Output::Key => 1,
        }
    }
}

impl ReadyIds {
    const fn empty() -> Self {
        Self {
            second: Cell::new(0),
            secret_version: Cell::new(0),
            ids: [const { Cell::new(0) }; BATCH],
            next: Cell::new(0),
            len: Cell::new(0),
        }
    }

    /// The next reserved ID, if the clock (`now`) still reads its second, no process of the
    /// server has begun a later second (`server_floor`), and the secret is unchanged.
    #[inline]
    fn take(&self, server_floor: u64, now: u64, secret_version: u64) -> Option<i64> {
        let next = self.next.get();
        let usable = next < self.len.get()
            && self.second.get() == now
            && server_floor <= now
            && self.secret_version.get() == secret_version;
        let id = self.ids.get(next).filter(|_| usable)?;
        self.next.set(next + 1);
        Some(id.get())
    }

    /// Keeps a new run: the first `len` of `ids` are this backend's to hand out, and the first of
    /// them has been handed out already.
    fn keep(&self, second: u64, secret_version: u64, ids: &[i64; BATCH], len: usize) {
        for (kept, id) in self.ids.iter().zip(ids) {
            kept.set(*id);
        }
        self.second.set(second);
        self.secret_version.set(secret_version);
        self.next.set(1);
        self.len.set(len);
    }
}

/// An ID reserved earlier, while the clock still reads its second, no later second has been
/// begun by any process of the server (a clock stepped back is refused here as on a refill), and
/// the secret is unchanged. Reads and compares, and cannot fail: the caller falls back to
/// [`next`] on `None`.
#[inline]
pub fn reserved_id() -> Option<i64> {
    // The floor is read before the clock, as the refill does: a second begun since was read
    // from a clock later than this reading, unless the clock was stepped back.
    let server_floor = server_position::latest_second();
    READY.get().take(server_floor, clock::unix_second(), secret::version())
}

/// Takes the next run from the server's position and returns its first value in the form
/// `output` asks for, keeping the rest of a run of IDs: what a call for an ID does when
/// [`reserved_id`] has none, and every call for a key. Starts this backend's state on its first
/// call.
pub fn next(output: Output) -> i64 {
    BACKEND
        .with(|slot| {
            let backend = match slot {
                Some(backend) => backend,
                None => slot.insert(BackendIds::start()?),
            };
            let secret_version = secret::version();
            // The secret is checked before values are taken, so a misconfigured server uses none;
            // keys need it too, since every key is shown encrypted.
            secret::with_cipher(|cipher| backend.refill(cipher, secret_version, output))?
        })
        .unwrap_or_else(|error| error.raise())
}

impl BackendIds {
    fn start() -> Result<Self, Error> {
        match node_config::mode() {
            Mode::Off => return Err(Error::GenerationOff {}),
            _ if backend::in_recovery() => return Err(Error::OnStandby {}),
            _ => {}
        }
        Ok(Self { backend: Backend::new() })
    }

    /// Takes the next run (encrypting and keeping it for [`Output::Id`]) and returns its first
    /// value, after whatever waits the refill policy asks for.
    fn refill(&mut self, cipher: &IdCipher, secret_version: u64, output: Output) -> Result<i64, Error> {
        loop {
            let refill = self.backend.refill(clock::unix_second(), output.run(), &mut SharedMemory);
            match refill {
                Refill::Issued { first, .. } if output == Output::Key => return Ok(first.to_raw() as i64),
                Refill::Issued { first, count } => {
                    // A run is consecutive plain values. Lanes past `count` are encrypted too,
                    // and never handed out.
                    let first_raw = first.to_raw();
                    let ids =
                        cipher.encrypt_raw_batch(&std::array::from_fn(|lane| first_raw.wrapping_add(lane as u64)));
                    READY.get().keep(first.timestamp, secret_version, &ids, count as usize);
                    return Ok(ids[0]);
                }
                Refill::WaitForSecond(second) => wait_for_second(second),
                Refill::ReadClockAgain => {}
                Refill::AwaitLease { limit } => wait_for_lease(limit),
                Refill::Refused(refusal) => return Err(error_of(refusal)),
            }
        }
    }
}

/// The error a refusal raises.
fn error_of(refusal: Refusal) -> Error {
    match refusal {
        Refusal::ClockBehind { now, used } => Error::ClockBehind { now, used },
        Refusal::BeforeWindow { now, first } => Error::ClockBeforeLease { now, start: first },
        Refusal::AfterWindow { now, last } => Error::LeaseLapsed { now, through: last },
        Refusal::PastLastSecond { now } => Error::ClockPastLastSecond { now },
        Refusal::NoLease => Error::NoLease { keeper: keeper_board::read(), database: node_config::database() },
    }
}

/// The server's shared memory, as the refill policy sees it.
struct SharedMemory;

impl Server for SharedMemory {
    fn lease_version(&self) -> u64 {
        lease_board::version()
    }

    fn published(&self) -> (u64, Option<Published>) {
        lease_board::read()
    }

    fn leases_taken(&self) -> u64 {
        lease_board::leases_taken()
    }

    fn take(&mut self, now: u64, span: NodeSpan, run: u32) -> Take {
        server_position::take(now, span, run)
    }

    fn count(&mut self, event: Event) {
        counters::count(event);
    }
}

/// Waits up to `limit` for the keeper to publish a new version of the lease. The limit is kept
/// by the monotonic clock: a wall clock stepped back must not stretch it.
fn wait_for_lease(limit: Duration) {
    let seen = lease_board::version();
    let deadline = Instant::now() + limit;
    while lease_board::version() == seen && Instant::now() < deadline {
        sleep(Duration::from_millis(20));
    }
}

/// Sleeps until the clock should read `second`, or until interrupted. The caller reads the
/// clock again afterwards, so a clock stepped back meanwhile is refused rather than waited out.
fn wait_for_second(second: u64) {
    sleep(Duration::from_secs(second).saturating_sub(clock::unix_time()));
}

/// Sleeps on this process's latch for about `duration` (1 ms to 1 s), then serves interrupts.
fn sleep(duration: Duration) {
    backend::wait_on_latch(duration.clamp(Duration::from_millis(1), Duration::from_secs(1)));
    check_for_interrupts!();
}
