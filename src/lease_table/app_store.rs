//! The application lease procedures' statements on the lease table. Each runs as whatever role
//! the caller acts as (the lease procedures act as the keeper's role), marked as the extension's
//! own, with its waits for locks bounded by [`LOCK_WAIT`](super::LOCK_WAIT). A failure is
//! raised as the statement's ERROR.
#![forbid(unsafe_code)]

use pgrx::prelude::*;
use pgrx::spi::{quote_qualified_identifier, SpiError};

use randflake::decisions::keeper::TableCheck;

use super::commit_evidence::{self, EvidenceReader};
use super::vetting::{self, Verdict};
use super::{as_extension, lock_table, LockNotGranted, LOCK_WAIT};
use crate::pg::lock::TableLock;
use crate::pg::{backend, guc};

/// The lease table, found trusted, as the application lease procedures use it.
pub struct AppLeaseTable {
    /// Quoted for SQL.
    table: String,
    relation: pg_sys::Oid,
    /// In fleet mode: where its commits' evidence is read (on the server holding the table).
    pub evidence: Option<EvidenceReader>,
}

/// The last second of a window on record of one node.
#[derive(Clone, Copy, Debug)]
pub struct NodeWindow {
    pub node: u32,
    pub last: u64,
}

/// The first and last second of a stored window.
#[derive(Clone, Copy, Debug)]
pub struct StoredWindow {
    pub start: u64,
    pub last: u64,
}

/// A new window of one node for an application.
pub struct NewAppLease<'a> {
    pub node: u32,
    /// The holder key stored (`app/<role>/<holder>`).
    pub holder: &'a str,
    /// What the table's `server_name` shows.
    pub shown: &'a str,
    pub start: u64,
    pub last: u64,
}

/// Another call inserted a window of the node first.
pub struct Raced;

/// The value of a statement, run marked as the extension's own and with `lock_timeout` at the
/// bound; a failure is raised as the statement's ERROR.
fn run<T>(statement: impl FnOnce() -> Result<T, SpiError>) -> T {
    let lock_timeout = format!("{}ms", LOCK_WAIT.as_millis());
    guc::with_setting(c"lock_timeout", &lock_timeout, || as_extension(statement))
        .unwrap_or_else(|error| error!("{error}"))
}

impl AppLeaseTable {
    /// The table `schema.table` if the keeper would trust it (`foreign_allowed` in fleet mode).
    /// In fleet mode its evidence relation must be trusted too: without it no commit through
    /// the table could be shown durable.
    pub fn open(schema: &str, table: &str, foreign_allowed: bool) -> Option<Self> {
        let Verdict::Trusted(relation) = vetting::vet(schema, table, foreign_allowed) else {
            return None;
        };
        let evidence = if foreign_allowed {
            if commit_evidence::check(schema, true) != TableCheck::Trusted {
                return None;
            }
            Some(EvidenceReader::new(schema))
        } else {
            None
        };
        Some(Self { table: quote_qualified_identifier(schema, table), relation, evidence })
    }

    /// Closes this backend's postgres_fdw connections to the server of the table, if it is a
    /// foreign table: an idle application session then holds none of the coordinator's
    /// connections. Between transactions that used it (postgres_fdw keeps one in use until the
    /// transaction ends). The function is postgres_fdw's own (a member of the extension), found
    /// by OID in the extension's schema, which a superuser owns (for `public` in PostgreSQL 15 and
    /// later, owned by `pg_database_owner`: the database's owner), never through `search_path`.
    pub fn disconnect(&self) {
        let found = run(|| {
            Spi::connect(|client| {
                let rows = client.select(
                    "SELECT s.srvname::pg_catalog.text, p.oid
                       FROM pg_catalog.pg_foreign_table t
                       JOIN pg_catalog.pg_foreign_server s ON s.oid = t.ftserver
                       JOIN pg_catalog.pg_extension e ON e.extname OPERATOR(pg_catalog.=) 'postgres_fdw'
                       JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
                       JOIN pg_catalog.pg_database d ON d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
                       JOIN pg_catalog.pg_roles r ON r.rolsuper
                        AND r.oid = CASE WHEN n.nspowner = 'pg_database_owner'::pg_catalog.regrole THEN d.datdba
                                         ELSE n.nspowner END
                       JOIN pg_catalog.pg_proc p ON p.pronamespace = e.extnamespace
                        AND p.proname OPERATOR(pg_catalog.=) 'postgres_fdw_disconnect'
                        AND p.proargtypes OPERATOR(pg_catalog.=) '25'::pg_catalog.oidvector
                        AND p.prorettype OPERATOR(pg_catalog.=) 'pg_catalog.bool'::pg_catalog.regtype
                      WHERE t.ftrelid = $1
                        AND EXISTS (SELECT FROM pg_catalog.pg_depend m
                                     WHERE m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND m.objid = p.oid
                                       AND m.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
                                       AND m.refobjid = e.oid AND m.deptype OPERATOR(pg_catalog.=) 'e')",
                    Some(1),
                    &[self.relation.into()],
                )?;
                if rows.is_empty() {
                    return Ok(None);
                }
                let row = rows.first();
                Ok(row.get::<String>(1)?.zip(row.get::<pg_sys::Oid>(2)?))
            })
        });
        if let Some((server, function)) = found {
            backend::call_text_to_bool(function, &server);
        }
    }

    /// Locks the table for the rest of the transaction in `mode`, waiting a bounded time.
    pub fn lock(&self, mode: TableLock) -> Result<(), LockNotGranted> {
        lock_table(self.relation, mode)
    }

    /// Serialises this server's acquisitions, which read the pool and then choose: a lock on
    /// this server's own lease table (in fleet mode too) that conflicts only with itself and
    /// VACUUM, not with the keeper's writes. The exclusion constraint still settles a race
    /// between servers of a fleet.
    pub fn lock_for_acquisition(&self) -> Result<(), LockNotGranted> {
        let own =
            run(|| Spi::get_one::<pg_sys::Oid>("SELECT 'randflake.node_leases'::pg_catalog.regclass::pg_catalog.oid"));
        lock_table(own.unwrap_or(self.relation), TableLock::ShareUpdateExclusive)
    }

    /// How many windows whose holder starts with `held` or `released` have not ended at `now`.
    pub fn windows_kept(&self, held: &str, released: &str, now: u64) -> u32 {
        let count = run(|| {
            Spi::get_one_with_args::<i64>(
                &format!(
                    "SELECT count(*) FROM {}
                      WHERE (pg_catalog.starts_with(holder, $1) OR pg_catalog.starts_with(holder, $3)) AND lease_end >= $2",
                    self.table
                ),
                &[held.into(), (now as i64).into(), released.into()],
            )
        });
        count.unwrap_or_default() as u32
    }

    /// Every window on record of a node of `first..=last`: a row of several nodes (only a
    /// misconfigured server's) counts for each of them.
    pub fn windows_of(&self, first: u32, last: u32) -> Vec<NodeWindow> {
        let rows: Vec<(i32, i32, i64)> = run(|| {
            Spi::connect(|client| {
                let rows = client.select(
                    &format!(
                        "SELECT first_node, last_node, lease_end FROM {} WHERE first_node <= $2 AND last_node >= $1",
                        self.table
                    ),
                    None,
                    &[(first as i32).into(), (last as i32).into()],
                )?;
                rows.map(|row| {
                    Ok((
                        row.get::<i32>(1)?.unwrap_or_default(),
                        row.get::<i32>(2)?.unwrap_or_default(),
                        row.get::<i64>(3)?.unwrap_or_default(),
                    ))
                })
                .collect()
            })
        });
        rows.into_iter()
            .flat_map(|(from, to, end)| {
                (from.max(first as i32)..=to.min(last as i32))
                    .map(move |node| NodeWindow { node: node as u32, last: end as u64 })
            })
            .collect()
    }

    /// The last seconds of the windows of `first..=last` held by applications that have not
    /// ended at `now`.
    pub fn held_ends(&self, first: u32, last: u32, now: u64) -> Vec<u64> {
        run(|| {
            Spi::connect(|client| {
                let rows = client.select(
                    &format!(
                        "SELECT lease_end FROM {}
                          WHERE first_node BETWEEN $1 AND $2 AND holder LIKE 'app/%' AND lease_end >= $3",
                        self.table
                    ),
                    None,
                    &[(first as i32).into(), (last as i32).into(), (now as i64).into()],
                )?;
                rows.map(|row| row.get::<i64>(1).map(|end| end.unwrap_or_default() as u64)).collect()
            })
        })
    }

    /// Deletes the windows of `node` that ended before `before`: they bound nothing a new one
    /// does not.
    pub fn delete_ended(&self, node: u32, before: u64) {
        run(|| {
            Spi::run_with_args(
                &format!("DELETE FROM {} WHERE first_node = $1 AND last_node = $1 AND lease_end < $2", self.table),
                &[(node as i32).into(), (before as i64).into()],
            )
        })
    }

    /// Inserts `lease`; `Raced` if another call's window of the node came first.
    pub fn insert(&self, lease: &NewAppLease<'_>) -> Result<(), Raced> {
        let inserted = PgTryBuilder::new(|| {
            run(|| {
                Spi::run_with_args(
                    &format!(
                        // renewed_at is explicit: through postgres_fdw, a remote default does not apply.
                        "INSERT INTO {} (first_node, last_node, holder, server_name, lease_start, lease_end, used_through, renewed_at)
                         VALUES ($1, $1, $2, $3, $4, $5, $5, pg_catalog.now())",
                        self.table
                    ),
                    &[
                        (lease.node as i32).into(),
                        lease.holder.into(),
                        lease.shown.into(),
                        (lease.start as i64).into(),
                        (lease.last as i64).into(),
                    ],
                )
            });
            true
        })
        .catch_when(PgSqlErrorCode::ERRCODE_EXCLUSION_VIOLATION, |_| false)
        .execute();
        if inserted {
            Ok(())
        } else {
            Err(Raced)
        }
    }

    /// Moves the end of `holder`'s window of `node` that has not ended at `now` to `last` (never
    /// earlier); the window as stored, or `None` if there is no such window.
    pub fn extend(&self, node: u32, holder: &str, last: u64, now: u64) -> Option<StoredWindow> {
        run(|| {
            Spi::connect_mut(|client| {
                let rows = client.update(
                    &format!(
                        "UPDATE {} SET lease_end = greatest(lease_end, $1), used_through = greatest(used_through, $1),
                                       renewed_at = pg_catalog.now()
                          WHERE first_node = $2 AND last_node = $2 AND holder = $3 AND lease_end >= $4
                      RETURNING lease_start, lease_end",
                        self.table
                    ),
                    Some(1),
                    &[(last as i64).into(), (node as i32).into(), holder.into(), (now as i64).into()],
                )?;
                window_of(rows)
            })
        })
    }

    /// `holder`'s latest window of `node`.
    pub fn latest(&self, node: u32, holder: &str) -> Option<StoredWindow> {
        run(|| {
            Spi::connect(|client| {
                let rows = client.select(
                    &format!(
                        "SELECT lease_start, lease_end FROM {}
                          WHERE first_node = $1 AND last_node = $1 AND holder = $2 ORDER BY lease_start DESC LIMIT 1",
                        self.table
                    ),
                    Some(1),
                    &[(node as i32).into(), holder.into()],
                )?;
                window_of(rows)
            })
        })
    }

    /// Releases `holder`'s window of `node` from `start`: one UPDATE that gives it the holder
    /// `released` (which no application can extend) and shows `shown`; the table's trigger sets
    /// its end, by the table server's clock. The window as stored, or `None` if another call
    /// released it meanwhile.
    pub fn release(&self, node: u32, start: u64, holder: &str, released: &str, shown: &str) -> Option<StoredWindow> {
        run(|| {
            Spi::connect_mut(|client| {
                let rows = client.update(
                    &format!(
                        "UPDATE {} SET holder = $4, server_name = $5, renewed_at = pg_catalog.now()
                          WHERE first_node = $1 AND last_node = $1 AND lease_start = $2 AND holder = $3
                      RETURNING lease_start, lease_end",
                        self.table
                    ),
                    Some(1),
                    &[(node as i32).into(), (start as i64).into(), holder.into(), released.into(), shown.into()],
                )?;
                window_of(rows)
            })
        })
    }
}

fn window_of(rows: pgrx::spi::SpiTupleTable<'_>) -> Result<Option<StoredWindow>, SpiError> {
    if rows.is_empty() {
        return Ok(None);
    }
    let row = rows.first();
    Ok(row
        .get::<i64>(1)?
        .zip(row.get::<i64>(2)?)
        .map(|(start, last)| StoredWindow { start: start as u64, last: last as u64 }))
}
