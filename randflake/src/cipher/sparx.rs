//! SPARX-64/128: the 64-bit block cipher under a 128-bit key (Dinu et al., ASIACRYPT 2016).
//!
//! Randflake needs a permutation of 64-bit values, not a general-purpose cipher mode, so only
//! block operations are exposed: on one block, or on many independent blocks side by side
//! (see [`crate::cipher::words`]). Bytes are read as four big-endian 16-bit words, which is the
//! convention of the cipher's reference code and of every Randflake port.

use core::fmt;

use crate::cipher::secret::wipe;
use crate::cipher::words::Word;

const STEPS: usize = 8;
const ROUNDS_PER_STEP: usize = 3;
const BRANCHES: usize = 2;
const SUBKEY_COUNT: usize = BRANCHES * STEPS + 1;

type Subkey = [u16; 2 * ROUNDS_PER_STEP];

/// An expanded SPARX-64/128 key, ready to encrypt or decrypt 8-byte blocks.
///
/// The key schedule runs once in [`Sparx64::new`]; encryption then costs 24 ARX rounds.
/// The round keys are wiped when the value is dropped and never printed by `Debug`.
#[derive(Clone)]
pub struct Sparx64 {
    subkeys: [Subkey; SUBKEY_COUNT],
}

/// The ARX-box (a Speck-32 round without key addition), after adding the round keys.
#[inline(always)]
fn arx<W: Word>(left: W, right: W, key_left: u16, key_right: u16) -> (W, W) {
    let (left, right) = (left ^ W::splat(key_left), right ^ W::splat(key_right));
    let left = left.rotate_left(9).wrapping_add(right);
    (left, right.rotate_left(2) ^ left)
}

/// The inverse of [`arx`], key removal included.
#[inline(always)]
fn arx_inverse<W: Word>(left: W, right: W, key_left: u16, key_right: u16) -> (W, W) {
    let right = (right ^ left).rotate_left(14);
    let left = left.wrapping_sub(right).rotate_left(7);
    (left ^ W::splat(key_left), right ^ W::splat(key_right))
}

/// The linear layer: mixes the left branch into the right one, then swaps the branches.
#[inline(always)]
fn linear<W: Word>([a, b, c, d]: [W; 4]) -> [W; 4] {
    let mix = (a ^ b).rotate_left(8);
    [c ^ a ^ mix, d ^ b ^ mix, a, b]
}

#[inline(always)]
fn linear_inverse<W: Word>([a, b, c, d]: [W; 4]) -> [W; 4] {
    let mix = (c ^ d).rotate_left(8);
    [c, d, a ^ c ^ mix, b ^ d ^ mix]
}

#[inline(always)]
fn whiten<W: Word>(x: [W; 4], whitening: &Subkey) -> [W; 4] {
    [0, 1, 2, 3].map(|word| x[word] ^ W::splat(whitening[word]))
}

fn expand_key(key: &[u8; 16]) -> [Subkey; SUBKEY_COUNT] {
    let mut state = [0u16; 8];
    for (word, pair) in state.iter_mut().zip(key.chunks_exact(2)) {
        *word = u16::from_be_bytes([pair[0], pair[1]]);
    }
    let mut subkeys = [[0u16; 2 * ROUNDS_PER_STEP]; SUBKEY_COUNT];
    for (counter, subkey) in (1u16..).zip(subkeys.iter_mut()) {
        subkey.copy_from_slice(&state[..2 * ROUNDS_PER_STEP]);
        let (left, right) = arx(state[0], state[1], 0, 0);
        state[0] = left;
        state[1] = right;
        state[2] = state[2].wrapping_add(left);
        state[3] = state[3].wrapping_add(right);
        state[7] = state[7].wrapping_add(counter);
        state.rotate_right(2);
    }
    wipe(&mut state);
    subkeys
}

/// A block as the cipher reads it: four big-endian 16-bit words.
#[inline(always)]
fn words_of(block: [u8; 8]) -> [u16; 4] {
    [0, 1, 2, 3].map(|word| u16::from_be_bytes([block[2 * word], block[2 * word + 1]]))
}

#[inline(always)]
fn block_of(words: [u16; 4]) -> [u8; 8] {
    let mut block = [0u8; 8];
    for (pair, word) in block.chunks_exact_mut(2).zip(words) {
        pair.copy_from_slice(&word.to_be_bytes());
    }
    block
}

impl Sparx64 {
    /// Runs the key schedule for a 128-bit key.
    pub fn new(key: &[u8; 16]) -> Self {
        Self { subkeys: expand_key(key) }
    }

    /// Encrypts one 8-byte block.
    #[inline]
    pub fn encrypt_block(&self, block: [u8; 8]) -> [u8; 8] {
        block_of(self.encrypt_words(words_of(block)))
    }

    /// Decrypts one 8-byte block: the exact inverse of [`Sparx64::encrypt_block`].
    #[inline]
    pub fn decrypt_block(&self, block: [u8; 8]) -> [u8; 8] {
        block_of(self.decrypt_words(words_of(block)))
    }

    /// Encrypts blocks given as their four big-endian 16-bit words: one block with `u16`, `N`
    /// blocks at once with [`Lanes<N>`](crate::cipher::words::Lanes). Always inlined, so that the
    /// lane-wise code is compiled for the vector width of the caller (see
    /// [`crate::cipher::batch`]).
    #[inline(always)]
    pub fn encrypt_words<W: Word>(&self, mut x: [W; 4]) -> [W; 4] {
        // The state moves as whole values, never indexed by a loop variable, so that wide words
        // stay in registers even where the compiler does not unroll the steps.
        for [left_key, right_key] in self.step_subkeys() {
            let [a, b, c, d] = x;
            let (a, b) = arx_rounds(a, b, left_key);
            let (c, d) = arx_rounds(c, d, right_key);
            x = linear([a, b, c, d]);
        }
        whiten(x, &self.subkeys[SUBKEY_COUNT - 1])
    }

    /// The exact inverse of [`Sparx64::encrypt_words`].
    #[inline(always)]
    pub fn decrypt_words<W: Word>(&self, x: [W; 4]) -> [W; 4] {
        let mut x = whiten(x, &self.subkeys[SUBKEY_COUNT - 1]);
        for [left_key, right_key] in self.step_subkeys().rev() {
            let [a, b, c, d] = linear_inverse(x);
            let (a, b) = arx_rounds_inverse(a, b, left_key);
            let (c, d) = arx_rounds_inverse(c, d, right_key);
            x = [a, b, c, d];
        }
        x
    }

    /// The round keys of each step: one per branch.
    #[inline(always)]
    fn step_subkeys(&self) -> impl DoubleEndedIterator<Item = &[Subkey; BRANCHES]> {
        self.subkeys[..BRANCHES * STEPS].as_chunks::<BRANCHES>().0.iter()
    }
}

/// One branch's rounds of a step.
#[inline(always)]
fn arx_rounds<W: Word>(mut left: W, mut right: W, subkey: &Subkey) -> (W, W) {
    for round in 0..ROUNDS_PER_STEP {
        (left, right) = arx(left, right, subkey[2 * round], subkey[2 * round + 1]);
    }
    (left, right)
}

#[inline(always)]
fn arx_rounds_inverse<W: Word>(mut left: W, mut right: W, subkey: &Subkey) -> (W, W) {
    for round in (0..ROUNDS_PER_STEP).rev() {
        (left, right) = arx_inverse(left, right, subkey[2 * round], subkey[2 * round + 1]);
    }
    (left, right)
}

impl Drop for Sparx64 {
    fn drop(&mut self) {
        wipe(self.subkeys.as_flattened_mut());
    }
}

impl fmt::Debug for Sparx64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sparx64 { subkeys: <redacted> }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cipher::words::Lanes;

    #[test]
    fn arx_box_and_linear_layer_invert() {
        for (left, right) in [(0u16, 0u16), (1, 0xffff), (0x1234, 0xabcd), (0xffff, 0xffff)] {
            let (l, r) = arx(left, right, 0x5a5a, 0x0f0f);
            assert_eq!(arx_inverse(l, r, 0x5a5a, 0x0f0f), (left, right));
        }
        let original = [0x0123u16, 0x4567, 0x89ab, 0xcdef];
        assert_ne!(linear(original), original);
        assert_eq!(linear_inverse(linear(original)), original);
    }

    #[test]
    fn wide_words_encrypt_each_lane_as_a_single_block() {
        let cipher = Sparx64::new(&[7; 16]);
        let lanes: [[u16; 16]; 4] =
            core::array::from_fn(|word| core::array::from_fn(|lane| ((lane * 4 + word) as u16).wrapping_mul(0x1357)));
        let encrypted = cipher.encrypt_words(lanes.map(Lanes)).map(|word| word.0);
        for lane in 0..16 {
            let alone = cipher.encrypt_words(lanes.map(|word| word[lane]));
            assert_eq!(alone, encrypted.map(|word| word[lane]));
        }
        let decrypted = cipher.decrypt_words(encrypted.map(Lanes)).map(|word| word.0);
        assert_eq!(decrypted, lanes);
    }

    #[test]
    fn debug_output_hides_round_keys() {
        let cipher = Sparx64::new(&[0xab; 16]);
        let printed = format!("{cipher:?}");
        assert!(printed.contains("redacted"));
        assert!(!printed.to_lowercase().contains("ab"), "{printed}");
    }
}
