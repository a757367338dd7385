//! The forms a `randflake_key` takes outside the server, which are all the encrypted ID: its text
//! and binary input and output, and the casts between it and `bigint` or `randflake_id`. Every
//! way in makes a key of a public ID, which only roles that may decode may do.
#![deny(unsafe_code)]

use pgrx::prelude::*;
use randflake::format::codec;

use super::{plain_value, public_id};
use crate::errors::Error;
use crate::functions::randflake_id_in;
use crate::pg;
use crate::pg::decoder_grant;
use crate::pg::entry::{Arguments, ByteaResult, CStringResult};

// The input, output, receive and send functions of `randflake_key` and its casts in are written by
// hand (`pg::entry`), as randflake_next() is: `COPY ... TO` calls the output function once per
// key, and through pgrx's wrapper (its guard, the argument and result boxing, a String and a
// CString copied into a palloc'd one) printing a key cost 2.2x printing the same ID as a bigint
// (bench/bench.py's key_edge step).
pg::entry::entry_points! {
    /// Input of `randflake_key`: the canonical string of the ID, decrypted, for a caller that
    /// may decode.
    randflake_key_in_wrapper, pg_finfo_randflake_key_in_wrapper => key_in;
    /// Output of `randflake_key`: the canonical string of the ID, as randflake_to_string()
    /// writes it, in the one palloc'd buffer returned.
    randflake_key_out_wrapper, pg_finfo_randflake_key_out_wrapper => key_out;
    /// Binary input of `randflake_key`: the ID as bigint's eight bytes, decrypted, for a caller
    /// that may decode.
    randflake_key_recv_wrapper, pg_finfo_randflake_key_recv_wrapper => key_recv;
    /// Binary output of `randflake_key`: the ID as bigint's eight bytes.
    randflake_key_send_wrapper, pg_finfo_randflake_key_send_wrapper => key_send;
    /// The casts into `randflake_key` from `bigint` and `randflake_id` (the same eight bytes):
    /// the public ID, decrypted, for a caller that may decode.
    randflake_key_from_id_wrapper, pg_finfo_randflake_key_from_id_wrapper => key_from_id;
}

/// The key of a public ID, for a caller that may decode (`pg::decoder_grant`); otherwise the
/// refusal, or the error of a missing secret.
fn key_of(arguments: &Arguments, id: i64) -> i64 {
    decoder_grant::require(arguments.function());
    plain_value(id) as i64
}

fn key_in(arguments: &Arguments) -> i64 {
    let input = arguments.cstring(0);
    key_of(arguments, randflake_id_in(input))
}

fn key_out(arguments: &Arguments) -> CStringResult<codec::IdString> {
    CStringResult(codec::encode(public_id(arguments.int8(0))))
}

fn key_recv(arguments: &Arguments) -> i64 {
    let id = match arguments.message::<8>(0) {
        Ok(bytes) => i64::from_be_bytes(bytes),
        Err(length) => Error::InvalidKeyBinary { length }.raise(),
    };
    key_of(arguments, id)
}

fn key_send(arguments: &Arguments) -> ByteaResult<[u8; 8]> {
    ByteaResult(public_id(arguments.int8(0)).to_be_bytes())
}

fn key_from_id(arguments: &Arguments) -> i64 {
    key_of(arguments, arguments.int8(0))
}

/// The ID a `randflake_key` holds, encrypted: the cast out of `randflake_key`, and what its
/// text and binary forms show.
#[pg_extern(stable, strict, parallel_safe, sql = false)]
fn randflake_key_to_id(key: i64) -> i64 {
    public_id(key)
}
