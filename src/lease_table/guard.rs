//! The lease table's guard: the trigger function `randflake.authorize_lease_write()`, run
//! before every row written to `randflake.node_leases` and before a TRUNCATE of it.
//!
//! A write that this module's statements make (marked, see `as_extension`), or that a session
//! logged in as a superuser makes, passes. Any other, whatever privileges its role holds
//! (`pg_write_all_data`, explicit grants, ownership):
//! - on a range-mode server, whose table only its own keeper and lease procedures write, is
//!   refused;
//! - on any other server, which may be a fleet's coordinator (its `node_source` is `fleet` or
//!   `off`), may do what the members' statements through postgres_fdw need and no more
//!   (`randflake::decisions::table_rules`), judged by this server's clock.
//!
//! An application lease's release (holder `app/...` becoming `released/...`) keeps its node
//! until this server's clock plus the applications' allowance, whoever writes it: the end is set
//! here, never taken from the writer.
#![forbid(unsafe_code)]

use pgrx::datum::TryFromDatumError;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use randflake::decisions::table_rules::{self, Row, Write};

use crate::errors::Error;
use crate::pg::{clock, identity};

/// Who may write the table besides this server's own code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableUse {
    /// Range mode: no one.
    ThisServerOnly,
    /// Fleet mode or none: a fleet's members, through postgres_fdw, within the fleet's rules.
    Fleet,
}

type Tuple<'a> = PgHeapTuple<'a, AllocatedByRust>;

/// The trigger's verdict on the row (or TRUNCATE) `trigger` fired for: the row to write, or an
/// ERROR.
pub fn authorize_write<'a>(
    trigger: &'a PgTrigger<'a>,
    table_use: TableUse,
) -> Result<Option<Tuple<'a>>, TryFromDatumError> {
    let operation = match trigger.op().unwrap_or_else(|error| error!("randflake_pg: {error}")) {
        PgTriggerOperation::Insert => Operation::Insert,
        PgTriggerOperation::Update => Operation::Update,
        PgTriggerOperation::Delete => Operation::Delete,
        PgTriggerOperation::Truncate => Operation::Truncate,
    };
    let trusted = super::extension_is_writing() || identity::session_user_is_superuser();
    let now = clock::unix_second();
    let (old, new) = (trigger.old().map(|row| row.into_owned()), trigger.new().map(|row| row.into_owned()));
    let (old_row, new_row) = (old.as_ref().map(row_of).transpose()?, new.as_ref().map(row_of).transpose()?);
    if !trusted {
        let write = match (operation, &old_row, &new_row) {
            (Operation::Insert, _, Some(new)) => Write::Insert(new),
            (Operation::Update, Some(old), Some(new)) => Write::Update { old, new },
            (Operation::Delete, Some(old), _) => Write::Delete(old),
            _ => Write::Truncate,
        };
        let refusal = match table_use {
            TableUse::ThisServerOnly => Some(format!(
                "{} by role {}, which is not randflake_pg's own code (on a range-mode server only its lease keeper and lease procedures write this table)",
                sql_of(operation),
                pgrx::spi::quote_identifier(identity::Role::current().name())
            )),
            TableUse::Fleet => table_rules::check(write, now).err().map(|refused| refused.to_string()),
        };
        if let Some(what) = refusal {
            Error::LeaseTableWrite { what }.raise();
        }
    }
    match (operation, old, new) {
        (Operation::Update, Some(_), Some(mut new)) => {
            if let (Some(old_row), Some(new_row)) = (&old_row, &new_row) {
                if table_rules::is_release(&old_row.holder, &new_row.holder) {
                    let end = table_rules::released_end(old_row, now) as i64;
                    new.set_by_name("lease_end", end)?;
                    new.set_by_name("used_through", end)?;
                }
            }
            Ok(Some(new))
        }
        (Operation::Delete, old, _) => Ok(old),
        (_, _, new) => Ok(new),
    }
}

#[derive(Clone, Copy)]
enum Operation {
    Insert,
    Update,
    Delete,
    Truncate,
}

fn sql_of(operation: Operation) -> &'static str {
    match operation {
        Operation::Insert => "INSERT",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Truncate => "TRUNCATE",
    }
}

/// A row of the table as the rules see it; a NULL (which the table's constraints forbid) reads
/// as zero.
fn row_of(tuple: &Tuple<'_>) -> Result<Row, TryFromDatumError> {
    let int = |name: &str| tuple.get_by_name::<i32>(name).map(|value| value.unwrap_or_default().max(0) as u32);
    let bigint = |name: &str| tuple.get_by_name::<i64>(name).map(|value| value.unwrap_or_default().max(0) as u64);
    Ok(Row {
        first_node: int("first_node")?,
        last_node: int("last_node")?,
        holder: tuple.get_by_name::<String>("holder")?.unwrap_or_default(),
        start: bigint("lease_start")?,
        end: bigint("lease_end")?,
        used_through: bigint("used_through")?,
    })
}
