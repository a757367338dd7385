//! The keeper's report: what randflake_pg's lease keeper is doing and why, in the words
//! randflake_status() and errors use: the one vocabulary shared by the keeper (which reports
//! it), shared memory (`shmem::keeper_board`, which carries it between processes) and the
//! errors that name it. Beside the keeper's decisions, since all of those sit in layers of the
//! extension below its keeper and it needs nothing from PostgreSQL.
#![forbid(unsafe_code)]

/// What the lease keeper is doing; shown by randflake_status() and in errors, with its cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeeperState {
    /// Not started yet, or not at all (on a standby the keeper starts at promotion).
    NotStarted = 0,
    /// `randflake.database` does not exist, or the keeper cannot connect to it.
    WaitingForDatabase = 1,
    /// The extension (or, in fleet mode, the fleet lease table) is missing in its database.
    WaitingForLeaseTable = 2,
    /// A table of the lease table's name exists but is not one the keeper may trust.
    RefusingLeaseTable = 3,
    /// Holding and renewing a lease.
    Holding = 4,
    /// Its last attempt to take, check or renew the lease failed.
    Failing = 5,
}

impl KeeperState {
    const ALL: [Self; 6] = [
        Self::NotStarted,
        Self::WaitingForDatabase,
        Self::WaitingForLeaseTable,
        Self::RefusingLeaseTable,
        Self::Holding,
        Self::Failing,
    ];

    /// The state stored as `code`; an unknown code reads as not started.
    pub fn from_code(code: u32) -> Self {
        Self::ALL.into_iter().find(|state| *state as u32 == code).unwrap_or(Self::NotStarted)
    }

    /// The state in words, with its cause where it has one.
    pub fn describe(self, cause: &str) -> String {
        match self {
            Self::NotStarted => "not started".into(),
            Self::WaitingForDatabase => format!("waiting for its database: {cause}"),
            Self::WaitingForLeaseTable => "waiting for the lease table".into(),
            Self::RefusingLeaseTable => format!("refusing the lease table: {cause}"),
            Self::Holding => "holding a lease".into(),
            Self::Failing => format!("failing: {cause}"),
        }
    }
}

/// The keeper as randflake_status() and errors report it.
#[derive(Clone, Debug)]
pub struct KeeperReport {
    /// What the keeper is doing.
    pub state: KeeperState,
    /// Why, for the states whose words name a cause ([`KeeperState::describe`]).
    pub cause: String,
    /// 0 when no keeper runs.
    pub pid: i32,
}

impl KeeperReport {
    /// The report in words, as randflake_status() shows it.
    pub fn describe(&self) -> String {
        self.state.describe(&self.cause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_from_its_code() {
        for state in KeeperState::ALL {
            assert_eq!(KeeperState::from_code(state as u32), state);
        }
        assert_eq!(KeeperState::from_code(99), KeeperState::NotStarted);
    }
}
