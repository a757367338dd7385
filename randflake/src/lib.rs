//! Randflake IDs: 64-bit identifiers that are unique across a fleet of generators yet look
//! random to anyone without the secret.
//!
//! This crate is the Rust implementation of the Randflake format. It produces and reads exactly
//! the same IDs as the reference ports in Go (`gosuda.org/randflake/v2`), Python (`randflake`
//! on PyPI, module `randflake.v2`) and TypeScript, and it is the engine of the `randflake_pg`
//! PostgreSQL extension: an ID made by any of them decodes here, and the other way round.
//!
//! # The format
//!
//! An ID starts as three fields packed into 64 bits, most significant first:
//!
//! | bits | field | range |
//! |------|-------|-------|
//! | 30 | seconds since [`EPOCH_SECOND`] (Unix second 1730000000) | Unix seconds up to [`MAX_SECOND`] (late 2058) |
//! | 17 | node | `0..=`[`MAX_NODE`] (131071) |
//! | 17 | sequence within the node and second | `0..=`[`MAX_SEQUENCE`] (131071) |
//!
//! that is `raw = (unix_seconds - 1730000000) << 34 | node << 17 | sequence` ([`Parts::to_raw`]).
//! The raw value is written little-endian into eight bytes, that block is encrypted with the
//! SPARX-64/128 block cipher ([`sparx`](cipher::sparx)) under a 16-byte [`Secret`], and the result
//! is read back little-endian as a signed `i64`: the ID. [`IdCipher`] does both directions.
//!
//! A block cipher is a permutation, so distinct `(second, node, sequence)` triples always give
//! distinct IDs under one secret. The ID itself carries no visible structure: no timestamp prefix,
//! no ordering, no node bits.
//!
//! IDs also have a text form ([`codec`]): the unsigned 64-bit value in base32hex (digits `0-9a-v`,
//! lower case, no padding, no leading zeros), 1 to 13 characters. Parsing is strict: only the
//! exact string [`codec::encode`] produces is accepted, so each ID has one spelling.
//!
//! ```
//! use randflake::{codec, IdCipher, Parts, Secret};
//!
//! let cipher = IdCipher::new(&Secret::from_hex("dffd6021bb2bd5b0af676290809ec3a5").unwrap());
//! let parts = Parts::new(1733706297, 42, 1).unwrap();
//! let id = cipher.encrypt(parts);
//! assert_eq!(id, 4594531474933654033);
//! assert_eq!(codec::encode(id).as_str(), "3vgoe12ccb8gh");
//! assert_eq!(cipher.decrypt(id), parts);
//! ```
//!
//! # Security model
//!
//! * **Without the secret an ID reveals nothing**: not when it was made, not by which node, not
//!   how many IDs came before it. Two IDs made a microsecond apart look as unrelated as two
//!   random numbers. This rests on SPARX-64/128 being a good pseudorandom permutation and on the
//!   secret being random and private.
//! * **Holders of the secret can decode** every ID back into its second, node and sequence. Give
//!   the secret only to the systems that generate IDs and to those that are allowed to learn when
//!   and where an ID was made. [`Secret`] never prints its bytes (`Debug` is redacted, error
//!   messages describe only the shape of bad input) and wipes them when dropped.
//! * **The secret must never change** for a population of IDs. Uniqueness holds only among IDs
//!   encrypted under the same secret: an ID issued under a new secret can equal one issued under
//!   the old one, and old IDs no longer decode to their true parts. Store it with the same care
//!   as the data the IDs identify; losing it loses the ability to decode, not the IDs themselves.
//! * **An ID is not authenticated.** Every 64-bit number decrypts to *some* valid-looking
//!   triple ([`IdCipher::decrypt`] cannot fail), so decoding a value someone sent you proves
//!   nothing about whether it was ever issued. Nobody without the secret can choose an ID that
//!   decodes to parts of their liking, but anybody can send an arbitrary number. Check existence
//!   in your data, not by decoding.
//!
//! # Decoding IDs made elsewhere
//!
//! To read IDs made by PostgreSQL's `randflake_pg` (`SELECT randflake_next()`), or by the Go,
//! Python or TypeScript ports, load the same secret (the extension's `randflake.secret` or
//! `randflake.secret_file`) and decrypt. IDs arrive either as the signed 64-bit integer (a
//! PostgreSQL `bigint`) or as the base32hex text (`randflake_to_string(id)` in SQL):
//!
//! ```
//! use randflake::{codec, IdCipher, Secret};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // In an application: Secret::from_key_file(path) or the hex from your secret store.
//! let secret = Secret::from_hex("dffd6021bb2bd5b0af676290809ec3a5")?;
//! let cipher = IdCipher::new(&secret);
//!
//! let from_bigint = cipher.decrypt(4594531474933654033);
//! let from_text = cipher.decrypt(codec::decode("3vgoe12ccb8gh")?);
//! assert_eq!(from_bigint, from_text);
//! assert_eq!((from_bigint.timestamp, from_bigint.node_id, from_bigint.sequence), (1733706297, 42, 1));
//! # Ok(())
//! # }
//! ```
//!
//! The `decode` example (`cargo run --example decode -- <ids>`) does the same from the command
//! line, one line per ID.
//!
//! # Generating IDs in an application
//!
//! A [`Generator`] decides which `(second, node, sequence)` to issue next; [`IdCipher`] turns
//! that into the ID. The generator owns neither a clock nor nodes: the caller passes the current
//! Unix second to every [`Generator::next`] call and hands it nodes when it asks, so the rules
//! that keep IDs unique are the caller's to keep:
//!
//! 1. **A node belongs to one generator at a time**, across every process and server that shares
//!    the secret, for as long as that generator may issue with it (its lease window). Two
//!    generators on the same node in the same second can issue the same ID. Assign nodes from
//!    configuration, from a lease table (see [`lease`]), or from a pool inside one process.
//! 2. **A node changing hands skips the seconds already used with it.** [`Generator::adopt`]
//!    takes the last second any earlier holder may have issued in (`used_through`), and the node
//!    is never used at or before it. The caller learns that second from
//!    [`Step::Issued`]`{ opened_second: true, .. }` and must record it (durably, if a restarted
//!    process will take the node over) before handing out the IDs of that step.
//! 3. **The clock never goes backwards for a node.** A reading earlier than a second the
//!    generator (or its node's previous holder) already used is refused with
//!    [`Refusal::ClockBehind`]; readings outside the generator's [`Window`] are refused with
//!    [`Refusal::BeforeWindow`] or [`Refusal::AfterWindow`] (or [`Refusal::PastLastSecond`],
//!    past the last second an ID can carry). A refusal changes nothing, so the caller may wait
//!    for the clock to catch up and call again, or report an error. The generator never
//!    backdates or invents seconds.
//!
//! Each call of [`Generator::next`] returns a [`Step`]: IDs to issue, a request for a node
//! ([`Step::NeedNode`], when the held node has used all 131072 sequences of this second), or a
//! request to wait for the next second ([`Step::WaitUntil`], when the per-second node budget is
//! spent). A process that owns a single node, with a simulated clock:
//!
//! ```
//! use randflake::{Generator, IdCipher, Refusal, Secret, Step, Window};
//!
//! /// The next ID at clock reading `now`, or `None` when the node has no sequence left in this
//! /// second and the caller should try again in the next one.
//! fn next_id(
//!     generator: &mut Generator,
//!     cipher: &IdCipher,
//!     node: u32,
//!     used_through: &mut u64,
//!     now: u64,
//! ) -> Result<Option<i64>, Refusal> {
//!     loop {
//!         match generator.next(now, 1, 1)? {
//!             Step::Issued { first, opened_second, .. } => {
//!                 if opened_second {
//!                     // Record (durably, in a real application) before the ID leaves.
//!                     *used_through = first.timestamp;
//!                 }
//!                 return Ok(Some(cipher.encrypt(first)));
//!             }
//!             // Our only node: take it (back) once its last used second is over.
//!             Step::NeedNode { .. } if *used_through < now => generator.adopt(node, *used_through),
//!             Step::NeedNode { .. } | Step::WaitUntil { .. } => return Ok(None),
//!         }
//!     }
//! }
//!
//! let cipher = IdCipher::new(&Secret::from_hex("dffd6021bb2bd5b0af676290809ec3a5").unwrap());
//! let t = 1_800_000_000;
//! // This process holds node 7 for ten minutes; the node was last used at second t - 1.
//! let mut generator = Generator::new(Window::new(t, t + 599).unwrap());
//! let mut used_through = t - 1;
//!
//! let first = next_id(&mut generator, &cipher, 7, &mut used_through, t).unwrap().unwrap();
//! let second = next_id(&mut generator, &cipher, 7, &mut used_through, t).unwrap().unwrap();
//! assert_ne!(first, second);
//! assert_eq!(cipher.decrypt(second).sequence, 1);
//!
//! let later = next_id(&mut generator, &cipher, 7, &mut used_through, t + 5).unwrap().unwrap();
//! assert_eq!(cipher.decrypt(later).sequence, 0);
//!
//! // The clock steps back two seconds: refused, nothing issued, nothing changed.
//! let refused = next_id(&mut generator, &cipher, 7, &mut used_through, t + 3);
//! assert_eq!(refused, Err(Refusal::ClockBehind { now: t + 3, used: t + 5 }));
//! // Past the window (the lease ran out and was not renewed): refused as well.
//! assert!(next_id(&mut generator, &cipher, 7, &mut used_through, t + 600).is_err());
//! ```
//!
//! The `generate` example (`cargo run --example generate`) shows a fuller loop with a pool of
//! nodes, real time and waiting. Capacity: 131072 IDs per node per second, 131072 nodes.
//!
//! # Modules
//!
//! Grouped by what they are about:
//!
//! * [`format`](mod@format): what an ID is. [`layout`](format::layout): the bit fields and their
//!   limits ([`Parts`]); [`codec`]: the strict base32hex text form; [`id`](format::id): [`Id`], an
//!   ID whose text is that form, and, with the `serde` feature, whose JSON is that string too;
//!   [`ordered`](format::ordered): the order of plain values that randflake_pg's key sorts by.
//! * [`cipher`]: what turns a layout value into an ID. [`sparx`](cipher::sparx): the
//!   SPARX-64/128 block cipher; [`words`](cipher::words): the 16-bit words it runs on, one block
//!   or many side by side; [`batch`](cipher::batch): [`BATCH`] IDs at once, on the CPU's widest
//!   vectors; [`secret`](cipher::secret): parsing the secret from hex or from a private key file.
//! * [`generator`]: the clock-driven state machine ([`Generator`], [`Step`], [`Refusal`]).
//! * [`decisions`]: what randflake_pg decides without a server, [`lease`] among them: arithmetic
//!   of node leases shared by many servers ([`Lease`], [`Terms`]).
//! * [`shared`]: the lock-free protocols of randflake_pg's shared memory (node table, lease
//!   board), generic over their atomics so that a model checker can run them.
//!
//! The crate has no dependencies (serde, with the `serde` feature; loom, with the `loom` feature
//! for the model check). Its only `unsafe` is the SSE2 intrinsics, the calls into the AVX2 and
//! AVX-512 kernels once the CPU has reported them, and volatile wiping of key material. Its minimum supported Rust version is 1.89.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod cipher;
pub mod decisions;
pub mod format;
pub mod generator;
pub mod shared;

// The modules the crate's README names, where it names them.
pub use decisions::lease;
pub use format::codec;

pub use cipher::batch::{Kernel, BATCH};
pub use cipher::secret::{Secret, SecretError};
pub use codec::{IdString, ParseIdError};
pub use format::id::Id;
pub use format::layout::{Parts, EPOCH_SECOND, MAX_NODE, MAX_SECOND, MAX_SEQUENCE};
pub use generator::{Generator, Refusal, Step, Window};
pub use lease::{Lease, Renewal, Terms, HIGH_WATER_LEAD};

/// Turns [`Parts`] into IDs and back under one secret. The key schedule runs once, in
/// [`IdCipher::new`]; after that the cipher is immutable and can be shared between threads.
///
/// ```
/// use randflake::{IdCipher, Parts, Secret};
///
/// let cipher = IdCipher::new(&Secret::from_hex("dffd6021bb2bd5b0af676290809ec3a5").unwrap());
/// let parts = Parts::new(1733706297, 42, 1).unwrap();
/// assert_eq!(cipher.encrypt(parts), 4594531474933654033);
/// assert_eq!(cipher.decrypt(4594531474933654033), parts);
/// ```
#[derive(Clone, Debug)]
pub struct IdCipher {
    cipher: cipher::sparx::Sparx64,
    kernel: Kernel,
}

impl IdCipher {
    /// Expands `secret` into the cipher's round keys. The secret itself is not kept. Batches
    /// use the fastest [`Kernel`] this CPU runs.
    pub fn new(secret: &Secret) -> Self {
        Self::with_kernel(secret, Kernel::best())
    }

    /// As [`IdCipher::new`], with batches encrypted by `kernel`: for tests and benchmarks.
    pub fn with_kernel(secret: &Secret, kernel: Kernel) -> Self {
        Self { cipher: cipher::sparx::Sparx64::new(secret.as_bytes()), kernel }
    }

    /// The kernel [`IdCipher::encrypt_raw_batch`] runs.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Encrypts an unencrypted 64-bit layout value ([`Parts::to_raw`]) into the signed ID.
    ///
    /// ```
    /// # use randflake::{IdCipher, Secret};
    /// let cipher = IdCipher::new(&Secret::from_hex("dffd6021bb2bd5b0af676290809ec3a5").unwrap());
    /// assert_eq!(cipher.encrypt_raw(63673697622556673), 4594531474933654033);
    /// ```
    #[inline]
    pub fn encrypt_raw(&self, raw: u64) -> i64 {
        i64::from_le_bytes(self.cipher.encrypt_block(raw.to_le_bytes()))
    }

    /// Encrypts [`BATCH`] values at once, for a fraction of the time per ID of one at a time.
    /// Equal, lane for lane, to [`IdCipher::encrypt_raw`] of each value.
    ///
    /// ```
    /// # use randflake::{IdCipher, Secret, BATCH};
    /// let cipher = IdCipher::new(&Secret::from_hex("dffd6021bb2bd5b0af676290809ec3a5").unwrap());
    /// let raws: [u64; BATCH] = core::array::from_fn(|lane| 1000 + lane as u64);
    /// let ids = cipher.encrypt_raw_batch(&raws);
    /// assert_eq!(ids[3], cipher.encrypt_raw(1003));
    /// ```
    #[inline]
    pub fn encrypt_raw_batch(&self, raws: &[u64; BATCH]) -> [i64; BATCH] {
        self.kernel.encrypt(&self.cipher, raws)
    }

    /// Recovers the unencrypted layout value of an ID: the inverse of [`IdCipher::encrypt_raw`].
    #[inline]
    pub fn decrypt_raw(&self, id: i64) -> u64 {
        u64::from_le_bytes(self.cipher.decrypt_block(id.to_le_bytes()))
    }

    /// Encrypts the parts of an ID into the ID.
    #[inline]
    pub fn encrypt(&self, parts: Parts) -> i64 {
        self.encrypt_raw(parts.to_raw())
    }

    /// Decrypts any 64-bit value into parts. IDs are not authenticated: a value that was never
    /// issued still decrypts to some (second, node, sequence), so this cannot fail and proves
    /// nothing about where the value came from.
    ///
    /// ```
    /// # use randflake::{IdCipher, Secret};
    /// let cipher = IdCipher::new(&Secret::from_hex("dffd6021bb2bd5b0af676290809ec3a5").unwrap());
    /// let parts = cipher.decrypt(4594531474933654033);
    /// assert_eq!((parts.timestamp, parts.node_id, parts.sequence), (1733706297, 42, 1));
    /// // Any number decodes to something.
    /// let _ = cipher.decrypt(12345);
    /// ```
    #[inline]
    pub fn decrypt(&self, id: i64) -> Parts {
        Parts::from_raw(self.decrypt_raw(id))
    }
}

/// The code blocks of `README.md`, compiled and run by `cargo test --doc` so they stay correct.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
