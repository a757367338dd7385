//! Leases of single nodes for application processes that generate IDs themselves (the Go,
//! Python and TypeScript reference ports take a `Lease(node_id, start, end_exclusive)`): which
//! node to hand out, the window it gets, what extending and releasing it do. randflake_pg's
//! `randflake_lease_acquire`, `_extend` and `_release` run this over the lease table that its
//! servers lease from, so that IDs made in the database and by applications share one ID space.
//!
//! The rules are the table's: a node's new window starts no earlier than the clock and after
//! every earlier window of that node ends. Windows here are half-open, `start..end_exclusive`,
//! as the reference ports take them; the table stores the last second, `end_exclusive - 1`.

use core::fmt;

use crate::layout::{EPOCH_SECOND, MAX_SECOND};

/// How far ahead of the database server's clock an application's clock may run. An application
/// issues IDs by its own clock, so a released lease keeps its node this long past the server's
/// clock (or until the window ends, if sooner): seconds an application with a fast clock may
/// already have used are never handed out again.
pub const CLOCK_TOLERANCE: u64 = 60;

/// The first part of an application lease's holder in the lease table, followed by the role and
/// holder (`app/<quoted role>/<holder>`).
pub const HELD: &str = "app";

/// The first part of a released application lease's holder (`released/<quoted role>/<holder>`):
/// it keeps the window's bound, and no application's holder can name it.
pub const RELEASED: &str = "released";

/// The longest holder name, in bytes: a holder names a process, not a document.
pub const HOLDER_MAX_BYTES: usize = 200;

/// Why a request is refused. Nothing is changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppLeaseError {
    /// `seconds` was zero or negative.
    NotPositive {
        /// The value given.
        seconds: i64,
    },
    /// The window would end past the last second an ID can carry.
    PastLastSecond {
        /// The last second the window would have.
        last: u64,
    },
    /// The clock reads outside the seconds an ID can carry.
    ClockOutOfRange {
        /// The clock reading.
        now: u64,
    },
    /// The holder name is empty, too long, or holds control characters.
    BadHolder,
}

impl fmt::Display for AppLeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NotPositive { seconds } => write!(f, "a lease must last at least 1 second, not {seconds}"),
            Self::PastLastSecond { last } => {
                write!(f, "the lease would end at second {last}, past {MAX_SECOND}, the last second an ID can carry")
            }
            Self::ClockOutOfRange { now } => write!(f, "the clock reads {now}, outside the seconds an ID can carry"),
            Self::BadHolder => {
                write!(f, "a holder is 1 to {HOLDER_MAX_BYTES} bytes of text without control characters")
            }
        }
    }
}

impl std::error::Error for AppLeaseError {}

/// A window of one node, half-open: `start..end_exclusive`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppWindow {
    /// The node.
    pub node: u32,
    /// The first second.
    pub start: u64,
    /// The second after the last.
    pub end_exclusive: u64,
}

impl AppWindow {
    /// The last second of the window, as the lease table stores it.
    pub fn last(&self) -> u64 {
        self.end_exclusive - 1
    }
}

/// Checks a holder name: 1 to [`HOLDER_MAX_BYTES`] bytes, no control characters. It is stored
/// and shown to DBAs; anything else about it is the application's business.
pub fn check_holder(holder: &str) -> Result<(), AppLeaseError> {
    let ok = !holder.is_empty() && holder.len() <= HOLDER_MAX_BYTES && !holder.chars().any(char::is_control);
    ok.then_some(()).ok_or(AppLeaseError::BadHolder)
}

/// The last second of a window that runs `seconds` from `now`: the value `randflake_lease_*`
/// store as the lease's end.
pub fn last_second(now: u64, seconds: i64) -> Result<u64, AppLeaseError> {
    if !(EPOCH_SECOND..=MAX_SECOND).contains(&now) {
        return Err(AppLeaseError::ClockOutOfRange { now });
    }
    let seconds =
        u64::try_from(seconds).ok().filter(|&seconds| seconds > 0).ok_or(AppLeaseError::NotPositive { seconds })?;
    let last = now.saturating_add(seconds - 1);
    if last > MAX_SECOND {
        return Err(AppLeaseError::PastLastSecond { last });
    }
    Ok(last)
}

/// The node of `first..=last` to lease now: one whose every earlier window ended before `now`,
/// given `(node, last second)` of the windows on record. The search starts at `spread` (any
/// number: a process's own), so that concurrent callers rarely race for the same node. `None`
/// when every node is taken.
pub fn free_node(first: u32, last: u32, windows: &[(u32, u64)], now: u64, spread: u64) -> Option<u32> {
    let count = u64::from(last - first) + 1;
    let busy = |node: u32| windows.iter().any(|&(leased, end)| leased == node && end >= now);
    (0..count).map(|offset| first + ((spread.wrapping_add(offset)) % count) as u32).find(|&node| !busy(node))
}

/// The last second a released window keeps: not past its own end, and not before the server's
/// clock plus [`CLOCK_TOLERANCE`], nor before its start.
pub fn released_last(start: u64, last: u64, now: u64) -> u64 {
    last.min(now.saturating_add(CLOCK_TOLERANCE)).max(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_800_000_000;

    #[test]
    fn a_window_lasts_at_least_one_second_and_ends_by_the_last_second_an_id_can_carry() {
        assert_eq!(last_second(T, 1), Ok(T));
        assert_eq!(last_second(T, 600), Ok(T + 599));
        assert_eq!(last_second(T, 0), Err(AppLeaseError::NotPositive { seconds: 0 }));
        assert_eq!(last_second(T, -5), Err(AppLeaseError::NotPositive { seconds: -5 }));
        assert_eq!(last_second(MAX_SECOND, 1), Ok(MAX_SECOND));
        assert_eq!(last_second(MAX_SECOND, 2), Err(AppLeaseError::PastLastSecond { last: MAX_SECOND + 1 }));
        assert_eq!(last_second(T, i64::MAX), Err(AppLeaseError::PastLastSecond { last: T + i64::MAX as u64 - 1 }));
        assert!(matches!(last_second(EPOCH_SECOND - 1, 1), Err(AppLeaseError::ClockOutOfRange { .. })));
    }

    #[test]
    fn a_node_is_free_once_every_window_of_it_has_ended() {
        let windows = [(10, T + 5), (11, T - 1), (12, T)];
        assert_eq!(free_node(10, 12, &windows, T, 0), Some(11));
        assert_eq!(free_node(10, 12, &windows, T + 1, 2), Some(12), "the search starts where spread says");
        assert_eq!(free_node(10, 12, &windows, T + 1, 0), Some(11));
        assert_eq!(free_node(10, 10, &windows, T + 5, 0), None);
        assert_eq!(free_node(10, 10, &windows, T + 6, 7), Some(10));
    }

    #[test]
    fn a_release_keeps_the_seconds_a_fast_clock_may_have_used() {
        assert_eq!(released_last(T, T + 599, T + 10), T + 10 + CLOCK_TOLERANCE);
        assert_eq!(released_last(T, T + 30, T + 10), T + 30, "never past the window's end");
        assert_eq!(released_last(T + 100, T + 600, T), T + 100, "never before its start");
    }

    #[test]
    fn holders_are_short_printable_text() {
        assert_eq!(check_holder("worker-7@host"), Ok(()));
        assert_eq!(check_holder(""), Err(AppLeaseError::BadHolder));
        assert_eq!(check_holder(&"x".repeat(HOLDER_MAX_BYTES + 1)), Err(AppLeaseError::BadHolder));
        assert_eq!(check_holder("a\nb"), Err(AppLeaseError::BadHolder));
        assert_eq!(check_holder("'; DROP TABLE t; --"), Ok(()), "SQL is the database's problem, passed as a parameter");
    }
}
