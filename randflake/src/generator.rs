//! The generator state machine: which (second, node, sequence) to issue next.
//!
//! It owns no clock and no node pool. The caller passes the current Unix second to every call and
//! hands it nodes on request, which keeps every decision here deterministic and testable, and
//! lets one generator serve a PostgreSQL backend, a thread or a simulation alike.
//!
//! Uniqueness rests on three rules:
//! 1. a node issues at most one ID per sequence number within a second, and sequences restart
//!    at 0 only when the second advances;
//! 2. a node taken from the pool is never used in a second at or before its `used_through`, the
//!    last second its previous holder may have issued in;
//! 3. a clock reading earlier than any second already used here is refused, never papered over.

use core::fmt;

use crate::format::layout::{Parts, EPOCH_SECOND, MAX_NODE, MAX_SECOND, MAX_SEQUENCE};

/// Inclusive range of Unix seconds in which a generator may issue IDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    first: u64,
    last: u64,
}

/// A window that is empty or reaches outside the seconds an ID can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidWindow {
    /// The first second asked for.
    pub first: u64,
    /// The last second asked for.
    pub last: u64,
}

impl fmt::Display for InvalidWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "window {}..={} is empty or outside {EPOCH_SECOND}..={MAX_SECOND}", self.first, self.last)
    }
}

impl std::error::Error for InvalidWindow {}

impl Window {
    /// Every second an ID can carry.
    pub const ALL: Window = Window { first: EPOCH_SECOND, last: MAX_SECOND };

    /// The seconds `first..=last`.
    ///
    /// # Errors
    /// If the range is empty or reaches outside `EPOCH_SECOND..=MAX_SECOND`.
    ///
    /// ```
    /// use randflake::Window;
    ///
    /// let lease = Window::new(1_800_000_000, 1_800_000_599).unwrap();
    /// assert_eq!((lease.first(), lease.last()), (1_800_000_000, 1_800_000_599));
    /// assert!(Window::new(1_800_000_000, 1_799_999_999).is_err());
    /// ```
    pub fn new(first: u64, last: u64) -> Result<Self, InvalidWindow> {
        if EPOCH_SECOND <= first && first <= last && last <= MAX_SECOND {
            Ok(Self { first, last })
        } else {
            Err(InvalidWindow { first, last })
        }
    }

    /// The first second in the window.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The last second in the window (inclusive).
    pub fn last(&self) -> u64 {
        self.last
    }
}

/// What the caller must do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `count` IDs to encrypt and hand out: `first` and the next `count - 1` sequences of the
    /// same second and node. `opened_second` is true when they are the first of a second on
    /// this node: the caller records `first.timestamp` as the node's used-through second before
    /// handing any out, so a later holder of the node skips that second.
    Issued {
        /// The parts of the first ID of the run.
        first: Parts,
        /// How many consecutive sequences the run holds, at least 1.
        count: u32,
        /// True when the run starts a new second on this node.
        opened_second: bool,
    },
    /// The generator holds no node with sequences left in this second. The caller returns
    /// `release` (if any) to its pool, obtains a node whose used-through second is before
    /// `now`, passes it to [`Generator::adopt`] and calls [`Generator::next`] again.
    NeedNode {
        /// The node the generator gave up, to go back to the caller's pool.
        release: Option<u32>,
    },
    /// The per-second node budget is spent: call again once the clock reads `second`.
    /// The held node is kept, and its sequences restart then.
    WaitUntil {
        /// The Unix second to wait for.
        second: u64,
    },
}

/// Why no ID can be issued at this clock reading. Nothing changed, and a later call may succeed. A
/// [`Generator`] refuses for its clock and its window: the first four; a process following a
/// server's lease ([`crate::decisions::refill::Backend`]) also for want of a lease, and there the
/// window is the lease's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The clock reads before the window's first second (a lease not started yet).
    BeforeWindow {
        /// The clock reading.
        now: u64,
        /// The window's first second.
        first: u64,
    },
    /// The clock reads past the window's last second (a lease that ran out).
    AfterWindow {
        /// The clock reading.
        now: u64,
        /// The window's last second.
        last: u64,
    },
    /// The clock reads earlier than a second already used by this generator or by the previous
    /// holder of its node (for a backend, by its server).
    ClockBehind {
        /// The clock reading.
        now: u64,
        /// The latest second already used.
        used: u64,
    },
    /// The clock reads past the last second an ID can carry.
    PastLastSecond {
        /// The clock reading (or the lease's start, for a lease that starts there).
        now: u64,
    },
    /// The server holds no lease.
    NoLease,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BeforeWindow { now, first } => {
                write!(f, "the clock reads {now}, {} s before the first usable second {first}", first - now)
            }
            Self::AfterWindow { now, last } => {
                write!(f, "the clock reads {now}, past the last usable second {last}")
            }
            Self::ClockBehind { now, used } => {
                write!(f, "the clock reads {now}, {} s behind second {used} which already has IDs", used - now)
            }
            Self::PastLastSecond { now } => write!(f, "second {now} is past the last an ID can carry"),
            Self::NoLease => f.write_str("the server holds no lease"),
        }
    }
}

impl std::error::Error for Refusal {}

#[derive(Clone, Copy, Debug)]
struct HeldNode {
    node_id: u32,
    /// Latest second this node has issued in, here or under its previous holder.
    second: u64,
    /// Next sequence for `second`; above `MAX_SEQUENCE` once the second is spent.
    next_sequence: u32,
}

/// Issues `Parts` for a stream of clock readings, switching nodes when a second runs dry.
///
/// See the [crate documentation](crate#generating-ids-in-an-application) for the rules a caller
/// must keep, and the `generate` example for a complete loop.
///
/// ```
/// use randflake::{Generator, Parts, Step, Window};
///
/// let t = 1_800_000_000;
/// let mut generator = Generator::new(Window::ALL);
/// assert_eq!(generator.next(t, 1, 1), Ok(Step::NeedNode { release: None }));
/// generator.adopt(5, t - 1);
/// assert_eq!(
///     generator.next(t, 1, 100),
///     Ok(Step::Issued { first: Parts::new(t, 5, 0).unwrap(), count: 100, opened_second: true }),
/// );
/// assert_eq!(generator.held_node(), Some(5));
/// ```
#[derive(Debug)]
pub struct Generator {
    window: Window,
    held: Option<HeldNode>,
    /// No clock reading below this second is accepted.
    clock_floor: u64,
    /// The second `nodes_in_second` counts for: nodes that issued in it, the held one included.
    budget_second: u64,
    nodes_in_second: u32,
}

const SPENT: u32 = MAX_SEQUENCE + 1;

impl Generator {
    /// A generator that issues only within `window` and holds no node yet.
    pub fn new(window: Window) -> Self {
        Self { window, held: None, clock_floor: window.first, budget_second: 0, nodes_in_second: 0 }
    }

    /// Moves the window's last second to `last`, as when a lease is renewed. The first second
    /// never moves: a generator for a later window is a new generator.
    ///
    /// # Errors
    /// If `last` is before the window's first second or past [`MAX_SECOND`].
    pub fn set_last_second(&mut self, last: u64) -> Result<(), InvalidWindow> {
        self.window = Window::new(self.window.first, last)?;
        Ok(())
    }

    /// The node currently held, which the caller must return to its pool when it stops.
    pub fn held_node(&self) -> Option<u32> {
        self.held.map(|held| held.node_id)
    }

    /// Takes a node from the caller's pool. `used_through` is the last second any earlier
    /// holder may have issued in with it; the node is never used at or before that second.
    ///
    /// # Panics
    /// If a node is already held or `node_id` exceeds [`MAX_NODE`]: both are caller bugs that
    /// would otherwise leak a node or issue malformed IDs.
    pub fn adopt(&mut self, node_id: u32, used_through: u64) {
        assert!(self.held.is_none(), "adopt() while holding a node");
        assert!(node_id <= MAX_NODE, "node id {node_id} out of range");
        self.held = Some(HeldNode { node_id, second: used_through, next_sequence: SPENT });
        self.clock_floor = self.clock_floor.max(used_through);
    }

    /// Gives up the held node, if any, returning it for the caller's pool.
    pub fn release(&mut self) -> Option<u32> {
        self.held.take().map(|held| held.node_id)
    }

    /// Decides the next IDs for clock reading `now`: at least one and at most `max_ids`
    /// consecutive sequences. `nodes_per_second` caps how many nodes may issue IDs within one
    /// second (a node carried over from the previous second counts) before the generator waits
    /// for the next second instead of taking another.
    #[inline]
    pub fn next(&mut self, now: u64, nodes_per_second: u32, max_ids: u32) -> Result<Step, Refusal> {
        if now < self.window.first {
            return Err(Refusal::BeforeWindow { now, first: self.window.first });
        }
        if now > self.window.last {
            // The window ends at MAX_SECOND at the latest.
            return Err(if now > MAX_SECOND {
                Refusal::PastLastSecond { now }
            } else {
                Refusal::AfterWindow { now, last: self.window.last }
            });
        }
        if now < self.clock_floor {
            return Err(Refusal::ClockBehind { now, used: self.clock_floor });
        }
        let Some(held) = self.held.as_mut() else {
            return Ok(self.node_wanted(now, nodes_per_second));
        };
        // now >= clock_floor >= held.second, so the node is either in a new second or in the
        // one it last used.
        let opened_second = now > held.second;
        if opened_second {
            held.second = now;
            held.next_sequence = 0;
            if self.budget_second == now {
                self.nodes_in_second += 1;
            } else {
                self.budget_second = now;
                self.nodes_in_second = 1;
            }
        } else if held.next_sequence == SPENT {
            return Ok(self.node_wanted(now, nodes_per_second));
        }
        let first = Parts { timestamp: now, node_id: held.node_id, sequence: held.next_sequence };
        let count = max_ids.clamp(1, SPENT - held.next_sequence);
        held.next_sequence += count;
        self.clock_floor = now;
        Ok(Step::Issued { first, count, opened_second })
    }

    fn node_wanted(&mut self, now: u64, nodes_per_second: u32) -> Step {
        if self.budget_second == now && self.nodes_in_second >= nodes_per_second {
            return Step::WaitUntil { second: now + 1 };
        }
        Step::NeedNode { release: self.release() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    const T: u64 = 1_800_000_000;
    const UNLIMITED: u32 = u32::MAX;

    fn issued(step: Step) -> Parts {
        match step {
            Step::Issued { first, count: 1, .. } => first,
            other => panic!("expected one ID, got {other:?}"),
        }
    }

    fn generator_with_node(node: u32, used_through: u64) -> Generator {
        let mut generator = Generator::new(Window::ALL);
        generator.adopt(node, used_through);
        generator
    }

    #[test]
    fn asks_for_a_node_before_the_first_id() {
        let mut generator = Generator::new(Window::ALL);
        assert_eq!(generator.next(T, UNLIMITED, 1), Ok(Step::NeedNode { release: None }));
    }

    #[test]
    fn sequence_starts_at_zero_each_second() {
        let mut generator = generator_with_node(7, T - 1);
        assert_eq!(
            generator.next(T, UNLIMITED, 1),
            Ok(Step::Issued { first: Parts { timestamp: T, node_id: 7, sequence: 0 }, count: 1, opened_second: true })
        );
        assert_eq!(
            generator.next(T, UNLIMITED, 1),
            Ok(Step::Issued { first: Parts { timestamp: T, node_id: 7, sequence: 1 }, count: 1, opened_second: false })
        );
        assert_eq!(issued(generator.next(T + 5, UNLIMITED, 1).unwrap()).sequence, 0);
        assert_eq!(issued(generator.next(T + 5, UNLIMITED, 1).unwrap()).sequence, 1);
    }

    #[test]
    fn a_clock_behind_a_used_second_is_refused_and_state_kept() {
        let mut generator = generator_with_node(1, T - 1);
        issued(generator.next(T, UNLIMITED, 1).unwrap());
        assert_eq!(generator.next(T - 1, UNLIMITED, 1), Err(Refusal::ClockBehind { now: T - 1, used: T }));
        assert_eq!(generator.next(T - 60, UNLIMITED, 1), Err(Refusal::ClockBehind { now: T - 60, used: T }));
        assert_eq!(issued(generator.next(T, UNLIMITED, 1).unwrap()).sequence, 1);
    }

    #[test]
    fn an_adopted_node_skips_its_used_seconds() {
        let mut generator = generator_with_node(3, T);
        assert_eq!(generator.next(T - 1, UNLIMITED, 1), Err(Refusal::ClockBehind { now: T - 1, used: T }));
        // The node's used-through second counts as spent, so a same-second reading wants another.
        assert_eq!(generator.next(T, UNLIMITED, 1), Ok(Step::NeedNode { release: Some(3) }));
        assert_eq!(generator.held_node(), None);
    }

    #[test]
    fn an_exhausted_second_asks_for_another_node() {
        let mut generator = generator_with_node(10, T - 1);
        for sequence in 0..=MAX_SEQUENCE {
            assert_eq!(issued(generator.next(T, UNLIMITED, 1).unwrap()).sequence, sequence);
        }
        assert_eq!(generator.next(T, UNLIMITED, 1), Ok(Step::NeedNode { release: Some(10) }));
        generator.adopt(11, T - 3);
        assert_eq!(issued(generator.next(T, UNLIMITED, 1).unwrap()), Parts { timestamp: T, node_id: 11, sequence: 0 });
    }

    #[test]
    fn the_node_budget_waits_for_the_next_second_and_keeps_the_node() {
        let mut generator = Generator::new(Window::ALL);
        let budget = 2;
        for node in [20, 21] {
            assert!(matches!(generator.next(T, budget, 1), Ok(Step::NeedNode { .. })));
            generator.adopt(node, T - 1);
            for _ in 0..=MAX_SEQUENCE {
                issued(generator.next(T, budget, 1).unwrap());
            }
        }
        assert_eq!(generator.next(T, budget, 1), Ok(Step::WaitUntil { second: T + 1 }));
        assert_eq!(generator.held_node(), Some(21));
        assert_eq!(
            issued(generator.next(T + 1, budget, 1).unwrap()),
            Parts { timestamp: T + 1, node_id: 21, sequence: 0 }
        );
    }

    #[test]
    fn a_node_carried_into_a_new_second_counts_against_the_budget() {
        let mut generator = generator_with_node(20, T - 1);
        issued(generator.next(T, 1, 1).unwrap());
        for _ in 0..=MAX_SEQUENCE {
            issued(generator.next(T + 1, 1, 1).unwrap());
        }
        assert_eq!(generator.next(T + 1, 1, 1), Ok(Step::WaitUntil { second: T + 2 }));
        assert_eq!(generator.held_node(), Some(20));
    }

    #[test]
    fn seconds_outside_the_window_are_refused() {
        let window = Window::new(T, T + 10).unwrap();
        let mut generator = Generator::new(window);
        generator.adopt(0, T - 1);
        assert_eq!(generator.next(T - 1, UNLIMITED, 1), Err(Refusal::BeforeWindow { now: T - 1, first: T }));
        assert_eq!(generator.next(T + 11, UNLIMITED, 1), Err(Refusal::AfterWindow { now: T + 11, last: T + 10 }));
        assert!(generator.next(T + 10, UNLIMITED, 1).is_ok());
    }

    #[test]
    fn a_renewed_window_issues_again_and_keeps_the_node() {
        let mut generator = Generator::new(Window::new(T, T + 1).unwrap());
        generator.adopt(7, T - 1);
        assert!(generator.next(T + 1, UNLIMITED, 1).is_ok());
        assert!(matches!(generator.next(T + 2, UNLIMITED, 1), Err(Refusal::AfterWindow { .. })));
        generator.set_last_second(T + 5).unwrap();
        let parts = issued(generator.next(T + 2, UNLIMITED, 1).unwrap());
        assert_eq!((parts.node_id, parts.timestamp, parts.sequence), (7, T + 2, 0));
        assert!(generator.set_last_second(T - 1).is_err());
        assert!(generator.set_last_second(MAX_SECOND + 1).is_err());
    }

    #[test]
    fn nothing_is_issued_past_the_last_second_an_id_can_carry() {
        let mut generator = generator_with_node(0, MAX_SECOND - 1);
        assert_eq!(issued(generator.next(MAX_SECOND, UNLIMITED, 1).unwrap()).timestamp, MAX_SECOND);
        assert_eq!(generator.next(MAX_SECOND + 1, UNLIMITED, 1), Err(Refusal::PastLastSecond { now: MAX_SECOND + 1 }));
        assert!(Window::new(EPOCH_SECOND, MAX_SECOND + 1).is_err());
        assert!(Window::new(EPOCH_SECOND - 1, MAX_SECOND).is_err());
        assert!(Window::new(T, T - 1).is_err());
    }

    #[test]
    fn runs_stop_at_the_end_of_a_nodes_second() {
        let mut generator = generator_with_node(5, T - 1);
        let mut issued = 0;
        let last_step = loop {
            match generator.next(T, UNLIMITED, 1000) {
                Ok(Step::Issued { first, count, .. }) => {
                    assert_eq!(first.sequence, issued);
                    assert!(count <= 1000);
                    issued += count;
                }
                other => break other,
            }
        };
        assert_eq!(issued, MAX_SEQUENCE + 1);
        assert_eq!(last_step, Ok(Step::NeedNode { release: Some(5) }));
    }

    /// A pool of nodes shared by several generators, as PostgreSQL's shared memory is.
    struct Pool {
        used_through: HashMap<u32, u64>,
        free: Vec<u32>,
    }

    impl Pool {
        fn take(&mut self, now: u64) -> Option<(u32, u64)> {
            let index = self.free.iter().position(|node| self.used_through[node] < now)?;
            let node = self.free.swap_remove(index);
            Some((node, self.used_through[&node]))
        }
    }

    /// Many generators sharing a small node pool under a clock that jitters, steps back, and
    /// stalls, with generators replaced mid-run: no `Parts` is ever issued twice.
    #[test]
    fn shared_pool_with_erratic_clock_never_repeats() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = move |bound: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % bound
        };
        let nodes = 6u32;
        let mut pool = Pool { used_through: (0..nodes).map(|n| (n, T)).collect(), free: (0..nodes).collect() };
        let mut generators: Vec<Generator> =
            (0..3).map(|_| Generator::new(Window::new(T + 1, MAX_SECOND).unwrap())).collect();
        let mut seen = HashSet::new();
        let mut clock = T;
        let (mut issued_count, mut refusals) = (0u64, 0u64);
        for _ in 0..400_000 {
            match random(1000) {
                0..=2 => clock -= random(3),
                3..=30 => clock += 1,
                _ => {}
            }
            let which = random(generators.len() as u64) as usize;
            if random(5000) == 0 {
                let old =
                    std::mem::replace(&mut generators[which], Generator::new(Window::new(T + 1, MAX_SECOND).unwrap()));
                pool.free.extend(old.held_node());
            }
            let generator = &mut generators[which];
            match generator.next(clock, 3, 1 + random(20) as u32) {
                Ok(Step::Issued { first, count, opened_second }) => {
                    if opened_second {
                        pool.used_through.insert(first.node_id, first.timestamp);
                    }
                    for sequence in first.sequence..first.sequence + count {
                        let parts = Parts { sequence, ..first };
                        assert!(seen.insert(parts), "duplicate {parts:?}");
                    }
                    issued_count += u64::from(count);
                }
                Ok(Step::NeedNode { release }) => {
                    pool.free.extend(release);
                    if let Some((node, used_through)) = pool.take(clock) {
                        generator.adopt(node, used_through);
                    }
                }
                Ok(Step::WaitUntil { second }) => assert_eq!(second, clock + 1),
                Err(_) => refusals += 1,
            }
        }
        assert!(issued_count > 300_000, "issued {issued_count}");
        assert!(refusals > 0, "the clock steps back, so some readings must be refused");
    }
}
