//! The secret as this process knows it: one slot per configuration source, filled by the GUC
//! assign hooks, and the rule that picks between them.
//!
//! The key schedule runs when a setting is assigned (at start-up or reload), never per call.
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use randflake::{IdCipher, Secret};

use crate::errors::Error;

#[derive(Clone, Copy)]
pub enum SecretSource {
    /// `randflake.secret`
    Setting,
    /// `randflake.secret_file`
    File,
}

/// A configured secret: its cipher, and the secret itself, kept only to take it out of log lines.
struct Keyed {
    cipher: IdCipher,
    secret: Secret,
}

struct Ciphers {
    from_setting: Option<Keyed>,
    from_file: Option<Keyed>,
}

thread_local! {
    static CIPHERS: RefCell<Ciphers> = const { RefCell::new(Ciphers { from_setting: None, from_file: None }) };
}

/// Counts installs, so that IDs encrypted ahead under an older secret are never served. An
/// atomic rather than a field of `CIPHERS`: it is read on every call of randflake_next().
static VERSION: AtomicU64 = AtomicU64::new(0);

/// Records the secret one source now provides (`None`: the source is unset).
pub fn install(source: SecretSource, secret: Option<Secret>) {
    let keyed = secret.map(|secret| Keyed { cipher: IdCipher::new(&secret), secret });
    CIPHERS.with_borrow_mut(|ciphers| match source {
        SecretSource::Setting => ciphers.from_setting = keyed,
        SecretSource::File => ciphers.from_file = keyed,
    });
    VERSION.fetch_add(1, Ordering::Relaxed);
}

/// Whether `source` provides a secret (valid, or it would not have been assigned).
pub fn is_set(source: SecretSource) -> bool {
    CIPHERS.with_borrow(|ciphers| match source {
        SecretSource::Setting => ciphers.from_setting.is_some(),
        SecretSource::File => ciphers.from_file.is_some(),
    })
}

/// Changes whenever either secret setting is assigned.
#[inline]
pub fn version() -> u64 {
    VERSION.load(Ordering::Relaxed)
}

/// Runs `f` with the configured cipher. Exactly one source must be set: with two, neither is
/// trusted, since the one left over by mistake may be the wrong key.
#[inline]
pub fn with_cipher<R>(f: impl FnOnce(&IdCipher) -> R) -> Result<R, Error> {
    CIPHERS.with_borrow(|ciphers| match (&ciphers.from_setting, &ciphers.from_file) {
        (Some(keyed), None) | (None, Some(keyed)) => Ok(f(&keyed.cipher)),
        (None, None) => Err(Error::NoSecret {}),
        (Some(_), Some(_)) => Err(Error::TwoSecrets {}),
    })
}

/// Runs `f` with the configured cipher, or raises the error saying why there is none: what the
/// SQL functions that encrypt or decrypt one value do.
pub fn with_cipher_or_raise<R>(f: impl FnOnce(&IdCipher) -> R) -> R {
    with_cipher(f).unwrap_or_else(|error| error.raise())
}

/// Why this process cannot issue or decode an ID, in words: no secret, or two; `None` when it
/// has one to key its cipher with.
pub fn cannot_issue_because() -> Option<String> {
    with_cipher(|_| ()).err().map(|error| error.message())
}

/// `text` with every piece of a configured secret replaced by `replacement` (see
/// [`Secret::redact`]); `None` when it holds none, and once the process has dropped its
/// secrets on the way out (the log hook still runs then, for the exit's own messages).
pub fn redact(text: &[u8], replacement: &[u8]) -> Option<Vec<u8>> {
    CIPHERS
        .try_with(|ciphers| {
            let ciphers = ciphers.try_borrow().ok()?;
            let mut redacted = None;
            for keyed in [&ciphers.from_setting, &ciphers.from_file].into_iter().flatten() {
                let current = redacted.as_deref().unwrap_or(text);
                redacted = keyed.secret.redact(current, replacement).or(redacted);
            }
            redacted
        })
        .ok()
        .flatten()
}
