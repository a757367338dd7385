//! The model check of randflake_pg's shared-memory protocols (`randflake::shared`): loom runs
//! the shipped code over its own atomics and tries every interleaving of the processes below,
//! and every value a weakly ordered load may return in each.
//!
//! `make loom` runs it: `cargo test -p randflake --release --features loom --test
//! shared_memory_model`, then again with the sequence lock's reader weakened
//! (`--features loom,fault-seqlock-relaxed-reader`), where the check must find torn reads.
#![cfg(feature = "loom")]

use std::sync::atomic::Ordering;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use randflake::decisions::refill::{NoNode, Published};
use randflake::shared::lease_board_protocol::LeaseBoard;
use randflake::shared::node_table_protocol::{Header, NodeSlot, NodeTable};
use randflake::shared::seqlock::SeqLock;
use randflake::shared::{Atomics, LoomAtomics};
use randflake::Lease;

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

/// Three backends take the one node of a range, each at its own second, issue in that second
/// and give it back. The node never has two holders (each holder writes the node's state
/// without a lock, which loom reports as a data race unless the holders are ordered one after
/// the other), and each holder learns the last second every earlier holder issued in, so never
/// issues in it again.
#[test]
fn a_node_has_one_holder_and_learns_its_last_second() {
    model(|| {
        let table = Arc::new(OneNode::default());
        let backends: Vec<_> = (1..=3)
            .map(|pid| {
                let table = Arc::clone(&table);
                thread::spawn(move || {
                    let now = 10 + u64::from(pid as u32);
                    let nodes = NodeTable::new(&table.header, &table.slots);
                    match nodes.acquire(0, 0, now, pid) {
                        Ok((node, used_through)) => {
                            table.issued_through.with_mut(|issued_through| {
                                // SAFETY: loom reports any access of the cell that is not
                                // ordered after the previous holder's.
                                let issued_through = unsafe { &mut *issued_through };
                                assert!(used_through >= *issued_through, "the node's last second was lost");
                                assert!(now > used_through);
                                nodes.record_used(node, now);
                                *issued_through = now;
                            });
                            assert!(table.header.latest_used() >= now);
                            nodes.release(node);
                        }
                        Err(NoNode::AllHeld | NoNode::AllUsedThisSecond) => {}
                    }
                })
            })
            .collect();
        for backend in backends {
            backend.join().unwrap();
        }
        let nodes = NodeTable::new(&table.header, &table.slots);
        assert_eq!(nodes.held_count(0, 0), 0);
    });
}

/// A node table of one node, and what its holders issued, outside the table.
#[derive(Default)]
struct OneNode {
    header: Header<LoomAtomics>,
    slots: [NodeSlot<LoomAtomics>; 1],
    /// The last second a holder issued in.
    issued_through: UnsafeCell<u64>,
}

/// A process that exits releases what it holds by a scan, while another takes a node: the scan
/// frees only its own nodes, and the other's hold stays exclusive.
#[test]
fn an_exiting_process_frees_only_its_own_nodes() {
    model(|| {
        let table = Arc::new(TwoNodes::default());
        let exiting = {
            let table = Arc::clone(&table);
            thread::spawn(move || {
                let nodes = NodeTable::new(&table.header, &table.slots);
                let taken = nodes.acquire(0, 1, 10, 1);
                nodes.release_all_held(0, 1, 1);
                taken
            })
        };
        let staying = {
            let table = Arc::clone(&table);
            thread::spawn(move || NodeTable::new(&table.header, &table.slots).acquire(0, 1, 10, 2))
        };
        let (exited, stayed) = (exiting.join().unwrap(), staying.join().unwrap());
        let nodes = NodeTable::new(&table.header, &table.slots);
        let (node, _) = stayed.expect("two nodes for two processes");
        assert_ne!(exited.map(|(node, _)| node), Ok(node), "one node given to two processes");
        assert_eq!(nodes.held_count(0, 1), 1, "the staying process lost its node");
        assert_eq!(nodes.held_count(node, node), 1);
    });
}

#[derive(Default)]
struct TwoNodes {
    header: Header<LoomAtomics>,
    slots: [NodeSlot<LoomAtomics>; 2],
}
