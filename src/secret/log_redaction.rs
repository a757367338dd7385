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
//! Which statement carries the secret: the guard (`sql_routes`) marks each statement it refuses;
//! any other statement is judged by its spelling, generously, with every escape that could spell
//! a letter decoded (`spelling_may_carry_secret`). The filter never calls PostgreSQL's parser: the
//! parser raises an ERROR on text it cannot parse, and the same text parses differently, or not
//! at all, once `standard_conforming_strings` has changed since PostgreSQL parsed it (as a `SET`
//! earlier in the same query string changes it); it also warns (`escape_string_warning`). An
//! ERROR raised inside error reporting cannot be caught and undone: PostgreSQL empties
//! ErrorContext, which holds the message being reported, before it handles a nested error.
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
use crate::pg::statement;
use crate::secret;

const VALUE_HIDDEN: &[u8] = b"(value hidden by randflake_pg)";
const STATEMENT_HIDDEN: &[u8] = b"<statement hidden by randflake_pg: it may give randflake.secret a value>";
const SQL_HIDDEN: &[u8] = b"(hidden by randflake_pg: it quotes a statement that may give randflake.secret a value)";

/// PostgreSQL's untranslated formats of the two configuration-file messages that quote values.
const RELOAD_CHANGE: &[u8] = b"parameter \"%s\" changed to \"%s\"";
const FILE_SYNTAX_ERROR: &[u8] = b"syntax error in file \"%s\" line %u, near token \"%s\"";

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
    sql_routes::current_statement_was_refused()
        || secret::redact(text, b"").is_some()
        || binds_secret_name(line)
        || (line.is_syntax_error() && may_name_secret(text))
        || spelling_may_carry_secret(text)
}

/// Whether text could, once parsed, name the secret's setting: it contains `secret`, or an
/// escape that could spell it (`U&"..."`, `U&'...'`, a backslash in an `E'...'` string). For a
/// statement PostgreSQL could not parse, whose spelling is all there is.
fn may_name_secret(text: &[u8]) -> bool {
    let lower = text.to_ascii_lowercase();
    find(&lower, b"secret").is_some() || find(&lower, b"u&").is_some() || lower.contains(&b'\\')
}

/// Whether a statement could give the secret a value, judged by its spelling, generously: read
/// as it is and with its escapes decoded, both as `E'...'` strings decode them (and as every
/// string does with `standard_conforming_strings` off) and as `U&` strings and names do, it
/// names `randflake.secret` ([`mentions_secret`]), calls `set_config()` with a first argument
/// other than a plain literal naming another setting (a name computed as the statement runs),
/// or chooses its own Unicode escape character (`UESCAPE`), which is left undecoded.
fn spelling_may_carry_secret(text: &[u8]) -> bool {
    let lower = text.to_ascii_lowercase();
    find(&lower, b"uescape").is_some()
        || [decode_backslash_escapes(text), decode_unicode_escapes(text), lower]
            .iter()
            .any(|spelling| mentions_secret(spelling) || calls_set_config_with_computed_name(spelling))
}

/// Text, lowercased, with each backslash escape of an `E'...'` string replaced by the character
/// it stands for: `\x` and one or two hex digits, one to three octal digits, `\u` and four or
/// `\U` and eight hex digits, any other character for itself. A character beyond ASCII becomes
/// a byte that no setting name holds.
fn decode_backslash_escapes(text: &[u8]) -> Vec<u8> {
    let mut decoded = Vec::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        let Some(&escaped) = text.get(at + 1).filter(|_| text[at] == b'\\') else {
            decoded.push(text[at].to_ascii_lowercase());
            at += 1;
            continue;
        };
        let after = &text[at + 2..];
        let (value, length) = match escaped {
            b'x' => digits(after, 16, 2).map_or((u32::from(escaped), 1), |(value, count)| (value, 1 + count)),
            b'u' | b'U' => digits(after, 16, if escaped == b'u' { 4 } else { 8 })
                .map_or((u32::from(escaped), 1), |(value, count)| (value, 1 + count)),
            b'0'..=b'7' => digits(&text[at + 1..], 8, 3).unwrap_or_default(),
            _ => (u32::from(escaped), 1),
        };
        decoded.push(ascii_or_placeholder(value));
        at += 1 + length;
    }
    decoded
}

/// Text, lowercased, with each escape of a `U&` string or name (`\` and four hex digits, `\+` and
/// six) replaced by the character it stands for, as in [`decode_backslash_escapes`].
fn decode_unicode_escapes(text: &[u8]) -> Vec<u8> {
    let mut decoded = Vec::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        let escape = match &text[at..] {
            [b'\\', b'+', after @ ..] => {
                digits(after, 16, 6).filter(|(_, count)| *count == 6).map(|(value, _)| (value, 8))
            }
            [b'\\', after @ ..] => digits(after, 16, 4).filter(|(_, count)| *count == 4).map(|(value, _)| (value, 5)),
            _ => None,
        };
        let (byte, length) =
            escape.map_or((text[at].to_ascii_lowercase(), 1), |(value, length)| (ascii_or_placeholder(value), length));
        decoded.push(byte);
        at += length;
    }
    decoded
}

/// The value of the (up to `most`) digits in `radix` that `text` starts with, and their count;
/// `None` when it starts with none.
fn digits(text: &[u8], radix: u32, most: usize) -> Option<(u32, usize)> {
    let values: Vec<u32> = text.iter().take(most).map_while(|byte| char::from(*byte).to_digit(radix)).collect();
    let value = values.iter().fold(0u32, |value, digit| value.wrapping_mul(radix).wrapping_add(*digit));
    (!values.is_empty()).then_some((value, values.len()))
}

fn ascii_or_placeholder(value: u32) -> u8 {
    u8::try_from(value).ok().filter(u8::is_ascii).map_or(0x80, |byte| byte.to_ascii_lowercase())
}

/// Whether lowercased text calls `set_config` with a first argument other than a plain literal
/// naming a setting other than the secret: a name computed as the statement runs
/// (`'randflake.s' || 'ecret'`, `$1`, `format(...)`), or one a comment stands before.
fn calls_set_config_with_computed_name(text: &[u8]) -> bool {
    const NAME: &[u8] = b"set_config";
    (0..text.len()).filter(|at| text[*at..].starts_with(NAME)).any(|at| {
        let rest = text[at + NAME.len()..].trim_ascii_start();
        if rest.starts_with(b"/*") || rest.starts_with(b"--") {
            return true;
        }
        let Some(argument) = rest.strip_prefix(b"(").map(<[u8]>::trim_ascii_start) else { return false };
        if argument.starts_with(b"/*") || argument.starts_with(b"--") {
            return true;
        }
        let Some(literal) = argument.strip_prefix(b"'") else { return true };
        let Some(end) = literal.iter().position(|byte| *byte == b'\'') else { return true };
        let (name, after) = (&literal[..end], literal[end + 1..].trim_ascii_start());
        name.contains(&b'\\')
            || !after.starts_with(b",")
            || sql_routes::names_the_secret(&String::from_utf8_lossy(name))
    })
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
    fn escapes_that_could_spell_the_name_count_for_a_statement_that_did_not_parse() {
        assert!(may_name_secret(b"ALTER SYSTEM SET U&\"randfl\\0061ke.s\\0065cret\" = 'x'"));
        assert!(may_name_secret(b"select set_config(E'randflake.\\163ecret', 'x', false)"));
        assert!(!may_name_secret(b"insert into t values (1)"));
    }

    #[test]
    fn every_spelling_of_the_name_and_every_computed_name_is_caught() {
        for carrying in [
            &b"ALTER SYSTEM SET \"RANDFLAKE\".\"Secret\" = 'x'"[..],
            b"ALTER SYSTEM SET U&\"randfl\\0061ke.s\\0065cret\" = 'x'",
            b"ALTER SYSTEM SET U&\"randfl\\+000061ke.secret\" = 'x'",
            b"ALTER SYSTEM SET U&\"randfl!0061ke.secret\" UESCAPE '!' = 'x'",
            b"select set_config(E'randflake.\\163ecret', 'x', false)",
            b"select set_config(E'randfl\\x61ke.s' || 'ecret', 'x', false)",
            b"select set_config(E'randfl\\u0061ke.\\u0073ecret', 'x', false)",
            b"select set_config('randflake.s' || 'ecret', 'x', false)",
            b"select set_config(format('%s.%s', 'randflake', 'secret'), 'x', false)",
            b"select pg_catalog.set_config ( $1, $2, false)",
            b"select set_config(/* */ 'randflake.secret', 'x', false)",
            b"prepare p as select set_config($1, $2, false)",
            b"execute p('randflake.secret', 'x')",
            b"do $$begin perform set_config('randflake.' || 'secret', 'x', false); end$$",
        ] {
            assert!(spelling_may_carry_secret(carrying), "{}", String::from_utf8_lossy(carrying));
        }
        for plain in [
            &b"SET standard_conforming_strings = off; INSERT INTO t SELECT current_user; SET application_name = '\\';"
                [..],
            b"SELECT pg_catalog.set_config('search_path', '', false);",
            b"select 'a\\nb', E'\\x41'",
            b"show randflake.secret_file",
            b"select secret from vault",
        ] {
            assert!(!spelling_may_carry_secret(plain), "{}", String::from_utf8_lossy(plain));
        }
    }

    #[test]
    fn escapes_decode_as_postgresql_reads_them() {
        assert_eq!(decode_backslash_escapes(b"A\\x41\\101\\u0041\\U00000041\\q\\\\"), b"aaaaaq\\");
        assert_eq!(decode_backslash_escapes(b"\\u0073ecret"), b"secret");
        assert_eq!(decode_unicode_escapes(b"\\0061\\+000062\\006"), b"ab\\006");
        assert_eq!(decode_backslash_escapes(b"\\u00e9"), [0x80]);
    }

    #[test]
    fn the_english_syntax_error_is_taken_apart() {
        let message = b"syntax error in file \"/etc/pg/postgresql.conf\" line 12, near token \"0123456789abcdef\"";
        assert_eq!(syntax_error_parts(message), Some((&b"/etc/pg/postgresql.conf"[..], 12, &b"0123456789abcdef"[..])));
        assert_eq!(syntax_error_parts(b"erreur de syntaxe dans le fichier"), None);
    }
}
