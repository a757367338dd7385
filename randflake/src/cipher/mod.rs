//! The permutation that turns a layout value into an ID: the SPARX-64/128 block cipher
//! ([`sparx`]) on its 16-bit words ([`words`]), [`BATCH`](batch::BATCH) values at once on the
//! CPU's widest vectors ([`batch`]), and the secret that keys it ([`secret`]).

pub mod batch;
pub mod secret;
pub mod sparx;
pub mod words;
