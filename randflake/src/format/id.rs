//! [`Id`]: an ID as a type of its own, whose text is the canonical string.
//!
//! A JSON number read by JavaScript, and by many other JSON parsers, keeps 53 bits, so a 64-bit
//! ID sent as a number arrives rounded to a different ID, with no error. With the `serde`
//! feature an [`Id`] is serialized as its canonical string and deserialized only from one,
//! parsed as strictly as [`codec::decode`]: a number, an upper-case or zero-padded string is an
//! error, never a guess.

use core::fmt;
use core::str::FromStr;

use crate::format::codec::{self, ParseIdError};

/// A Randflake ID. Displays as its canonical string and parses from exactly that string.
///
/// ```
/// use randflake::Id;
///
/// let id = Id(4594531474933654033);
/// assert_eq!(id.to_string(), "3vgoe12ccb8gh");
/// assert_eq!("3vgoe12ccb8gh".parse(), Ok(id));
/// assert!("3VGOE12CCB8GH".parse::<Id>().is_err());
/// assert_eq!(i64::from(Id(-1)), -1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id(pub i64);

impl From<i64> for Id {
    fn from(id: i64) -> Self {
        Self(id)
    }
}

impl From<Id> for i64 {
    fn from(id: Id) -> Self {
        id.0
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(codec::encode(self.0).as_str())
    }
}

impl FromStr for Id {
    type Err = ParseIdError;

    fn from_str(text: &str) -> Result<Self, ParseIdError> {
        codec::decode(text).map(Self)
    }
}

#[cfg(feature = "serde")]
mod with_serde {
    use core::fmt;

    use serde::de::{self, Deserialize, Deserializer, Visitor};
    use serde::ser::{Serialize, Serializer};

    use super::Id;
    use crate::format::codec;

    impl Serialize for Id {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_str(codec::encode(self.0).as_str())
        }
    }

    impl<'de> Deserialize<'de> for Id {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_str(CanonicalString)
        }
    }

    /// Accepts strings only; any other JSON (or other format's) value is a type error.
    struct CanonicalString;

    impl Visitor<'_> for CanonicalString {
        type Value = Id;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a Randflake ID string: 1 to 13 lower-case base32hex digits")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Id, E> {
            // The input is left out of the message: it may be long, or not meant for logs.
            text.parse().map_err(|reason| E::custom(format_args!("invalid Randflake ID string: {reason}")))
        }
    }
}
