//! The canonical string form of an ID: base32hex (RFC 4648 alphabet `0-9a-v`) of the
//! unsigned 64-bit value, lowercase, without padding or leading zeros.
//!
//! Parsing accepts exactly the strings that encoding produces, so every ID has one spelling and
//! strings can be compared, indexed and deduplicated as text.

use core::fmt;

const ALPHABET: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";

/// Longest string form: 13 digits of 5 bits cover 64 bits.
pub const MAX_STRING_LEN: usize = 13;

/// Why a string is not the canonical form of an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseIdError {
    /// The empty string.
    Empty,
    /// More than [`MAX_STRING_LEN`] characters.
    TooLong {
        /// The string's length in characters.
        length: usize,
    },
    /// A `0` before other digits.
    LeadingZero,
    /// A character outside `0-9a-v`, at a character (not byte) position counted from 0.
    InvalidCharacter {
        /// The offending character.
        character: char,
        /// Its position, in characters from 0.
        position: usize,
    },
    /// Thirteen digits whose value exceeds 2^64 − 1.
    Overflow,
}

impl fmt::Display for ParseIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("the string is empty"),
            Self::TooLong { length } => {
                write!(f, "the string has {length} characters, more than the {MAX_STRING_LEN} an ID can need")
            }
            Self::LeadingZero => f.write_str("the string has a leading zero"),
            Self::InvalidCharacter { character, position } => {
                if character.is_ascii_uppercase() {
                    write!(f, "upper-case character {character:?} at position {position}")
                } else {
                    write!(f, "character {character:?} at position {position} is not a base32hex digit")
                }
            }
            Self::Overflow => f.write_str("the value does not fit in 64 bits"),
        }
    }
}

impl std::error::Error for ParseIdError {}

/// A stack buffer holding an ID's string form, so encoding allocates nothing.
#[derive(Clone, Copy)]
pub struct IdString {
    digits: [u8; MAX_STRING_LEN],
    start: usize,
}

impl IdString {
    /// The string form, 1 to [`MAX_STRING_LEN`] characters of `0-9a-v`.
    pub fn as_str(&self) -> &str {
        // Every byte comes from ALPHABET, which is ASCII.
        core::str::from_utf8(&self.digits[self.start..]).expect("alphabet is ASCII")
    }
}

impl AsRef<str> for IdString {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for IdString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for IdString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Encodes a signed ID by its unsigned 64-bit value.
///
/// ```
/// use randflake::codec;
///
/// assert_eq!(codec::encode(4594531474933654033).as_str(), "3vgoe12ccb8gh");
/// assert_eq!(codec::encode(-1).to_string(), "fvvvvvvvvvvvv");
/// assert_eq!(codec::encode(0).as_str(), "0");
/// ```
pub fn encode(id: i64) -> IdString {
    let mut value = id as u64;
    let mut digits = [b'0'; MAX_STRING_LEN];
    let mut start = MAX_STRING_LEN;
    loop {
        start -= 1;
        digits[start] = ALPHABET[(value & 31) as usize];
        value >>= 5;
        if value == 0 {
            break;
        }
    }
    IdString { digits, start }
}

fn digit_value(byte: u8) -> Option<u64> {
    match byte {
        b'0'..=b'9' => Some(u64::from(byte - b'0')),
        b'a'..=b'v' => Some(u64::from(byte - b'a' + 10)),
        _ => None,
    }
}

/// Parses the canonical string form back into the signed ID.
///
/// Only what [`encode`] produces is accepted: lower-case digits `0-9a-v`, no leading zero, no
/// white space, sign or padding, and a value that fits in 64 bits.
///
/// ```
/// use randflake::codec::{self, ParseIdError};
///
/// assert_eq!(codec::decode("3vgoe12ccb8gh"), Ok(4594531474933654033));
/// assert_eq!(codec::decode("fvvvvvvvvvvvv"), Ok(-1));
/// assert_eq!(codec::decode("0v").unwrap_err(), ParseIdError::LeadingZero);
/// assert_eq!(codec::decode("3VGOE12CCB8GH").unwrap_err(), ParseIdError::InvalidCharacter { character: 'V', position: 1 });
/// ```
pub fn decode(text: &str) -> Result<i64, ParseIdError> {
    if text.is_empty() {
        return Err(ParseIdError::Empty);
    }
    let length = text.chars().count();
    if length > MAX_STRING_LEN {
        return Err(ParseIdError::TooLong { length });
    }
    let mut value: u64 = 0;
    for (position, character) in text.chars().enumerate() {
        let digit = u8::try_from(character)
            .ok()
            .and_then(digit_value)
            .ok_or(ParseIdError::InvalidCharacter { character, position })?;
        value = value.checked_mul(32).map(|shifted| shifted | digit).ok_or(ParseIdError::Overflow)?;
    }
    if text.starts_with('0') && length > 1 {
        return Err(ParseIdError::LeadingZero);
    }
    Ok(value as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extremes_round_trip() {
        for (id, text) in [
            (0i64, "0"),
            (1, "1"),
            (31, "v"),
            (32, "10"),
            (i64::MAX, "7vvvvvvvvvvvv"),
            (i64::MIN, "8000000000000"),
            (-1, "fvvvvvvvvvvvv"),
        ] {
            assert_eq!(encode(id).as_str(), text);
            assert_eq!(decode(text), Ok(id));
        }
    }

    #[test]
    fn non_canonical_strings_are_rejected_with_their_reason() {
        assert_eq!(decode(""), Err(ParseIdError::Empty));
        assert_eq!(decode("00"), Err(ParseIdError::LeadingZero));
        assert_eq!(decode("01"), Err(ParseIdError::LeadingZero));
        assert_eq!(decode("A"), Err(ParseIdError::InvalidCharacter { character: 'A', position: 0 }));
        assert_eq!(decode("0="), Err(ParseIdError::InvalidCharacter { character: '=', position: 1 }));
        assert_eq!(decode("g000000000000"), Err(ParseIdError::Overflow));
        assert_eq!(decode("vvvvvvvvvvvvv"), Err(ParseIdError::Overflow));
        assert_eq!(decode("-1"), Err(ParseIdError::InvalidCharacter { character: '-', position: 0 }));
        assert_eq!(decode(" 1"), Err(ParseIdError::InvalidCharacter { character: ' ', position: 0 }));
        assert_eq!(decode("1 "), Err(ParseIdError::InvalidCharacter { character: ' ', position: 1 }));
        assert_eq!(decode("w"), Err(ParseIdError::InvalidCharacter { character: 'w', position: 0 }));
        assert_eq!(decode("é"), Err(ParseIdError::InvalidCharacter { character: 'é', position: 0 }));
        assert_eq!(decode("10000000000000"), Err(ParseIdError::TooLong { length: 14 }));
    }

    #[test]
    fn messages_name_upper_case_explicitly() {
        let message = decode("1V").unwrap_err().to_string();
        assert!(message.contains("upper-case"), "{message}");
    }
}
