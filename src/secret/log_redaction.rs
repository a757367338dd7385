//! Keeps the secret out of the server log.
//!
//! randflake_pg's own messages never contain the secret, but PostgreSQL's can:
//! - on reload the postmaster logs `parameter "randflake.secret" changed to "<value>"`;
//! - a syntax error in postgresql.conf quotes the token the parser stopped at, which on the
//!   secret's line is a piece of it;
//! - the text of a statement that tried to give the secret a value is written by
//!   `log_statement` before the statement runs, by duration logging, and in the STATEMENT,
//!   CONTEXT, QUERY and DETAIL lines of its errors.
//!
//! Which statement carries the secret is decided by what PostgreSQL parsed: the guard
//! (`sql_routes`) marks each statement it refuses; a statement logged before it runs has just
//! been parsed without error, and is parsed again here. Only a statement PostgreSQL could not
//! parse, or one being reported in an error (where parsing again could raise an error inside
//! error reporting), is judged by its spelling, and then generously.
//!
//! Last, whatever the route, every piece of a configured secret is taken out of every part of
//! every line, by value (`randflake::Secret::redact`).
//!
//! This filter runs inside error reporting: it never raises, and it leaves every message
//! untouched unless one needs rewriting.
#![forbid(unsafe_code)]

use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;

use super::sql_routes;
use crate::pg::log_hook::{self, LogLine};
use crate::pg::{parse_tree, statement};
use crate::secret;

const VALUE_HIDDEN: &[u8] = b"(value hidden by randflake_pg)";
const STATEMENT_HIDDEN: &[u8] = b"<statement hidden by randflake_pg: it gave randflake.secret a value>";
const SQL_HIDDEN: &[u8] = b"(hidden by randflake_pg: it quotes a statement that gave randflake.secret a value)";

/// PostgreSQL's untranslated formats of the two configuration-file messages that quote values.
const RELOAD_CHANGE: &[u8] = b"parameter \"%s\" changed to \"%s\"";
const FILE_SYNTAX_ERROR: &[u8] = b"syntax error in file \"%s\" line %u, near token \"%s\"";

/// The PostgreSQL functions whose non-error messages quote a statement they parsed without
/// error: `log_statement` and duration logging, for both protocols.
const STATEMENT_LOGGERS: [&[u8]; 4] =
    [b"exec_simple_query", b"exec_parse_message", b"exec_bind_message", b"exec_execute_message"];

/// Installs the filter. Called from `_PG_init` while preloading, so the postmaster has it too.
pub fn install() {
    log_hook::install(redact);
}

fn redact(line: &mut LogLine) {
    if let Some(rewritten) = configuration_message(line) {
        line.set_message(&rewritten);
    }
    statement::with_current(|statement| {
        if let Some(statement) = statement.filter(|statement| carries_secret(line, statement)) {
            hide(line, statement.to_bytes());
        }
    });
    // Whatever brought it there, a piece of a configured secret leaves every part of every line.
    line.rewrite_each_part(|text| secret::redact(text, VALUE_HIDDEN));
}

/// Whether the statement a message is about carries the secret.
fn carries_secret(line: &LogLine, statement: &CStr) -> bool {
    let text = statement.to_bytes();
    if sql_routes::current_statement_was_refused() || secret::redact(text, b"").is_some() || binds_secret_name(line) {
        return true;
    }
    if !may_name_secret(text) {
        return false;
    }
    if !line.is_error() && STATEMENT_LOGGERS.contains(&line.reported_by()) {
        return parse_tree::parse(statement).iter().any(sql_routes::carries_secret);
    }
    line.is_syntax_error() || mentions_secret(text)
}

/// Whether text could, once parsed, name the secret's setting: it contains `secret`, or an
/// escape that could spell it (`U&"..."`, `U&'...'`, a backslash in an `E'...'` string). A
/// cheap test that lets every other statement through without parsing.
fn may_name_secret(text: &[u8]) -> bool {
    let lower = text.to_ascii_lowercase();
    find(&lower, b"secret").is_some() || find(&lower, b"u&").is_some() || lower.contains(&b'\\')
}

/// Whether text names `randflake.secret` in plain letters, in any case, quoting or spacing
/// (`"RANDFLAKE" . "secret"` is the same setting); `randflake.secret_file` alone does not count.
fn mentions_secret(text: &[u8]) -> bool {
    let lower = text.to_ascii_lowercase();
    let Some(start) = find(&lower, b"randflake") else { return false };
    let rest = &lower[start..];
    (0..rest.len()).any(|at| rest[at..].starts_with(b"secret") && !rest[at + 6..].starts_with(b"_file"))
}

/// Whether the bound parameters that `log_statement` lists in the DETAIL of an extended-protocol
/// statement include the setting's name: `set_config($1, $2, false)` bound to it.
fn binds_secret_name(line: &LogLine) -> bool {
    line.detail().is_some_and(|detail| find(&detail.to_ascii_lowercase(), b"'randflake.secret'").is_some())
}

/// Takes every trace of the statement out of the message: the statement line, the quoted SQL of
/// DETAIL, CONTEXT and QUERY, the statement where the message quotes it, and what the message
/// quotes from it.
fn hide(line: &mut LogLine, statement: &[u8]) {
    line.hide_statement();
    line.hide_quoted_sql(SQL_HIDDEN);
    let Some(message) = line.message() else { return };
    let rewritten = match find(message, statement) {
        Some(at) => Some([&message[..at], STATEMENT_HIDDEN, &message[at + statement.len()..]].concat()),
        None => scrub_quoted_hex(message),
    };
    if let Some(rewritten) = rewritten {
        line.set_message(&rewritten);
    }
}

/// The message with every double-quoted part made only of hexadecimal digits, and every run of
/// six or more hexadecimal digits, replaced; `None` when nothing changed. What a parser quotes
/// from a statement (`at or near "0123a"`) can be a piece of a key; a quoted name
/// (`"randflake.secret"`) is not.
fn scrub_quoted_hex(message: &[u8]) -> Option<Vec<u8>> {
    const LONGEST_RUN_KEPT: usize = 5;
    let mut scrubbed = Vec::with_capacity(message.len());
    let mut rest = message;
    while let Some(&byte) = rest.first() {
        let quoted = (byte == b'"').then(|| rest[1..].iter().position(|&byte| byte == b'"')).flatten();
        let run = rest.iter().take_while(|byte| byte.is_ascii_hexdigit()).count();
        match quoted {
            Some(length) if length > 0 && rest[1..=length].iter().all(u8::is_ascii_hexdigit) => {
                scrubbed.extend_from_slice(b"\"(hidden)\"");
                rest = &rest[length + 2..];
            }
            _ if run > LONGEST_RUN_KEPT => {
                scrubbed.extend_from_slice(b"(hidden)");
                rest = &rest[run..];
            }
            _ => {
                let kept = run.max(1);
                scrubbed.extend_from_slice(&rest[..kept]);
                rest = &rest[kept..];
            }
        }
    }
    (scrubbed != message).then_some(scrubbed)
}

/// The rewritten text of a configuration-file message that would quote the secret, or `None`.
/// Recognised by PostgreSQL's untranslated format, so that `lc_messages` cannot hide one.
fn configuration_message(line: &LogLine) -> Option<Vec<u8>> {
    let message = line.message()?;
    match line.message_id()? {
        RELOAD_CHANGE if names_secret_setting(message) => {
            Some([b"parameter \"randflake.secret\" changed ", VALUE_HIDDEN].concat())
        }
        FILE_SYNTAX_ERROR => file_syntax_error(message),
        _ => None,
    }
}

/// Whether a message names the `randflake.secret` setting (not `randflake.secret_file`).
fn names_secret_setting(message: &[u8]) -> bool {
    let lower = message.to_ascii_lowercase();
    let name = b"randflake.secret";
    lower.windows(name.len()).enumerate().any(|(at, window)| {
        window == name && !lower.get(at + name.len()).is_some_and(|next| next.is_ascii_alphanumeric() || *next == b'_')
    })
}

/// `syntax error in file "F" line N, near token "T"`: the token is hidden when line N of F sets
/// `randflake.secret`, since it is then a piece of the value. A translated message cannot be
/// taken apart, and is replaced whole.
fn file_syntax_error(message: &[u8]) -> Option<Vec<u8>> {
    let Some((file, line_number, token)) = syntax_error_parts(message) else {
        return Some(
            b"syntax error in a configuration file (message hidden by randflake_pg: it may quote part of randflake.secret; set lc_messages to C to see where)"
                .to_vec(),
        );
    };
    if !line_sets_secret(file, line_number) {
        return None;
    }
    let token_at = message.len() - token.len() - 1;
    Some([&message[..token_at], VALUE_HIDDEN, b"\""].concat())
}

/// The file, line number and token of the English message.
fn syntax_error_parts(message: &[u8]) -> Option<(&[u8], usize, &[u8])> {
    let rest = message.strip_prefix(b"syntax error in file \"")?;
    let file_end = find(rest, b"\" line ")?;
    let (file, rest) = (&rest[..file_end], &rest[file_end + b"\" line ".len()..]);
    let number_end = find(rest, b", near token \"")?;
    let line_number = std::str::from_utf8(&rest[..number_end]).ok()?.parse().ok()?;
    let token = rest[number_end + b", near token \"".len()..].strip_suffix(b"\"")?;
    Some((file, line_number, token))
}

/// Whether line `number` (from 1) of a configuration file sets `randflake.secret`; true when the
/// file cannot be read, since the token must then be assumed to be part of the secret.
fn line_sets_secret(file: &[u8], number: usize) -> bool {
    let Ok(contents) = std::fs::read(std::ffi::OsStr::from_bytes(file)) else { return true };
    let Some(line) = contents.split(|&byte| byte == b'\n').nth(number.saturating_sub(1)) else { return true };
    let line = line.trim_ascii_start();
    let name_end = line.iter().position(|byte| *byte == b'=' || byte.is_ascii_whitespace()).unwrap_or(line.len());
    line[..name_end].eq_ignore_ascii_case(b"randflake.secret")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_pieces_of_a_key_are_hidden_and_plain_words_kept() {
        let scrubbed = scrub_quoted_hex(b"trailing junk after numeric literal at or near \"0123a\"").unwrap();
        assert_eq!(scrubbed, b"trailing junk after numeric literal at or near \"(hidden)\"");
        assert_eq!(scrub_quoted_hex(b"syntax error at or near \"=\""), None);
        assert_eq!(scrub_quoted_hex(b"permission denied to examine \"randflake.secret\""), None);
        assert_eq!(scrub_quoted_hex(b"value 0123456789abcdef here").unwrap(), b"value (hidden) here");
    }

    #[test]
    fn the_secret_file_setting_is_not_the_secret() {
        assert!(names_secret_setting(b"parameter \"RANDFLAKE.SECRET\" changed to \"x\""));
        assert!(!names_secret_setting(b"parameter \"randflake.secret_file\" changed to \"x\""));
        assert!(mentions_secret(b"alter system set \"RANDFLAKE\".\"secret\" = 'x'"));
        assert!(!mentions_secret(b"show randflake.secret_file"));
    }

    #[test]
    fn escapes_that_could_spell_the_name_are_parsed() {
        assert!(may_name_secret(b"ALTER SYSTEM SET U&\"randfl\\0061ke.s\\0065cret\" = 'x'"));
        assert!(may_name_secret(b"select set_config(E'randflake.\\163ecret', 'x', false)"));
        assert!(!may_name_secret(b"insert into t values (1)"));
    }

    #[test]
    fn the_english_syntax_error_is_taken_apart() {
        let message = b"syntax error in file \"/etc/pg/postgresql.conf\" line 12, near token \"0123456789abcdef\"";
        assert_eq!(syntax_error_parts(message), Some((&b"/etc/pg/postgresql.conf"[..], 12, &b"0123456789abcdef"[..])));
        assert_eq!(syntax_error_parts(b"erreur de syntaxe dans le fichier"), None);
    }
}
