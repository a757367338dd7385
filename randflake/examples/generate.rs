//! Generates Randflake IDs the way an application would: a [`Generator`] driven by the system
//! clock, a small pool of nodes this process owns, and an [`IdCipher`] under the shared secret.
//!
//! ```text
//! RANDFLAKE_SECRET=<32 hex digits> cargo run -q -p randflake --example generate -- [COUNT]
//! ```
//!
//! Prints COUNT IDs (default 5), one per line as `<id> <string>`: the signed decimal ID and its
//! string form. The lines can be piped into the `decode` example, which reads both. Without
//! `RANDFLAKE_SECRET` the published test secret is used, with a warning: its IDs are not private.
//!
//! The application here owns nodes 100 and 101. Owning means that no other generator sharing
//! the secret (another process, server, or a PostgreSQL server running `randflake_pg` with the
//! same secret) uses those nodes while this one runs; how nodes are handed out (configuration,
//! a lease table) is up to the deployment, and [`randflake::lease`] has the arithmetic for
//! leases. Each node gives 131072 IDs per second, so asking for more than 262144 IDs shows the
//! generator switching nodes and waiting for the next second.
//!
//! Uniqueness across restarts needs the last second each node was used in. This example keeps
//! it in memory and, at start-up, assumes the current second may already have been used by a
//! previous run, which holds as long as the clock does not step back across a restart. A real
//! application stores it durably (see `used_through` in [`randflake::lease`]) before handing out
//! the IDs of a new second.

use std::collections::BTreeMap;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use randflake::{codec, Generator, IdCipher, Parts, Refusal, Secret, Step, Window};

/// The nodes this process owns.
const NODES: [u32; 2] = [100, 101];
/// How long this process holds its nodes (in a deployment, the lease it was granted).
const LEASE_SECONDS: u64 = 3600;
/// How far the clock may step back before we give up instead of waiting for it to catch up.
const TOLERATED_CLOCK_STEP_BACK: u64 = 10;
/// The secret of the published test vectors: for trying the example only.
const DEMO_SECRET: &str = "dffd6021bb2bd5b0af676290809ec3a5";

/// This process's nodes, each with the last second it was used in.
struct NodePool {
    used_through: BTreeMap<u32, u64>,
    free: Vec<u32>,
}

impl NodePool {
    fn new(nodes: &[u32], used_through: u64) -> Self {
        Self { used_through: nodes.iter().map(|&node| (node, used_through)).collect(), free: nodes.to_vec() }
    }

    /// A free node whose last used second is over, with that second.
    fn take(&mut self, now: u64) -> Option<(u32, u64)> {
        let index = self.free.iter().position(|node| self.used_through[node] < now)?;
        let node = self.free.swap_remove(index);
        Some((node, self.used_through[&node]))
    }

    fn give_back(&mut self, node: u32) {
        self.free.push(node);
    }

    /// Called before the IDs of a newly opened second leave the process.
    fn record_use(&mut self, node: u32, second: u64) {
        self.used_through.insert(node, second);
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("generate: {message}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let count: usize = match std::env::args().nth(1) {
        None => 5,
        Some(text) => text.parse().map_err(|_| format!("COUNT must be a whole number, not {text:?}"))?,
    };
    let secret = match std::env::var("RANDFLAKE_SECRET") {
        Ok(hex) => Secret::from_hex(&hex).map_err(|error| format!("RANDFLAKE_SECRET: {error}"))?,
        Err(_) => {
            eprintln!("generate: RANDFLAKE_SECRET is not set; using the public test secret");
            Secret::from_hex(DEMO_SECRET).map_err(|error| error.to_string())?
        }
    };
    let cipher = IdCipher::new(&secret);

    let start = unix_now()?;
    let window = Window::new(start, start + LEASE_SECONDS - 1).map_err(|error| error.to_string())?;
    let mut generator = Generator::new(window);
    let mut pool = NodePool::new(&NODES, start);

    let mut ids = Vec::with_capacity(count);
    while ids.len() < count {
        let now = unix_now()?;
        let wanted = u32::try_from(count - ids.len()).unwrap_or(u32::MAX);
        match generator.next(now, NODES.len() as u32, wanted) {
            Ok(Step::Issued { first, count: run, opened_second }) => {
                if opened_second {
                    pool.record_use(first.node_id, first.timestamp);
                }
                ids.extend(
                    (first.sequence..first.sequence + run).map(|sequence| cipher.encrypt(Parts { sequence, ..first })),
                );
            }
            Ok(Step::NeedNode { release }) => {
                if let Some(node) = release {
                    pool.give_back(node);
                }
                match pool.take(now) {
                    Some((node, used_through)) => generator.adopt(node, used_through),
                    // Every node we own has already been used in this second.
                    None => sleep_until(now + 1),
                }
            }
            // As many nodes as we allow per second are spent; the held node is kept.
            Ok(Step::WaitUntil { second }) => sleep_until(second),
            // The clock stepped back (NTP, a VM resumed): wait a little for it to catch up.
            Err(Refusal::ClockBehind { now, used }) if used - now <= TOLERATED_CLOCK_STEP_BACK => sleep_until(used),
            Err(Refusal::BeforeWindow { now, first }) if first - now <= TOLERATED_CLOCK_STEP_BACK => sleep_until(first),
            // Past the lease (renew it and call `set_last_second` in a real application), or a
            // clock too far behind: no ID can be issued safely now.
            Err(refusal) => return Err(format!("cannot issue IDs: {refusal}")),
        }
    }
    // Stopping: the held node goes back to the pool (and, in a deployment, its lease is released
    // or left to expire).
    if let Some(node) = generator.release() {
        pool.give_back(node);
    }

    let mut out = BufWriter::new(io::stdout().lock());
    for id in ids {
        writeln!(out, "{id} {}", codec::encode(id)).map_err(|error| format!("cannot write the output: {error}"))?;
    }
    out.flush().map_err(|error| format!("cannot write the output: {error}"))
}

fn unix_now() -> Result<u64, String> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .map_err(|_| "the system clock reads before 1970".to_owned())
}

/// Sleeps until the system clock reads `second` (at once if it already does).
fn sleep_until(second: u64) {
    let target = UNIX_EPOCH + Duration::from_secs(second);
    while let Ok(remaining) = target.duration_since(SystemTime::now()) {
        if remaining.is_zero() {
            break;
        }
        std::thread::sleep(remaining);
    }
}
