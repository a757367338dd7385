//! Whether the keeper may touch the lease table its settings name.
//!
//! The keeper runs as the bootstrap superuser and finds the lease table by name, in a database
//! that an ordinary role may own. Whoever controls a relation of that name controls what the
//! keeper's INSERT, UPDATE and SELECT run: triggers, rules, defaults, a view's functions. So
//! the keeper runs no SQL on the table unless no ordinary role could have made it or can
//! change it: it and its schema belong to superusers, and the functions of its triggers too;
//! in range mode it is the table that CREATE EXTENSION randflake_pg made (a member of the
//! extension); in fleet mode it is that table or a foreign table whose server a superuser owns.
//! The relation the keeper reads its commits' evidence from, beside the lease table, is checked
//! the same way (the extension's view, or a foreign table).
//!
//! The check reads only pg_catalog: relations and functions named with their schema, operators
//! found through the keeper's pinned `search_path`, which holds nothing else.
#![forbid(unsafe_code)]

use pgrx::prelude::*;

/// What the keeper found under the lease table's name.
pub enum Verdict {
    /// No relation of that name (the extension is not created yet, or the fleet set-up is
    /// unfinished): nothing to refuse, nothing to use.
    Missing,
    /// The relation may be used; its oid.
    Trusted(pg_sys::Oid),
    /// Present but not trustworthy; the text says why.
    Refused(String),
}

const QUERY: &str = "
SELECT c.relkind::text,
       pg_catalog.pg_get_userbyid(c.relowner)::text, table_owner.rolsuper,
       pg_catalog.pg_get_userbyid(n.nspowner)::text, schema_owner.rolsuper,
       EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                 JOIN pg_catalog.pg_extension AS e ON e.oid = d.refobjid
                WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                  AND d.objid = c.oid
                  AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
                  AND d.deptype = 'e'
                  AND e.extname = 'randflake_pg'),
       (SELECT pg_catalog.string_agg(pg_catalog.format('%I (function owned by %I)', t.tgname,
                                                       pg_catalog.pg_get_userbyid(p.proowner)), ', ')
          FROM pg_catalog.pg_trigger AS t
          JOIN pg_catalog.pg_proc AS p ON p.oid = t.tgfoid
          JOIN pg_catalog.pg_roles AS function_owner ON function_owner.oid = p.proowner
         WHERE t.tgrelid = c.oid AND NOT function_owner.rolsuper),
       c.relhasrules,
       server.srvname::text, pg_catalog.pg_get_userbyid(server.srvowner)::text, server_owner.rolsuper,
       c.oid
  FROM pg_catalog.pg_class AS c
  JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
  JOIN pg_catalog.pg_roles AS table_owner ON table_owner.oid = c.relowner
  JOIN pg_catalog.pg_roles AS schema_owner ON schema_owner.oid = n.nspowner
  LEFT JOIN pg_catalog.pg_foreign_table AS f ON f.ftrelid = c.oid
  LEFT JOIN pg_catalog.pg_foreign_server AS server ON server.oid = f.ftserver
  LEFT JOIN pg_catalog.pg_roles AS server_owner ON server_owner.oid = server.srvowner
 WHERE n.nspname = $1::pg_catalog.name
   AND c.relname = $2::pg_catalog.name";

/// What the keeper uses a relation for: the extension's own one is of a kind of its own.
#[derive(Clone, Copy)]
enum Use {
    /// The lease table, `randflake.node_leases` in the extension.
    LeaseTable,
    /// The commit evidence, the view `randflake.commit_evidence` in the extension.
    CommitEvidence,
}

/// Looks at `schema.table` as the keeper's lease table; `foreign_allowed` in fleet mode.
pub fn vet(schema: &str, table: &str, foreign_allowed: bool) -> Verdict {
    vet_for(Use::LeaseTable, schema, table, foreign_allowed)
}

/// Looks at `schema.relation` as the relation the keeper reads its commits' evidence from.
pub fn vet_commit_evidence(schema: &str, relation: &str, foreign_allowed: bool) -> Verdict {
    vet_for(Use::CommitEvidence, schema, relation, foreign_allowed)
}

fn vet_for(usage: Use, schema: &str, table: &str, foreign_allowed: bool) -> Verdict {
    let found = Spi::connect(|client| {
        let rows = client.select(QUERY, Some(1), &[schema.into(), table.into()])?;
        if rows.is_empty() {
            return Ok(None);
        }
        let row = rows.first();
        Ok::<_, pgrx::spi::SpiError>(Some(Found {
            kind: row.get::<String>(1)?.unwrap_or_default(),
            owner: row.get::<String>(2)?.unwrap_or_default(),
            owner_is_superuser: row.get::<bool>(3)?.unwrap_or(false),
            schema_owner: row.get::<String>(4)?.unwrap_or_default(),
            schema_owner_is_superuser: row.get::<bool>(5)?.unwrap_or(false),
            extension_member: row.get::<bool>(6)?.unwrap_or(false),
            untrusted_triggers: row.get::<String>(7)?,
            has_rules: row.get::<bool>(8)?.unwrap_or(true),
            server: row.get::<String>(9)?,
            server_owner: row.get::<String>(10)?.unwrap_or_default(),
            server_owner_is_superuser: row.get::<bool>(11)?.unwrap_or(false),
            relation: row.get::<pg_sys::Oid>(12)?.unwrap_or(pg_sys::InvalidOid),
        }))
    });
    match found {
        Ok(None) => Verdict::Missing,
        Ok(Some(found)) => match found.refusal(usage, foreign_allowed) {
            None => Verdict::Trusted(found.relation),
            Some(reason) => Verdict::Refused(format!(
                "{}.{} {reason}",
                pgrx::spi::quote_identifier(schema),
                pgrx::spi::quote_identifier(table)
            )),
        },
        Err(error) => error!("could not check the lease table: {error}"),
    }
}

struct Found {
    kind: String,
    owner: String,
    owner_is_superuser: bool,
    schema_owner: String,
    schema_owner_is_superuser: bool,
    extension_member: bool,
    untrusted_triggers: Option<String>,
    has_rules: bool,
    server: Option<String>,
    server_owner: String,
    server_owner_is_superuser: bool,
    relation: pg_sys::Oid,
}

impl Found {
    /// Why the keeper must not use this relation, or `None` when it may.
    fn refusal(&self, usage: Use, foreign_allowed: bool) -> Option<String> {
        let (own_kind, what) = match usage {
            Use::LeaseTable => ("r", "lease table"),
            Use::CommitEvidence => ("v", "commit evidence view"),
        };
        let own_table = self.kind == own_kind && self.extension_member;
        let foreign_table = foreign_allowed && self.kind == "f";
        if !own_table && !foreign_table {
            return Some(if foreign_allowed {
                format!("is neither randflake_pg's own {what} nor a foreign table")
            } else {
                format!("is not the {what} created by CREATE EXTENSION randflake_pg (not a member of the extension)")
            });
        }
        if !self.owner_is_superuser {
            return Some(format!("is owned by role \"{}\", which is not a superuser", self.owner));
        }
        if !self.schema_owner_is_superuser {
            return Some(format!("is in a schema owned by role \"{}\", which is not a superuser", self.schema_owner));
        }
        if let Some(triggers) = &self.untrusted_triggers {
            return Some(format!("has triggers whose functions no superuser owns: {triggers}"));
        }
        // A view's one rule is its definition, the extension's own.
        if self.has_rules && !(own_table && own_kind == "v") {
            return Some("has rules".into());
        }
        if foreign_table && !self.server_owner_is_superuser {
            return Some(format!(
                "reaches foreign server \"{}\", owned by role \"{}\", which is not a superuser",
                self.server.as_deref().unwrap_or_default(),
                self.server_owner
            ));
        }
        None
    }
}
