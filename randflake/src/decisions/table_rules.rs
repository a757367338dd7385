//! What a write to a lease table may do when it does not come from randflake_pg's own code on the
//! server that stores the table: on a fleet's coordinator, the members' keepers and lease
//! functions write through `postgres_fdw`, as a role no member code runs under there. Such a
//! write may do what those statements need and no more, so that no holder of that role (or of
//! `pg_write_all_data`) can free nodes whose seconds may still be in use:
//! - no row is deleted before its end has passed by the table server's clock less
//!   [`MAX_CLOCK_SKEW`] (a member prunes only rows [`prune_bound`] allows, which is earlier);
//! - a row's nodes, holder and start never change, and its end and high-water mark only move
//!   forward, except an application lease's release, whose end the table server sets itself
//!   ([`released_end`]);
//! - a new row starts no earlier than the table server's clock less [`MAX_CLOCK_SKEW`] (the
//!   table's constraints keep it clear of every other row);
//! - nothing is truncated.

use core::fmt;

use crate::decisions::app_lease;

/// How far apart the clocks of a fleet's members and its coordinator may be, in seconds. A member
/// prunes a row only once its end is [`prune_bound`] behind its own clock, and the coordinator
/// refuses a deletion of a row whose end has not passed its own clock by this much, or an insert
/// starting this much before it.
pub const MAX_CLOCK_SKEW: u64 = 60;

/// One row of the lease table, as a write sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// First node of the block.
    pub first_node: u32,
    /// Last node of the block (inclusive).
    pub last_node: u32,
    /// Who holds it: a server's identity, `app/<role>/<holder>`, or `released/<role>/<holder>`.
    pub holder: String,
    /// First second.
    pub start: u64,
    /// Last second (inclusive).
    pub end: u64,
    /// The high-water mark.
    pub used_through: u64,
}

/// A write to the table, row by row (TRUNCATE for the whole table).
#[derive(Clone, Copy, Debug)]
pub enum Write<'a> {
    /// A new row.
    Insert(&'a Row),
    /// A row changed from `old` to `new`.
    Update {
        /// The row before.
        old: &'a Row,
        /// The row as written.
        new: &'a Row,
    },
    /// A row deleted.
    Delete(&'a Row),
    /// Every row at once.
    Truncate,
}

/// Why such a write is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// TRUNCATE.
    Truncate,
    /// A deletion of a row whose seconds may still be in use.
    DeleteLive {
        /// The row.
        first_node: u32,
        /// The row's last node.
        last_node: u32,
        /// Its start.
        start: u64,
        /// Its end.
        end: u64,
    },
    /// An update of a row's nodes, holder or start (other than a release).
    Replace,
    /// An update that moves a row's end or high-water mark back.
    MovesBack,
    /// An insert of a row starting before the table server's clock less the skew bound.
    StartsInThePast {
        /// The row's start.
        start: u64,
        /// The earliest start allowed now.
        earliest: u64,
    },
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncate => write!(f, "TRUNCATE"),
            Self::DeleteLive { first_node, last_node, start, end } => write!(
                f,
                "deleting the lease of nodes {first_node}..{last_node} from second {start}, whose seconds may be in use until {}",
                end.saturating_add(MAX_CLOCK_SKEW)
            ),
            Self::Replace => write!(f, "changing the nodes, holder or start of a lease"),
            Self::MovesBack => write!(f, "moving the end or high-water mark of a lease back"),
            Self::StartsInThePast { start, earliest } => {
                write!(f, "inserting a lease that starts at second {start}, before second {earliest}")
            }
        }
    }
}

/// Whether a write that randflake_pg's own code did not make may be done now, by the table
/// server's clock `now`.
pub fn check(write: Write<'_>, now: u64) -> Result<(), Refused> {
    let earliest = now.saturating_sub(MAX_CLOCK_SKEW);
    match write {
        Write::Truncate => Err(Refused::Truncate),
        Write::Delete(row) if row.end >= earliest => Err(Refused::DeleteLive {
            first_node: row.first_node,
            last_node: row.last_node,
            start: row.start,
            end: row.end,
        }),
        Write::Delete(_) => Ok(()),
        Write::Insert(row) if row.start < earliest => Err(Refused::StartsInThePast { start: row.start, earliest }),
        Write::Insert(_) => Ok(()),
        Write::Update { old, new } => {
            let same_lease = (new.first_node, new.last_node, new.start) == (old.first_node, old.last_node, old.start);
            if !same_lease || (new.holder != old.holder && !is_release(&old.holder, &new.holder)) {
                Err(Refused::Replace)
            } else if is_release(&old.holder, &new.holder) {
                // Its end is the table server's to set (`released_end`), whatever was written.
                Ok(())
            } else if new.end < old.end || new.used_through < old.used_through {
                Err(Refused::MovesBack)
            } else {
                Ok(())
            }
        }
    }
}

/// Whether an update from holder `old` to `new` releases an application lease: `app/...`
/// becoming `released/...`, the same role and holder.
pub fn is_release(old: &str, new: &str) -> bool {
    match (after(old, app_lease::HELD), after(new, app_lease::RELEASED)) {
        (Some(held), Some(released)) => held == released,
        _ => false,
    }
}

/// What follows `first` and a slash in `holder`.
fn after<'a>(holder: &'a str, first: &str) -> Option<&'a str> {
    holder.strip_prefix(first).and_then(|rest| rest.strip_prefix('/'))
}

/// The last second a released application lease keeps, by the table server's clock `now`: its
/// own end, or the clock plus the applications' allowance if sooner, never before its start.
pub fn released_end(old: &Row, now: u64) -> u64 {
    app_lease::released_last(old.start, old.end, now)
}

/// The rows a fleet member may delete by its own clock `now`: those that ended before this.
/// Twice the skew bound behind the member's clock is at least the bound behind the
/// coordinator's, however the two clocks differ within it, so the coordinator never refuses a
/// member's pruning, and no member prunes a row another may still be using.
pub fn prune_bound(now: u64) -> u64 {
    now.saturating_sub(2 * MAX_CLOCK_SKEW)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_800_000_000;

    fn row(holder: &str, start: u64, end: u64) -> Row {
        Row { first_node: 0, last_node: 1023, holder: holder.into(), start, end, used_through: end }
    }

    #[test]
    fn a_row_is_deleted_only_once_its_end_is_past_the_skew_bound() {
        let live = row("7300/1", T - 600, T - 30);
        assert!(matches!(check(Write::Delete(&live), T), Err(Refused::DeleteLive { .. })));
        let ended = row("7300/1", T - 600, T - MAX_CLOCK_SKEW - 1);
        assert_eq!(check(Write::Delete(&ended), T), Ok(()));
        assert_eq!(check(Write::Truncate, T), Err(Refused::Truncate));
    }

    #[test]
    fn updates_only_move_forward_or_release() {
        let old = row("7300/1", T, T + 600);
        let renewed = Row { end: T + 900, used_through: T + 900, ..old.clone() };
        assert_eq!(check(Write::Update { old: &old, new: &renewed }, T), Ok(()));
        let cut = Row { end: T + 10, used_through: T + 10, ..old.clone() };
        assert_eq!(check(Write::Update { old: &old, new: &cut }, T), Err(Refused::MovesBack));
        let stolen = Row { holder: "7301/1".into(), ..old.clone() };
        assert_eq!(check(Write::Update { old: &old, new: &stolen }, T), Err(Refused::Replace));
        let moved = Row { first_node: 1024, last_node: 2047, ..old.clone() };
        assert_eq!(check(Write::Update { old: &old, new: &moved }, T), Err(Refused::Replace));

        let held = row("app/\"alice\"/p", T, T + 600);
        let released = Row { holder: "released/\"alice\"/p".into(), ..held.clone() };
        assert_eq!(check(Write::Update { old: &held, new: &released }, T), Ok(()));
        let someone_elses = Row { holder: "released/\"bob\"/p".into(), ..held.clone() };
        assert_eq!(check(Write::Update { old: &held, new: &someone_elses }, T), Err(Refused::Replace));
        let unreleased = Row { holder: "app/\"alice\"/p".into(), ..released.clone() };
        assert_eq!(check(Write::Update { old: &released, new: &unreleased }, T), Err(Refused::Replace));
    }

    #[test]
    fn a_release_keeps_the_table_servers_clock_plus_the_allowance() {
        let held = row("app/\"alice\"/p", T - 10, T + 600);
        assert_eq!(released_end(&held, T), T + app_lease::CLOCK_TOLERANCE);
        let ending = row("app/\"alice\"/p", T - 10, T + 5);
        assert_eq!(released_end(&ending, T), T + 5);
    }

    #[test]
    fn inserts_start_no_earlier_than_the_clock_less_the_skew_bound() {
        assert_eq!(check(Write::Insert(&row("7300/1", T - MAX_CLOCK_SKEW, T + 600)), T), Ok(()));
        assert!(matches!(
            check(Write::Insert(&row("7300/1", T - MAX_CLOCK_SKEW - 1, T + 600)), T),
            Err(Refused::StartsInThePast { .. })
        ));
    }

    #[test]
    fn a_members_pruning_is_never_refused_within_the_skew_bound() {
        for member_ahead in [-(MAX_CLOCK_SKEW as i64), -30, 0, 30, MAX_CLOCK_SKEW as i64] {
            let member_now = T.checked_add_signed(member_ahead).unwrap();
            let pruned = row("7300/1", T - 1200, prune_bound(member_now) - 1);
            assert_eq!(check(Write::Delete(&pruned), T), Ok(()), "member {member_ahead} s ahead");
        }
    }
}
