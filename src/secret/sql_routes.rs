//! The secret never travels through SQL. SQL text is kept where more roles than the superuser
//! can read it: pg_stat_activity and pg_stat_statements (both open to `pg_monitor`) and the
//! server log. So every statement that would give `randflake.secret` a value is refused, and
//! its text taken out of pg_stat_activity first.
//!
//! What counts is what PostgreSQL parsed, not how the statement was spelt: a name in capitals,
//! in quotes or with Unicode escapes reaches these checks as the setting's name. Two places see
//! every route:
//! - the utility hook, for `SET`, `ALTER SYSTEM SET`, `ALTER ROLE/DATABASE ... SET` and the
//!   `SET` clause of `CREATE/ALTER FUNCTION`, before PostgreSQL runs them;
//! - the setting's check hook (`secret::settings`), for a value given at run time, where no
//!   parse tree shows it: `set_config()` with a name computed by the query, a connection option.
//!
//! A refusal straight from the client is an ERROR. Anywhere else it ends the session (FATAL): a
//! function or DO block could catch an ERROR, finish normally, and have its text, secret
//! included, recorded as a successful statement by pg_stat_statements and duration logging.
#![forbid(unsafe_code)]

use std::cell::Cell;
use std::ffi::CStr;

use crate::errors::Error;
use crate::pg::parse_tree::StatementFacts;
use crate::pg::statement::{self, StatementId};
use crate::pg::utility_hook;

/// The setting that holds the secret itself (not `randflake.secret_file`, which holds a path).
const SECRET_SETTING: &str = "randflake.secret";

/// What pg_stat_activity shows of a refused statement, until the session runs another.
const HIDDEN_ACTIVITY: &CStr = c"<statement hidden by randflake_pg: it gave randflake.secret a value>";

thread_local! {
    /// The statement refused last, so that the log hook hides every line about it.
    static REFUSED: Cell<Option<StatementId>> = const { Cell::new(None) };
}

/// Installs the check of utility statements. Called once, from `_PG_init` while preloading.
pub fn install() {
    utility_hook::install(refuse_secret_values);
}

/// Whether `name` is the secret's setting, compared as PostgreSQL compares setting names.
pub fn names_the_secret(name: &str) -> bool {
    name.eq_ignore_ascii_case(SECRET_SETTING)
}

fn refuse_secret_values(facts: &StatementFacts, nested: bool) {
    if facts.settings_given_values.iter().any(|name| names_the_secret(name)) {
        refuse(nested);
    }
}

/// Refuses the statement being run for giving the secret a value: its text leaves
/// pg_stat_activity, the log hook is told to hide every line about it, and the statement ends
/// with an ERROR, or the session with a FATAL when `ends_session`.
pub fn refuse(ends_session: bool) -> ! {
    statement::replace_activity_text(HIDDEN_ACTIVITY);
    REFUSED.set(statement::current_id());
    Error::SecretThroughSql { ends_session }.raise()
}

/// Whether the statement being run (or reported on) is one this guard refused.
pub fn current_statement_was_refused() -> bool {
    REFUSED.get().is_some_and(|refused| statement::current_id() == Some(refused))
}
