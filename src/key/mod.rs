//! `randflake_key`, in one place: a Randflake ID stored as its plain value, so that an index on
//! it grows at its right end as an identity key's does, and shown encrypted everywhere an ID
//! leaves the server. Its SQL objects are declared in one stretch of
//! sql/randflake_pg--0.5.0--0.6.0.sql, in the order of these files:
//!
//! * `io`: text and binary input and output, and the casts in and out (making a key of a public
//!   ID is decoding: `pg::decoder_grant` decides who may);
//! * `order`: the comparison functions, `max()` and `min()`'s transition functions and the sort
//!   support, in the order of `randflake::format::ordered`;
//! * `public_ids`: equality with public IDs (which makes no key, so it is everyone's) and the
//!   hash, which is bigint's hash of the public ID;
//! * `time`: the generator, time bounds and the decoders.
//!
//! docs/ordered-keys.md is the user's guide.
#![deny(unsafe_code)]

mod io;
mod order;
mod public_ids;
mod time;

use crate::secret;

/// The public ID of a key: what its text and binary forms show and what it is compared with.
fn public_id(key: i64) -> i64 {
    secret::with_cipher_or_raise(|cipher| cipher.encrypt_raw(key as u64))
}

/// The plain value of a public ID: what a key of it holds.
fn plain_value(id: i64) -> u64 {
    secret::with_cipher_or_raise(|cipher| cipher.decrypt_raw(id))
}
