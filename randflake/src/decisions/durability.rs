//! Whether a commit is known durable: judged only on positive evidence, read back from the
//! server that holds the lease table, never from the absence of a sign that it was not.
//!
//! A commit whose wait for synchronous standbys is cut short stands committed on its server
//! alone, and a failover to a standby loses it. PostgreSQL reports such a cut as a WARNING to the
//! session that committed, not as an error, and the cut may come from anywhere: the committing
//! process's own deadline, a `pg_cancel_backend()` on the server holding the table (for a fleet
//! member, a coordinator backend it cannot see), a driver's time-out. So nothing the committing
//! process did or did not receive tells whether the commit is durable. What does is the server's
//! own account, read after the commit returned: the position its WAL had reached then (at or past
//! the commit's end) and the position through which its WAL is durable as it is configured
//! (flushed locally and, where `synchronous_standby_names` asks for standbys, flushed by as many
//! of them as it asks for). The commit is durable once the second reaches the first, read on the
//! same server: a promoted standby or another cluster counts its positions on its own.

/// How a commit ended, as far as the keeper may rely on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// Known durable: the server holding the table showed it durable as configured.
    Durable,
    /// Committed locally at least, but not shown durable: counts as not granted.
    Uncertain,
}

/// A server as its WAL positions are counted: positions of different clusters, or of a primary
/// and the standby promoted from it (a new timeline), cannot be compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalServer {
    /// The cluster's system identifier.
    pub system_identifier: u64,
    /// The timeline it writes WAL on.
    pub timeline: u32,
}

/// One reading of the server holding the lease table, made in a transaction of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalReading {
    /// The server read.
    pub server: WalServer,
    /// Its WAL insert position: past the end of every commit that had returned when it was read.
    pub insert: u64,
    /// The position through which its WAL is durable as configured; `None` where it cannot say
    /// (fewer synchronous standbys connected than it asks for, or it is in recovery).
    pub durable: Option<u64>,
}

/// What a store learned about its commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitEvidence {
    /// Nothing was read: the keeper said it relies on nothing the transaction wrote.
    NotRead,
    /// The server the transaction wrote to (read in it, before the commit), the first reading
    /// after the commit returned, and the latest one (the same, or a later poll).
    Read {
        /// The server the transaction wrote to.
        written_on: WalServer,
        /// The first reading after the commit returned; its insert position covers the commit.
        first: WalReading,
        /// The latest reading.
        latest: WalReading,
    },
}

impl CommitEvidence {
    /// The rule: durable only when the server the commit was made on, read after it returned,
    /// shows its durable position at or past the insert position it showed first.
    pub fn commit(&self) -> Commit {
        match *self {
            CommitEvidence::Read { written_on, first, latest }
                if first.server == written_on
                    && latest.server == written_on
                    && latest.durable.is_some_and(|durable| durable >= first.insert) =>
            {
                Commit::Durable
            }
            _ => Commit::Uncertain,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIMARY: WalServer = WalServer { system_identifier: 7, timeline: 1 };

    fn reading(server: WalServer, insert: u64, durable: Option<u64>) -> WalReading {
        WalReading { server, insert, durable }
    }

    fn read(first: WalReading, latest: WalReading) -> Commit {
        CommitEvidence::Read { written_on: PRIMARY, first, latest }.commit()
    }

    #[test]
    fn a_commit_is_durable_once_the_durable_position_reaches_the_first_insert_position() {
        assert_eq!(read(reading(PRIMARY, 100, Some(100)), reading(PRIMARY, 100, Some(100))), Commit::Durable);
        // Still short of it: a standby that has not confirmed.
        let first = reading(PRIMARY, 100, Some(99));
        assert_eq!(read(first, first), Commit::Uncertain);
        // A later poll: other commits moved the insert position on; only the first one counts.
        assert_eq!(read(first, reading(PRIMARY, 180, Some(120))), Commit::Durable);
    }

    #[test]
    fn a_server_that_cannot_say_gives_no_evidence() {
        let first = reading(PRIMARY, 100, None);
        assert_eq!(read(first, first), Commit::Uncertain);
        assert_eq!(read(first, reading(PRIMARY, 100, None)), Commit::Uncertain);
    }

    #[test]
    fn positions_of_another_timeline_or_cluster_prove_nothing() {
        // The standby promoted between the commit and the reading: a new timeline, whose
        // positions may well pass the old primary's.
        let promoted = WalServer { timeline: 2, ..PRIMARY };
        let other = WalServer { system_identifier: 8, ..PRIMARY };
        for server in [promoted, other] {
            assert_eq!(read(reading(server, 100, Some(500)), reading(server, 100, Some(500))), Commit::Uncertain);
            assert_eq!(read(reading(PRIMARY, 100, Some(90)), reading(server, 100, Some(500))), Commit::Uncertain);
        }
    }

    #[test]
    fn a_commit_without_a_reading_is_uncertain() {
        assert_eq!(CommitEvidence::NotRead.commit(), Commit::Uncertain);
    }
}
