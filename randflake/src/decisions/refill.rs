//! One process that issues IDs under its server's published lease: which run of IDs it takes
//! next, when it takes another node, when it waits and when it refuses.
//!
//! The server's shared state (the published lease, the node table) stands behind [`Server`], so
//! that randflake_pg's backends (over shared memory) and the fleet simulation run the same
//! decisions. Waiting is the caller's: [`Backend::refill`] says how long, and is called again.

use core::time::Duration;

use crate::decisions::lease::{Lease, HIGH_WATER_LEAD};
use crate::format::layout::{Parts, EPOCH_SECOND, MAX_SECOND};
use crate::generator::{Generator, Refusal, Step, Window};

/// How long a backend waits for its server's first lease since start-up before refusing.
pub const FIRST_LEASE_WAIT: Duration = Duration::from_secs(5);

/// How long a backend waits for a lease to be renewed at the second after its last, or for a
/// new one after the server's was withdrawn, before refusing.
pub const RENEWAL_WAIT: Duration = Duration::from_secs(1);

/// A lease as the keeper publishes it, with its number: a backend that sees a new number
/// starts over, with a new generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// Counts the leases published since the server started; a renewal keeps the number.
    pub number: u64,
    /// The lease.
    pub lease: Lease,
}

/// Why no node could be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoNode {
    /// Every node of the range is held by a running process.
    AllHeld,
    /// Some nodes are free, but each has already issued IDs in the current second.
    AllUsedThisSecond,
}

/// What a backend counts for the server's monitoring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A node's second was used up, and another node taken.
    NodeSwitch,
    /// A call refused because of the clock.
    ClockRefusal,
    /// A call refused because the server had no current lease.
    LeaseRefusal,
}

/// The server's state that every backend shares: randflake_pg's shared memory.
pub trait Server {
    /// The latest second in which any process of the server has issued IDs. Read before the
    /// clock: only a clock stepped back can then read earlier.
    fn latest_used(&self) -> u64;
    /// Changes whenever the published lease does.
    fn lease_version(&self) -> u64;
    /// The published lease, if any, with the version it was read at.
    fn published(&self) -> (u64, Option<Published>);
    /// How many leases the server has published since it started.
    fn leases_taken(&self) -> u64;
    /// Takes a free node of `first..=last` whose last used second is before `now`: the node
    /// and that second.
    fn acquire(&mut self, first: u32, last: u32, now: u64) -> Result<(u32, u64), NoNode>;
    /// Records, before the first ID of `second` leaves, that `node` issues in it.
    fn record_used(&mut self, node: u32, second: u64);
    /// Gives a node back.
    fn release(&mut self, node: u32);
    /// Counts an event.
    fn count(&mut self, event: Event);
}

/// What a backend does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refill {
    /// `count` IDs: `first` and the next sequences of its second and node. The node's second
    /// is already recorded.
    Issued {
        /// The first of the run.
        first: Parts,
        /// How many, at least 1.
        count: u32,
    },
    /// Sleep until the clock should read `second`, then refill again (reading the clock anew:
    /// a clock stepped back meanwhile is refused, not waited out).
    WaitForSecond(u64),
    /// Wait up to `limit` (by a monotonic clock) for a new version of the published lease, then
    /// refill again.
    AwaitLease {
        /// The longest wait.
        limit: Duration,
    },
    /// Refuse the call.
    Refused(Refusal),
}

/// A generator confined to one lease: a new lease (not a renewal) gets a new generator.
#[derive(Debug)]
struct FollowedLease {
    number: u64,
    lease: Lease,
    generator: Generator,
}

/// One backend: the generator for the lease it follows, and whether it is waiting for one.
#[derive(Debug, Default)]
pub struct Backend {
    current: Option<FollowedLease>,
    /// The published lease's version when `current` was last checked against it.
    lease_version: Option<u64>,
    /// Set while waiting for the server's first lease: the second refill without one refuses.
    awaiting_lease: bool,
}

impl Backend {
    /// A backend that has issued nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next run of at most `max_ids` IDs at clock reading `now`, taking at most
    /// `nodes_per_second` nodes within one second; or what to wait for, or the refusal.
    pub fn refill(&mut self, now: u64, nodes_per_second: u32, max_ids: u32, server: &mut impl Server) -> Refill {
        // Each node refuses seconds before its own last one; this refuses a clock behind any
        // second the server has used, so that no session, not even a new one on an idle node,
        // issues IDs dated in the past after the clock was stepped back.
        let server_floor = server.latest_used();
        if now < server_floor {
            return refuse(server, Refusal::ClockBehind { now, used: server_floor });
        }
        if let Err(refill) = self.follow_lease(server) {
            return refill;
        }
        let Some(current) = self.current.as_mut() else { return Refill::Refused(Refusal::NoLease) };
        let lease = current.lease;
        loop {
            match current.generator.next(now, nodes_per_second, max_ids) {
                Ok(Step::Issued { first, count, opened_second }) => {
                    if opened_second {
                        server.record_used(first.node_id, first.timestamp);
                    }
                    return Refill::Issued { first, count };
                }
                Ok(Step::NeedNode { release }) => {
                    if let Some(node) = release {
                        server.release(node);
                        server.count(Event::NodeSwitch);
                    }
                    match server.acquire(lease.first_node, lease.last_node, now) {
                        Ok((node, used_through)) => current.generator.adopt(node, used_through),
                        Err(NoNode::AllUsedThisSecond) => return Refill::WaitForSecond(now + 1),
                        Err(NoNode::AllHeld) => {
                            return Refill::Refused(Refusal::NoFreeNode {
                                first: lease.first_node,
                                last: lease.last_node,
                            })
                        }
                    }
                }
                Ok(Step::WaitUntil { second }) => return Refill::WaitForSecond(second),
                // After a restart the new lease starts just past the recorded high-water mark,
                // at most HIGH_WATER_LEAD + 1 seconds ahead: that is waited out, like a
                // high-water mark the keeper is about to advance. A clock further behind is
                // refused.
                Err(Refusal::BeforeWindow { now, first }) if first - now <= HIGH_WATER_LEAD + 1 => {
                    return Refill::WaitForSecond(first)
                }
                // The lease's last second has passed: its renewal is due. (Past the last second
                // an ID can carry, the generator refuses with PastLastSecond instead.)
                Err(Refusal::AfterWindow { now, last }) if now == last + 1 => {
                    return Refill::AwaitLease { limit: RENEWAL_WAIT }
                }
                Err(refusal) => return refuse(server, refusal),
            }
        }
    }

    /// Gives back the node held, if any: when the process stops issuing (exits).
    pub fn release(&mut self, server: &mut impl Server) {
        if let Some(node) = self.current.as_mut().and_then(|current| current.generator.release()) {
            server.release(node);
        }
    }

    /// Makes `current` the generator for the lease published now. A new lease means a new
    /// generator, after giving the old lease's node back; a renewal moves the last second.
    /// Every change the keeper makes bumps the version: an unchanged one needs no more.
    fn follow_lease(&mut self, server: &mut impl Server) -> Result<(), Refill> {
        if self.current.is_some() && self.lease_version == Some(server.lease_version()) {
            return Ok(());
        }
        let (version, Some(Published { number, lease })) = server.published() else {
            // The first call without a lease waits for one; the one after that wait refuses. A
            // server just started waits for the keeper's first lease; one whose lease was
            // withdrawn only briefly, for the keeper to take the next one in the same tick.
            self.awaiting_lease = !self.awaiting_lease;
            let limit = if server.leases_taken() == 0 { FIRST_LEASE_WAIT } else { RENEWAL_WAIT };
            return Err(if self.awaiting_lease {
                Refill::AwaitLease { limit }
            } else {
                refuse(server, Refusal::NoLease)
            });
        };
        self.awaiting_lease = false;
        let last = lease.issuable_through().min(MAX_SECOND);
        match &mut self.current {
            Some(current) if current.number == number => {
                if current.generator.set_last_second(last).is_err() {
                    return Err(refuse(server, Refusal::PastLastSecond { now: last }));
                }
                current.lease = lease;
            }
            _ => {
                self.release(server);
                let Ok(window) = Window::new(lease.start.max(EPOCH_SECOND), last.max(lease.start)) else {
                    return Err(refuse(server, Refusal::PastLastSecond { now: lease.start }));
                };
                self.current = Some(FollowedLease { number, lease, generator: Generator::new(window) });
            }
        }
        self.lease_version = Some(version);
        Ok(())
    }
}

/// Counts a refusal for monitoring, and returns it.
fn refuse(server: &mut impl Server, refusal: Refusal) -> Refill {
    server.count(match refusal {
        Refusal::AfterWindow { .. } | Refusal::NoLease => Event::LeaseRefusal,
        _ => Event::ClockRefusal,
    });
    Refill::Refused(refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_800_000_000;

    /// A server of four nodes, with a lease that the test publishes.
    #[derive(Default)]
    struct OneServer {
        used: [u64; 4],
        held: [bool; 4],
        latest: u64,
        version: u64,
        published: Option<Published>,
        taken: u64,
        events: Vec<Event>,
    }

    impl OneServer {
        fn publish(&mut self, number: u64, lease: Lease) {
            self.version += 1;
            self.published = Some(Published { number, lease });
            self.taken = self.taken.max(number);
        }
    }

    impl Server for OneServer {
        fn latest_used(&self) -> u64 {
            self.latest
        }
        fn lease_version(&self) -> u64 {
            self.version
        }
        fn published(&self) -> (u64, Option<Published>) {
            (self.version, self.published)
        }
        fn leases_taken(&self) -> u64 {
            self.taken
        }
        fn acquire(&mut self, first: u32, last: u32, now: u64) -> Result<(u32, u64), NoNode> {
            let free: Vec<u32> = (first..=last).filter(|&node| !self.held[node as usize]).collect();
            let node = free.iter().find(|&&node| self.used[node as usize] < now).ok_or(if free.is_empty() {
                NoNode::AllHeld
            } else {
                NoNode::AllUsedThisSecond
            })?;
            self.held[*node as usize] = true;
            Ok((*node, self.used[*node as usize]))
        }
        fn record_used(&mut self, node: u32, second: u64) {
            self.used[node as usize] = second;
            self.latest = self.latest.max(second);
        }
        fn release(&mut self, node: u32) {
            self.held[node as usize] = false;
        }
        fn count(&mut self, event: Event) {
            self.events.push(event);
        }
    }

    fn lease(start: u64, end: u64) -> Lease {
        Lease { first_node: 0, last_node: 3, start, end, used_through: end }
    }

    #[test]
    fn no_lease_is_waited_for_once_then_refused() {
        let mut server = OneServer::default();
        let mut backend = Backend::new();
        assert_eq!(backend.refill(T, 8, 64, &mut server), Refill::AwaitLease { limit: FIRST_LEASE_WAIT });
        assert_eq!(backend.refill(T, 8, 64, &mut server), Refill::Refused(Refusal::NoLease));
        assert_eq!(server.events, [Event::LeaseRefusal]);
        server.publish(1, lease(T, T + 60));
        assert!(matches!(backend.refill(T, 8, 64, &mut server), Refill::Issued { count: 64, .. }));
        // Withdrawn later: a short wait, for the keeper's next lease, then the refusal.
        server.version += 1;
        server.published = None;
        assert_eq!(backend.refill(T, 8, 64, &mut server), Refill::AwaitLease { limit: RENEWAL_WAIT });
        assert_eq!(backend.refill(T, 8, 64, &mut server), Refill::Refused(Refusal::NoLease));
    }

    #[test]
    fn a_new_lease_starts_a_new_generator_and_gives_the_node_back() {
        let mut server = OneServer::default();
        let mut backend = Backend::new();
        server.publish(1, lease(T, T + 60));
        let Refill::Issued { first, .. } = backend.refill(T, 8, 64, &mut server) else { panic!("nothing issued") };
        assert!(server.held[first.node_id as usize]);
        server.publish(2, lease(T + 1, T + 60));
        let Refill::Issued { first: next, .. } = backend.refill(T + 1, 8, 64, &mut server) else { panic!("nothing") };
        assert_eq!(server.held.iter().filter(|held| **held).count(), 1, "the old lease's node was given back");
        assert_eq!(next.timestamp, T + 1);
    }

    #[test]
    fn a_clock_behind_the_servers_floor_is_refused_even_on_a_fresh_node() {
        let mut server = OneServer { latest: T + 5, ..OneServer::default() };
        server.publish(1, lease(T, T + 60));
        let mut backend = Backend::new();
        assert_eq!(
            backend.refill(T + 3, 8, 64, &mut server),
            Refill::Refused(Refusal::ClockBehind { now: T + 3, used: T + 5 })
        );
        assert_eq!(server.events, [Event::ClockRefusal]);
    }

    #[test]
    fn the_second_after_a_lease_waits_for_its_renewal_and_later_ones_are_refused() {
        let mut server = OneServer::default();
        server.publish(1, lease(T, T + 10));
        let mut backend = Backend::new();
        assert!(matches!(backend.refill(T, 8, 64, &mut server), Refill::Issued { .. }));
        assert_eq!(backend.refill(T + 11, 8, 64, &mut server), Refill::AwaitLease { limit: RENEWAL_WAIT });
        assert_eq!(
            backend.refill(T + 12, 8, 64, &mut server),
            Refill::Refused(Refusal::AfterWindow { now: T + 12, last: T + 10 })
        );
        server.publish(1, lease(T, T + 70));
        assert!(matches!(backend.refill(T + 12, 8, 64, &mut server), Refill::Issued { .. }), "the renewal applies");
    }

    #[test]
    fn nodes_used_this_second_make_it_wait_for_the_next() {
        let mut server = OneServer::default();
        server.publish(1, lease(T, T + 60));
        let mut backend = Backend::new();
        for node in 0..4 {
            server.used[node] = T;
        }
        assert_eq!(backend.refill(T, 8, 64, &mut server), Refill::WaitForSecond(T + 1));
    }
}
