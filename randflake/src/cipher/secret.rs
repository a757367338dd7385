//! The 128-bit secret that keys the ID permutation, and the two ways to supply it: 32 hex digits,
//! or a private key file holding them.
//!
//! No error, `Debug` output or panic message in this module contains key material: callers put
//! these messages in server logs that other people read.

use core::fmt;
use std::io::Read;
use std::path::Path;

/// Length of the secret in its hex form.
pub const SECRET_HEX_LEN: usize = 32;

/// A key file larger than this cannot be a key; refusing early keeps a mistaken path (a log, a
/// database file) from being read whole.
const KEY_FILE_MAX_BYTES: u64 = 4096;

/// The 16-byte Randflake secret. Wiped on drop; `Debug` prints no key bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; 16]);

/// Why a value is not a usable secret. Messages describe the shape, never the content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretError {
    /// Not exactly 32 characters (after trimming surrounding white space, for key files).
    WrongLength {
        /// The length found, in characters.
        length: usize,
    },
    /// A character that is not a hexadecimal digit.
    NotHex {
        /// Its 0-based character position.
        position: usize,
    },
    /// The key file could not be opened or read; carries the OS error text, not the content.
    Unreadable {
        /// The operating system's description of the failure.
        reason: String,
    },
    /// The key file is larger than any key file can be.
    FileTooLarge {
        /// The file's size.
        bytes: u64,
    },
    /// The key file can be read by its group or by everybody (Unix permission bits).
    FileTooOpen {
        /// The file's permission bits.
        mode: u32,
    },
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WrongLength { length } => {
                write!(f, "the secret has {length} characters; it must be exactly {SECRET_HEX_LEN} hexadecimal digits")
            }
            Self::NotHex { position } => write!(f, "the secret has a non-hexadecimal character at position {position}"),
            Self::Unreadable { reason } => write!(f, "the key file cannot be read: {reason}"),
            Self::FileTooLarge { bytes } => {
                write!(f, "the key file has {bytes} bytes, far more than a {SECRET_HEX_LEN}-digit key")
            }
            Self::FileTooOpen { mode } => {
                write!(f, "the key file has permissions {mode:04o}; it must not be accessible to group or others")
            }
        }
    }
}

impl std::error::Error for SecretError {}

impl Secret {
    /// Uses 16 bytes as the secret, in the order the hex form spells them.
    ///
    /// A new secret should come from a cryptographically secure random source, for example
    /// `openssl rand -hex 16`, and then never change.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// Parses exactly 32 hex digits, either case, with nothing around them.
    ///
    /// ```
    /// use randflake::{Secret, SecretError};
    ///
    /// let secret = Secret::from_hex("DFFD6021BB2BD5B0AF676290809EC3A5").unwrap();
    /// assert_eq!(secret.as_bytes()[0], 0xdf);
    /// assert_eq!(Secret::from_hex("dffd"), Err(SecretError::WrongLength { length: 4 }));
    /// // Neither errors nor `Debug` show the key.
    /// assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
    /// ```
    pub fn from_hex(text: &str) -> Result<Self, SecretError> {
        let length = text.chars().count();
        if length != SECRET_HEX_LEN || text.len() != SECRET_HEX_LEN {
            return Err(SecretError::WrongLength { length });
        }
        let mut bytes = [0u8; 16];
        for (index, pair) in text.as_bytes().chunks_exact(2).enumerate() {
            let high = hex_value(pair[0]).ok_or(SecretError::NotHex { position: 2 * index })?;
            let low = hex_value(pair[1]).ok_or(SecretError::NotHex { position: 2 * index + 1 })?;
            bytes[index] = (high << 4) | low;
        }
        Ok(Self(bytes))
    }

    /// Reads a key file: 32 hex digits, surrounding white space (a trailing newline) allowed.
    ///
    /// Like PostgreSQL's `ssl_key_file`, a file that its group or others may access is refused on
    /// Unix, so a key that leaked through permissions is never silently used.
    pub fn from_key_file(path: &Path) -> Result<Self, SecretError> {
        let unreadable = |error: std::io::Error| SecretError::Unreadable { reason: error.to_string() };
        let file = std::fs::File::open(path).map_err(unreadable)?;
        let metadata = file.metadata().map_err(unreadable)?;
        check_private(&metadata)?;
        if metadata.len() > KEY_FILE_MAX_BYTES {
            return Err(SecretError::FileTooLarge { bytes: metadata.len() });
        }
        let mut content = Vec::with_capacity(64);
        file.take(KEY_FILE_MAX_BYTES + 1).read_to_end(&mut content).map_err(unreadable)?;
        let parsed = match std::str::from_utf8(&content) {
            Ok(text) => Self::from_hex(text.trim()),
            Err(error) => Err(SecretError::NotHex { position: error.valid_up_to() }),
        };
        wipe(&mut content);
        parsed
    }

    /// The 16 key bytes, as SPARX-64/128 takes them.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// `text` with every run of hexadecimal digits that holds [`REDACTED_PIECE_DIGITS`] or more
    /// consecutive digits of this secret's hex form, in either case, replaced by `replacement`;
    /// `None` when the text has none. For text that others read, such as a server log: the
    /// secret, or a piece of it that narrows a search for it, is taken out wherever it appears.
    ///
    /// ```
    /// use randflake::Secret;
    ///
    /// let secret = Secret::from_hex("dffd6021bb2bd5b0af676290809ec3a5").unwrap();
    /// let logged = b"statement: SELECT f('DFFD6021BB2BD5B0AF676290809EC3A5'), 'bb2bd5b0af'";
    /// assert_eq!(
    ///     secret.redact(logged, b"<hidden>").unwrap(),
    ///     b"statement: SELECT f('<hidden>'), '<hidden>'",
    /// );
    /// assert_eq!(secret.redact(b"id 4594531474933654033", b"<hidden>"), None);
    /// ```
    pub fn redact(&self, text: &[u8], replacement: &[u8]) -> Option<Vec<u8>> {
        // Each piece of the secret as the 32-bit number its eight digits spell, so that a long
        // text costs one shift and a few comparisons per digit.
        let nibble = |at: usize| u32::from(self.0[at / 2] >> (4 * (1 - at % 2)) & 0xf);
        let mut pieces: [u32; SECRET_HEX_LEN - REDACTED_PIECE_DIGITS + 1] = core::array::from_fn(|start| {
            (start..start + REDACTED_PIECE_DIGITS).fold(0, |value, at| value << 4 | nibble(at))
        });
        let holds_piece = |run: &[u8]| {
            let mut value = 0u32;
            run.iter().enumerate().any(|(at, &digit)| {
                value = value << 4 | u32::from(hex_value(digit).unwrap_or(0));
                at + 1 >= REDACTED_PIECE_DIGITS && pieces.contains(&value)
            })
        };
        let mut redacted: Option<Vec<u8>> = None;
        let (mut copied, mut at) = (0, 0);
        while at < text.len() {
            let run = text[at..].iter().take_while(|byte| byte.is_ascii_hexdigit()).count();
            if run >= REDACTED_PIECE_DIGITS && holds_piece(&text[at..at + run]) {
                let out = redacted.get_or_insert_with(|| Vec::with_capacity(text.len()));
                out.extend_from_slice(&text[copied..at]);
                out.extend_from_slice(replacement);
                copied = at + run;
            }
            at += run.max(1);
        }
        wipe(&mut pieces);
        redacted.map(|mut out| {
            out.extend_from_slice(&text[copied..]);
            out
        })
    }
}

/// How many consecutive hex digits of the secret [`Secret::redact`] takes to be a piece of it:
/// 32 bits, which text not derived from the secret matches by chance about once in a hundred
/// million runs.
pub const REDACTED_PIECE_DIGITS: usize = 8;

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(unix)]
fn check_private(metadata: &std::fs::Metadata) -> Result<(), SecretError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretError::FileTooOpen { mode });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_metadata: &std::fs::Metadata) -> Result<(), SecretError> {
    Ok(())
}

/// Overwrites key material with zeros in a way the optimiser may not elide: the secret's bytes
/// here, the cipher's round keys in `sparx`.
pub(crate) fn wipe<T: Copy + Default>(values: &mut [T]) {
    for value in values.iter_mut() {
        // SAFETY: `value` is a valid, aligned, exclusive reference to an initialised `T`, and
        // `T: Copy` has no destructor that overwriting could skip.
        unsafe { core::ptr::write_volatile(value, T::default()) };
    }
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
}

impl Drop for Secret {
    fn drop(&mut self) {
        wipe(&mut self.0);
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    const KEY: &str = "00112233445566778899aabbccddeeff";

    /// A key file in the system temp directory, removed on drop.
    struct TempKeyFile(std::path::PathBuf);

    impl TempKeyFile {
        fn new(content: &str, mode: u32) -> Self {
            static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("randflake-key-{}-{n}", std::process::id()));
            let mut file = std::fs::File::create(&path).unwrap();
            file.write_all(content.as_bytes()).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            Self(path)
        }
    }

    impl Drop for TempKeyFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn hex_secrets_parse_in_either_case() {
        let lower = Secret::from_hex(KEY).unwrap();
        let upper = Secret::from_hex(&KEY.to_uppercase()).unwrap();
        assert_eq!(lower, upper);
        assert_eq!(lower.as_bytes()[..3], [0x00, 0x11, 0x22]);
    }

    #[test]
    fn malformed_secrets_are_described_without_their_content() {
        for (text, expected) in [
            ("", SecretError::WrongLength { length: 0 }),
            ("0011", SecretError::WrongLength { length: 4 }),
            (&format!("{KEY}00"), SecretError::WrongLength { length: 34 }),
            (&format!(" {}", &KEY[1..]), SecretError::NotHex { position: 0 }),
            (&format!("{}g", &KEY[..31]), SecretError::NotHex { position: 31 }),
            (&format!("{}é", &KEY[..31]), SecretError::WrongLength { length: 32 }),
        ] {
            let error = Secret::from_hex(text).unwrap_err();
            assert_eq!(error, expected, "{text:?}");
            let message = error.to_string();
            assert!(!message.contains("0011") && !message.contains("eeff"), "{message}");
        }
    }

    #[test]
    fn debug_hides_the_key() {
        let printed = format!("{:?}", Secret::from_hex(KEY).unwrap());
        assert_eq!(printed, "Secret(<redacted>)");
    }

    #[test]
    fn key_files_allow_surrounding_white_space() {
        let file = TempKeyFile::new(&format!("{KEY}\n"), 0o600);
        assert_eq!(Secret::from_key_file(&file.0).unwrap(), Secret::from_hex(KEY).unwrap());
    }

    #[test]
    fn key_files_readable_by_others_are_refused() {
        let file = TempKeyFile::new(KEY, 0o644);
        assert_eq!(Secret::from_key_file(&file.0), Err(SecretError::FileTooOpen { mode: 0o644 }));
        let file = TempKeyFile::new(KEY, 0o640);
        assert_eq!(Secret::from_key_file(&file.0), Err(SecretError::FileTooOpen { mode: 0o640 }));
    }

    #[test]
    fn bad_key_files_are_refused_without_echoing_content() {
        let missing = Secret::from_key_file(Path::new("/nonexistent/randflake.key")).unwrap_err();
        assert!(matches!(missing, SecretError::Unreadable { .. }));
        let file = TempKeyFile::new("not a key at all", 0o600);
        let error = Secret::from_key_file(&file.0).unwrap_err();
        assert_eq!(error, SecretError::WrongLength { length: 16 });
        assert!(!error.to_string().contains("not a key"));
        let big = TempKeyFile::new(&"0".repeat(5000), 0o600);
        assert_eq!(Secret::from_key_file(&big.0), Err(SecretError::FileTooLarge { bytes: 5000 }));
    }

    #[test]
    fn redaction_takes_out_every_piece_of_eight_digits_and_nothing_else() {
        let secret = Secret::from_hex(KEY).unwrap();
        let hidden = |text: &str| secret.redact(text.as_bytes(), b"#").map(|text| String::from_utf8(text).unwrap());
        assert_eq!(hidden("key 00112233445566778899AABBCCDDEEFF."), Some("key #.".into()));
        assert_eq!(hidden("near token \"66778899aabb\""), Some("near token \"#\"".into()));
        // Two halves, and a piece inside a longer run of other digits.
        assert_eq!(hidden("0011223344556677 || 8899aabbccddeeff"), Some("# || #".into()));
        assert_eq!(hidden("ffff2233445566ffff"), Some("#".into()));
        // Seven digits of it, or eight that are not consecutive in it, are not a piece.
        assert_eq!(hidden("0011223 and 00112244"), None);
        assert_eq!(hidden(""), None);
    }
}
