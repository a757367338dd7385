//! Every SQL-callable function of randflake_pg. Their SQL comments and grants are in
//! `sql/comments_and_grants_0.1.0.sql` and the upgrade scripts after it.
//!
//! The C functions written by hand (`randflake_next()`, the key's input, output and casts in, the
//! application lease procedures) are declared through `pg::entry::entry_points!` and
//! `pg::procedure::procedure_entry_points!`, whose items are the only ones that allow `unsafe`
//! here; no `unsafe` is written in this file.
#![deny(unsafe_code)]

use std::ffi::{CStr, CString};

use pgrx::prelude::*;
use randflake::{codec, ordered, Parts};

use crate::errors::Error;
use crate::generation::Output;
use crate::lease_table::TableUse;
use crate::node_config::{self, Mode};
use crate::pg;
use crate::pg::decoder_grant;
use crate::pg::entry::{Arguments, ByteaResult, CStringResult};
use crate::pg::procedure::{Call, Out};
use crate::{app_leases, generation, lease_table, secret, status};

/// Seconds from the Unix epoch to PostgreSQL's (2000-01-01).
const POSTGRES_EPOCH_UNIX_SECOND: i64 = 946_684_800;

pg::entry::entry_points! {
    /// `randflake_next()`: a new ID, unique across every server sharing the secret with a
    /// disjoint node range. Written by hand (`pg::entry`) rather than by `#[pg_extern]`, whose
    /// wrapper would be a large share of a call this short; the SQL declaration below is what
    /// pgrx would have generated. docs/performance.md has the measurements.
    randflake_next_wrapper, pg_finfo_randflake_next_wrapper => next_id;
}

/// An ID reserved earlier, or else a new run reserved, with every check that needs.
fn next_id(_: &Arguments) -> i64 {
    generation::reserved_id(Output::Ids).unwrap_or_else(|| generation::next_id(Output::Ids))
}

extension_sql!(
    r#"
CREATE FUNCTION "randflake_next"() RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'randflake_next_wrapper';
"#,
    name = "randflake_next"
);

/// The second, node and sequence an ID was made from. Needs the secret, so EXECUTE is revoked
/// from PUBLIC.
#[pg_extern(stable, strict, parallel_safe)]
fn randflake_decode(
    id: i64,
) -> TableIterator<'static, (name!(timestamp, TimestampWithTimeZone), name!(node_id, i32), name!(sequence, i32))> {
    let parts = decrypted(id);
    TableIterator::once((timestamp_of(parts.timestamp), parts.node_id as i32, parts.sequence as i32))
}

/// The second an ID was made in: `randflake_decode(id).timestamp` as a plain function, which
/// the executor calls per row for a fraction of the cost of a set-returning one. Needs the
/// secret, so EXECUTE is revoked from PUBLIC, as for the other accessors.
#[pg_extern(stable, strict, parallel_safe)]
fn randflake_timestamp(id: i64) -> TimestampWithTimeZone {
    timestamp_of(decrypted(id).timestamp)
}

/// The node that made an ID: `randflake_decode(id).node_id`.
#[pg_extern(stable, strict, parallel_safe)]
fn randflake_node_id(id: i64) -> i32 {
    decrypted(id).node_id as i32
}

/// An ID's sequence within its node and second: `randflake_decode(id).sequence`.
#[pg_extern(stable, strict, parallel_safe)]
fn randflake_sequence(id: i64) -> i32 {
    decrypted(id).sequence as i32
}

/// Decrypts with the configured secret, or raises the error saying why there is none.
fn decrypted(id: i64) -> Parts {
    secret::with_cipher(|cipher| cipher.decrypt(id)).unwrap_or_else(|error| error.raise())
}

/// The parts of a `randflake_key`: `randflake_key_decode()` and its accessors, which need no
/// cipher (the key holds the plain value) but reveal as much as `randflake_decode()`, so their
/// EXECUTE is revoked from PUBLIC like its. Named apart rather than overloading the decoders, so
/// that a decoder called with an untyped argument still has one reading. Declared in
/// sql/randflake_pg--0.5.0--0.6.0.sql.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_decode(
    key: i64,
) -> TableIterator<'static, (name!(timestamp, TimestampWithTimeZone), name!(node_id, i32), name!(sequence, i32))> {
    let parts = Parts::from_raw(key as u64);
    TableIterator::once((timestamp_of(parts.timestamp), parts.node_id as i32, parts.sequence as i32))
}

#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_timestamp(key: i64) -> TimestampWithTimeZone {
    timestamp_of(Parts::from_raw(key as u64).timestamp)
}

#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_node_id(key: i64) -> i32 {
    Parts::from_raw(key as u64).node_id as i32
}

#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_sequence(key: i64) -> i32 {
    Parts::from_raw(key as u64).sequence as i32
}

/// This server's lease and what generation has met since start-up: one row, for monitoring.
/// EXECUTE is granted to pg_monitor only. Declared by the upgrade scripts (0.2.0's, and 0.6.0's,
/// which added `keeper_ticks`): a column cannot be added by CREATE OR REPLACE.
// pgrx reads the column names from the signature itself, so the row type cannot be an alias.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe, sql = false)]
fn randflake_status() -> TableIterator<
    'static,
    (
        name!(node_source, String),
        name!(state, String),
        name!(first_node, Option<i32>),
        name!(last_node, Option<i32>),
        name!(lease_start, Option<TimestampWithTimeZone>),
        name!(lease_end, Option<TimestampWithTimeZone>),
        name!(issuable_through, Option<TimestampWithTimeZone>),
        name!(renewed_at, Option<TimestampWithTimeZone>),
        name!(nodes_in_use, Option<i32>),
        name!(nodes_free, Option<i32>),
        name!(node_switches, i64),
        name!(clock_refusals, i64),
        name!(lease_refusals, i64),
        name!(keeper_pid, Option<i32>),
        name!(keeper_ticks, i64),
    ),
> {
    let status = status::current();
    let lease = status.lease;
    TableIterator::once((
        status.node_source.to_owned(),
        status.state,
        lease.map(|lease| lease.first_node as i32),
        lease.map(|lease| lease.last_node as i32),
        lease.map(|lease| timestamp_of(lease.start)),
        lease.map(|lease| timestamp_of(lease.end)),
        lease.map(|lease| timestamp_of(lease.issuable_through())),
        status.renewed_at.map(timestamp_of),
        status.nodes.as_ref().map(|nodes| nodes.in_use as i32),
        status.nodes.as_ref().map(|nodes| nodes.free as i32),
        status.node_switches as i64,
        status.clock_refusals as i64,
        status.lease_refusals as i64,
        status.keeper_pid,
        status.keeper_ticks as i64,
    ))
}

fn timestamp_of(unix_second: u64) -> TimestampWithTimeZone {
    let micros = (unix_second as i64 - POSTGRES_EPOCH_UNIX_SECOND) * 1_000_000;
    TimestampWithTimeZone::try_from(micros).expect("every Randflake second lies within PostgreSQL's timestamp range")
}

/// The canonical string form: base32hex of the unsigned value.
#[pg_extern(immutable, strict, parallel_safe)]
fn randflake_to_string(id: i64) -> String {
    codec::encode(id).to_string()
}

/// Parses the canonical string form; anything else is an error, never a guess.
#[pg_extern(immutable, strict, parallel_safe)]
fn randflake_from_string(s: &str) -> i64 {
    codec::decode(s).unwrap_or_else(|reason| Error::InvalidIdString { input: s.to_owned(), reason }.raise())
}

/// Input of the `randflake_id` type, which is bigint's eight bytes shown as the canonical string
/// (declared in sql/randflake_pg--0.4.0--0.5.0.sql).
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_id_in(input: &CStr) -> i64 {
    // Bytes that are not UTF-8 become U+FFFD, which no ID string holds: the error shows where.
    randflake_from_string(&input.to_string_lossy())
}

/// Output of the `randflake_id` type: the canonical string.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_id_out(id: i64) -> CString {
    CString::new(randflake_to_string(id)).expect("base32hex digits hold no NUL")
}

/// A new `randflake_key`: the plain value of the ID `randflake_next()` would have returned,
/// from the same reserved runs, never encrypted. Declared in sql/randflake_pg--0.5.0--0.6.0.sql.
#[pg_extern(volatile, parallel_safe, sql = false)]
fn randflake_next_key() -> i64 {
    generation::reserved_id(Output::Keys).unwrap_or_else(|| generation::next_id(Output::Keys))
}

/// The ID a `randflake_key` holds, encrypted: the cast out of `randflake_key`, and what its
/// text and binary forms show.
#[pg_extern(stable, strict, parallel_safe, sql = false)]
fn randflake_key_to_id(key: i64) -> i64 {
    secret::with_cipher(|cipher| cipher.encrypt_raw(key as u64)).unwrap_or_else(|error| error.raise())
}

// The input, output, receive and send functions of `randflake_key` and its casts in are written by
// hand (`pg::entry`), as randflake_next() is: `COPY ... TO` calls the output function once per
// key, and through pgrx's wrapper (its guard, the argument and result boxing, a String and a
// CString copied into a palloc'd one) printing a key cost 2.2x printing the same ID as a bigint
// (bench/bench.py's key_edge step).
pg::entry::entry_points! {
    /// Input of `randflake_key`: the canonical string of the ID, decrypted, for a caller that
    /// may decode.
    randflake_key_in_wrapper, pg_finfo_randflake_key_in_wrapper => key_in;
    /// Output of `randflake_key`: the canonical string of the ID, as randflake_to_string()
    /// writes it, in the one palloc'd buffer returned.
    randflake_key_out_wrapper, pg_finfo_randflake_key_out_wrapper => key_out;
    /// Binary input of `randflake_key`: the ID as bigint's eight bytes, decrypted, for a caller
    /// that may decode.
    randflake_key_recv_wrapper, pg_finfo_randflake_key_recv_wrapper => key_recv;
    /// Binary output of `randflake_key`: the ID as bigint's eight bytes.
    randflake_key_send_wrapper, pg_finfo_randflake_key_send_wrapper => key_send;
    /// The casts into `randflake_key` from `bigint` and `randflake_id` (the same eight bytes):
    /// the public ID, decrypted, for a caller that may decode.
    randflake_key_from_id_wrapper, pg_finfo_randflake_key_from_id_wrapper => key_from_id;
}

/// The public ID of a key, or the error of a missing secret.
fn public_id_of(key: i64) -> i64 {
    secret::with_cipher(|cipher| cipher.encrypt_raw(key as u64)).unwrap_or_else(|error| error.raise())
}

/// The key of a public ID, for a caller that may decode (`pg::decoder_grant`); otherwise the
/// refusal, or the error of a missing secret.
fn key_of(arguments: &Arguments, id: i64) -> i64 {
    decoder_grant::require(arguments.function());
    secret::with_cipher(|cipher| cipher.decrypt_raw(id) as i64).unwrap_or_else(|error| error.raise())
}

fn key_in(arguments: &Arguments) -> i64 {
    let input = arguments.cstring(0);
    key_of(arguments, randflake_id_in(input))
}

fn key_out(arguments: &Arguments) -> CStringResult<codec::IdString> {
    CStringResult(codec::encode(public_id_of(arguments.int8(0))))
}

fn key_recv(arguments: &Arguments) -> i64 {
    let id = match arguments.message::<8>(0) {
        Ok(bytes) => i64::from_be_bytes(bytes),
        Err(length) => Error::InvalidKeyBinary { length }.raise(),
    };
    key_of(arguments, id)
}

fn key_send(arguments: &Arguments) -> ByteaResult<[u8; 8]> {
    ByteaResult(public_id_of(arguments.int8(0)).to_be_bytes())
}

fn key_from_id(arguments: &Arguments) -> i64 {
    key_of(arguments, arguments.int8(0))
}

// Equality between a `randflake_key` and a public ID (smallint, integer, bigint, randflake_id,
// text), so that `WHERE id = $1` finds a row by its public ID without making a key of it, which
// only roles that may decode can do. Each operator says only whether the two are the same ID, so
// it is everyone's. The btree operator family holds these operators with the support functions
// below, which order a public ID by its plain value: the index then serves `id = $1`, `id =
// ANY($1)` and joins with a bigint column. Those support functions reveal the order, so their
// EXECUTE is granted to no one; btree calls them without that privilege.

/// The public ID of a key: what it is compared with.
fn public_id(key: i64) -> i64 {
    secret::with_cipher(|cipher| cipher.encrypt_raw(key as u64)).unwrap_or_else(|error| error.raise())
}

/// The plain value of a public ID, for the order of the btree support functions only.
fn plain_value(id: i64) -> u64 {
    secret::with_cipher(|cipher| cipher.decrypt_raw(id)).unwrap_or_else(|error| error.raise())
}

/// `=`, `<>` and the btree support of a key against one type of public ID, under the names the
/// 0.6.0 script declares; `$id` turns the argument into the ID's bigint.
macro_rules! compared_with_public_ids {
    ($($public:ty => $eq:ident, $ne:ident, $eq_reversed:ident, $ne_reversed:ident, $order:ident, $order_of_ids:ident, $id:expr;)+) => {$(
        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $eq(key: i64, id: $public) -> bool {
            public_id(key) == $id(id)
        }

        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $ne(key: i64, id: $public) -> bool {
            public_id(key) != $id(id)
        }

        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $eq_reversed(id: $public, key: i64) -> bool {
            public_id(key) == $id(id)
        }

        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $ne_reversed(id: $public, key: i64) -> bool {
            public_id(key) != $id(id)
        }

        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $order(key: i64, id: $public) -> i32 {
            ordered::compare(key as u64, plain_value($id(id))) as i32
        }

        #[pg_extern(stable, strict, parallel_safe, sql = false)]
        fn $order_of_ids(left: $public, right: $public) -> i32 {
            ordered::compare(plain_value($id(left)), plain_value($id(right))) as i32
        }
    )+};
}

compared_with_public_ids! {
    i16 => randflake_key_eq_int2, randflake_key_ne_int2, randflake_int2_eq_key, randflake_int2_ne_key,
        randflake_key_order_int2, randflake_int2_order, i64::from;
    i32 => randflake_key_eq_int4, randflake_key_ne_int4, randflake_int4_eq_key, randflake_int4_ne_key,
        randflake_key_order_int4, randflake_int4_order, i64::from;
    i64 => randflake_key_eq_int8, randflake_key_ne_int8, randflake_int8_eq_key, randflake_int8_ne_key,
        randflake_key_order_int8, randflake_int8_order, i64::from;
    &str => randflake_key_eq_text, randflake_key_ne_text, randflake_text_eq_key, randflake_text_ne_key,
        randflake_key_order_text, randflake_text_order, randflake_from_string;
}

/// The hash of a key: bigint's hash of its public ID, so that a key and the same ID as a bigint
/// hash alike (hash joins between the two), and so that no hash the server exposes (through
/// `hash_array()`, `hash_record()`, hash partitions) is a function of the plain value.
#[pg_extern(stable, strict, parallel_safe, sql = false)]
fn randflake_key_hash(key: i64) -> i32 {
    pg::hash::int8(public_id(key))
}

/// The seeded hash of a key: bigint's seeded hash of its public ID.
#[pg_extern(stable, strict, parallel_safe, sql = false)]
fn randflake_key_hash_extended(key: i64, seed: i64) -> i64 {
    pg::hash::int8_extended(public_id(key), seed)
}

// The comparison functions of `randflake_key` are C entry points of `pg::key_order`, beside its
// sort support: nothing in them can fail.

/// The lowest `randflake_key` of the second `at` falls in: `id >= randflake_key_lowest(t1) AND
/// id < randflake_key_lowest(t2)` selects the keys made from t1's second up to t2's, by an
/// index range scan.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_lowest(at: TimestampWithTimeZone) -> i64 {
    key_of_second(at, ordered::lowest_of_second)
}

/// The highest `randflake_key` of the second `at` falls in.
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn randflake_key_highest(at: TimestampWithTimeZone) -> i64 {
    key_of_second(at, ordered::highest_of_second)
}

/// `bound` of the Unix second `at` falls in, or the error saying no ID carries that second.
fn key_of_second(at: TimestampWithTimeZone, bound: fn(u64) -> Result<u64, randflake::layout::LayoutError>) -> i64 {
    let second = if at.is_infinity() {
        i64::MAX
    } else if !at.is_finite() {
        i64::MIN
    } else {
        at.into_inner().div_euclid(1_000_000) + POSTGRES_EPOCH_UNIX_SECOND
    };
    u64::try_from(second)
        .ok()
        .and_then(|second| bound(second).ok())
        .unwrap_or_else(|| Error::TimestampOutsideIds { unix_second: second }.raise()) as i64
}

/// 0.5.0's application lease functions. A function cannot commit, so they returned a lease whose
/// transaction the caller could still roll back (or lose, uncommitted, in a pipeline); 0.6.0
/// replaces them with the procedures below, of the same names. Their entry points remain for
/// the 0.4.0 to 0.5.0 script, and for a database still at 0.5.0 under this library, where they
/// refuse, naming the update and the CALL to use.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn randflake_lease_acquire(
    holder: Option<&str>,
    seconds: default!(Option<i32>, 600),
) -> TableIterator<'static, (name!(node_id, i32), name!(lease_start, i64), name!(lease_end_exclusive, i64))> {
    let _ = (holder, seconds);
    Error::AppLeaseIsProcedure {
        function: "randflake_lease_acquire",
        call: "CALL randflake_lease_acquire(holder, seconds, NULL, NULL, NULL)",
    }
    .raise()
}

/// See [`randflake_lease_acquire`].
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn randflake_lease_extend(
    holder: Option<&str>,
    node_id: Option<i32>,
    seconds: default!(Option<i32>, 600),
) -> TableIterator<'static, (name!(node_id, i32), name!(lease_start, i64), name!(lease_end_exclusive, i64))> {
    let _ = (holder, node_id, seconds);
    Error::AppLeaseIsProcedure {
        function: "randflake_lease_extend",
        call: "CALL randflake_lease_extend(holder, node_id, seconds, NULL, NULL, NULL)",
    }
    .raise()
}

/// See [`randflake_lease_acquire`].
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn randflake_lease_release(holder: Option<&str>, node_id: Option<i32>) -> bool {
    let _ = (holder, node_id);
    Error::AppLeaseIsProcedure {
        function: "randflake_lease_release",
        call: "CALL randflake_lease_release(holder, node_id, NULL)",
    }
    .raise()
}

// The application lease procedures: C procedures declared by hand in
// sql/randflake_pg--0.5.0--0.6.0.sql (pgrx declares functions only, and a function cannot
// commit), run by `pg::procedure::Call::run` under pgrx's guard, which turns any error or panic
// into an ERROR. EXECUTE is granted to nobody by default.
pg::procedure::procedure_entry_points! {
    /// `CALL randflake_lease_acquire(holder, seconds, OUT node_id, OUT lease_start, OUT
    /// lease_end_exclusive)`: a node of the application pool, leased to `holder` for `seconds`
    /// from now, returned once its commit is durable: the window to pass to a Randflake port's
    /// `Lease(node_id, start, end_exclusive)`.
    randflake_lease_acquire_procedure, pg_finfo_randflake_lease_acquire_procedure => lease_acquire;
    /// `CALL randflake_lease_extend(holder, node_id, seconds, OUT node_id, OUT lease_start, OUT
    /// lease_end_exclusive)`: `holder`'s lease of `node_id`, its end moved to `seconds` from now
    /// (never earlier), returned once durable.
    randflake_lease_extend_procedure, pg_finfo_randflake_lease_extend_procedure => lease_extend;
    /// `CALL randflake_lease_release(holder, node_id, OUT released)`: gives `holder`'s lease of
    /// `node_id` back; true once the release is durable, false if the lease had already ended.
    randflake_lease_release_procedure, pg_finfo_randflake_lease_release_procedure => lease_release;
}

fn lease_acquire(call: &Call) -> [Out; 3] {
    window_row(app_leases::acquire(call, call.text(0).as_deref(), call.int4(1)))
}

fn lease_extend(call: &Call) -> [Out; 3] {
    window_row(app_leases::extend(call, call.text(0).as_deref(), call.int4(1), call.int4(2)))
}

fn lease_release(call: &Call) -> [Out; 1] {
    [Out::Bool(app_leases::release(call, call.text(0).as_deref(), call.int4(1)))]
}

/// A window as the procedures' OUT row: node_id, lease_start, lease_end_exclusive.
fn window_row(window: randflake::app_lease::AppWindow) -> [Out; 3] {
    [Out::Int4(window.node as i32), Out::Int8(window.start as i64), Out::Int8(window.end_exclusive as i64)]
}

/// The application pool, for monitoring: its nodes, the leases held, the nodes free now, and
/// the soonest end of a held lease. No row without a pool, outside randflake.database, or on a
/// fleet member (the pool's state is the coordinator's: ask it there).
/// EXECUTE is granted to pg_monitor only.
#[pg_extern(volatile, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn randflake_app_leases() -> TableIterator<
    'static,
    (
        name!(pool_first, i32),
        name!(pool_last, i32),
        name!(leases_held, i32),
        name!(nodes_free, i32),
        name!(soonest_end, Option<TimestampWithTimeZone>),
    ),
> {
    TableIterator::new(app_leases::status().map(|status| {
        (
            status.pool.0 as i32,
            status.pool.1 as i32,
            status.held as i32,
            status.free as i32,
            status.soonest_end.map(timestamp_of),
        )
    }))
}

/// The trigger of `randflake.node_leases` that refuses every write randflake_pg's own code did
/// not make (`lease_table::authorize_write`). Declared in sql/randflake_pg--0.5.0--0.6.0.sql.
#[pg_trigger(sql = false)]
fn authorize_lease_write<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, pgrx::AllocatedByRust>>, pgrx::datum::TryFromDatumError> {
    let table_use = match node_config::mode() {
        Mode::Range => TableUse::ThisServerOnly,
        Mode::Fleet | Mode::Off => TableUse::Fleet,
    };
    lease_table::authorize_write(trigger, table_use)
}

/// Flushes this server's WAL through the end of what was inserted and returns that position (a
/// `pg_lsn`; NULL on a standby): the insert position of `randflake.wal_durability()`, which a
/// lease keeper compares with the flush position after its commit returned. Declared in
/// sql/randflake_pg--0.5.0--0.6.0.sql.
#[pg_extern(volatile, sql = false)]
fn randflake_flush_inserted_wal() -> Option<i64> {
    pg::backend::flush_inserted_wal().map(|end| end as i64)
}
