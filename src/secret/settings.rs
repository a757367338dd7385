//! The two secret settings, `randflake.secret` and `randflake.secret_file`: they parse and check
//! a proposed secret, hand it to the cipher slots, keep its value out of SHOW, and refuse a
//! secret given through SQL.
#![forbid(unsafe_code)]

use std::ffi::{CStr, CString};
use std::path::Path;

use pgrx::guc::{GucContext, GucFlags, GucSetting};
use randflake::Secret;

use super::ciphers::{self, SecretSource};
use super::sql_routes;
use crate::errors::Error;
use crate::pg::guc::{self, Definition, Source, StringHooks};

static SECRET: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static SECRET_FILE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

pub fn define() {
    guc::define_hooked_string::<SecretSetting>(
        Definition {
            name: c"randflake.secret",
            short: c"Randflake secret: 32 hexadecimal digits (128 bits) keying the ID permutation.",
            long: c"Prefer randflake.secret_file, which keeps the key out of postgresql.conf. Setting both is an error. Use one secret for the whole fleet and never change it: IDs made under different secrets can collide. Set it only in postgresql.conf: SQL that gives it a value (ALTER SYSTEM, SET, set_config) is refused, since statement text reaches pg_stat_activity, pg_stat_statements and the log. SHOW says only whether it is set.",
            // Superuser rather than sighup: a value given at run time (set_config) then reaches
            // the check hook, which refuses it, instead of being turned away before any hook
            // sees it. The configuration files and reloads apply it exactly as for sighup.
            context: GucContext::Suset,
            flags: GucFlags::SUPERUSER_ONLY | GucFlags::NO_SHOW_ALL,
        },
        &SECRET,
    );
    guc::define_hooked_string::<SecretFileSetting>(
        Definition {
            name: c"randflake.secret_file",
            short: c"Path of a file holding the Randflake secret (32 hexadecimal digits), readable only by the server's operating-system user.",
            long: c"Read by the server at start-up and on reload, like ssl_key_file; a relative path is relative to the data directory. The file must not be accessible to group or others. Setting both this and randflake.secret is an error.",
            context: GucContext::Sighup,
            flags: GucFlags::SUPERUSER_ONLY,
        },
        &SECRET_FILE,
    );
}

struct SecretSetting;

impl StringHooks for SecretSetting {
    type Parsed = [u8; 16];
    const SHOWS: bool = true;

    fn check(proposed: Option<&CStr>, source: Source) -> Result<Option<[u8; 16]>, Error> {
        // The utility hook refuses the statements whose parse tree gives the secret a value;
        // what reaches this point from a session was given at run time (set_config(), a
        // connection option), maybe by a function that would catch an ERROR: the session ends.
        if source == Source::Session {
            sql_routes::refuse(true);
        }
        let Some(value) = proposed else { return Ok(None) };
        let text = value.to_str().map_err(|_| Error::SecretNotText {})?;
        let secret = Secret::from_hex(text).map_err(|reason| Error::SecretInvalid { reason })?;
        Ok(Some(*secret.as_bytes()))
    }

    fn assign(parsed: Option<[u8; 16]>) {
        ciphers::install(SecretSource::Setting, parsed.map(Secret::from_bytes));
    }

    /// What SHOW, current_setting() and pg_settings say of randflake.secret, to every role, the
    /// superuser included: whether it is set, never its value. pg_monitor members may read
    /// superuser-only settings, and monitoring agents routinely are such members.
    fn show() -> Option<&'static CStr> {
        Some(if ciphers::is_set(SecretSource::Setting) { c"(set; hidden by randflake_pg)" } else { c"" })
    }
}

struct SecretFileSetting;

impl StringHooks for SecretFileSetting {
    type Parsed = [u8; 16];

    fn check(proposed: Option<&CStr>, _source: Source) -> Result<Option<[u8; 16]>, Error> {
        let Some(value) = proposed else { return Ok(None) };
        let path = value.to_str().map_err(|_| Error::SecretFilePath {})?;
        let secret = Secret::from_key_file(Path::new(path))
            .map_err(|reason| Error::SecretFileInvalid { path: path.to_owned(), reason })?;
        Ok(Some(*secret.as_bytes()))
    }

    fn assign(parsed: Option<[u8; 16]>) {
        ciphers::install(SecretSource::File, parsed.map(Secret::from_bytes));
    }
}
