//! Every error randflake_pg raises, with its SQLSTATE, message and hint, in one place.
//!
//! Messages may name settings, paths, clock readings and node ids. They never contain the
//! secret, any part of it, or its length beyond "32 hexadecimal digits".

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use randflake::{ParseIdError, Refusal, MAX_SECOND};

use crate::shmem::published_lease::{KeeperReport, KeeperState};
use std::borrow::Cow;

/// The SQLSTATE of a rejected setting (invalid_parameter_value), raised through the check
/// hooks in `check_hooks` rather than as an [`Error`]: PostgreSQL reports those itself.
pub const INVALID_SETTING: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE;

/// Conditions that stop a randflake_pg function. Each ends the statement with an ERROR.
#[derive(Debug)]
pub enum Error {
    /// The library was loaded on demand instead of through `shared_preload_libraries`, so the
    /// node table it needs was never allocated.
    NotPreloaded,
    /// A randflake setting in the configuration failed validation while the library was being
    /// preloaded; PostgreSQL already logged why.
    InvalidSettingsAtStartup,
    /// Neither `randflake.secret` nor `randflake.secret_file` is set.
    NoSecret,
    /// Both secret settings are set; neither wins, so that a stale one cannot silently apply.
    TwoSecrets,
    /// `randflake.node_source` is `fleet` but no fleet lease table is configured.
    FleetWithoutLeaseTable,
    /// The clock reads earlier than a second this server already used.
    ClockBehind { now: u64, used: u64 },
    /// The clock reads before the start of this server's lease.
    ClockBeforeLease { now: u64, start: u64 },
    /// The clock reads past the last second this server's lease allows: it was not renewed.
    LeaseLapsed { now: u64, through: u64 },
    /// The lease keeper has not published a lease; it works in `database`.
    NoLease { keeper: KeeperReport, database: String },
    /// Hot standbys cannot write leases.
    OnStandby,
    /// `randflake.node_source` is `off`.
    GenerationOff,
    /// The clock is past the last second an ID can carry (2058-11-05).
    ClockPastLastSecond { now: u64 },
    /// Every node of the configured range is held by another running process.
    NoFreeNode { first: u32, last: u32 },
    /// Text that is not the canonical string form of an ID.
    InvalidIdString { input: String, reason: ParseIdError },
    /// A statement tried to give `randflake.secret` a value through SQL. `ends_session` when the
    /// value came from inside a function, a DO block or a run-time call, where a caller could
    /// catch an ERROR and have the statement's text recorded as run.
    SecretThroughSql { ends_session: bool },
    /// `randflake.app_node_id_min`/`max` are half set, reversed, or overlap the node range.
    AppPoolInvalid { app: (i32, i32), nodes: (u32, u32) },
    /// An application lease function was called, but no application pool is configured.
    NoAppPool,
    /// An application lease function was called outside `randflake.database`.
    AppLeaseDatabase { database: String },
    /// An application lease function was called inside an explicit transaction block.
    AppLeaseInTransaction { function: &'static str },
    /// A NULL argument to an application lease function.
    AppLeaseNull { argument: &'static str },
    /// An application lease argument out of range; why.
    AppLeaseArgument { reason: String },
    /// Every node of the application pool is leased.
    AppPoolExhausted { first: u32, last: u32 },
    /// The calling role already holds `randflake.app_leases_per_role` live leases.
    AppRoleQuota { role: String, limit: u32 },
    /// The holder holds no lease of that node.
    AppLeaseNotHeld { node: i32, holder: String },
    /// The holder's lease of that node has ended.
    AppLeaseEnded { node: i32, holder: String, last: u64 },
    /// Another server leased the chosen node at the same moment.
    AppLeaseRace { node: u32 },
}

impl Error {
    fn sqlstate(&self) -> PgSqlErrorCode {
        use PgSqlErrorCode::*;
        match self {
            Self::NotPreloaded
            | Self::NoSecret
            | Self::ClockBehind { .. }
            | Self::ClockBeforeLease { .. }
            | Self::LeaseLapsed { .. }
            | Self::NoLease { .. }
            | Self::GenerationOff => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            Self::OnStandby => ERRCODE_READ_ONLY_SQL_TRANSACTION,
            Self::TwoSecrets | Self::InvalidSettingsAtStartup | Self::FleetWithoutLeaseTable => {
                ERRCODE_CONFIG_FILE_ERROR
            }
            Self::ClockPastLastSecond { .. } => ERRCODE_DATETIME_FIELD_OVERFLOW,
            Self::NoFreeNode { .. } => ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            Self::InvalidIdString { .. } => ERRCODE_INVALID_TEXT_REPRESENTATION,
            Self::SecretThroughSql { .. } => ERRCODE_CANT_CHANGE_RUNTIME_PARAM,
            Self::AppPoolInvalid { .. } => ERRCODE_CONFIG_FILE_ERROR,
            Self::NoAppPool
            | Self::AppLeaseDatabase { .. }
            | Self::AppLeaseNotHeld { .. }
            | Self::AppLeaseEnded { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            Self::AppLeaseInTransaction { .. } => ERRCODE_ACTIVE_SQL_TRANSACTION,
            Self::AppLeaseNull { .. } => ERRCODE_NULL_VALUE_NOT_ALLOWED,
            Self::AppLeaseArgument { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
            Self::AppPoolExhausted { .. } | Self::AppRoleQuota { .. } => ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            Self::AppLeaseRace { .. } => ERRCODE_T_R_SERIALIZATION_FAILURE,
        }
    }

    fn message(&self) -> String {
        match self {
            Self::NotPreloaded => {
                "randflake_pg must be loaded via shared_preload_libraries".into()
            }
            Self::InvalidSettingsAtStartup => {
                "invalid randflake_pg settings in the server configuration".into()
            }
            Self::NoSecret => "randflake_pg has no secret configured".into(),
            Self::TwoSecrets => {
                "both randflake.secret and randflake.secret_file are set".into()
            }
            Self::FleetWithoutLeaseTable => {
                "randflake.node_source is fleet but randflake.fleet_lease_table is not set".into()
            }
            Self::ClockBeforeLease { now, start } => format!(
                "the system clock reads {now}, {} s before second {start}, where this server's node lease starts",
                start - now
            ),
            Self::LeaseLapsed { now, through } => format!(
                "this server's node lease covers IDs only through second {through}, {} s before the clock's reading {now}",
                now - through
            ),
            Self::NoLease { keeper, .. } => {
                format!("randflake_pg holds no node lease yet: the lease keeper is {}", keeper.describe())
            }
            Self::OnStandby => "randflake_pg issues no IDs on a standby server".into(),
            Self::GenerationOff => {
                "randflake_pg issues no IDs on this server: randflake.node_source is off".into()
            }
            Self::ClockBehind { now, used } => format!(
                "the system clock is {} s behind second {used}, which this server has already used for IDs",
                used - now
            ),
            Self::ClockPastLastSecond { now } => format!(
                "the system clock reads {now}, past {MAX_SECOND}, the last second a Randflake ID can carry"
            ),
            Self::NoFreeNode { first, last } => format!(
                "no free randflake node: all {} nodes of range {first}..{last} are in use",
                last - first + 1
            ),
            Self::InvalidIdString { input, reason } => {
                format!("invalid Randflake ID string \"{}\": {reason}", quoted_excerpt(input))
            }
            Self::SecretThroughSql { ends_session: false } => {
                "randflake.secret cannot be given a value through SQL".into()
            }
            Self::SecretThroughSql { ends_session: true } => {
                "randflake.secret cannot be given a value through SQL; the session ends, so that no caller can catch this error".into()
            }
            Self::AppPoolInvalid { app: (first, last), nodes: (node_first, node_last) } => format!(
                "randflake.app_node_id_min..randflake.app_node_id_max ({first}..{last}) must be both -1, or an ascending range outside randflake.node_id_min..randflake.node_id_max ({node_first}..{node_last})"
            ),
            Self::NoAppPool => "randflake_pg leases no nodes to applications on this server: no application pool is configured".into(),
            Self::AppLeaseDatabase { database } => {
                format!("application leases are kept in database \"{database}\" (randflake.database), not in this one")
            }
            Self::AppLeaseInTransaction { function } => {
                format!("{function}() must run in a transaction of its own, not inside a transaction block")
            }
            Self::AppLeaseNull { argument } => format!("the {argument} of an application lease must not be NULL"),
            Self::AppLeaseArgument { reason } => format!("invalid application lease: {reason}"),
            Self::AppPoolExhausted { first, last } => {
                format!("no free node in the application pool: all {} nodes of {first}..{last} are leased", last - first + 1)
            }
            Self::AppRoleQuota { role, limit } => {
                format!("role \"{}\" already holds {limit} application leases, its limit", quoted_excerpt(role))
            }
            Self::AppLeaseNotHeld { node, holder } => {
                format!("holder \"{}\" holds no lease of node {node}", quoted_excerpt(holder))
            }
            Self::AppLeaseEnded { node, holder, last } => {
                format!("the lease of node {node} by holder \"{}\" ended with second {last}", quoted_excerpt(holder))
            }
            Self::AppLeaseRace { node } => format!("another server leased node {node} at the same moment"),
        }
    }

    fn hint(&self) -> Cow<'static, str> {
        match self {
            Self::FleetWithoutLeaseTable => {
                "Set randflake.fleet_lease_table to the table holding the fleet's leases (normally a postgres_fdw foreign table reaching the coordination server), or set randflake.node_source to range.".into()
            }
            Self::ClockBeforeLease { start, .. } => format!(
                "Either the clock was stepped back (or the server restarted with its clock behind seconds it had used), or the only free node block is leased to another server until then. Generation resumes by itself at second {start}; randflake_status() shows the lease."
            )
            .into(),
            Self::LeaseLapsed { .. } => {
                "The lease keeper has not renewed the lease in time; randflake_status() and the server log say why. Generation resumes within seconds of the keeper renewing it.".into()
            }
            Self::NoLease { keeper, database } if keeper.state == KeeperState::WaitingForLeaseTable => format!(
                "Run CREATE EXTENSION randflake_pg in database \"{database}\" (set by randflake.database), or ALTER EXTENSION randflake_pg UPDATE if a version before 0.2.0 is installed there; in fleet mode, create randflake.fleet_lease_table there.",
            )
            .into(),
            Self::NoLease { keeper, database } if keeper.state == KeeperState::WaitingForDatabase => format!(
                "Create database \"{database}\" and run CREATE EXTENSION randflake_pg there, or set randflake.database to the database that has the extension and restart the server.",
            )
            .into(),
            Self::NoLease { keeper, database } if keeper.state == KeeperState::RefusingLeaseTable => format!(
                "The lease keeper uses only a lease table that no ordinary role can have created or can change. Drop the object it names, then run CREATE EXTENSION randflake_pg as a superuser in database \"{database}\" (in fleet mode, make a superuser own the foreign table, its schema and its server).",
            )
            .into(),
            Self::NoLease { .. } => {
                "randflake_status() and the lease keeper's WARNINGs in the server log say why it has no lease.".into()
            }
            Self::OnStandby => {
                "A standby cannot write leases. Generate IDs on the primary; once promoted, this server leases its nodes and issues IDs by itself.".into()
            }
            Self::GenerationOff => {
                "Set randflake.node_source to range or fleet in postgresql.conf and restart the server.".into()
            }
            Self::NotPreloaded => {
                "Add randflake_pg to shared_preload_libraries in postgresql.conf and restart the server.".into()
            }
            Self::InvalidSettingsAtStartup => {
                "The WARNING just before this message names the setting and the problem. The server does not start with a setting it cannot honour.".into()
            }
            Self::NoSecret => {
                "Put 32 hexadecimal digits in a file readable only by the server's user, set randflake.secret_file to its path in postgresql.conf, and reload.".into()
            }
            Self::TwoSecrets => {
                "Remove one of the two settings from postgresql.conf (keep randflake.secret_file), then reload.".into()
            }
            Self::ClockBehind { .. } => {
                "The clock was stepped backwards. Generation resumes by itself once the clock passes that second; check the time synchronisation (NTP) of this machine.".into()
            }
            Self::ClockPastLastSecond { .. } => {
                "Check the system clock; Randflake IDs cannot represent times after 2058-11-05 23:23:43 UTC.".into()
            }
            Self::NoFreeNode { .. } => {
                "Widen this server's node range (randflake.node_id_min..randflake.node_id_max, or randflake.fleet_block_size in fleet mode; restart needed), or use fewer concurrent connections.".into()
            }
            Self::InvalidIdString { .. } => {
                "A Randflake ID string is 1 to 13 lower-case base32hex digits (0-9, a-v), without padding or leading zeros.".into()
            }
            Self::SecretThroughSql { .. } => {
                "Write the secret into the file named by randflake.secret_file, readable only by the server's user (or into postgresql.conf, by hand), then reload. The text of SQL statements is kept where monitoring roles can read it: pg_stat_activity, pg_stat_statements and the server log.".into()
            }
            Self::AppPoolInvalid { .. } => {
                "Set both to -1 (no application pool), or to a range of nodes that no server of the fleet issues with, the same on every member; then start the server.".into()
            }
            Self::NoAppPool => {
                "Set randflake.app_node_id_min and randflake.app_node_id_max to a range outside the servers' nodes in postgresql.conf, and restart.".into()
            }
            Self::AppLeaseDatabase { database } => format!(
                "Connect to database \"{database}\", where the lease keeper keeps this server's leases, and call the function there."
            )
            .into(),
            Self::AppLeaseInTransaction { .. } => {
                "Call it in autocommit mode. A lease counts only once committed: inside a transaction block, a later rollback would take back a lease the application already uses.".into()
            }
            Self::AppLeaseNull { .. } => "Pass the holder's name, the node and a number of seconds.".into(),
            Self::AppLeaseArgument { .. } => {
                "A holder is 1 to 200 bytes of text without control characters; seconds run from 1 to the last second an ID can carry (2058-11-05); the node is one of the application pool's.".into()
            }
            Self::AppPoolExhausted { .. } => {
                "Widen the application pool (randflake.app_node_id_min..randflake.app_node_id_max, restart needed), release leases no longer used, or lease for fewer seconds so that nodes come back sooner.".into()
            }
            Self::AppRoleQuota { .. } => {
                "Release the leases this role no longer uses (randflake_lease_release), let them end, or ask the DBA to raise randflake.app_leases_per_role.".into()
            }
            Self::AppLeaseNotHeld { .. } => {
                "A holder extends or releases only what randflake_lease_acquire() gave it, under the same role; acquire a new lease.".into()
            }
            Self::AppLeaseEnded { .. } => {
                "The application must stop issuing IDs with that node now, and acquire a new lease.".into()
            }
            Self::AppLeaseRace { .. } => "Try again: another node will be chosen.".into(),
        }
    }

    /// FATAL for the errors that must end the session, ERROR for the rest.
    fn level(&self) -> PgLogLevel {
        match self {
            Self::SecretThroughSql { ends_session: true } => PgLogLevel::FATAL,
            _ => PgLogLevel::ERROR,
        }
    }

    /// Ends the current statement (or, for a FATAL one, the session) with this error.
    #[track_caller]
    pub fn raise(self) -> ! {
        let level = self.level();
        ErrorReport::new(self.sqlstate(), self.message(), "randflake_pg").set_hint(self.hint()).report(level);
        unreachable!("ERROR and FATAL do not return")
    }
}

/// The first characters of a rejected input, control characters and quotes escaped, so that a
/// huge or binary argument yields a short, printable message.
fn quoted_excerpt(input: &str) -> String {
    const SHOWN: usize = 32;
    let mut excerpt: String = input.chars().take(SHOWN).flat_map(char::escape_debug).collect();
    if input.chars().nth(SHOWN).is_some() {
        excerpt.push('…');
    }
    excerpt
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::ClockBehind { now, used } => Self::ClockBehind { now, used },
            Refusal::BeforeWindow { now, first } => Self::ClockBeforeLease { now, start: first },
            Refusal::AfterWindow { now, .. } if now > MAX_SECOND => Self::ClockPastLastSecond { now },
            Refusal::AfterWindow { now, last } => Self::LeaseLapsed { now, through: last },
        }
    }
}

/// What the test of the DBA guide's error table needs: one error of every kind, and each one's
/// SQLSTATE and message as PostgreSQL reports them.
#[cfg(any(test, feature = "pg_test"))]
pub mod catalog {
    use super::*;

    /// How many kinds of [`Error`] there are; [`kind`] numbers them below this.
    pub const KINDS: usize = 27;

    /// A number for each kind of error. A new variant fails to compile here until it is given
    /// one, and then the table test until [`one_of_each`] has an example of it.
    pub fn kind(error: &Error) -> usize {
        match error {
            Error::NotPreloaded => 0,
            Error::InvalidSettingsAtStartup => 1,
            Error::NoSecret => 2,
            Error::TwoSecrets => 3,
            Error::FleetWithoutLeaseTable => 4,
            Error::ClockBehind { .. } => 5,
            Error::ClockBeforeLease { .. } => 6,
            Error::LeaseLapsed { .. } => 7,
            Error::NoLease { .. } => 8,
            Error::OnStandby => 9,
            Error::GenerationOff => 10,
            Error::ClockPastLastSecond { .. } => 11,
            Error::NoFreeNode { .. } => 12,
            Error::InvalidIdString { .. } => 13,
            Error::SecretThroughSql { ends_session: false } => 14,
            Error::SecretThroughSql { ends_session: true } => 15,
            Error::AppPoolInvalid { .. } => 16,
            Error::NoAppPool => 17,
            Error::AppLeaseDatabase { .. } => 18,
            Error::AppLeaseInTransaction { .. } => 19,
            Error::AppLeaseNull { .. } => 20,
            Error::AppLeaseArgument { .. } => 21,
            Error::AppPoolExhausted { .. } => 22,
            Error::AppLeaseNotHeld { .. } => 23,
            Error::AppLeaseEnded { .. } => 24,
            Error::AppLeaseRace { .. } => 25,
            Error::AppRoleQuota { .. } => 26,
        }
    }

    /// One example of each kind, with values like those the server reports.
    pub fn one_of_each() -> Vec<Error> {
        let keeper = KeeperReport { state: KeeperState::Failing, cause: "connection refused".into(), pid: 0 };
        vec![
            Error::NotPreloaded,
            Error::InvalidSettingsAtStartup,
            Error::NoSecret,
            Error::TwoSecrets,
            Error::FleetWithoutLeaseTable,
            Error::ClockBehind { now: 1_800_000_000, used: 1_800_000_004 },
            Error::ClockBeforeLease { now: 1_800_000_000, start: 1_800_000_011 },
            Error::LeaseLapsed { now: 1_800_000_000, through: 1_799_999_990 },
            Error::NoLease { keeper, database: "postgres".into() },
            Error::OnStandby,
            Error::GenerationOff,
            Error::ClockPastLastSecond { now: MAX_SECOND + 1 },
            Error::NoFreeNode { first: 0, last: 127 },
            Error::InvalidIdString { input: "00".into(), reason: ParseIdError::LeadingZero },
            Error::SecretThroughSql { ends_session: false },
            Error::SecretThroughSql { ends_session: true },
            Error::AppPoolInvalid { app: (0, 200), nodes: (0, 131071) },
            Error::NoAppPool,
            Error::AppLeaseDatabase { database: "postgres".into() },
            Error::AppLeaseInTransaction { function: "randflake_lease_acquire" },
            Error::AppLeaseNull { argument: "holder" },
            Error::AppLeaseArgument { reason: "a lease must last at least 1 second, not 0".into() },
            Error::AppPoolExhausted { first: 200, last: 263 },
            Error::AppLeaseNotHeld { node: 201, holder: "worker-1".into() },
            Error::AppLeaseEnded { node: 201, holder: "worker-1".into(), last: 1_800_000_000 },
            Error::AppLeaseRace { node: 201 },
            Error::AppRoleQuota { role: "orders_service".into(), limit: 8 },
        ]
    }

    /// The five characters of a SQLSTATE, from PostgreSQL's packed form (six bits a character).
    pub fn sqlstate_text(code: PgSqlErrorCode) -> String {
        let packed = code as i32;
        (0..5).map(|place| char::from(b'0' + ((packed >> (6 * place)) & 0x3F) as u8)).collect()
    }

    /// The error's SQLSTATE and message.
    pub fn reported(error: &Error) -> (String, String) {
        (sqlstate_text(error.sqlstate()), error.message())
    }
}
