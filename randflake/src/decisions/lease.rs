//! Leases: which seconds a block of nodes may issue IDs in, and when to write that down.
//!
//! A lease gives one holder a block of nodes for the seconds `start..=end`. Two rules make leases
//! safe to hand out across servers, restarts and clock steps:
//! 1. a new lease of a node starts after every earlier lease of that node has ended;
//! 2. a holder issues IDs only within its lease, and only up to its `used_through` second.
//!
//! `used_through` is the holder's durable high-water mark. It is recorded before any ID of a
//! second is issued, a little ahead of the clock, so that a holder restarting after a crash can
//! end its old lease there and begin the next one right after, instead of waiting out the rest
//! of a lease that nobody is using. A holder that does not resume its own leases (a fleet member,
//! which takes whatever block is free) keeps `used_through` at `end`.
//!
//! Everything here is arithmetic on Unix seconds; storing leases is the caller's business.

use crate::format::layout::MAX_SECOND;

/// How far ahead of the clock a holder that resumes its own leases (randflake_pg's range mode)
/// keeps its high-water mark, in seconds. After a restart or crash the holder's next lease
/// starts just past the recorded mark, so at most this many seconds (plus the one being
/// written) ahead of the clock: issuing waits that out rather than refusing. The mark is
/// written about every half of it.
pub const HIGH_WATER_LEAD: u64 = 10;

/// One lease of nodes `first_node..=last_node` for the seconds `start..=end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// First node of the block.
    pub first_node: u32,
    /// Last node of the block (inclusive).
    pub last_node: u32,
    /// First Unix second of the lease.
    pub start: u64,
    /// Last Unix second of the lease (inclusive).
    pub end: u64,
    /// Last second in which IDs may have been issued under this lease; `start - 1` means none.
    pub used_through: u64,
}

impl Lease {
    /// The last second IDs may be issued in now: within the lease and covered by the recorded
    /// high-water mark.
    pub fn issuable_through(&self) -> u64 {
        self.end.min(self.used_through)
    }

    /// True when `second` lies inside the seconds the lease allows issuing in.
    pub fn allows(&self, second: u64) -> bool {
        self.start <= second && second <= self.issuable_through()
    }

    /// This lease with the end and high-water mark of `renewal`.
    pub fn renewed(self, renewal: Renewal) -> Self {
        Self { end: renewal.end, used_through: renewal.used_through, ..self }
    }
}

/// The two values of a lease that a renewal moves, and never back: its end and its high-water
/// mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// Last Unix second of the lease (inclusive).
    pub end: u64,
    /// The high-water mark.
    pub used_through: u64,
}

/// How long leases last and how far ahead of the clock the high-water mark is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terms {
    /// Seconds a lease covers when taken or renewed.
    pub length: u64,
    /// Seconds the high-water mark runs ahead of the clock; `None` keeps it at the lease's end.
    pub high_water_lead: Option<u64>,
}

impl Terms {
    /// The lease to take now for a block whose earlier leases ended at `latest_end` at the
    /// latest (`None`: the block was never leased). It starts at the first second after that
    /// end, or now if that is later. `None` when that second is past what an ID can carry.
    ///
    /// ```
    /// use randflake::{Terms, Window};
    ///
    /// let terms = Terms { length: 600, high_water_lead: Some(10) };
    /// let now = 1_800_000_000;
    /// // Nodes 0..=9 were last leased until now + 60 (the clock stepped back since): the new
    /// // lease waits for that one to end.
    /// let lease = terms.new_lease(0, 9, now, Some(now + 60)).unwrap();
    /// assert_eq!((lease.start, lease.end), (now + 61, now + 660));
    /// assert!(!lease.allows(now));
    /// // A generator for this lease issues only in the seconds the high-water mark covers.
    /// let window = Window::new(lease.start, lease.issuable_through()).unwrap();
    /// assert_eq!(window.last(), now + 71);
    /// ```
    pub fn new_lease(&self, first_node: u32, last_node: u32, now: u64, latest_end: Option<u64>) -> Option<Lease> {
        let start = latest_end.map_or(now, |end| now.max(end + 1));
        if start > MAX_SECOND {
            return None;
        }
        let end = (start + self.length - 1).min(MAX_SECOND);
        Some(Lease { first_node, last_node, start, end, used_through: self.high_water(start, end, now) })
    }

    /// The end and high-water mark to record now, or `None` while the stored values still have
    /// enough margin. The end is pushed out once a third of the length has elapsed, so a holder
    /// survives its lease store being unreachable for two thirds of a lease; the high-water mark
    /// once half of its lead has been used, so it is written about every `lead / 2` seconds.
    pub fn renewal(&self, lease: &Lease, now: u64) -> Option<Renewal> {
        let from = now.max(lease.start);
        let mut renewed = *lease;
        if lease.end < from + self.length * 2 / 3 {
            renewed.end = (from + self.length - 1).min(MAX_SECOND).max(lease.end);
        }
        let high_water_due = match self.high_water_lead {
            None => renewed.used_through != renewed.end,
            Some(lead) => lease.used_through < (from + lead / 2).min(renewed.end),
        };
        if high_water_due {
            renewed.used_through = self.high_water(renewed.start, renewed.end, now).max(lease.used_through);
        }
        (renewed != *lease).then_some(Renewal { end: renewed.end, used_through: renewed.used_through })
    }

    /// The high-water mark to record now for a lease of the seconds `start..=end`.
    fn high_water(&self, start: u64, end: u64, now: u64) -> u64 {
        match self.high_water_lead {
            None => end,
            Some(lead) => (now.max(start) + lead).min(end),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_800_000_000;
    const RANGE: Terms = Terms { length: 600, high_water_lead: Some(HIGH_WATER_LEAD) };
    const FLEET: Terms = Terms { length: 600, high_water_lead: None };

    #[test]
    fn a_new_lease_starts_after_every_earlier_one() {
        let fresh = RANGE.new_lease(0, 9, T, None).unwrap();
        assert_eq!((fresh.start, fresh.end, fresh.used_through), (T, T + 599, T + 10));
        let after_old = RANGE.new_lease(0, 9, T, Some(T - 5)).unwrap();
        assert_eq!(after_old.start, T);
        let clock_behind = RANGE.new_lease(0, 9, T, Some(T + 60)).unwrap();
        assert_eq!(clock_behind.start, T + 61);
        assert!(!clock_behind.allows(T), "a clock behind the lease must not issue");
        assert!(clock_behind.allows(T + 61));
    }

    #[test]
    fn a_fleet_lease_covers_its_whole_length() {
        let lease = FLEET.new_lease(1024, 2047, T, Some(T - 1)).unwrap();
        assert_eq!(lease.issuable_through(), lease.end);
        assert_eq!(FLEET.renewal(&lease, T), None);
    }

    #[test]
    fn ids_are_issued_only_up_to_the_high_water_mark() {
        let lease = RANGE.new_lease(0, 0, T, None).unwrap();
        assert!(lease.allows(T + 10));
        assert!(!lease.allows(T + 11));
        assert!(!lease.allows(T - 1));
    }

    #[test]
    fn the_high_water_mark_is_written_every_half_lead() {
        let lease = RANGE.new_lease(0, 0, T, None).unwrap();
        assert_eq!(RANGE.renewal(&lease, T + 4), None);
        assert_eq!(RANGE.renewal(&lease, T + 6), Some(Renewal { end: lease.end, used_through: T + 16 }));
    }

    #[test]
    fn the_end_is_renewed_once_a_third_has_elapsed() {
        let lease = FLEET.new_lease(0, 0, T, None).unwrap();
        assert_eq!(FLEET.renewal(&lease, T + 199), None);
        assert_eq!(FLEET.renewal(&lease, T + 200), Some(Renewal { end: T + 799, used_through: T + 799 }));
    }

    #[test]
    fn renewal_never_moves_anything_backwards() {
        let lease = RANGE.new_lease(0, 0, T, Some(T + 100)).unwrap();
        // The clock reads far behind the lease: nothing to write yet.
        assert_eq!(RANGE.renewal(&lease, T - 1000), None);
        for now in [T, T + 101, T + 300, T + 650] {
            if let Some(Renewal { end, used_through }) = RANGE.renewal(&lease, now) {
                assert!(end >= lease.end && used_through >= lease.used_through && used_through <= end);
            }
        }
    }

    #[test]
    fn no_lease_reaches_past_the_last_second_an_id_can_carry() {
        let lease = RANGE.new_lease(0, 0, MAX_SECOND - 5, None).unwrap();
        assert_eq!(lease.end, MAX_SECOND);
        assert_eq!(RANGE.new_lease(0, 0, MAX_SECOND, Some(MAX_SECOND)), None);
    }
}
