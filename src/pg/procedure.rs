//! Procedures written in Rust that commit their own transaction and return only what is durable:
//! a CALL's arguments and OUT row, the transaction a non-atomic CALL may commit (non-atomic SPI),
//! and the evidence that its commit is durable (flushed locally and, where synchronous standbys
//! are configured, confirmed by them). pgrx declares functions only, so the procedures' entry
//! points are written by [`procedure_entry_points!`] and declared in the SQL scripts.

use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::headers::SYNC_REP_LOCK;
use super::transaction::Alone;

/// One CALL of a C procedure, as PostgreSQL's function manager passed it.
pub struct Call {
    fcinfo: pg_sys::FunctionCallInfo,
}

/// A value of a procedure's OUT row.
pub enum Out {
    Int4(i32),
    Int8(i64),
    Bool(bool),
}

/// Why a CALL may not commit its own transaction.
pub enum NotOwn {
    /// The CALL runs where PostgreSQL lets it not end the transaction: inside a transaction
    /// block, in a query string of several statements, or from a function (or from a
    /// procedure or DO block run in one of those).
    Atomic,
    /// The transaction already wrote before the CALL (the earlier statements of a pipeline
    /// sent without a Sync): committing it would commit them too.
    AlreadyWrote,
}

impl Call {
    /// Runs one CALL: `procedure` reads the arguments it takes from the call and makes its OUT
    /// row, which goes back to PostgreSQL as the call's result.
    ///
    /// # Safety
    ///
    /// `fcinfo` is what PostgreSQL's function manager passed to a C procedure (one declared with
    /// `CREATE PROCEDURE ... LANGUAGE c`), for this call; the `Call` lives only during it.
    pub unsafe fn run<const N: usize>(
        fcinfo: pg_sys::FunctionCallInfo,
        procedure: impl FnOnce(&Self) -> [Out; N],
    ) -> pg_sys::Datum {
        let call = Self { fcinfo };
        let row = procedure(&call);
        call.returning(&row)
    }

    /// Argument `index` as text; `None` if NULL.
    pub fn text(&self, index: usize) -> Option<String> {
        self.require(index);
        // SAFETY: fcinfo is live for the call (see `run`), argument `index` is one of the call's,
        // and the procedure's SQL declaration gives it the type text.
        unsafe { pgrx::fcinfo::pg_getarg::<String>(self.fcinfo, index) }
    }

    /// Argument `index` as an integer; `None` if NULL.
    pub fn int4(&self, index: usize) -> Option<i32> {
        self.require(index);
        // SAFETY: as for `text`, for an argument declared integer.
        unsafe { pgrx::fcinfo::pg_getarg::<i32>(self.fcinfo, index) }
    }

    /// Refuses to read past the call's arguments (a procedure declared by hand with fewer).
    fn require(&self, index: usize) {
        // SAFETY: fcinfo is live for the call (see `run`).
        let count = usize::try_from(unsafe { (*self.fcinfo).nargs }).unwrap_or(0);
        if index >= count {
            crate::errors::Error::EntryArgumentMissing { index, count }.raise();
        }
    }

    /// Opens the procedure's own transaction, which [`OwnTransaction::commit`] commits: only a
    /// CALL that PostgreSQL lets end its transaction (a statement of its own, outside any block)
    /// and that finds nothing written before it. A `search_path` of `pg_catalog, pg_temp` holds
    /// until the commit (a procedure that commits cannot pin it with `SET` in its declaration).
    pub fn own_transaction(&self) -> Result<OwnTransaction, NotOwn> {
        // SAFETY: fcinfo is live for the call; its context is a CallContext node when PostgreSQL
        // runs a CALL, and is checked to be one before it is read as one.
        let atomic = unsafe {
            let context = (*self.fcinfo).context;
            context.is_null()
                || (*context).type_ != pg_sys::NodeTag::T_CallContext
                || (*context.cast::<pg_sys::CallContext>()).atomic
        };
        if atomic {
            return Err(NotOwn::Atomic);
        }
        // SAFETY: a plain read of this backend's transaction state.
        if unsafe { pg_sys::GetTopTransactionIdIfAny() } != pg_sys::InvalidTransactionId {
            return Err(NotOwn::AlreadyWrote);
        }
        // SAFETY: the CALL is non-atomic (checked above), which is what a non-atomic SPI
        // connection requires; it is finished in `commit`, or cleaned up by PostgreSQL if an
        // ERROR ends the call first. The setting is a local one, undone at the commit.
        unsafe {
            if pg_sys::SPI_connect_ext(pg_sys::SPI_OPT_NONATOMIC as i32) != pg_sys::SPI_OK_CONNECT as i32 {
                error!("randflake_pg: SPI_connect_ext failed");
            }
            pg_sys::set_config_option(
                c"search_path".as_ptr(),
                c"pg_catalog, pg_temp".as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_LOCAL,
                true,
                PgLogLevel::ERROR as i32,
                false,
            );
        }
        Ok(OwnTransaction(()))
    }

    /// The procedure's result: its OUT parameters' row, in their declared order.
    fn returning(self, values: &[Out]) -> pg_sys::Datum {
        let mut datums: Vec<pg_sys::Datum> = values
            .iter()
            .map(|value| match *value {
                Out::Int4(value) => pg_sys::Datum::from(value),
                Out::Int8(value) => pg_sys::Datum::from(value),
                Out::Bool(value) => pg_sys::Datum::from(value),
            })
            .collect();
        let mut nulls = vec![false; values.len()];
        // SAFETY: fcinfo is live for the call; PostgreSQL describes a procedure's OUT
        // parameters as a composite result, checked to have one attribute per value (of the
        // types the declaration gives them, pass-by-value all), and the tuple is formed in the
        // memory context the call returns in.
        unsafe {
            let mut descriptor: pg_sys::TupleDesc = std::ptr::null_mut();
            let kind = pg_sys::get_call_result_type(self.fcinfo, std::ptr::null_mut(), &mut descriptor);
            if kind != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE || (*descriptor).natts as usize != values.len() {
                error!("randflake_pg: the procedure's OUT parameters are not the {} it returns", values.len());
            }
            let descriptor = pg_sys::BlessTupleDesc(descriptor);
            let tuple = pg_sys::heap_form_tuple(descriptor, datums.as_mut_ptr(), nulls.as_mut_ptr());
            pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data)
        }
    }
}

/// The transaction of a CALL that may commit it, open until [`OwnTransaction::commit`].
pub struct OwnTransaction(());

/// What is known about a commit once it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The transaction wrote nothing: there is nothing to be durable.
    NothingWritten,
    /// Its commit record is flushed here and, where synchronous standbys are configured,
    /// confirmed flushed by them.
    Durable,
    /// No evidence that it is: a cancel or a termination cut the wait for the synchronous
    /// standbys short, and the commit is local only (for now, or for good after a failover).
    Unconfirmed,
}

impl OwnTransaction {
    /// Commits (deferred checks and the wait for synchronous standbys included; an ERROR there
    /// is raised as any other), then judges the commit by positive evidence only: the end of
    /// its commit record against the WAL flushed here and, if synchronous standbys are
    /// configured, against the position they confirmed flushing (the one PostgreSQL releases
    /// waiting commits at, computed from the standbys for `FIRST n` and `ANY n` alike). A cancel
    /// during the commit's wait leaves that position short of the commit: `Unconfirmed`.
    pub fn commit(self) -> Durability {
        let (durability, committed) = self.commit_and_continue();
        committed.finish();
        durability
    }

    /// Commits and judges the commit as [`commit`](Self::commit) does, and keeps the procedure
    /// able to run work in transactions of its own afterwards ([`Committed`]).
    pub fn commit_and_continue(self) -> (Durability, Committed) {
        // SAFETY: the non-atomic SPI connection of `own_transaction` is the current one (every
        // nested one is finished by now); SPI_commit commits and starts the next transaction,
        // raising an ERROR as any other on failure. XactLastCommitEnd is this backend's own, set
        // by the commit just made when it wrote a commit record, which it did if the transaction
        // had an id.
        let (wrote, commit_end) = unsafe {
            let wrote = pg_sys::GetTopTransactionIdIfAny() != pg_sys::InvalidTransactionId;
            pg_sys::SPI_commit();
            (wrote, pg_sys::XactLastCommitEnd)
        };
        (judge(wrote, commit_end), Committed(()))
    }
}

/// The transactions of a CALL after its own commit: each piece of work [`Alone::alone`] runs is
/// committed on its own; [`Committed::finish`] leaves the last, empty one for the CALL to end.
pub struct Committed(());

impl Alone for Committed {
    fn alone<T>(&mut self, work: impl FnOnce() -> T) -> T {
        // SAFETY: the transaction SPI_commit started is open and has no snapshot (the CALL's was
        // released at the commit); one is set for `work`'s statements and taken off before the
        // commit, made on the CALL's non-atomic SPI connection, still the current one.
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
        let value = work();
        // SAFETY: as above.
        unsafe {
            pg_sys::PopActiveSnapshot();
            pg_sys::SPI_commit();
        }
        value
    }
}

impl Committed {
    /// Closes the CALL's non-atomic SPI connection.
    pub fn finish(self) {
        // SAFETY: the connection of `own_transaction` is the current one; nothing uses it after.
        unsafe { pg_sys::SPI_finish() };
    }
}

/// What a commit that returned shows: `wrote`, whether it wrote a commit record, ending at
/// `commit_end`.
fn judge(wrote: bool, commit_end: pg_sys::XLogRecPtr) -> Durability {
    if !wrote {
        return Durability::NothingWritten;
    }
    // SAFETY: a read of this server's WAL flush position.
    let flushed = unsafe { pg_sys::GetFlushRecPtr(std::ptr::null_mut()) };
    if flushed < commit_end {
        return Durability::Unconfirmed;
    }
    if !synchronous_standbys_configured() {
        return Durability::Durable;
    }
    if synchronous_standbys_confirmed() >= commit_end {
        Durability::Durable
    } else {
        Durability::Unconfirmed
    }
}

/// Whether a commit here waits for synchronous standbys: WAL senders enabled and
/// `synchronous_standby_names` set (the lease table's trigger raises `synchronous_commit` to at
/// least `on` for every transaction that writes a lease).
fn synchronous_standbys_configured() -> bool {
    // SAFETY: plain reads of this backend's settings; the name is a NUL-terminated string or null.
    unsafe {
        let names = pg_sys::SyncRepStandbyNames;
        pg_sys::max_wal_senders > 0 && !names.is_null() && !CStr::from_ptr(names).is_empty()
    }
}

/// The WAL position the synchronous standbys confirmed flushing, as PostgreSQL releases waiting
/// commits at it (`WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH]`, under `SyncRepLock`).
fn synchronous_standbys_confirmed() -> pg_sys::XLogRecPtr {
    // SAFETY: WalSndCtl is the WAL senders' shared state, set up at start-up; its release
    // positions are written under SyncRepLock, held in shared mode for the read.
    unsafe {
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(SYNC_REP_LOCK)).lock;
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_SHARED);
        let confirmed = (*pg_sys::WalSndCtl).lsn[pg_sys::SYNC_REP_WAIT_FLUSH as usize];
        pg_sys::LWLockRelease(lock);
        confirmed
    }
}

/// Declares C procedures: each symbol, run under pgrx's guard by [`Call::run`] with its body (a
/// `fn(&Call) -> [Out; N]`), and the `pg_finfo_` record of the version-1 calling convention. The
/// items it writes are the only `unsafe` the calling module holds, allowed on each of them.
macro_rules! procedure_entry_points {
    ($($(#[doc = $doc:literal])* $symbol:ident, $finfo:ident => $body:path;)+) => {$(
        $(#[doc = $doc])*
        ///
        /// # Safety
        ///
        /// Called only by PostgreSQL's function manager, for a CALL of the procedure.
        #[allow(unsafe_code)]
        #[no_mangle]
        #[::pgrx::pg_guard]
        pub unsafe extern "C-unwind" fn $symbol(fcinfo: ::pgrx::pg_sys::FunctionCallInfo) -> ::pgrx::pg_sys::Datum {
            // SAFETY: fcinfo is what the function manager passed, for this CALL.
            unsafe { $crate::pg::procedure::Call::run(fcinfo, $body) }
        }

        $crate::pg::version_1!($finfo);
    )+};
}
pub(crate) use procedure_entry_points;
