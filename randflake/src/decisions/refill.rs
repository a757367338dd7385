//! One process that issues IDs under its server's published lease: which run of IDs it takes
//! next, when it waits and when it refuses.
//!
//! The server's shared state (the published lease, the server's position) stands behind
//! [`Server`], so that randflake_pg's backends (over shared memory) and the fleet simulation run
//! the same decisions. Waiting is the caller's: [`Backend::refill`] says how long, and is called
//! again.
//!
//! Every process of a server takes its IDs from the server's one position
//! ([`crate::shared::server_position`]), which walks the lease's nodes in order within each
//! second: a server uses the nodes its rate needs (one below 131,072 IDs a second), however many
//! processes make IDs, and a process holds no node of its own.

use core::time::Duration;

use crate::decisions::lease::{Lease, HIGH_WATER_LEAD};
use crate::format::layout::{Parts, MAX_SECOND};
use crate::generator::Refusal;
use crate::shared::server_position::{NodeSpan, Take};

/// How long a backend waits for its server's first lease since start-up before refusing.
pub const FIRST_LEASE_WAIT: Duration = Duration::from_secs(5);

/// How long a backend waits for a lease to be renewed at the second after its last, or for a
/// new one after the server's was withdrawn, before refusing.
pub const RENEWAL_WAIT: Duration = Duration::from_secs(1);

/// A lease as the keeper publishes it, with its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// Counts the leases published since the server started; a renewal keeps the number.
    pub number: u64,
    /// The lease.
    pub lease: Lease,
}

/// What a backend counts for the server's monitoring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The server moved on to its next node within a second: a run took the first value of a
    /// node other than the lease's first.
    NodeSwitch,
    /// A call waited for the next second: every node of the lease had used up the current one.
    SecondUsedUp,
    /// A call refused because of the clock.
    ClockRefusal,
    /// A call refused because the server had no current lease.
    LeaseRefusal,
}

/// The server's state that every backend shares: randflake_pg's shared memory.
pub trait Server {
    /// Changes whenever the published lease does.
    fn lease_version(&self) -> u64;
    /// The published lease, if any, with the version it was read at.
    fn published(&self) -> (u64, Option<Published>);
    /// How many leases the server has published since it started.
    fn leases_taken(&self) -> u64;
    /// Takes up to `run` values of second `now` in `span` from the server's position
    /// ([`crate::shared::server_position::ServerPosition::take`]).
    fn take(&mut self, now: u64, span: NodeSpan, run: u32) -> Take;
    /// Counts an event.
    fn count(&mut self, event: Event);
}

/// What a backend does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refill {
    /// `count` IDs: the plain values from `first`'s on, consecutive (a run may go on from a
    /// node's last sequence to the next node's first).
    Issued {
        /// The first of the run.
        first: Parts,
        /// How many, at least 1.
        count: u32,
    },
    /// Sleep until the clock should read `second`, then refill again (reading the clock anew:
    /// a clock stepped back meanwhile is refused, not waited out).
    WaitForSecond(u64),
    /// Read the clock again and refill at once: the server began the second after this
    /// reading.
    ReadClockAgain,
    /// Wait up to `limit` (by a monotonic clock) for a new version of the published lease, then
    /// refill again.
    AwaitLease {
        /// The longest wait.
        limit: Duration,
    },
    /// Refuse the call.
    Refused(Refusal),
}

/// One backend: the lease it follows, and whether it is waiting for one.
#[derive(Debug, Default)]
pub struct Backend {
    /// The published lease, with the version of the board it was read at.
    followed: Option<(u64, Lease)>,
    /// Set while waiting for the server's first lease: the second refill without one refuses.
    awaiting_lease: bool,
    /// The second the server had begun when the last refill asked for the clock to be read
    /// again: a refill that finds the clock still behind it refuses.
    reread_for: Option<u64>,
}

impl Backend {
    /// A backend that has issued nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next run of at most `run` IDs at clock reading `now`; or what to wait for, or the
    /// refusal.
    pub fn refill(&mut self, now: u64, run: u32, server: &mut impl Server) -> Refill {
        let lease = match self.follow_lease(server) {
            Ok(lease) => lease,
            Err(refill) => return refill,
        };
        if now > MAX_SECOND {
            return refuse(server, Refusal::PastLastSecond { now });
        }
        // After a restart the new lease starts just past the recorded high-water mark, at most
        // HIGH_WATER_LEAD + 1 seconds ahead: that is waited out, like a high-water mark the
        // keeper is about to advance. A clock further behind is refused.
        if now < lease.start {
            return if lease.start - now <= HIGH_WATER_LEAD + 1 {
                Refill::WaitForSecond(lease.start)
            } else {
                refuse(server, Refusal::BeforeWindow { now, first: lease.start })
            };
        }
        // Past the lease's last second its renewal is due; a clock further on is refused.
        let last = lease.issuable_through().min(MAX_SECOND);
        if now > last {
            return if now == last + 1 {
                Refill::AwaitLease { limit: RENEWAL_WAIT }
            } else {
                refuse(server, Refusal::AfterWindow { now, last })
            };
        }
        let span = NodeSpan { first: lease.first_node, last: lease.last_node };
        match server.take(now, span, run) {
            Take::Run { first, count } => {
                self.reread_for = None;
                let (first, last) = (Parts::from_raw(first), Parts::from_raw(first + u64::from(count) - 1));
                if last.node_id != first.node_id || (first.sequence == 0 && first.node_id != span.first) {
                    server.count(Event::NodeSwitch);
                }
                Refill::Issued { first, count }
            }
            Take::SecondUsedUp => {
                server.count(Event::SecondUsedUp);
                Refill::WaitForSecond(now + 1)
            }
            // Another process may have read the clock a moment after this reading and begun the
            // next second: read again, the clock reads it too. A clock stepped back by a second
            // still reads behind it, and is refused then.
            Take::Ahead { second } if second == now + 1 && self.reread_for != Some(second) => {
                self.reread_for = Some(second);
                Refill::ReadClockAgain
            }
            Take::Ahead { second } => {
                self.reread_for = None;
                refuse(server, Refusal::ClockBehind { now, used: second })
            }
        }
    }

    /// The lease published now. Every change the keeper makes bumps the version: an unchanged
    /// one needs no more reading.
    fn follow_lease(&mut self, server: &mut impl Server) -> Result<Lease, Refill> {
        if let Some((version, lease)) = self.followed {
            if version == server.lease_version() {
                return Ok(lease);
            }
        }
        let (version, Some(Published { lease, .. })) = server.published() else {
            // The first call without a lease waits for one; the one after that wait refuses. A
            // server just started waits for the keeper's first lease; one whose lease was
            // withdrawn only briefly, for the keeper to take the next one in the same tick.
            self.followed = None;
            self.awaiting_lease = !self.awaiting_lease;
            let limit = if server.leases_taken() == 0 { FIRST_LEASE_WAIT } else { RENEWAL_WAIT };
            return Err(if self.awaiting_lease {
                Refill::AwaitLease { limit }
            } else {
                refuse(server, Refusal::NoLease)
            });
        };
        self.awaiting_lease = false;
        self.followed = Some((version, lease));
        Ok(lease)
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
    use crate::format::layout::MAX_SEQUENCE;
    use crate::shared::server_position::ServerPosition;
    use crate::shared::StdAtomics;

    const T: u64 = 1_800_000_000;

    /// A server with a lease that the test publishes, over the shipped position.
    #[derive(Default)]
    struct OneServer {
        position: ServerPosition<StdAtomics>,
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
        fn lease_version(&self) -> u64 {
            self.version
        }
        fn published(&self) -> (u64, Option<Published>) {
            (self.version, self.published)
        }
        fn leases_taken(&self) -> u64 {
            self.taken
        }
        fn take(&mut self, now: u64, span: NodeSpan, run: u32) -> Take {
            self.position.take(now, span, run)
        }
        fn count(&mut self, event: Event) {
            self.events.push(event);
        }
    }

    fn lease(start: u64, end: u64) -> Lease {
        Lease { first_node: 0, last_node: 3, start, end, used_through: end }
    }

    fn issued(refill: Refill) -> (Parts, u32) {
        match refill {
            Refill::Issued { first, count } => (first, count),
            other => panic!("nothing issued: {other:?}"),
        }
    }

    #[test]
    fn no_lease_is_waited_for_once_then_refused() {
        let mut server = OneServer::default();
        let mut backend = Backend::new();
        assert_eq!(backend.refill(T, 64, &mut server), Refill::AwaitLease { limit: FIRST_LEASE_WAIT });
        assert_eq!(backend.refill(T, 64, &mut server), Refill::Refused(Refusal::NoLease));
        assert_eq!(server.events, [Event::LeaseRefusal]);
        server.publish(1, lease(T, T + 60));
        assert_eq!(issued(backend.refill(T, 64, &mut server)).1, 64);
        // Withdrawn later: a short wait, for the keeper's next lease, then the refusal.
        server.version += 1;
        server.published = None;
        assert_eq!(backend.refill(T, 64, &mut server), Refill::AwaitLease { limit: RENEWAL_WAIT });
        assert_eq!(backend.refill(T, 64, &mut server), Refill::Refused(Refusal::NoLease));
    }

    #[test]
    fn backends_share_the_servers_position_node_by_node() {
        let mut server = OneServer::default();
        server.publish(1, lease(T, T + 60));
        let (mut one, mut other) = (Backend::new(), Backend::new());
        assert_eq!(issued(one.refill(T, 64, &mut server)), (Parts { timestamp: T, node_id: 0, sequence: 0 }, 64));
        assert_eq!(issued(other.refill(T, 1, &mut server)), (Parts { timestamp: T, node_id: 0, sequence: 64 }, 1));
        // A new lease (another block) begins at its own first node; the old block is left.
        server.publish(2, Lease { first_node: 8, last_node: 9, ..lease(T + 1, T + 60) });
        assert_eq!(issued(one.refill(T + 1, 64, &mut server)).0, Parts { timestamp: T + 1, node_id: 8, sequence: 0 });
    }

    #[test]
    fn a_clock_behind_the_servers_second_is_refused_and_one_second_behind_read_again_first() {
        let mut server = OneServer::default();
        server.publish(1, lease(T, T + 60));
        let mut backend = Backend::new();
        issued(backend.refill(T + 5, 64, &mut server));
        assert_eq!(
            backend.refill(T + 3, 64, &mut server),
            Refill::Refused(Refusal::ClockBehind { now: T + 3, used: T + 5 })
        );
        assert_eq!(server.events, [Event::ClockRefusal]);
        // One second behind is read again once (another process may have read the clock a
        // moment later), then refused if the clock still reads behind.
        assert_eq!(backend.refill(T + 4, 64, &mut server), Refill::ReadClockAgain);
        assert_eq!(
            backend.refill(T + 4, 64, &mut server),
            Refill::Refused(Refusal::ClockBehind { now: T + 4, used: T + 5 })
        );
        assert_eq!(backend.refill(T + 4, 64, &mut server), Refill::ReadClockAgain);
        assert_eq!(issued(backend.refill(T + 5, 64, &mut server)).0.sequence, 64, "nothing moved back");
    }

    #[test]
    fn the_second_after_a_lease_waits_for_its_renewal_and_later_ones_are_refused() {
        let mut server = OneServer::default();
        server.publish(1, lease(T, T + 10));
        let mut backend = Backend::new();
        issued(backend.refill(T, 64, &mut server));
        assert_eq!(backend.refill(T + 11, 64, &mut server), Refill::AwaitLease { limit: RENEWAL_WAIT });
        assert_eq!(
            backend.refill(T + 12, 64, &mut server),
            Refill::Refused(Refusal::AfterWindow { now: T + 12, last: T + 10 })
        );
        server.publish(1, lease(T, T + 70));
        issued(backend.refill(T + 12, 64, &mut server));
    }

    #[test]
    fn a_lease_about_to_start_is_waited_for_and_one_far_ahead_refused() {
        let mut server = OneServer::default();
        server.publish(1, lease(T + HIGH_WATER_LEAD + 1, T + 100));
        let mut backend = Backend::new();
        assert_eq!(backend.refill(T, 64, &mut server), Refill::WaitForSecond(T + HIGH_WATER_LEAD + 1));
        assert_eq!(
            backend.refill(T - 1, 64, &mut server),
            Refill::Refused(Refusal::BeforeWindow { now: T - 1, first: T + HIGH_WATER_LEAD + 1 })
        );
        assert_eq!(
            backend.refill(MAX_SECOND + 1, 64, &mut server),
            Refill::Refused(Refusal::PastLastSecond { now: MAX_SECOND + 1 })
        );
    }

    #[test]
    fn a_second_used_up_on_every_node_waits_for_the_next() {
        let mut server = OneServer::default();
        server.publish(1, Lease { last_node: 1, ..lease(T, T + 60) });
        let mut backend = Backend::new();
        let mut taken = 0;
        while taken < 2 * (MAX_SEQUENCE + 1) {
            taken += issued(backend.refill(T, 4096, &mut server)).1;
        }

        assert_eq!(backend.refill(T, 64, &mut server), Refill::WaitForSecond(T + 1));
        assert_eq!(server.events, [Event::NodeSwitch, Event::SecondUsedUp]);
        assert_eq!(
            issued(backend.refill(T + 1, 64, &mut server)).0,
            Parts { timestamp: T + 1, node_id: 0, sequence: 0 }
        );
    }

    #[test]
    fn each_node_entered_after_the_first_counts_one_switch() {
        let mut server = OneServer::default();
        server.publish(1, lease(T, T + 60));
        let mut backend = Backend::new();
        issued(backend.refill(T, MAX_SEQUENCE, &mut server));
        assert_eq!(server.events, []);
        // A run that crosses into the next node, and one that starts at a node's first value.
        issued(backend.refill(T, 2, &mut server));
        issued(backend.refill(T, MAX_SEQUENCE, &mut server));
        issued(backend.refill(T, 1, &mut server));
        assert_eq!(server.events, [Event::NodeSwitch, Event::NodeSwitch]);
        // The next second begins at the first node again: no switch.
        issued(backend.refill(T + 1, 1, &mut server));
        assert_eq!(server.events.len(), 2);
    }
}
