//! The server's position: the next plain value any process of the server may issue. Every
//! backend of a server draws its IDs from this one word, so a server uses the nodes its rate
//! needs, not one per process.
//!
//! The word is laid out as a plain value, `(second − epoch) << 34 | node << 17 | sequence`, so
//! advancing it by one is the next sequence, and past a node's last sequence the carry is the
//! next node's first. A caller takes a run of consecutive values with one `fetch_add`; a
//! compare-and-swap is needed only to begin a second (the word moves to the span's first node,
//! sequence 0). Within a second the word walks the span's nodes in order, each used up before
//! the next is touched, and past the span's last node the second is used up.
//!
//! Uniqueness rests on two facts: a `fetch_add` hands every caller values no other caller
//! receives (the modification order of one word is total, at any memory ordering), and the
//! word never moves backwards (a second is begun only by a compare-and-swap from a smaller
//! word to a larger one). So within one postmaster's life no value is handed out twice, whatever
//! the lease; across servers the leases' node spans are disjoint, and across restarts (this
//! word lost with shared memory) the keeper's next lease starts past every second used.
//!
//! The word's second is also the server's clock floor: a caller whose clock reads earlier is
//! refused, never moved back to its second.

use core::sync::atomic::Ordering;

use super::{Atomic, Atomics, StdAtomics};
use crate::format::layout::{Parts, MAX_NODE, MAX_SEQUENCE};

/// The nodes a server issues from: its lease's block (fleet mode) or its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSpan {
    /// The first node, where every second begins.
    pub first: u32,
    /// The last node (inclusive).
    pub last: u32,
}

impl NodeSpan {
    /// The first value of `second` in this span.
    fn first_value(self, second: u64) -> u64 {
        Parts { timestamp: second, node_id: self.first, sequence: 0 }.to_raw()
    }

    /// The last value of `second` in this span.
    fn last_value(self, second: u64) -> u64 {
        Parts { timestamp: second, node_id: self.last, sequence: MAX_SEQUENCE }.to_raw()
    }

    /// How many nodes of the span have handed out values up to and including `value`, a value
    /// of some second the span began.
    fn nodes_through(self, value: u64) -> u32 {
        let node = Parts::from_raw(value).node_id;
        if node < self.first {
            0
        } else {
            node.min(self.last) - self.first + 1
        }
    }
}

/// What a take found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// `count` consecutive plain values from `first`, all of the second asked for and inside
    /// the span: a run may run on from one node into the next.
    Run {
        /// The first plain value.
        first: u64,
        /// How many, from 1 to the run asked for.
        count: u32,
    },
    /// Every node of the span has handed out all its sequences of this second.
    SecondUsedUp,
    /// The server already issues in a later second than the clock reading passed.
    Ahead {
        /// That later second.
        second: u64,
    },
}

/// The last second that a newer one replaced, as [`ServerPosition::report`] gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PositionReport {
    /// The word now: the next value the server hands out.
    pub next: u64,
    /// The last value handed out in the second before the word's own, or 0 if none is known.
    pub last_of_previous_second: u64,
}

impl PositionReport {
    /// The second the server issues in now (the epoch while it has issued nothing).
    pub fn second(&self) -> u64 {
        Parts::from_raw(self.next).timestamp
    }

    /// How many nodes of `span` the server has used in its current second.
    pub fn nodes_used_now(&self, span: NodeSpan) -> u32 {
        match self.next.checked_sub(1) {
            Some(last) if Parts::from_raw(last).timestamp == self.second() => span.nodes_through(last),
            _ => 0,
        }
    }

    /// How many nodes of `span` the server used in the second before its current one, if it
    /// issued in that second; 0 otherwise.
    pub fn nodes_used_before(&self, span: NodeSpan) -> u32 {
        let previous = Parts::from_raw(self.last_of_previous_second).timestamp;
        if self.last_of_previous_second != 0 && previous + 1 == self.second() {
            span.nodes_through(self.last_of_previous_second)
        } else {
            0
        }
    }
}

/// The word, and what the processes that began seconds wrote beside it.
#[derive(Default)]
pub struct ServerPosition<A: Atomics = StdAtomics> {
    /// The next plain value to hand out. On a cache line of its own: every run taken writes it,
    /// and the fields below are read on every call.
    next: OwnCacheLine<A::U64>,
    /// The latest second begun: the clock floor that every call reads, written once a second.
    latest_second: A::U64,
    /// The last value handed out before the current second began (for monitoring only).
    last_of_previous_second: A::U64,
}

/// A value alone on its cache line (PostgreSQL's `PG_CACHE_LINE_SIZE`, 128 bytes, which also
/// keeps it off the line that adjacent-line prefetching pairs with it).
#[derive(Default)]
#[repr(align(128))]
struct OwnCacheLine<T>(T);

/// Values from here on (2^32 below `u64::MAX`: the layout's last seconds, on their last nodes)
/// are taken by compare-and-swap, which cannot wrap the word past the end. Below it, a
/// `fetch_add` of every process at once cannot reach the end either: that would take 2^26
/// processes each taking a run of 64.
const NEAR_THE_END: u64 = 0xFFFF_FFFF_0000_0000;

impl<A: Atomics> ServerPosition<A> {
    /// The latest second in which the server has issued IDs, or is about to: the server's
    /// clock floor. Read it before the clock: a second begun since was read from a clock later
    /// than this reading, so only a clock stepped back reads earlier than the value returned.
    /// (It is written just after the second begins: a caller that reads the previous second
    /// meanwhile only checks its clock against a lower floor, and `take` refuses a clock behind
    /// the word itself.)
    #[inline]
    pub fn latest_second(&self) -> u64 {
        self.latest_second.load(Ordering::Relaxed)
    }

    /// Takes up to `run` (at least 1) consecutive values of second `now` in `span`, beginning
    /// `now` if the server has not yet.
    pub fn take(&self, now: u64, span: NodeSpan, run: u32) -> Take {
        debug_assert!(span.first <= span.last && span.last <= MAX_NODE && run >= 1);
        // The layout's very last value is never handed out: the word holding it means the
        // layout is used up, as no word past it exists.
        let (start, last) = (span.first_value(now), span.last_value(now).min(u64::MAX - 1));
        loop {
            let seen = self.next.0.load(Ordering::Relaxed);
            if seen > last {
                if Parts::from_raw(seen).timestamp > now {
                    #[cfg(feature = "fault-position-rewinds")]
                    {
                        self.next.0.store(start, Ordering::Relaxed);
                        continue;
                    }
                    #[cfg(not(feature = "fault-position-rewinds"))]
                    return Take::Ahead { second: Parts::from_raw(seen).timestamp };
                }
                return Take::SecondUsedUp;
            }
            if seen < start {
                self.begin(seen, start);
                continue;
            }
            let Some(first) = self.advance(seen, run) else { continue };
            // Another process may have begun a later second, or used the span up, between the
            // load and the advance: then the values taken are not this second's, and are dropped.
            if first < start || first > last {
                continue;
            }
            let count = (last - first + 1).min(u64::from(run)) as u32;
            return Take::Run { first, count };
        }
    }

    /// Moves the word from below `start` to `start`, unless another process moved it first.
    fn begin(&self, mut seen: u64, start: u64) {
        while seen < start {
            match self.next.0.compare_exchange(seen, start, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.latest_second.fetch_max(Parts::from_raw(start).timestamp, Ordering::Relaxed);
                    if let Some(last_handed_out) = seen.checked_sub(1) {
                        self.last_of_previous_second.store(last_handed_out, Ordering::Relaxed);
                    }
                    return;
                }
                Err(found) => seen = found,
            }
        }
    }

    /// Advances the word by `run` from about `seen`, returning the value it held: a
    /// `fetch_add`, except near the end of the layout, where a compare-and-swap from exactly
    /// `seen` (`None` if the word moved) keeps the word from wrapping.
    #[inline]
    fn advance(&self, seen: u64, run: u32) -> Option<u64> {
        if seen < NEAR_THE_END {
            return Some(self.next.0.fetch_add(u64::from(run), Ordering::Relaxed));
        }
        let after = seen.saturating_add(u64::from(run));
        self.next.0.compare_exchange(seen, after, Ordering::Relaxed, Ordering::Relaxed).ok()
    }

    /// The word and the end of the previous second, for monitoring.
    pub fn report(&self) -> PositionReport {
        PositionReport {
            next: self.next.0.load(Ordering::Relaxed),
            last_of_previous_second: self.last_of_previous_second.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::layout::MAX_SECOND;

    const T: u64 = 1_800_000_000;
    const SPAN: NodeSpan = NodeSpan { first: 4, last: 5 };

    fn run(take: Take) -> (Parts, u32) {
        match take {
            Take::Run { first, count } => (Parts::from_raw(first), count),
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn a_second_begins_at_the_first_node_and_uses_each_node_up_in_turn() {
        let position = ServerPosition::<StdAtomics>::default();
        assert_eq!(run(position.take(T, SPAN, 64)), (Parts { timestamp: T, node_id: 4, sequence: 0 }, 64));
        assert_eq!(run(position.take(T, SPAN, 1)), (Parts { timestamp: T, node_id: 4, sequence: 64 }, 1));
        let mut taken = 65;
        while taken < 2 * (MAX_SEQUENCE + 1) {
            let (first, count) = run(position.take(T, SPAN, 1000));
            assert_eq!(first, Parts::from_raw(SPAN.first_value(T) + u64::from(taken)));
            taken += count;
        }
        assert_eq!(taken, 2 * (MAX_SEQUENCE + 1), "the last run stops at the span's last value");
        assert_eq!(position.take(T, SPAN, 1), Take::SecondUsedUp);
        assert_eq!(position.report().nodes_used_now(SPAN), 2);
        // The next second begins again at the first node.
        assert_eq!(run(position.take(T + 1, SPAN, 8)), (Parts { timestamp: T + 1, node_id: 4, sequence: 0 }, 8));
        let report = position.report();
        assert_eq!((report.nodes_used_now(SPAN), report.nodes_used_before(SPAN)), (1, 2));
    }

    #[test]
    fn a_clock_behind_the_servers_second_is_told_so_and_nothing_moves() {
        let position = ServerPosition::<StdAtomics>::default();
        run(position.take(T, SPAN, 1));
        let before = position.report();
        assert_eq!(position.take(T - 1, SPAN, 1), Take::Ahead { second: T });
        assert_eq!(position.report(), before);
        assert_eq!(position.latest_second(), T);
    }

    #[test]
    fn a_run_is_cut_at_the_span_and_a_span_moved_up_begins_at_its_own_first_node() {
        let position = ServerPosition::<StdAtomics>::default();
        let one_node = NodeSpan { first: 2, last: 2 };
        let mut taken = 0;
        while taken < MAX_SEQUENCE + 1 - 10 {
            taken += run(position.take(T, one_node, 1)).1;
        }
        assert_eq!(run(position.take(T, one_node, 64)).1, 10);
        // A lease of higher nodes in the same second starts at its first node.
        let higher = NodeSpan { first: 9, last: 9 };
        assert_eq!(run(position.take(T, higher, 1)).0, Parts { timestamp: T, node_id: 9, sequence: 0 });
        // One of lower nodes finds the second used up: the word never moves back.
        assert_eq!(position.take(T, one_node, 1), Take::SecondUsedUp);
    }

    #[test]
    fn a_second_begun_with_nothing_taken_yet_has_used_no_node() {
        // From node 0, the value before the second's first is the previous second's last.
        let from_zero = NodeSpan { first: 0, last: 1 };
        let begun =
            PositionReport { next: from_zero.first_value(T), last_of_previous_second: from_zero.last_value(T - 1) };
        assert_eq!((begun.nodes_used_now(from_zero), begun.nodes_used_before(from_zero)), (0, 2));
        // A second that follows a gap of seconds without IDs: none used in the one before.
        let position = ServerPosition::<StdAtomics>::default();
        run(position.take(T, SPAN, 1));
        run(position.take(T + 2, SPAN, 1));
        let report = position.report();
        assert_eq!((report.nodes_used_now(SPAN), report.nodes_used_before(SPAN)), (1, 0));
    }

    #[test]
    fn the_word_never_wraps_at_the_end_of_the_layout() {
        let position = ServerPosition::<StdAtomics>::default();
        let end = NodeSpan { first: MAX_NODE, last: MAX_NODE };
        let mut taken = 0u32;
        loop {
            match position.take(MAX_SECOND, end, 4096) {
                Take::Run { count, .. } => taken += count,
                Take::SecondUsedUp => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(taken, MAX_SEQUENCE, "all but the layout's last value");
        assert_eq!(position.report().next, u64::MAX);
        assert_eq!(position.take(MAX_SECOND, end, 4096), Take::SecondUsedUp);
    }
}
