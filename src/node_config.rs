//! The server's node configuration: where its nodes come from, which ones, and where, as whom
//! and for how long the keeper leases them. Generation, the status report, application leases
//! and the lease table's guard read it as much as the keeper does. Every setting needs a restart
//! but the lease length and the keeper's tick.
//!
//! Only superusers can set any of them: a role that could set the node range could make this
//! server issue IDs that collide with another's.
#![forbid(unsafe_code)]

use std::ffi::{CStr, CString};
use std::time::Duration;

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};
use randflake::decisions::keeper::NodeSource;
use randflake::MAX_NODE;

use crate::errors::Error;
use crate::pg::guc::{self, Definition, IntHooks, Source, StringHooks};

static NODE_SOURCE: GucSetting<Mode> = GucSetting::<Mode>::new(Mode::Range);
static NODE_ID_MIN: GucSetting<i32> = GucSetting::<i32>::new(0);
static NODE_ID_MAX: GucSetting<i32> = GucSetting::<i32>::new(MAX_NODE as i32);
static FLEET_LEASE_TABLE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static FLEET_BLOCK_SIZE: GucSetting<i32> = GucSetting::<i32>::new(4);
static DATABASE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"postgres"));
static KEEPER_ROLE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static LEASE_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(600);
static KEEPER_TICK: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// The value of `randflake.node_source`: whether and how this server leases nodes. What the
/// keeper leases, with its bounds, is the crate's [`NodeSource`] ([`node_source`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PostgresGucEnum)]
pub enum Mode {
    /// The DBA's `node_id_min..node_id_max`, leased in this server's own lease table.
    #[name = c"range"]
    Range,
    /// One block of `fleet_block_size` nodes, leased from the fleet's shared lease table.
    #[name = c"fleet"]
    Fleet,
    /// No IDs and no leases: for a server that only stores a fleet's lease table.
    #[name = c"off"]
    Off,
}

impl Mode {
    /// The value as written in postgresql.conf.
    pub fn name(self) -> &'static str {
        guc::enum_name(self)
    }
}

pub fn define() {
    define_node_settings();
    define_lease_settings();
}

/// Which nodes this server leases.
fn define_node_settings() {
    GucRegistry::define_enum_guc(
        c"randflake.node_source",
        c"Where this server's Randflake node ids come from: range, fleet or off.",
        c"range: lease randflake.node_id_min..randflake.node_id_max in this server's own randflake.node_leases (one server, or a fleet with hand-assigned disjoint ranges). fleet: lease one free block of randflake.fleet_block_size nodes from randflake.fleet_lease_table, shared by the whole fleet. off: issue no IDs and lease nothing, for a server that only stores a fleet's lease table.",
        &NODE_SOURCE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    guc::define_checked_int::<NodeIdMin>(
        Definition {
            name: c"randflake.node_id_min",
            short: c"Lowest Randflake node id this server may use; in fleet mode, the lowest of the fleet's pool.",
            long: c"In range mode, give each server (and each standby) a disjoint node_id_min..node_id_max range; the server's backends share its nodes, each second from the first, so it needs one node for each 131072 IDs it makes in a second at its peak, and one more. In fleet mode, the range is the pool that blocks are cut from, the same on every member.",
            context: GucContext::Postmaster,
            flags: GucFlags::default(),
        },
        &NODE_ID_MIN,
        (0, MAX_NODE as i32),
    );
    guc::define_checked_int::<NodeIdMax>(
        Definition {
            name: c"randflake.node_id_max",
            short: c"Highest Randflake node id this server may use; in fleet mode, the highest of the fleet's pool.",
            long: c"Must not be below randflake.node_id_min. The range needs one node for each 131072 IDs the server makes in a second at its peak, and one more; past that, a call waits for the next second.",
            context: GucContext::Postmaster,
            flags: GucFlags::default(),
        },
        &NODE_ID_MAX,
        (0, MAX_NODE as i32),
    );
    GucRegistry::define_int_guc(
        c"randflake.fleet_block_size",
        c"In fleet mode, how many nodes one server leases.",
        c"Blocks are cut from randflake.node_id_min..randflake.node_id_max, which must be the same on every server of the fleet, as must this size. A block needs one node for each 131072 IDs the server makes in a second at its peak, and one more; past that, a call waits for the next second.",
        &FLEET_BLOCK_SIZE,
        1,
        MAX_NODE as i32 + 1,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

/// Where, as whom and for how long the keeper leases them.
fn define_lease_settings() {
    guc::define_hooked_string::<FleetLeaseTable>(
        Definition {
            name: c"randflake.fleet_lease_table",
            short: c"In fleet mode, the schema-qualified table holding the fleet's leases, normally a postgres_fdw foreign table.",
            long: c"It must have the columns of randflake.node_leases and reach the one lease table of the fleet's coordination server, which enforces that no two leases overlap. On the coordination server itself, use randflake.node_leases.",
            context: GucContext::Postmaster,
            flags: GucFlags::default(),
        },
        &FLEET_LEASE_TABLE,
    );
    guc::define_hooked_string::<Database>(
        Definition {
            name: c"randflake.database",
            short: c"Database in which the randflake_pg lease keeper runs; CREATE EXTENSION randflake_pg there.",
            long: c"The lease keeper background worker connects to this database and writes the leases in its randflake.node_leases (or, in fleet mode, in randflake.fleet_lease_table). Other databases may use the extension too; they share this server's lease.",
            context: GucContext::Postmaster,
            flags: GucFlags::default(),
        },
        &DATABASE,
    );
    GucRegistry::define_string_guc(
        c"randflake.keeper_role",
        c"Role the lease keeper runs as; empty: the bootstrap superuser.",
        c"A role with LOGIN (it needs no password) and only the rights the keeper uses: USAGE on schema randflake and SELECT, INSERT, UPDATE, DELETE on randflake.node_leases in randflake.database; in fleet mode, the same on the fleet lease table and a user mapping for the coordinator. The keeper then cannot do more than that, whatever runs in its transactions.",
        &KEEPER_ROLE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"randflake.keeper_tick",
        c"How often the lease keeper checks the clock and the lease, and its launcher the keeper; for test suites.",
        c"Every lease length, margin and deadline is set by the other settings: this only sets how soon the keeper notices, which the test suites shorten so that they wait less. Leave it at 1 s.",
        &KEEPER_TICK,
        10,
        1000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"randflake.lease_seconds",
        c"Length of a node lease, in seconds.",
        c"The lease keeper renews the lease once a third of it has passed, so a fleet member keeps issuing IDs through an outage of its coordination server of up to two thirds of this. A stopped server's block can be taken by another server only after its lease ends.",
        &LEASE_SECONDS,
        5,
        86_400,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
}

/// What the settings cannot check one by one; after they are all read at start-up.
pub fn check_at_startup() -> Result<(), Error> {
    if mode() == Mode::Fleet && fleet_lease_table().is_none() {
        return Err(Error::FleetWithoutLeaseTable {});
    }
    Ok(())
}

/// One line for the server log at start-up: where IDs will come from, as the settings say.
pub fn describe() -> String {
    let (first, last) = node_range();
    let database = match keeper_role() {
        Some(role) => format!("{}\" by role \"{role}", database()),
        None => database(),
    };
    let mode = mode();
    let name = mode.name();
    match mode {
        Mode::Range => format!("node source {name}, nodes {first}..{last}, leased in database \"{database}\""),
        Mode::Fleet => format!(
            "node source {name}, blocks of {} nodes from pool {first}..{last}, leased through {} in database \"{database}\"",
            fleet_block_size(),
            fleet_lease_table().map(|(schema, table)| format!("{schema}.{table}")).unwrap_or_default()
        ),
        Mode::Off => format!("node source {name}: this server issues no IDs"),
    }
}

/// The value of `randflake.node_source`.
pub fn mode() -> Mode {
    NODE_SOURCE.get()
}

/// Where the keeper leases this server's nodes from. `fleet_preference` spreads fleet members
/// that start together over the pool's blocks (any number: the keeper takes it modulo the
/// blocks). With `randflake.node_source = off` no keeper runs; that reads as the range.
pub fn node_source(fleet_preference: u64) -> NodeSource {
    let (first, last) = node_range();
    match mode() {
        Mode::Fleet => NodeSource::Fleet {
            pool_first: first,
            pool_last: last,
            block_size: fleet_block_size(),
            preference: fleet_preference,
        },
        Mode::Range | Mode::Off => NodeSource::Range { first, last },
    }
}

/// The configured node range, `first..=last`; the check hooks keep `first <= last`.
pub fn node_range() -> (u32, u32) {
    (NODE_ID_MIN.get() as u32, NODE_ID_MAX.get() as u32)
}

/// The fleet lease table as `(schema, table)`; the check hook accepts nothing else.
fn fleet_lease_table() -> Option<(String, String)> {
    let name = FLEET_LEASE_TABLE.get()?;
    let (schema, table) = name.to_str().ok()?.split_once('.')?;
    Some((schema.to_owned(), table.to_owned()))
}

/// The table leases are kept in: this server's own `randflake.node_leases`, or in fleet mode
/// the fleet's table (normally a foreign table), as `(schema, table)`.
pub fn lease_table() -> (String, String) {
    match (mode(), fleet_lease_table()) {
        (Mode::Fleet, Some(name)) => name,
        _ => ("randflake".to_owned(), "node_leases".to_owned()),
    }
}

fn fleet_block_size() -> u32 {
    FLEET_BLOCK_SIZE.get() as u32
}

pub fn database() -> String {
    DATABASE.get().map_or_else(|| "postgres".to_owned(), |name| name.to_string_lossy().into_owned())
}

/// The role the lease keeper connects as; `None`: the bootstrap superuser.
pub fn keeper_role() -> Option<String> {
    KEEPER_ROLE.get().map(|name| name.to_string_lossy().into_owned()).filter(|name| !name.is_empty())
}

/// How often the keeper and its launcher look (randflake.keeper_tick).
pub fn tick() -> Duration {
    Duration::from_millis(KEEPER_TICK.get() as u64)
}

pub fn lease_seconds() -> u64 {
    LEASE_SECONDS.get() as u64
}

/// Both bounds' checks compare against the other bound's current value. At start-up that is
/// order-independent, because the defaults are the widest range; for ALTER SYSTEM it is the
/// running value, which is conservative.
fn node_range_is_valid(min: i32, max: i32) -> Result<(), Error> {
    if min <= max {
        Ok(())
    } else {
        Err(Error::NodeRangeReversed { min, max })
    }
}

struct NodeIdMin;

impl IntHooks for NodeIdMin {
    fn check(proposed: i32) -> Result<(), Error> {
        node_range_is_valid(proposed, NODE_ID_MAX.get())
    }
}

struct NodeIdMax;

impl IntHooks for NodeIdMax {
    fn check(proposed: i32) -> Result<(), Error> {
        node_range_is_valid(NODE_ID_MIN.get(), proposed)
    }
}

struct Database;

impl StringHooks for Database {
    type Parsed = ();

    fn check(proposed: Option<&CStr>, _source: Source) -> Result<Option<()>, Error> {
        proposed.map(|_| None).ok_or(Error::DatabaseUnset {})
    }
}

struct FleetLeaseTable;

impl StringHooks for FleetLeaseTable {
    type Parsed = ();

    fn check(proposed: Option<&CStr>, _source: Source) -> Result<Option<()>, Error> {
        let Some(value) = proposed else { return Ok(None) };
        let name = value.to_string_lossy();
        match name.split_once('.') {
            Some((schema, table)) if is_simple_identifier(schema) && is_simple_identifier(table) => Ok(None),
            _ => Err(Error::FleetLeaseTableName { name: name.into_owned() }),
        }
    }
}

/// A plain identifier: what the keeper can quote without guessing at case or escapes.
fn is_simple_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|first| first.is_ascii_lowercase() || first == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_lease_table_is_schema_dot_table_in_plain_lower_case() {
        let check = |name: &CStr| FleetLeaseTable::check(Some(name), Source::ConfigurationOrServer).is_ok();
        assert!(check(c"randflake_fleet.node_leases"));
        assert!(check(c"_s1.t_2"));
        for refused in [c"node_leases", c"Fleet.leases", c"a.b.c", c"\"a\".b", c"a.", c".b", c"a.1b", c"a b.c"] {
            assert!(!check(refused), "{refused:?}");
        }
    }

    #[test]
    fn a_node_range_may_not_be_reversed() {
        assert!(node_range_is_valid(5, 5).is_ok());
        assert!(matches!(node_range_is_valid(6, 5), Err(Error::NodeRangeReversed { min: 6, max: 5 })));
    }
}
