//! Every randflake_pg setting (GUC), with its description and validation.
//!
//! All of them can be set only by superusers: a role that could set the node range or the
//! secret could make this server issue IDs that collide with another's.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use pgrx::guc::{GucContext, GucEnum, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};
use pgrx::pg_sys;
use pgrx::prelude::*;
use randflake::MAX_NODE;

use crate::check_hooks::{self, proposed, reject};
use crate::secret::settings::{assign_secret, assign_secret_file, check_secret, check_secret_file, show_secret};

static SECRET: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static SECRET_FILE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static NODE_ID_MIN: GucSetting<i32> = GucSetting::<i32>::new(0);
static NODE_ID_MAX: GucSetting<i32> = GucSetting::<i32>::new(MAX_NODE as i32);
static MAX_NODES_PER_BACKEND: GucSetting<i32> = GucSetting::<i32>::new(128);
static NODE_SOURCE: GucSetting<NodeSource> = GucSetting::<NodeSource>::new(NodeSource::Range);
static DATABASE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"postgres"));
static KEEPER_ROLE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static LEASE_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(600);
static FLEET_LEASE_TABLE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static FLEET_BLOCK_SIZE: GucSetting<i32> = GucSetting::<i32>::new(1024);
static APP_NODE_ID_MIN: GucSetting<i32> = GucSetting::<i32>::new(-1);
static APP_NODE_ID_MAX: GucSetting<i32> = GucSetting::<i32>::new(-1);
static APP_LEASES_PER_ROLE: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Where this server's node ids come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PostgresGucEnum)]
pub enum NodeSource {
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

impl NodeSource {
    /// The value as written in postgresql.conf, read from the very table PostgreSQL parses it
    /// with, so that messages and randflake_status() cannot spell it differently.
    pub fn name(self) -> &'static str {
        let mut entry = <Self as GucEnum>::CONFIG_ENUM_ENTRY;
        // SAFETY: GucEnum's contract, kept by pgrx's derive: a static array of entries with
        // static NUL-terminated names, ended by an entry whose name is null.
        unsafe {
            while let Some(name) = (*entry).name.as_ref() {
                if (*entry).val == self.to_ordinal() {
                    return CStr::from_ptr(name).to_str().unwrap_or_default();
                }
                entry = entry.add(1);
            }
        }
        ""
    }
}

/// Registers all settings. Called once, from `_PG_init`, while preloading.
pub fn define() {
    // SAFETY: the hooks below are #[pg_guard]ed and only read their arguments as PostgreSQL
    // documents them.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"randflake.secret",
            c"Randflake secret: 32 hexadecimal digits (128 bits) keying the ID permutation.",
            c"Prefer randflake.secret_file, which keeps the key out of postgresql.conf. Setting both is an error. Use one secret for the whole fleet and never change it: IDs made under different secrets can collide. Set it only in postgresql.conf: SQL that gives it a value (ALTER SYSTEM, SET, set_config) is refused, since statement text reaches pg_stat_activity, pg_stat_statements and the log. SHOW says only whether it is set.",
            &SECRET,
            // Superuser rather than sighup: a value given at run time (set_config) then reaches
            // the check hook, which refuses it, instead of being turned away before any hook
            // sees it. The configuration files and reloads apply it exactly as for sighup.
            GucContext::Suset,
            GucFlags::SUPERUSER_ONLY | GucFlags::NO_SHOW_ALL,
            Some(check_secret),
            Some(assign_secret),
            Some(show_secret),
        );
        GucRegistry::define_string_guc_with_hooks(
            c"randflake.secret_file",
            c"Path of a file holding the Randflake secret (32 hexadecimal digits), readable only by the server's operating-system user.",
            c"Read by the server at start-up and on reload, like ssl_key_file; a relative path is relative to the data directory. The file must not be accessible to group or others. Setting both this and randflake.secret is an error.",
            &SECRET_FILE,
            GucContext::Sighup,
            GucFlags::SUPERUSER_ONLY,
            Some(check_secret_file),
            Some(assign_secret_file),
            None,
        );
        GucRegistry::define_int_guc_with_hooks(
            c"randflake.node_id_min",
            c"Lowest Randflake node id this server may use; in fleet mode, the lowest of the fleet's pool.",
            c"In range mode, give each server (and each standby) a disjoint node_id_min..node_id_max range; each running backend or parallel worker holds one node of it. In fleet mode, the range is the pool that blocks are cut from, the same on every member.",
            &NODE_ID_MIN,
            0,
            MAX_NODE as i32,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_node_id_min),
            None,
            None,
        );
        GucRegistry::define_int_guc_with_hooks(
            c"randflake.node_id_max",
            c"Highest Randflake node id this server may use; in fleet mode, the highest of the fleet's pool.",
            c"Must not be below randflake.node_id_min. The range must hold more nodes than the server has connections plus parallel workers.",
            &NODE_ID_MAX,
            0,
            MAX_NODE as i32,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_node_id_max),
            None,
            None,
        );
    }
    GucRegistry::define_enum_guc(
        c"randflake.node_source",
        c"Where this server's Randflake node ids come from: range, fleet or off.",
        c"range: lease randflake.node_id_min..randflake.node_id_max in this server's own randflake.node_leases (one server, or a fleet with hand-assigned disjoint ranges). fleet: lease one free block of randflake.fleet_block_size nodes from randflake.fleet_lease_table, shared by the whole fleet. off: issue no IDs and lease nothing, for a server that only stores a fleet's lease table.",
        &NODE_SOURCE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    // SAFETY: as above.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"randflake.database",
            c"Database in which the randflake_pg lease keeper runs; CREATE EXTENSION randflake_pg there.",
            c"The lease keeper background worker connects to this database and writes the leases in its randflake.node_leases (or, in fleet mode, in randflake.fleet_lease_table). Other databases may use the extension too; they share this server's lease.",
            &DATABASE,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_database),
            None,
            None,
        );
        GucRegistry::define_string_guc(
            c"randflake.keeper_role",
            c"Role the lease keeper runs as; empty: the bootstrap superuser.",
            c"A role with LOGIN (it needs no password) and only the rights the keeper uses: USAGE on schema randflake and SELECT, INSERT, UPDATE, DELETE on randflake.node_leases in randflake.database; in fleet mode, the same on the fleet lease table and a user mapping for the coordinator. The keeper then cannot do more than that, whatever runs in its transactions.",
            &KEEPER_ROLE,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        GucRegistry::define_string_guc_with_hooks(
            c"randflake.fleet_lease_table",
            c"In fleet mode, the schema-qualified table holding the fleet's leases, normally a postgres_fdw foreign table.",
            c"It must have the columns of randflake.node_leases and reach the one lease table of the fleet's coordination server, which enforces that no two leases overlap. On the coordination server itself, use randflake.node_leases.",
            &FLEET_LEASE_TABLE,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_fleet_lease_table),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"randflake.fleet_block_size",
        c"In fleet mode, how many nodes one server leases.",
        c"Blocks are cut from randflake.node_id_min..randflake.node_id_max, which must be the same on every server of the fleet, as must this size. A block must hold more nodes than the server has connections plus parallel workers.",
        &FLEET_BLOCK_SIZE,
        1,
        MAX_NODE as i32 + 1,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    for (name, short, setting) in [
        (
            c"randflake.app_node_id_min",
            c"Lowest node id that randflake_lease_acquire() leases to application processes; -1: none.",
            &APP_NODE_ID_MIN,
        ),
        (
            c"randflake.app_node_id_max",
            c"Highest node id that randflake_lease_acquire() leases to application processes; -1: none.",
            &APP_NODE_ID_MAX,
        ),
    ] {
        GucRegistry::define_int_guc(
            name,
            short,
            c"The application pool: nodes leased one at a time, in the same lease table as this server's own (in fleet mode, the fleet's), to processes that make IDs with a Randflake port. It must not overlap randflake.node_id_min..randflake.node_id_max (the server does not start otherwise), and must be the same on every member of a fleet.",
            setting,
            -1,
            MAX_NODE as i32,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    GucRegistry::define_int_guc(
        c"randflake.app_leases_per_role",
        c"Most application leases one role may hold at once; 0: no limit.",
        c"A role granted randflake_lease_acquire() could otherwise lease the whole application pool and starve every other service.",
        &APP_LEASES_PER_ROLE,
        0,
        MAX_NODE as i32 + 1,
        GucContext::Sighup,
        GucFlags::default(),
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
    GucRegistry::define_int_guc(
        c"randflake.max_nodes_per_backend",
        c"Most nodes one backend may take within a single second.",
        c"A node issues at most 131072 IDs per second; a backend that uses them up takes another free node. Past this many nodes in one second, it waits for the next second instead, so one busy session cannot drain the node range.",
        &MAX_NODES_PER_BACKEND,
        1,
        MAX_NODE as i32 + 1,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // A misspelt randflake.* line would otherwise stay a placeholder and leave this server on
    // the default, widest node range, overlapping every other server: PostgreSQL now warns
    // about it and removes it, and no later SET can create one either.
    // SAFETY: called once, from _PG_init, after every randflake setting is defined.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"randflake".as_ptr()) };
    if check_hooks::rejected_while_loading() {
        crate::errors::Error::InvalidSettingsAtStartup.raise();
    }
    if node_source() == NodeSource::Fleet && fleet_lease_table().is_none() {
        crate::errors::Error::FleetWithoutLeaseTable.raise();
    }
    let (app, nodes) = ((APP_NODE_ID_MIN.get(), APP_NODE_ID_MAX.get()), node_range());
    let app_pool_is_valid = match app {
        (-1, -1) => true,
        (first, last) if 0 <= first && first <= last => last < nodes.0 as i32 || first > nodes.1 as i32,
        _ => false,
    };
    if !app_pool_is_valid {
        crate::errors::Error::AppPoolInvalid { app, nodes }.raise();
    }
}

/// The application pool, `first..=last`, if one is configured (checked at start-up).
pub fn app_pool() -> Option<(u32, u32)> {
    let (first, last) = (APP_NODE_ID_MIN.get(), APP_NODE_ID_MAX.get());
    (first >= 0 && first <= last).then_some((first as u32, last as u32))
}

/// How many live application leases one role may hold; `None`: no limit.
pub fn app_leases_per_role() -> Option<u32> {
    u32::try_from(APP_LEASES_PER_ROLE.get()).ok().filter(|&limit| limit > 0)
}

/// The table leases are kept in: this server's own `randflake.node_leases`, or in fleet mode
/// the fleet's table (normally a foreign table), as `(schema, table)`.
pub fn lease_table() -> (String, String) {
    match (node_source(), fleet_lease_table()) {
        (NodeSource::Fleet, Some(name)) => name,
        _ => ("randflake".to_owned(), "node_leases".to_owned()),
    }
}

/// One line for the server log at start-up: where IDs will come from, as the settings say.
pub fn describe_configuration() -> String {
    let (first, last) = node_range();
    let database = match keeper_role() {
        Some(role) => format!("{}\" by role \"{role}", database()),
        None => database(),
    };
    let source = node_source();
    let name = source.name();
    match source {
        NodeSource::Range => format!("node source {name}, nodes {first}..{last}, leased in database \"{database}\""),
        NodeSource::Fleet => format!(
            "node source {name}, blocks of {} nodes from pool {first}..{last}, leased through {} in database \"{database}\"",
            fleet_block_size(),
            FLEET_LEASE_TABLE.get().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
        ),
        NodeSource::Off => format!("node source {name}: this server issues no IDs"),
    }
}

pub fn node_source() -> NodeSource {
    NODE_SOURCE.get()
}

pub fn database() -> String {
    DATABASE.get().map_or_else(|| "postgres".to_owned(), |name| name.to_string_lossy().into_owned())
}

/// The role the lease keeper connects as; `None`: the bootstrap superuser.
pub fn keeper_role() -> Option<String> {
    KEEPER_ROLE.get().map(|name| name.to_string_lossy().into_owned()).filter(|name| !name.is_empty())
}

pub fn lease_seconds() -> u64 {
    LEASE_SECONDS.get() as u64
}

/// The fleet lease table as `(schema, table)`; the check hook accepts nothing else.
pub fn fleet_lease_table() -> Option<(String, String)> {
    let name = FLEET_LEASE_TABLE.get()?;
    let (schema, table) = name.to_str().ok()?.split_once('.')?;
    Some((schema.to_owned(), table.to_owned()))
}

pub fn fleet_block_size() -> u32 {
    FLEET_BLOCK_SIZE.get() as u32
}

/// The configured node range, `first..=last`; the check hooks keep `first <= last`.
pub fn node_range() -> (u32, u32) {
    (NODE_ID_MIN.get() as u32, NODE_ID_MAX.get() as u32)
}

pub fn max_nodes_per_backend() -> u32 {
    MAX_NODES_PER_BACKEND.get() as u32
}

const NODE_RANGE_HINT: &str =
    "Set randflake.node_id_min <= randflake.node_id_max; to move a range, change both in postgresql.conf and restart.";

/// Both bounds' check hooks compare against the other bound's current value. At start-up that
/// is order-independent, because the defaults are the widest range; for ALTER SYSTEM it is the
/// running value, which is conservative.
fn node_range_is_valid(min: i32, max: i32) -> bool {
    min <= max
        || reject(
            &format!("randflake.node_id_min ({min}) is greater than randflake.node_id_max ({max})"),
            NODE_RANGE_HINT,
        )
}

/// # Safety
///
/// Only PostgreSQL calls this, as randflake.node_id_min's check hook, with the arguments it documents for that hook.
#[pg_guard]
unsafe extern "C-unwind" fn check_node_id_min(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a pointer to the proposed integer.
    node_range_is_valid(unsafe { *newval }, NODE_ID_MAX.get())
}

/// # Safety
///
/// Only PostgreSQL calls this, as randflake.node_id_max's check hook, with the arguments it documents for that hook.
#[pg_guard]
unsafe extern "C-unwind" fn check_node_id_max(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a pointer to the proposed integer.
    node_range_is_valid(NODE_ID_MIN.get(), unsafe { *newval })
}

/// # Safety
///
/// Only PostgreSQL calls this, as randflake.database's check hook, with the arguments it documents for that hook.
#[pg_guard]
unsafe extern "C-unwind" fn check_database(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: `newval` is this check hook's first argument.
    unsafe { proposed(newval) }.is_some()
        || reject(
            "randflake.database must name a database",
            "Set it to the database where CREATE EXTENSION randflake_pg was run.",
        )
}

/// A plain identifier: what the keeper can quote without guessing at case or escapes.
fn is_simple_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|first| first.is_ascii_lowercase() || first == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// # Safety
///
/// Only PostgreSQL calls this, as randflake.fleet_lease_table's check hook, with the arguments it documents for that hook.
#[pg_guard]
unsafe extern "C-unwind" fn check_fleet_lease_table(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: `newval` is this check hook's first argument.
    let Some(value) = (unsafe { proposed(newval) }) else { return true };
    let name = value.to_str().unwrap_or_default();
    match name.split_once('.') {
        Some((schema, table)) if is_simple_identifier(schema) && is_simple_identifier(table) => true,
        _ => reject(
            &format!("randflake.fleet_lease_table \"{}\" is not a schema-qualified table name", name.escape_default()),
            "Use schema.table in lower case, for example randflake_fleet.node_leases.",
        ),
    }
}
