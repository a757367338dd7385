//! Leases of single nodes for application processes that generate IDs themselves (the Go,
//! Python and TypeScript reference ports take a `Lease(node_id, start, end_exclusive)`): which
//! node to hand out, the window it gets, what extending and releasing it do. randflake_pg's
//! `randflake_lease_acquire`, `_extend` and `_release` run this over the lease table that its
//! servers lease from, so that IDs made in the database and by applications share one ID space.
//!
//! The rules are the table's: a node's new window starts no earlier than the clock and after
//! every earlier window of that node ends, and nothing reaches the application before its commit
//! is known durable ([`may_return`]). Windows here are half-open, `start..end_exclusive`, as the
//! reference ports take them; the table stores the last second, `end_exclusive - 1`.
//!
//! [`acquire`], [`extend`] and [`release`] make the decisions over an [`AppLeaseStore`]: in
//! randflake_pg, SQL over the lease table in the caller's own transaction; in the simulation
//! (`tests/app_lease_simulation.rs`), a server and its standby that fail.

use core::fmt;

use crate::decisions::invisible::is_invisible;
use crate::format::layout::{EPOCH_SECOND, MAX_SECOND};

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
    /// The holder name is empty, too long, or holds an invisible or line-breaking character
    /// ([`check_holder`]).
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
                write!(
                    f,
                    "a holder is 1 to {HOLDER_MAX_BYTES} bytes of text without invisible or line-breaking characters"
                )
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

/// Checks a holder name: 1 to [`HOLDER_MAX_BYTES`] bytes, and no character that is invisible or
/// breaks a line, which would let a name read as another, or forge a line, where DBAs read it:
/// none of Unicode's control, format, line and paragraph separator characters (such as a newline,
/// U+202E RIGHT-TO-LEFT OVERRIDE or U+2028 LINE SEPARATOR), its default-ignorable code points
/// (such as U+3164 HANGUL FILLER or a variation selector) or the characters fonts draw blank
/// (U+2800 BRAILLE PATTERN BLANK). Anything else about it is the application's business.
pub fn check_holder(holder: &str) -> Result<(), AppLeaseError> {
    let ok = !holder.is_empty() && holder.len() <= HOLDER_MAX_BYTES && !holder.chars().any(is_invisible);
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

/// What is known about the commit of an application lease's write once it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitEvidence {
    /// Positive evidence that it is durable: flushed, and confirmed by the synchronous standbys
    /// that the storing server's configuration asks for.
    Durable,
    /// Anything else: a commit whose wait for the standbys was cut short (a cancel, a timeout,
    /// a termination), or one made on another server. It may be lost in a failover.
    Unconfirmed,
}

/// The rule: a lease, an extension or a release reaches the application only on positive
/// evidence that its commit is durable. A lease returned on a commit later lost in a failover
/// would let the node be leased again for the same seconds. The
/// `fault-grant-uncertain-app-leases` feature breaks the rule on purpose, for the simulation's
/// proof that it then finds a duplicate; no build of randflake_pg enables it.
pub fn may_return(evidence: CommitEvidence) -> bool {
    evidence == CommitEvidence::Durable || cfg!(feature = "fault-grant-uncertain-app-leases")
}

/// The last second a released window keeps: not past its own end, and not before the server's
/// clock plus [`CLOCK_TOLERANCE`], nor before its start.
pub fn released_last(start: u64, last: u64, now: u64) -> u64 {
    last.min(now.saturating_add(CLOCK_TOLERANCE)).max(start)
}

/// The lease table as one call of one holder sees it, in a transaction of the call's own that
/// [`AppLeaseStore::commit`] ends. A call whose decision is a refusal writes nothing that is
/// kept: randflake_pg raises an ERROR, which rolls the transaction back.
pub trait AppLeaseStore {
    /// `(node, last second)` of every window on record of a node of `first..=last`, whoever holds it.
    fn windows(&mut self, first: u32, last: u32) -> Vec<(u32, u64)>;
    /// Removes the windows of `node` that ended before `now`: they bound nothing a new one does not.
    fn remove_ended(&mut self, node: u32, now: u64);
    /// Records the holder's new window; false if another call recorded an overlapping one meanwhile.
    fn insert(&mut self, window: AppWindow) -> bool;
    /// Moves the last second of the holder's live window of `node` (one not ended before `now`)
    /// to `last`, never earlier: its start and new last second, or `None` if it has none.
    fn lengthen(&mut self, node: u32, last: u64, now: u64) -> Option<(u64, u64)>;
    /// The start and last second of the holder's latest window of `node`.
    fn latest(&mut self, node: u32) -> Option<(u64, u64)>;
    /// Replaces the holder's window of `node` that starts at `start` by a released one that ends
    /// with `last` and that no holder can extend; false if it was gone (released meanwhile).
    fn replace_released(&mut self, node: u32, start: u64, last: u64) -> bool;
    /// Commits the call's transaction; what is known about the commit.
    fn commit(&mut self) -> CommitEvidence;
}

/// Why a call is refused. Nothing it wrote is kept, except where it says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppLeaseRefusal {
    /// Every node of the pool is leased.
    PoolExhausted,
    /// Another call leased the chosen node at the same moment.
    Race {
        /// The node.
        node: u32,
    },
    /// The holder never leased the node.
    NotHeld {
        /// The node.
        node: u32,
    },
    /// The holder's lease of the node ended.
    Ended {
        /// The node.
        node: u32,
        /// Its last second.
        last: u64,
    },
    /// The call's write committed without evidence that it is durable: it is kept on the server
    /// (or lost in a failover), and not returned.
    Unconfirmed {
        /// The node written.
        node: u32,
    },
}

/// Leases a free node of `first..=last_node` to the holder from `now` through `last`, returned
/// only once committed durably; `spread` is where the search for a free node starts.
pub fn acquire(
    store: &mut impl AppLeaseStore,
    (first, last_node): (u32, u32),
    now: u64,
    last: u64,
    spread: u64,
) -> Result<AppWindow, AppLeaseRefusal> {
    let windows = store.windows(first, last_node);
    let node = free_node(first, last_node, &windows, now, spread).ok_or(AppLeaseRefusal::PoolExhausted)?;
    store.remove_ended(node, now);
    let window = AppWindow { node, start: now, end_exclusive: last + 1 };
    if !store.insert(window) {
        return Err(AppLeaseRefusal::Race { node });
    }
    durable(store, node)?;
    Ok(window)
}

/// Moves the end of the holder's live lease of `node` to `last` (never earlier), returned only
/// once committed durably.
pub fn extend(store: &mut impl AppLeaseStore, node: u32, now: u64, last: u64) -> Result<AppWindow, AppLeaseRefusal> {
    let Some((start, end)) = store.lengthen(node, last, now) else {
        return Err(match store.latest(node) {
            Some((_, last)) => AppLeaseRefusal::Ended { node, last },
            None => AppLeaseRefusal::NotHeld { node },
        });
    };
    durable(store, node)?;
    Ok(AppWindow { node, start, end_exclusive: end + 1 })
}

/// Gives the holder's live lease of `node` back, keeping the seconds it may have used
/// ([`released_last`]): true once committed durably; false if the lease had already ended (or
/// another call released it), which writes nothing.
pub fn release(store: &mut impl AppLeaseStore, node: u32, now: u64) -> Result<bool, AppLeaseRefusal> {
    let (start, end) = store.latest(node).ok_or(AppLeaseRefusal::NotHeld { node })?;
    if end < now || !store.replace_released(node, start, released_last(start, end, now)) {
        // Nothing written: no commit can take an ended lease back.
        store.commit();
        return Ok(false);
    }
    durable(store, node)?;
    Ok(true)
}

/// Commits, and refuses unless the commit is known durable ([`may_return`]).
fn durable(store: &mut impl AppLeaseStore, node: u32) -> Result<(), AppLeaseRefusal> {
    if may_return(store.commit()) {
        Ok(())
    } else {
        Err(AppLeaseRefusal::Unconfirmed { node })
    }
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
        for invisible in
            ["a\nb", "a\u{7f}", "admin\u{202e}nimda", "a\u{2028}b", "a\u{2029}", "a\u{200b}b", "\u{feff}a", "a\u{ad}"]
        {
            assert_eq!(check_holder(invisible), Err(AppLeaseError::BadHolder), "{invisible:?}");
        }
        // Default-ignorable code points, among them the Hangul fillers, which are letters, and
        // characters drawn blank: each alone, and hidden inside a name another holder has.
        let ignorable_and_blank = "\u{115f}\u{1160}\u{3164}\u{ffa0}\u{2800}\u{1d159}\
             \u{34f}\u{180e}\u{200b}\u{2060}\u{fe0f}\u{e0001}\u{e0100}";
        for invisible in ignorable_and_blank.chars() {
            assert_eq!(check_holder(&invisible.to_string()), Err(AppLeaseError::BadHolder), "{invisible:?}");
            assert_eq!(check_holder(&format!("worker{invisible}-7")), Err(AppLeaseError::BadHolder), "{invisible:?}");
        }
        assert_eq!(check_holder("wörker 7 \u{1f600}"), Ok(()));
        assert_eq!(check_holder("\u{3131}\u{1100}\u{2801}"), Ok(()), "Hangul letters, a Braille pattern with a dot");
        assert_eq!(check_holder("'; DROP TABLE t; --"), Ok(()), "SQL is the database's problem, passed as a parameter");
    }

    /// One holder's view of a table of `(node, start, last, released)`, committing with the
    /// evidence it is given.
    struct Table {
        rows: Vec<(u32, u64, u64, bool)>,
        evidence: CommitEvidence,
        commits: u32,
    }

    impl Table {
        fn new(evidence: CommitEvidence) -> Self {
            Self { rows: Vec::new(), evidence, commits: 0 }
        }

        fn own(&mut self, node: u32) -> Option<&mut (u32, u64, u64, bool)> {
            self.rows.iter_mut().rev().find(|row| row.0 == node && !row.3)
        }
    }

    impl AppLeaseStore for Table {
        fn windows(&mut self, first: u32, last: u32) -> Vec<(u32, u64)> {
            self.rows.iter().filter(|row| (first..=last).contains(&row.0)).map(|row| (row.0, row.2)).collect()
        }
        fn remove_ended(&mut self, node: u32, now: u64) {
            self.rows.retain(|row| row.0 != node || row.2 >= now);
        }
        fn insert(&mut self, window: AppWindow) -> bool {
            self.rows.push((window.node, window.start, window.last(), false));
            true
        }
        fn lengthen(&mut self, node: u32, last: u64, now: u64) -> Option<(u64, u64)> {
            let row = self.own(node).filter(|row| row.2 >= now)?;
            row.2 = row.2.max(last);
            Some((row.1, row.2))
        }
        fn latest(&mut self, node: u32) -> Option<(u64, u64)> {
            self.own(node).map(|row| (row.1, row.2))
        }
        fn replace_released(&mut self, node: u32, _start: u64, last: u64) -> bool {
            self.own(node).map(|row| *row = (row.0, row.1, last, true)).is_some()
        }
        fn commit(&mut self) -> CommitEvidence {
            self.commits += 1;
            self.evidence
        }
    }

    #[test]
    fn acquire_extend_and_release_return_what_a_durable_commit_recorded() {
        let mut table = Table::new(CommitEvidence::Durable);
        let window = acquire(&mut table, (10, 11), T, T + 59, 0).expect("a free node");
        assert_eq!(window, AppWindow { node: 10, start: T, end_exclusive: T + 60 });
        assert_eq!(acquire(&mut table, (10, 10), T + 1, T + 9, 0), Err(AppLeaseRefusal::PoolExhausted));
        let extended = extend(&mut table, 10, T + 30, T + 119).expect("a live lease");
        assert_eq!((extended.start, extended.end_exclusive), (T, T + 120));
        assert_eq!(extend(&mut table, 11, T + 30, T + 40), Err(AppLeaseRefusal::NotHeld { node: 11 }));
        assert_eq!(release(&mut table, 10, T + 31), Ok(true));
        assert_eq!(table.rows, [(10, T, T + 31 + CLOCK_TOLERANCE, true)]);
        assert_eq!(release(&mut table, 10, T + 32), Err(AppLeaseRefusal::NotHeld { node: 10 }), "releasing twice");
        let commits = table.commits;
        let mut ended = Table::new(CommitEvidence::Durable);
        ended.rows.push((10, T, T + 5, false));
        assert_eq!(release(&mut ended, 10, T + 6), Ok(false), "an ended lease");
        assert_eq!(extend(&mut ended, 10, T + 6, T + 9), Err(AppLeaseRefusal::Ended { node: 10, last: T + 5 }));
        assert_eq!(ended.rows, [(10, T, T + 5, false)]);
        assert_eq!(commits, 3, "one commit for each call that wrote");
    }

    #[cfg(not(feature = "fault-grant-uncertain-app-leases"))]
    #[test]
    fn nothing_is_returned_from_an_unconfirmed_commit() {
        let mut table = Table::new(CommitEvidence::Unconfirmed);
        assert_eq!(acquire(&mut table, (10, 11), T, T + 59, 0), Err(AppLeaseRefusal::Unconfirmed { node: 10 }));
        assert_eq!(table.rows.len(), 1, "the window stays recorded, keeping its node from others");
        assert_eq!(extend(&mut table, 10, T + 1, T + 99), Err(AppLeaseRefusal::Unconfirmed { node: 10 }));
        assert_eq!(release(&mut table, 10, T + 2), Err(AppLeaseRefusal::Unconfirmed { node: 10 }));
    }
}
