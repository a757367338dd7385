//! Every error randflake_pg reports, each declared once: its SQLSTATE, when it happens, its
//! message and hint, and examples. docs/errors.md's table is rendered from these declarations
//! (`make docs`), and a test fails when the committed table differs.
//!
//! Messages may name settings, paths, clock readings and node ids. They never contain the
//! secret, any part of it, or its length beyond "32 hexadecimal digits".
#![forbid(unsafe_code)]

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use randflake::decisions::keeper_report::{KeeperReport, KeeperState};
use randflake::{ParseIdError, SecretError, MAX_SECOND};

/// Declares [`Error`] and what each variant reports, from one block per variant:
///
/// ```text
/// /// What it is.
/// Name { field: Type, ... } {
///     sqlstate: ERRCODE_...,
///     level: <expression>,          // optional; ERROR otherwise
///     when: "for the DBA guide",
///     message: <expression>,        // the fields are in scope, by reference
///     hint: <expression>,
///     examples: [{ field: value, ... }, ...],
/// }
/// ```
macro_rules! declare_errors {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident { $($field:ident: $type:ty),* $(,)? } {
            sqlstate: $sqlstate:ident,
            $(level: $level:expr,)?
            when: $when:literal,
            message: $message:expr,
            hint: $hint:expr,
            examples: [$({ $($example_field:ident: $example_value:expr),* $(,)? }),+ $(,)?] $(,)?
        }
    )*) => {
        /// Conditions that stop a randflake_pg function, or reject a setting.
        #[derive(Debug)]
        pub enum Error {
            $($(#[doc = $doc])* $name { $($field: $type),* },)*
        }

        impl Error {
            fn code(&self) -> PgSqlErrorCode {
                match self {
                    $(Self::$name { .. } => PgSqlErrorCode::$sqlstate,)*
                }
            }

            /// The primary message.
            pub fn message(&self) -> String {
                match self {
                    $(#[allow(unused_variables)] Self::$name { $($field),* } => String::from($message),)*
                }
            }

            /// What to do about it.
            pub fn hint(&self) -> String {
                match self {
                    $(#[allow(unused_variables)] Self::$name { $($field),* } => String::from($hint),)*
                }
            }

            fn level(&self) -> PgLogLevel {
                match self {
                    $(#[allow(unused_variables)] Self::$name { $($field),* } => declare_errors!(@level $($level)?),)*
                }
            }

            /// When it happens, for the DBA guide.
            #[cfg(test)]
            fn when(&self) -> &'static str {
                match self {
                    $(Self::$name { .. } => $when,)*
                }
            }
        }

        /// Examples of every error, in declaration order: at least one of each kind, and one for
        /// each case whose message differs.
        #[cfg(test)]
        fn examples() -> Vec<Error> {
            vec![$($(Error::$name { $($example_field: $example_value),* },)+)*]
        }
    };
    (@level) => { PgLogLevel::ERROR };
    (@level $level:expr) => { $level };
}

const SECRET_FORMAT_HINT: &str = "The secret is exactly 32 hexadecimal digits, for example from: openssl rand -hex 16";

declare_errors! {
    /// The library was loaded on demand instead of through `shared_preload_libraries`, so the
    /// shared memory it needs was never allocated.
    NotPreloaded {} {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "`CREATE EXTENSION`, `LOAD` or any function, without preloading; there is no fallback",
        message: "randflake_pg must be loaded via shared_preload_libraries",
        hint: "Add randflake_pg to shared_preload_libraries in postgresql.conf and restart the server.",
        examples: [{}],
    }
    /// A randflake setting in the configuration failed validation while the library was being
    /// preloaded; PostgreSQL already logged why.
    InvalidSettingsAtStartup {} {
        sqlstate: ERRCODE_CONFIG_FILE_ERROR,
        when: "server start-up (in the log), after one of the setting errors below",
        message: "invalid randflake_pg settings in the server configuration",
        hint: "The WARNING just before this message names the setting and the problem. The server does not start with a setting it cannot honour.",
        examples: [{}],
    }
    /// Neither `randflake.secret` nor `randflake.secret_file` is set.
    NoSecret {} {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "generating or decoding",
        message: "randflake_pg has no secret configured",
        hint: "Put 32 hexadecimal digits in a file readable only by the server's user, set randflake.secret_file to its path in postgresql.conf, and reload.",
        examples: [{}],
    }
    /// Both secret settings are set; neither wins, so that a stale one cannot silently apply.
    TwoSecrets {} {
        sqlstate: ERRCODE_CONFIG_FILE_ERROR,
        when: "generating or decoding",
        message: "both randflake.secret and randflake.secret_file are set",
        hint: "Remove one of the two settings from postgresql.conf (keep randflake.secret_file), then reload.",
        examples: [{}],
    }
    /// `randflake.node_source` is `fleet` but no fleet lease table is configured.
    FleetWithoutLeaseTable {} {
        sqlstate: ERRCODE_CONFIG_FILE_ERROR,
        when: "server start-up (in the log)",
        message: "randflake.node_source is fleet but randflake.fleet_lease_table is not set",
        hint: "Set randflake.fleet_lease_table to the table holding the fleet's leases (normally a postgres_fdw foreign table reaching the coordination server), or set randflake.node_source to range.",
        examples: [{}],
    }
    /// `randflake.app_node_id_min`/`max` are half set, reversed, or overlap the node range.
    AppPoolInvalid { app: (i32, i32), nodes: (u32, u32) } {
        sqlstate: ERRCODE_CONFIG_FILE_ERROR,
        when: "server start-up (in the log): the application pool half set, reversed, or overlapping the server's nodes",
        message: format!(
            "randflake.app_node_id_min..randflake.app_node_id_max ({}..{}) must be both -1, or an ascending range outside randflake.node_id_min..randflake.node_id_max ({}..{})",
            app.0, app.1, nodes.0, nodes.1
        ),
        hint: "Set both to -1 (no application pool), or to a range of nodes that no server of the fleet issues with, the same on every member; then start the server.",
        examples: [{ app: (0, 200), nodes: (0, 131071) }],
    }
    /// `randflake.node_id_min` is above `randflake.node_id_max`.
    NodeRangeReversed { min: i32, max: i32 } {
        sqlstate: ERRCODE_INVALID_PARAMETER_VALUE,
        when: "setting a node bound (at start-up the server does not start; `ALTER SYSTEM` is refused)",
        message: format!("randflake.node_id_min ({min}) is greater than randflake.node_id_max ({max})"),
        hint: "Set randflake.node_id_min <= randflake.node_id_max; to move a range, change both in postgresql.conf and restart.",
        examples: [{ min: 1024, max: 1023 }],
    }
    /// `randflake.database` is empty.
    DatabaseUnset {} {
        sqlstate: ERRCODE_INVALID_PARAMETER_VALUE,
        when: "setting `randflake.database` to an empty string",
        message: "randflake.database must name a database",
        hint: "Set it to the database where CREATE EXTENSION randflake_pg was run.",
        examples: [{}],
    }
    /// `randflake.fleet_lease_table` is not `schema.table` in plain lower-case identifiers.
    FleetLeaseTableName { name: String } {
        sqlstate: ERRCODE_INVALID_PARAMETER_VALUE,
        when: "setting `randflake.fleet_lease_table`",
        message: format!("randflake.fleet_lease_table \"{}\" is not a schema-qualified table name", quoted_excerpt(name)),
        hint: "Use schema.table in lower case, for example randflake_fleet.node_leases.",
        examples: [{ name: "node_leases".into() }],
    }
    /// A value for `randflake.secret` that is not text.
    SecretNotText {} {
        sqlstate: ERRCODE_INVALID_PARAMETER_VALUE,
        when: "setting `randflake.secret` in postgresql.conf to bytes that are not UTF-8; the value is never quoted",
        message: "invalid value for randflake.secret: it is not valid text",
        hint: SECRET_FORMAT_HINT,
        examples: [{}],
    }
    /// A value for `randflake.secret` that is not 32 hexadecimal digits.
    SecretInvalid { reason: SecretError } {
        sqlstate: ERRCODE_INVALID_PARAMETER_VALUE,
        when: "setting `randflake.secret` in postgresql.conf; the value is never quoted",
        message: format!("invalid value for randflake.secret: {reason}"),
        hint: SECRET_FORMAT_HINT,
        examples: [{ reason: SecretError::WrongLength { length: 31 } }],
    }
    /// A `randflake.secret_file` path that is not UTF-8.
    SecretFilePath {} {
        sqlstate: ERRCODE_INVALID_PARAMETER_VALUE,
        when: "setting `randflake.secret_file` to a path that is not UTF-8",
        message: "randflake.secret_file is not a valid path",
        hint: "Use a UTF-8 path.",
        examples: [{}],
    }
    /// A key file that cannot be used.
    SecretFileInvalid { path: String, reason: SecretError } {
        sqlstate: ERRCODE_INVALID_PARAMETER_VALUE,
        when: "setting `randflake.secret_file` (start-up, reload): a file missing, unreadable, open to others or not holding 32 hexadecimal digits; on reload the old secret stays",
        message: format!("invalid randflake.secret_file \"{}\": {reason}", quoted_excerpt(path)),
        hint: "The file must hold exactly 32 hexadecimal digits and have mode 0600 or 0400, owned by the server's user; a relative path is relative to the data directory.",
        examples: [{ path: "randflake.key".into(), reason: SecretError::FileTooOpen { mode: 0o644 } }],
    }
    /// Memory ran out while a check hook copied what it parsed.
    SettingOutOfMemory {} {
        sqlstate: ERRCODE_INVALID_PARAMETER_VALUE,
        when: "setting the secret while the server is out of memory",
        message: "out of memory while checking a randflake_pg setting",
        hint: "Retry once memory is available; the setting keeps its previous value.",
        examples: [{}],
    }
    /// A statement tried to give `randflake.secret` a value through SQL. `ends_session` when the
    /// value came from inside a function, a DO block or a run-time call, where a caller could
    /// catch an ERROR and have the statement's text recorded as run.
    SecretThroughSql { ends_session: bool } {
        sqlstate: ERRCODE_CANT_CHANGE_RUNTIME_PARAM,
        level: if *ends_session { PgLogLevel::FATAL } else { PgLogLevel::ERROR },
        when: "any SQL that gives `randflake.secret` a value: `ALTER SYSTEM`, `SET`, `ALTER ROLE/DATABASE … SET`, a function's `SET` clause, `set_config()`; its text is hidden from `pg_stat_activity` and the log. Straight from the client it is an ERROR; inside a function or DO block, or at run time (`set_config()`), a FATAL that ends the session, so that no exception handler can swallow it",
        message: if *ends_session {
            "randflake.secret cannot be given a value through SQL; the session ends, so that no caller can catch this error"
        } else {
            "randflake.secret cannot be given a value through SQL"
        },
        hint: "Write the secret into the file named by randflake.secret_file, readable only by the server's user (or into postgresql.conf, by hand), then reload. The text of SQL statements is kept where monitoring roles can read it: pg_stat_activity, pg_stat_statements and the server log.",
        examples: [{ ends_session: false }, { ends_session: true }],
    }
    /// The clock reads earlier than a second this server already used.
    ClockBehind { now: u64, used: u64 } {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "the clock stepped back while the server runs",
        message: format!(
            "the system clock is {} s behind second {used}, which this server has already used for IDs",
            used - now
        ),
        hint: "The clock was stepped backwards. Generation resumes by itself once the clock passes that second; check the time synchronisation (NTP) of this machine.",
        examples: [{ now: 1_800_000_000, used: 1_800_000_004 }],
    }
    /// The clock reads before the start of this server's lease.
    ClockBeforeLease { now: u64, start: u64 } {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "the clock behind the lease after a restart; or a same-range promoted standby, a restored server or a fleet member waiting for a block (the first to free up is still leased to a stopped member until then)",
        message: format!(
            "the system clock reads {now}, {} s before second {start}, where this server's node lease starts",
            start - now
        ),
        hint: format!(
            "Either the clock was stepped back (or the server restarted with its clock behind seconds it had used), or the only free node block is leased to another server until then. Generation resumes by itself at second {start}; randflake_status() shows the lease."
        ),
        examples: [{ now: 1_800_000_000, start: 1_800_000_011 }],
    }
    /// The clock reads past the last second this server's lease allows: it was not renewed.
    LeaseLapsed { now: u64, through: u64 } {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "the keeper did not renew in time (a lock on the lease table; in a fleet, the coordinator unreachable for over two thirds of a lease); briefly after a forward clock step",
        message: format!(
            "this server's node lease covers IDs only through second {through}, {} s before the clock's reading {now}",
            now - through
        ),
        hint: "The lease keeper has not renewed the lease in time; randflake_status() and the server log say why. Generation resumes within seconds of the keeper renewing it.",
        examples: [{ now: 1_800_000_000, through: 1_799_999_990 }],
    }
    /// The lease keeper has not published a lease; it works in `database`.
    NoLease { keeper: KeeperReport, database: String } {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "no lease published; the message ends with the keeper's state, and the hint says what to do in that state",
        message: format!("randflake_pg holds no node lease yet: the lease keeper is {}", keeper.describe()),
        hint: match keeper.state {
            KeeperState::WaitingForLeaseTable => format!(
                "Run CREATE EXTENSION randflake_pg in database \"{database}\" (set by randflake.database), or ALTER EXTENSION randflake_pg UPDATE if a version before 0.2.0 is installed there; in fleet mode, create randflake.fleet_lease_table there."
            ),
            KeeperState::WaitingForDatabase => format!(
                "Create database \"{database}\" and run CREATE EXTENSION randflake_pg there, or set randflake.database to the database that has the extension and restart the server."
            ),
            KeeperState::RefusingLeaseTable => format!(
                "The lease keeper uses only a lease table that no ordinary role can have created or can change. Drop the object it names, then run CREATE EXTENSION randflake_pg as a superuser in database \"{database}\" (in fleet mode, make a superuser own the foreign table, its schema and its server)."
            ),
            _ => "randflake_status() and the lease keeper's WARNINGs in the server log say why it has no lease.".to_owned(),
        },
        examples: [
            { keeper: report(KeeperState::WaitingForLeaseTable, ""), database: "postgres".into() },
            { keeper: report(KeeperState::WaitingForDatabase, "database \"leases\" (randflake.database) does not exist"), database: "leases".into() },
            { keeper: report(KeeperState::RefusingLeaseTable, "randflake.node_leases is owned by role \"app\", which is not a superuser"), database: "postgres".into() },
            { keeper: report(KeeperState::Failing, "connection refused"), database: "postgres".into() },
        ],
    }
    /// Hot standbys cannot write leases.
    OnStandby {} {
        sqlstate: ERRCODE_READ_ONLY_SQL_TRANSACTION,
        when: "generating on a hot standby",
        message: "randflake_pg issues no IDs on a standby server",
        hint: "A standby cannot write leases. Generate IDs on the primary; once promoted, this server leases its nodes and issues IDs by itself.",
        examples: [{}],
    }
    /// `randflake.node_source` is `off`.
    GenerationOff {} {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "generating on a server that only keeps a fleet's lease table",
        message: "randflake_pg issues no IDs on this server: randflake.node_source is off",
        hint: "Set randflake.node_source to range or fleet in postgresql.conf and restart the server.",
        examples: [{}],
    }
    /// The clock is past the last second an ID can carry (2058-11-05).
    ClockPastLastSecond { now: u64 } {
        sqlstate: ERRCODE_DATETIME_FIELD_OVERFLOW,
        when: "the clock after 2058-11-05 17:10:23 UTC",
        message: format!("the system clock reads {now}, past {MAX_SECOND}, the last second a Randflake ID can carry"),
        hint: "Check the system clock; Randflake IDs cannot represent times after 2058-11-05 17:10:23 UTC.",
        examples: [{ now: MAX_SECOND + 1 }],
    }
    /// Text that is not the canonical string form of an ID.
    InvalidIdString { input: String, reason: ParseIdError } {
        sqlstate: ERRCODE_INVALID_TEXT_REPRESENTATION,
        when: "`randflake_from_string()` given a string that is not canonical",
        message: format!("invalid Randflake ID string \"{}\": {reason}", quoted_excerpt(input)),
        hint: "A Randflake ID string is 1 to 13 lower-case base32hex digits (0-9, a-v), without padding or leading zeros.",
        examples: [{ input: "00".into(), reason: ParseIdError::LeadingZero }],
    }
    /// An application lease function was called, but no application pool is configured.
    NoAppPool {} {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "an application lease function on a server without an application pool",
        message: "randflake_pg leases no nodes to applications on this server: no application pool is configured",
        hint: "Set randflake.app_node_id_min and randflake.app_node_id_max to a range outside the servers' nodes in postgresql.conf, and restart.",
        examples: [{}],
    }
    /// An application lease function was called outside `randflake.database`.
    AppLeaseDatabase { database: String } {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "an application lease function called in a database other than `randflake.database`",
        message: format!("application leases are kept in database \"{database}\" (randflake.database), not in this one"),
        hint: format!(
            "Connect to database \"{database}\", where the lease keeper keeps this server's leases, and call the function there."
        ),
        examples: [{ database: "postgres".into() }],
    }
    /// An application lease function was called inside an explicit transaction block.
    AppLeaseInTransaction { function: &'static str } {
        sqlstate: ERRCODE_ACTIVE_SQL_TRANSACTION,
        when: "`CALL` of an application lease procedure inside `BEGIN … COMMIT`, in a query string of several statements, or from a function",
        message: format!("CALL {function}() must be a statement of its own: it commits its own transaction"),
        hint: "Send the CALL as a statement of its own, in autocommit mode: not inside BEGIN … COMMIT, not with other statements in one query string or in one pipeline or batch without a Sync between them, not from a function. A lease is returned only once its commit is durable, which a transaction the procedure does not end could still take back.",
        examples: [{ function: "randflake_lease_acquire" }],
    }
    /// A NULL argument to an application lease function.
    AppLeaseNull { argument: &'static str } {
        sqlstate: ERRCODE_NULL_VALUE_NOT_ALLOWED,
        when: "a NULL argument to an application lease function",
        message: format!("the {argument} of an application lease must not be NULL"),
        hint: match *argument {
            "holder" => "Pass the holder's name: the process that holds the lease, in 1 to 200 bytes of text.",
            "node_id" => "Pass the node_id that randflake_lease_acquire returned to this holder.",
            // "seconds", the only other argument.
            _ => "Pass how many seconds from now the lease is to last: 1 or more.",
        },
        examples: [{ argument: "holder" }, { argument: "node_id" }, { argument: "seconds" }],
    }
    /// An application lease argument out of range; why.
    AppLeaseArgument { reason: String } {
        sqlstate: ERRCODE_INVALID_PARAMETER_VALUE,
        when: "seconds ≤ 0 or past 2058-11-05, a node outside the pool, a holder that is empty, over 200 bytes or holds an invisible or line-breaking character",
        message: format!("invalid application lease: {reason}"),
        hint: "A holder is 1 to 200 bytes of text without invisible or line-breaking characters: no Unicode control, format or separator character (Cc, Cf, Zl, Zp), no default-ignorable code point such as U+200B or U+3164 HANGUL FILLER, no blank such as U+2800 BRAILLE PATTERN BLANK; seconds run from 1 to the last second an ID can carry (2058-11-05); the node is one of the application pool's.",
        examples: [{ reason: "a lease must last at least 1 second, not 0".into() }],
    }
    /// Every node of the application pool is leased.
    AppPoolExhausted { first: u32, last: u32 } {
        sqlstate: ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        when: "every node of the application pool leased",
        message: format!("no free node in the application pool: all {} nodes of {first}..{last} are leased", last - first + 1),
        hint: "Widen the application pool (randflake.app_node_id_min..randflake.app_node_id_max, restart needed), release leases no longer used, or lease for fewer seconds so that nodes come back sooner.",
        examples: [{ first: 200, last: 263 }],
    }
    /// The calling role already holds `randflake.app_leases_per_role` live leases.
    AppRoleQuota { role: String, limit: u32 } {
        sqlstate: ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        when: "a role holding `randflake.app_leases_per_role` live leases acquires another",
        message: format!("role \"{}\" already holds {limit} application leases, its limit", quoted_excerpt(role)),
        hint: "Release the leases this role no longer uses (randflake_lease_release), let them end, or ask the DBA to raise randflake.app_leases_per_role.",
        examples: [{ role: "orders_service".into(), limit: 8 }],
    }
    /// The holder holds no lease of that node.
    AppLeaseNotHeld { node: i32, holder: String } {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "extend or release of a node the holder (under the calling role) never leased, or already released (a second release)",
        message: format!("holder \"{}\" holds no lease of node {node}", quoted_excerpt(holder)),
        hint: "A holder extends or releases only what randflake_lease_acquire() gave it, under the same role; acquire a new lease.",
        examples: [{ node: 201, holder: "worker-1".into() }],
    }
    /// The holder's lease of that node has ended.
    AppLeaseEnded { node: i32, holder: String, last: u64 } {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        when: "extend of a lease that has ended",
        message: format!("the lease of node {node} by holder \"{}\" ended with second {last}", quoted_excerpt(holder)),
        hint: "The application must stop issuing IDs with that node now, and acquire a new lease.",
        examples: [{ node: 201, holder: "worker-1".into(), last: 1_800_000_000 }],
    }
    /// Another call leased the chosen node at the same moment.
    AppLeaseRace { node: u32 } {
        sqlstate: ERRCODE_T_R_SERIALIZATION_FAILURE,
        when: "two calls (in a fleet, on two members) chose the same node for an application at once",
        message: format!("node {node} was leased by another call at the same moment"),
        hint: "Try again: another node will be chosen.",
        examples: [{ node: 201 }],
    }
    /// The server starts, but without a usable secret it cannot issue an ID.
    CannotIssue { cause: String } {
        sqlstate: ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        level: PgLogLevel::WARNING,
        when: "server start-up (a WARNING in the log), with no secret or two",
        message: format!("randflake_pg cannot issue IDs on this server: {cause}"),
        hint: "Every randflake_next() fails until then, and randflake_status() reports the state \"cannot issue\". Give the server exactly one secret (randflake.secret_file), then reload.",
        examples: [{ cause: "randflake_pg has no secret configured".into() }],
    }
    /// A binary randflake_key (a bind parameter or binary COPY) that is not eight bytes.
    InvalidKeyBinary { length: usize } {
        sqlstate: ERRCODE_INVALID_BINARY_REPRESENTATION,
        when: "binary input of a `randflake_key`: a bind parameter in binary format, or `COPY ... FROM` in binary",
        message: format!("invalid binary randflake_key: {length} bytes instead of 8"),
        hint: "In binary format a randflake_key is sent as its public ID, exactly as a bigint: eight bytes, big-endian, signed. Send a bigint, or the ID's canonical string in text format.",
        examples: [{ length: 4 }],
    }
    /// A role without the decoder grant turned a public ID into a `randflake_key`: the key holds
    /// the plain value, which sorts by creation, so making one is decoding.
    DecoderGrantMissing { role: String, schema: String } {
        sqlstate: ERRCODE_INSUFFICIENT_PRIVILEGE,
        when: "a role that is not a superuser and may not execute `randflake_decode(bigint)` turns a public ID into a `randflake_key`: the type's text or binary input (a literal, an untyped parameter, `COPY ... FROM`), or a cast from `bigint` or `randflake_id`",
        message: format!("permission denied to turn a public ID into a randflake_key: role \"{}\" may not decode IDs", quoted_excerpt(role)),
        hint: format!(
            "A randflake_key sorts by creation, so making one from an ID reveals as much as decoding it. To look a row up by its public ID, compare without making a key: WHERE id = $1::bigint, or WHERE id = $1::text for the string form. To let the role make keys: GRANT EXECUTE ON FUNCTION {}.randflake_decode(bigint) TO {};",
            sql_identifier(schema),
            sql_identifier(role)
        ),
        examples: [{ role: "orders_service".into(), schema: "public".into() }],
    }
    /// A C function of the extension read an argument its call does not have: declared by hand
    /// with other arguments, or called directly from C.
    EntryArgumentMissing { index: usize, count: usize } {
        sqlstate: ERRCODE_INTERNAL_ERROR,
        when: "a C function of the library declared in SQL with fewer arguments than the extension's scripts give it (by hand, with `CREATE FUNCTION … AS 'randflake_pg', …`), or called directly from C",
        message: format!("randflake_pg: a C function read argument {} of a call that has {count}", index + 1),
        hint: "Call the extension's functions as its scripts declare them; a function declared by hand over the library's C symbols must take the same arguments.",
        examples: [{ index: 1, count: 1 }],
    }
    /// A C function of the extension that takes no NULL was given one.
    EntryArgumentNull { index: usize } {
        sqlstate: ERRCODE_NULL_VALUE_NOT_ALLOWED,
        when: "a C function of the library declared in SQL without STRICT (by hand) and called with a NULL argument",
        message: format!("randflake_pg: argument {} of a C function that takes no NULL is NULL", index + 1),
        hint: "Declare a function over the library's C symbols STRICT, as the extension's scripts do, so that PostgreSQL answers NULL for a NULL argument without calling it.",
        examples: [{ index: 0 }],
    }
    /// The memory for a function's result could not be allocated.
    OutOfMemory { bytes: usize } {
        sqlstate: ERRCODE_OUT_OF_MEMORY,
        when: "printing a `randflake_key` (its text or binary form) when the server's memory is exhausted",
        message: format!("out of memory: randflake_pg could not allocate {bytes} bytes for a result"),
        hint: "The server ran out of memory; see the server log for which memory context grew.",
        examples: [{ bytes: 14 }],
    }
    /// `randflake_key_lowest()` or `randflake_key_highest()` was given a time no ID can carry.
    TimestampOutsideIds { unix_second: i64 } {
        sqlstate: ERRCODE_DATETIME_FIELD_OVERFLOW,
        when: "`randflake_key_lowest()` or `randflake_key_highest()` given a time before 2024-10-27 03:33:20 UTC or after 2058-11-05 17:10:23 UTC",
        message: format!("no Randflake ID is made in Unix second {unix_second}"),
        hint: format!("Randflake IDs carry Unix seconds {} to {MAX_SECOND}. For a range open at one end, leave that bound out of the condition (or use MINVALUE or MAXVALUE in a partition bound).", randflake::EPOCH_SECOND),
        examples: [{ unix_second: 1_700_000_000 }],
    }
    /// An application lease procedure called in a transaction that had already written.
    AppLeaseAfterWrites { function: &'static str } {
        sqlstate: ERRCODE_ACTIVE_SQL_TRANSACTION,
        when: "`CALL` of an application lease procedure after statements that wrote in the same transaction: a pipeline or batch without a Sync between them",
        message: format!("CALL {function}() would commit what the statements before it wrote in this transaction"),
        hint: "End the statements before it with a Sync (psycopg: conn.pipeline() blocks, pipeline.sync(); pgx and JDBC: a batch of its own), so that the CALL starts a transaction of its own.",
        examples: [{ function: "randflake_lease_acquire" }],
    }
    /// The commit of an application lease's write has no evidence of being durable.
    AppLeaseUnconfirmed { function: &'static str, node: u32, consequence: &'static str } {
        sqlstate: ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN,
        when: "the wait of an application lease procedure's commit for the synchronous standbys was cut short (a cancel, `statement_timeout`), so the commit may be lost in a failover",
        message: format!(
            "{function}() committed its write of node {node} only locally: no synchronous standby confirmed it, so it is not returned"
        ),
        hint: format!(
            "{consequence} Check that the synchronous standbys named by synchronous_standby_names are connected and replaying, then call again."
        ),
        examples: [
            {
                function: "randflake_lease_acquire",
                node: 201,
                consequence: "Do not issue IDs with this node: the window its commit recorded keeps it from others until it ends.",
            },
            {
                function: "randflake_lease_release",
                node: 201,
                consequence: "Whether the release counts is unknown: stop issuing IDs with this node anyway, as after any release.",
            },
        ],
    }
    /// A function of 0.5.0's application lease API, now a procedure.
    AppLeaseIsProcedure { function: &'static str, call: &'static str } {
        sqlstate: ERRCODE_FEATURE_NOT_SUPPORTED,
        when: "an application lease function of 0.5.0, in a database where `ALTER EXTENSION randflake_pg UPDATE` has not run since the library was upgraded",
        message: format!("{function}() is a procedure since randflake_pg 0.6.0: a function could return a lease that is then rolled back or lost"),
        hint: format!("Run ALTER EXTENSION randflake_pg UPDATE in this database, then use {call}, alone in autocommit mode; its OUT parameters come back as a row (pass NULL for them)."),
        examples: [{
            function: "randflake_lease_acquire",
            call: "CALL randflake_lease_acquire(holder, seconds, NULL, NULL, NULL)",
        }],
    }
    /// A write to the lease table that randflake_pg's own code did not make.
    LeaseTableWrite { what: String } {
        sqlstate: ERRCODE_INSUFFICIENT_PRIVILEGE,
        when: "a role that is not a superuser writes `randflake.node_leases` itself, whatever its privileges on the table; on a fleet's coordinator, a member's write beyond what its keeper needs",
        message: format!("randflake_pg refuses this write to its lease table: {what}"),
        hint: "Only randflake_pg's lease keepers and application lease procedures write randflake.node_leases; on a fleet's coordinator, its members may only take, renew and release leases and prune leases that ended. A superuser may repair the table by hand.",
        examples: [
            { what: "DELETE by role etl, which is not randflake_pg's own code (on a range-mode server only its lease keeper and lease procedures write this table)".into() },
            { what: "deleting the lease of nodes 0..1023 from second 1800000000, whose seconds may be in use until 1800000660".into() },
        ],
    }
    /// The lease table's lock was not granted within the bound.
    LeaseTableLocked { function: &'static str, sessions: String } {
        sqlstate: ERRCODE_LOCK_NOT_AVAILABLE,
        when: "an application lease procedure or `randflake_app_leases()` waited a second for a lock on the lease table that another session holds or awaits; a WARNING names the sessions",
        message: format!("{function}() could not lock the lease table within a second: {sessions}"),
        hint: "End the session named, or its transaction (an idle transaction, a queued VACUUM FULL or LOCK TABLE), then call again.",
        examples: [{ function: "randflake_lease_acquire", sessions: "held up by pid 4242 (role dba, application 'psql', active) awaits AccessExclusiveLock behind pids {4243}".into() }],
    }
    /// `randflake_app_leases()` inside a transaction block.
    PoolStatusInTransaction { function: &'static str } {
        sqlstate: ERRCODE_ACTIVE_SQL_TRANSACTION,
        when: "`randflake_app_leases()` inside `BEGIN … COMMIT`",
        message: format!("{function}() must run in a transaction of its own, not inside a transaction block"),
        hint: "Call it in autocommit mode: it locks the lease table, and a lock kept by an idle transaction would queue a VACUUM FULL's request, and the lease keeper behind it.",
        examples: [{ function: "randflake_app_leases" }],
    }
}

impl Error {
    /// Ends the current statement (or, for a FATAL one, the session) with this error.
    #[track_caller]
    pub fn raise(self) -> ! {
        let level = self.level();
        ErrorReport::new(self.code(), self.message(), "randflake_pg").set_hint(self.hint()).report(level);
        unreachable!("ERROR and FATAL do not return")
    }

    /// Reports a condition that stops nothing, at its level (a WARNING).
    pub fn warn(self) {
        ErrorReport::new(self.code(), self.message(), "randflake_pg").set_hint(self.hint()).report(self.level());
    }

    /// The SQLSTATE, message and hint, for reporting through another channel (a setting's
    /// check hook).
    pub fn parts(&self) -> (PgSqlErrorCode, String, String) {
        (self.code(), self.message(), self.hint())
    }

    /// The five characters of the SQLSTATE, from PostgreSQL's packed form (six bits a character).
    #[cfg(test)]
    fn sqlstate(&self) -> String {
        let packed = self.code() as i32;
        (0..5).map(|place| char::from(b'0' + ((packed >> (6 * place)) & 0x3F) as u8)).collect()
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

/// A name as SQL writes it in a statement: in double quotes, its own double quotes doubled.
fn sql_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A keeper report for the examples.
#[cfg(test)]
fn report(state: KeeperState, cause: &str) -> KeeperReport {
    KeeperReport { state, cause: cause.to_owned(), pid: 0 }
}

/// The table of docs/errors.md: one row per example, in declaration order.
#[cfg(test)]
fn rendered_table() -> String {
    let cell = |text: &str| text.replace('|', "\\|").replace('\n', " ");
    let mut table = String::from("| SQLSTATE | message | when | what to do (the HINT) |\n|---|---|---|---|\n");
    for error in examples() {
        table.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            error.sqlstate(),
            cell(&format!("`{}`", error.message())),
            cell(error.when()),
            cell(&error.hint())
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUIDE: &str = "docs/errors.md";
    const START: &str = "<!-- The table below is rendered from src/errors.rs by `make docs`. -->\n";
    const END: &str = "\n<!-- End of the rendered table. -->";

    /// docs/errors.md holds the table the declarations render; with RANDFLAKE_WRITE_DOCS set,
    /// this rewrites it instead (what `make docs` does).
    #[test]
    fn the_errors_page_shows_every_error_as_declared() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(GUIDE);
        let page = std::fs::read_to_string(&path).expect("docs/errors.md exists");
        let (before, rest) = page.split_once(START).expect("the page marks where its table starts");
        let (committed, after) = rest.split_once(END).expect("the page marks where its table ends");
        let rendered = rendered_table();
        if std::env::var_os("RANDFLAKE_WRITE_DOCS").is_some() {
            std::fs::write(&path, format!("{before}{START}{rendered}{END}{after}"))
                .expect("docs/errors.md is writable");
        } else {
            assert_eq!(committed, rendered, "docs/errors.md is stale: run `make docs`");
        }
    }

    /// Every page and declaration that names the last second an ID can carry as a UTC date (and
    /// time) names the one `MAX_SECOND` is, computed here from the number.
    #[test]
    fn the_last_second_is_named_as_the_date_it_is() {
        let (date, time) = utc(MAX_SECOND);
        assert_eq!((date.as_str(), time.as_str()), ("2058-11-05", "17:10:23"));
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("README.md"), root.join("src/errors.rs"), root.join("randflake/README.md")];
        // Every file under these directories, however deep.
        let mut dirs = vec![root.join("docs"), root.join("randflake/src")];
        while let Some(dir) = dirs.pop() {
            for path in std::fs::read_dir(dir).expect("the directory exists").map(|entry| entry.unwrap().path()) {
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    files.push(path);
                }
            }
        }
        let year = &date[..5];
        let mut named = 0;
        for file in files {
            let text = std::fs::read_to_string(&file).expect("readable");
            for (at, _) in text.match_indices(year) {
                let rest = &text[at..];
                assert!(rest.starts_with(&date), "{}: {}", file.display(), &rest[..20.min(rest.len())]);
                let clock = rest[date.len()..]
                    .strip_prefix([' ', 'T'])
                    .filter(|clock| clock.starts_with(|c: char| c.is_ascii_digit()));
                if let Some(clock) = clock {
                    assert!(clock.starts_with(&time), "{}: {}", file.display(), &rest[..20]);
                }
                named += 1;
            }
        }
        assert!(named > 5, "the date is named in the docs and the HINT");
    }

    /// A Unix second as its UTC date and time of day (Howard Hinnant's days-to-civil algorithm).
    fn utc(second: u64) -> (String, String) {
        let (days, of_day) = ((second / 86_400) as i64 + 719_468, second % 86_400);
        let (era, day_of_era) = (days.div_euclid(146_097), days.rem_euclid(146_097));
        let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let shifted_month = (5 * day_of_year + 2) / 153;
        let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
        let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
        let year = year_of_era + era * 400 + i64::from(month <= 2);
        let time = format!("{:02}:{:02}:{:02}", of_day / 3600, of_day / 60 % 60, of_day % 60);
        (format!("{year:04}-{month:02}-{day:02}"), time)
    }

    #[test]
    fn sqlstates_read_as_their_five_characters() {
        assert_eq!(Error::NotPreloaded {}.sqlstate(), "55000");
        assert_eq!(Error::SecretThroughSql { ends_session: true }.sqlstate(), "55P02");
        assert_eq!(Error::AppLeaseRace { node: 1 }.sqlstate(), "40001");
    }
}
