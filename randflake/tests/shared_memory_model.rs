//! The model check of randflake_pg's shared-memory protocols (`randflake::shared`): loom runs
//! the shipped code over its own atomics and tries every interleaving of the processes below,
//! and every value a weakly ordered load may return in each.
//!
//! `make loom` runs it: `cargo test -p randflake --release --features loom --test
//! shared_memory_model`, then again with the sequence lock's reader weakened
//! (`--features loom,fault-seqlock-relaxed-reader`), where the check must find torn reads, and
//! with the server position's clock rule off (`--features loom,fault-position-rewinds`), where it
//! must find values handed out twice.
#![cfg(feature = "loom")]

use std::sync::atomic::Ordering;

use std::ops::Range;

use loom::sync::Arc;
use loom::thread;

use randflake::decisions::refill::Published;
use randflake::shared::lease_board_protocol::LeaseBoard;
use randflake::shared::seqlock::SeqLock;
use randflake::shared::server_position::{NodeSpan, ServerPosition, Take};
use randflake::shared::{Atomics, LoomAtomics};
use randflake::{Lease, Parts, MAX_SEQUENCE};

/// Runs `check` in every interleaving with up to `LOOM_MAX_PREEMPTIONS` (default 2) threads
/// switched away from while they could still run: loom's usual bound, which keeps three
/// threads' models to seconds (an unbounded one of the lease board runs for hours), and finds
/// the known ordering bugs, whose races need one or two such switches.
fn model(check: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(2));
    builder.check(check);
}

/// A lease with no field at its default, so that a lease read half before its publication is seen.
const TAKEN: Lease = Lease { first_node: 1, last_node: 2, start: 100, end: 199, used_through: 99 };

/// The keeper publishes a lease while a backend reads the board. Every read returns, with the
/// version it was read at, exactly what the board held at that version: no lease, or the whole
/// lease, never one with fields from before the publication. With the reader's first load of
/// the version relaxed, a backend can see the version the publication left and still load
/// fields from before it: the check must find that.
#[test]
#[cfg_attr(feature = "fault-seqlock-relaxed-reader", should_panic(expected = "mixed lease"))]
fn backends_read_the_published_lease_whole() {
    model(|| {
        let board = Arc::new(LeaseBoard::<LoomAtomics>::default());
        let keeper = {
            let board = Arc::clone(&board);
            thread::spawn(move || board.publish(&TAKEN, false, 100))
        };
        let (version, lease) = board.read();
        let expected = match version {
            0 => None,
            2 => Some(Published { number: 1, lease: TAKEN }),
            _ => panic!("a read returned the version {version}"),
        };
        assert_eq!(lease, expected, "mixed lease at version {version}");
        keeper.join().unwrap();
        assert_eq!(board.read(), (2, Some(Published { number: 1, lease: TAKEN })));
    });
}

/// Two values behind a sequence lock, written together.
#[derive(Default)]
struct Pair {
    lock: SeqLock<LoomAtomics>,
    a: <LoomAtomics as Atomics>::U64,
    b: <LoomAtomics as Atomics>::U64,
}

impl Pair {
    fn write(&self, value: u64) {
        self.lock.write(|| {
            self.a.store(value, Ordering::Relaxed);
            self.b.store(value, Ordering::Relaxed);
        });
    }

    /// The pair, checked whole and as new as the version it was read at: write `n` leaves
    /// version `2 n`, and the value `n`.
    fn read_checked(&self) {
        let (version, (a, b)) = self.lock.read(|| (self.a.load(Ordering::Relaxed), self.b.load(Ordering::Relaxed)));
        assert_eq!((a, b), (version / 2, version / 2), "mixed pair at version {version}");
    }
}

/// One writer writes twice while a reader reads: the read is a whole write, the one its version
/// says. With the reader's first load of the version relaxed, it can see the version a write
/// left and still load values from before that write: the check must find that.
#[test]
#[cfg_attr(feature = "fault-seqlock-relaxed-reader", should_panic(expected = "mixed pair"))]
fn readers_see_each_write_whole() {
    model(|| {
        let pair = Arc::new(Pair::default());
        let writer = {
            let pair = Arc::clone(&pair);
            thread::spawn(move || {
                pair.write(1);
                pair.write(2);
            })
        };
        pair.read_checked();
        writer.join().unwrap();
    });
}

/// Two writers (the keeper and the launcher, on the keeper's report) take turns while a reader
/// reads: it sees no write, or one whole write; with the reader weakened, a mix.
#[test]
#[cfg_attr(feature = "fault-seqlock-relaxed-reader", should_panic(expected = "mixed pair"))]
fn writers_take_turns() {
    model(|| {
        let pair = Arc::new(Pair::default());
        let writers: Vec<_> = [1, 2]
            .map(|value| {
                let pair = Arc::clone(&pair);
                thread::spawn(move || pair.write(value))
            })
            .into_iter()
            .collect();
        let (version, (a, b)) = pair.lock.read(|| (pair.a.load(Ordering::Relaxed), pair.b.load(Ordering::Relaxed)));
        assert_eq!(a, b, "mixed pair at version {version}");
        assert_eq!(version == 0, a == 0);
        for writer in writers {
            writer.join().unwrap();
        }
        assert_eq!(pair.lock.version(), 4);
    });
}

/// The server's position with `values` of second `T` in `SPAN` already handed out, and the
/// run that handed them out.
fn position_after(values: u32) -> (Arc<ServerPosition<LoomAtomics>>, Range<u64>) {
    let position = Arc::new(ServerPosition::<LoomAtomics>::default());
    let Take::Run { first, count } = position.take(T, SPAN, values) else { panic!("nothing taken") };
    assert_eq!(count, values);
    (position, first..first + u64::from(count))
}

const T: u64 = 1_800_000_000;
/// Two nodes, above node 0, so that a second begun at node 0 would show.
const SPAN: NodeSpan = NodeSpan { first: 3, last: 4 };

/// The values a take handed out (none for a refusal or a used-up second).
fn values(take: Take) -> Range<u64> {
    match take {
        Take::Run { first, count } => first..first + u64::from(count),
        Take::SecondUsedUp | Take::Ahead { .. } => 0..0,
    }
}

/// Asserts that no value is in two of `runs`.
fn disjoint(runs: &[Range<u64>]) {
    for (index, run) in runs.iter().enumerate() {
        for other in &runs[index + 1..] {
            assert!(run.end <= other.start || other.end <= run.start, "values handed out twice: {run:?} and {other:?}");
        }
    }
}

/// Two backends take runs of second `T`, one running on from the first node into the next, while
/// a third, its clock a second later, begins `T + 1`. No value is handed out twice; a take of `T`
/// after the roll-over is told the server is ahead, never moved back. With the rule switched off
/// (`fault-position-rewinds`: a position ahead of the caller's clock is moved back to its second)
/// the check must find values handed out twice.
#[test]
#[cfg_attr(feature = "fault-position-rewinds", should_panic(expected = "values handed out twice"))]
fn runs_taken_around_a_roll_over_are_handed_out_once() {
    model(|| {
        let (position, before) = position_after(MAX_SEQUENCE - 1);
        let takers: Vec<_> = [(T, 4), (T, 1), (T + 1, 2)]
            .map(|(now, run)| {
                let position = Arc::clone(&position);
                thread::spawn(move || (now, position.take(now, SPAN, run)))
            })
            .into_iter()
            .collect();
        let mut runs = vec![before];
        for taker in takers {
            let (now, take) = taker.join().unwrap();
            match take {
                Take::Run { first, .. } => assert_eq!(Parts::from_raw(first).timestamp, now),
                Take::Ahead { second } => assert_eq!((now, second), (T, T + 1)),
                Take::SecondUsedUp => panic!("a span of two nodes used up by {MAX_SEQUENCE} values"),
            }
            runs.push(values(take));
        }
        disjoint(&runs);
        assert_eq!(position.latest_second(), T + 1);
        assert!(position.report().nodes_used_before(SPAN) >= 1);
    });
}

/// Three backends take the last values of a second: each value goes to one of them, the last run
/// cut at the span's end, and a take after them finds the second used up.
#[test]
fn the_last_values_of_a_second_go_to_one_backend_each() {
    model(|| {
        let (position, before) = position_after(2 * (MAX_SEQUENCE + 1) - 5);
        let takers: Vec<_> = (0..3)
            .map(|_| {
                let position = Arc::clone(&position);
                thread::spawn(move || position.take(T, SPAN, 2))
            })
            .collect();
        let mut runs = vec![before];
        runs.extend(takers.into_iter().map(|taker| values(taker.join().unwrap())));
        disjoint(&runs);
        let handed_out: u64 = runs.iter().map(|run| run.end - run.start).sum();
        assert_eq!(handed_out, 2 * (u64::from(MAX_SEQUENCE) + 1), "values lost or invented");
        assert_eq!(position.take(T, SPAN, 1), Take::SecondUsedUp);
    });
}

/// Two backends begin the next second at once: one compare-and-swap wins, both take from the
/// second begun, at the span's first node.
#[test]
fn two_backends_begin_a_second_once() {
    model(|| {
        let (position, before) = position_after(5);
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let position = Arc::clone(&position);
                thread::spawn(move || position.take(T + 1, SPAN, 2))
            })
            .collect();
        let mut runs = vec![before];
        runs.extend(takers.into_iter().map(|taker| values(taker.join().unwrap())));
        disjoint(&runs);
        let mut begun: Vec<Parts> = runs[1..].iter().map(|run| Parts::from_raw(run.start)).collect();
        begun.sort();
        let first = Parts { timestamp: T + 1, node_id: SPAN.first, sequence: 0 };
        assert_eq!(begun, [first, Parts { sequence: 2, ..first }]);
        let report = position.report();
        assert_eq!((report.nodes_used_now(SPAN), report.nodes_used_before(SPAN)), (1, 1));
    });
}
