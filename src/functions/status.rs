//! `randflake_status()`: the status report (`crate::status`) as one row.
#![forbid(unsafe_code)]

use pgrx::prelude::*;

use super::timestamp_of;
use crate::status;

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
        name!(nodes_used_this_second, Option<i32>),
        name!(nodes_used_last_second, Option<i32>),
        name!(node_switches, i64),
        name!(waits_for_next_second, i64),
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
        status.nodes.as_ref().map(|nodes| nodes.used_this_second as i32),
        status.nodes.as_ref().map(|nodes| nodes.used_last_second as i32),
        status.counted.node_switches as i64,
        status.counted.waits_for_next_second as i64,
        status.counted.clock_refusals as i64,
        status.counted.lease_refusals as i64,
        status.keeper_pid,
        status.keeper_ticks as i64,
    ))
}
