//! Decodes Randflake IDs into the second, node and sequence they were made from.
//!
//! ```text
//! RANDFLAKE_SECRET=<32 hex digits> cargo run -q -p randflake --example decode -- [OPTIONS] ID...
//! RANDFLAKE_SECRET_FILE=/path/to/key cargo run -q -p randflake --example decode -- ID...
//! ```
//!
//! The secret comes from exactly one of two environment variables: `RANDFLAKE_SECRET` (the 32 hex
//! digits) or `RANDFLAKE_SECRET_FILE` (a file holding them, readable by its owner only, as for
//! the `randflake.secret_file` setting of `randflake_pg`). It is never printed.
//!
//! # Reading IDs
//!
//! IDs are signed decimal 64-bit integers (a PostgreSQL `bigint`), or with `--string` their
//! base32hex string form (`randflake_to_string(id)` in SQL). A token such as `12` could be
//! either, so the rule is explicit rather than guessed: `12` is the ID 12 and `--string 12` the
//! ID 34. This is the contract the Python and Go examples in the repository's `examples/` share.
//!
//! # Output
//!
//! One line per ID, in the order given, five fields separated by single spaces:
//!
//! ```text
//! <id> <string> <unix_seconds> <node> <sequence>
//! ```
//!
//! `<id>` is the signed decimal ID, `<string>` its canonical string form, `<unix_seconds>` the
//! Unix second it was made in (decimal), `<node>` and `<sequence>` decimal. This format is stable:
//! tests compare it with SQL's `randflake_decode()` (whose `timestamp` column is
//! `to_timestamp(<unix_seconds>)`). For example, with the secret
//! `dffd6021bb2bd5b0af676290809ec3a5`, both `4594531474933654033` and `3vgoe12ccb8gh` print
//!
//! ```text
//! 4594531474933654033 3vgoe12ccb8gh 1733706297 42 1
//! ```
//!
//! Decoding does not authenticate: every 64-bit number decodes to some second, node and
//! sequence, whether or not it was ever issued.
//!
//! # Exit status
//!
//! 0 when every ID was decoded (and for `--help`). 2 for a missing or malformed secret, an
//! unknown option, no ID at all or any token that is not an ID; then every bad token is reported
//! on standard error and nothing is printed on standard output. 1 when the output cannot be
//! written.

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use randflake::{codec, IdCipher, Secret};

const USAGE: &str = "usage: RANDFLAKE_SECRET=<hex> | RANDFLAKE_SECRET_FILE=<path> \
                     decode [--string] ID...";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Err(Failure::Usage(messages)) => {
            for message in messages {
                eprintln!("decode: {message}");
            }
            ExitCode::from(2)
        }
        Err(Failure::Output(error)) => {
            eprintln!("decode: cannot write the output: {error}");
            ExitCode::from(1)
        }
    }
}

enum Failure {
    /// `--help`: the usage on standard output, exit status 0.
    Help,
    /// Bad secret, options or IDs: exit status 2.
    Usage(Vec<String>),
    /// Standard output failed: exit status 1.
    Output(io::Error),
}

fn usage(message: String) -> Failure {
    Failure::Usage(vec![message])
}

fn run() -> Result<(), Failure> {
    let (strings, tokens) = parse_arguments(std::env::args().skip(1))?;
    let cipher = IdCipher::new(&load_secret()?);

    let mut ids = Vec::with_capacity(tokens.len());
    let mut errors = Vec::new();
    for token in &tokens {
        match parse_id(strings, token) {
            Ok(id) => ids.push(id),
            Err(reason) => errors.push(format!("{token:?} is not an ID: {reason}")),
        }
    }
    if !errors.is_empty() {
        return Err(Failure::Usage(errors));
    }

    let mut out = BufWriter::new(io::stdout().lock());
    for id in ids {
        let parts = cipher.decrypt(id);
        writeln!(out, "{id} {} {} {} {}", codec::encode(id), parts.timestamp, parts.node_id, parts.sequence)
            .map_err(Failure::Output)?;
    }
    out.flush().map_err(Failure::Output)
}

/// Whether the IDs are strings (`--string`), and the ID tokens.
fn parse_arguments(arguments: impl Iterator<Item = String>) -> Result<(bool, Vec<String>), Failure> {
    let mut strings = false;
    let mut tokens = Vec::new();
    for argument in arguments {
        match argument.as_str() {
            "--string" => strings = true,
            "--help" | "-h" => return Err(Failure::Help),
            // Negative decimal IDs start with '-' too; only `--` options are options.
            option if option.starts_with("--") => return Err(usage(format!("unknown option {option:?}\n{USAGE}"))),
            _ => tokens.push(argument),
        }
    }
    if tokens.is_empty() {
        return Err(usage(format!("no ID given\n{USAGE}")));
    }
    Ok((strings, tokens))
}

fn parse_id(string: bool, token: &str) -> Result<i64, String> {
    if string {
        return codec::decode(token).map_err(|error| format!("not an ID string ({error})"));
    }
    // i64's parser also takes a leading '+'; a bigint never prints one, so refuse it.
    if token.starts_with('+') {
        return Err("a decimal ID has no '+' sign".to_owned());
    }
    token.parse::<i64>().map_err(|error| format!("not a signed 64-bit decimal integer ({error})"))
}

fn load_secret() -> Result<Secret, Failure> {
    let hex = std::env::var_os("RANDFLAKE_SECRET");
    let file = std::env::var_os("RANDFLAKE_SECRET_FILE");
    // Messages name the variable and describe the problem; they never contain the value.
    match (hex, file) {
        (Some(_), Some(_)) => {
            Err(usage("both RANDFLAKE_SECRET and RANDFLAKE_SECRET_FILE are set; set only one".to_owned()))
        }
        (None, None) => Err(usage(format!(
            "set RANDFLAKE_SECRET to the 32-hex-digit secret or RANDFLAKE_SECRET_FILE to a file holding it\n{USAGE}"
        ))),
        (Some(hex), None) => {
            let hex = hex.to_str().ok_or_else(|| usage("RANDFLAKE_SECRET is not valid UTF-8".to_owned()))?;
            Secret::from_hex(hex).map_err(|error| usage(format!("RANDFLAKE_SECRET: {error}")))
        }
        (None, Some(path)) => {
            Secret::from_key_file(Path::new(&path)).map_err(|error| usage(format!("RANDFLAKE_SECRET_FILE: {error}")))
        }
    }
}
