//! SPARX-64/128: the 64-bit block cipher under a 128-bit key (Dinu et al., ASIACRYPT 2016).
//!
//! Randflake needs a permutation of 64-bit values, not a general-purpose cipher mode, so only the
//! single-block operations are exposed. Bytes are read as four big-endian 16-bit words, which is
//! the convention of the cipher's reference code and of every Randflake port.

use core::fmt;

const STEPS: usize = 8;
const ROUNDS_PER_STEP: usize = 3;
const BRANCHES: usize = 2;
const SUBKEY_COUNT: usize = BRANCHES * STEPS + 1;

type Subkey = [u16; 2 * ROUNDS_PER_STEP];

/// An expanded SPARX-64/128 key, ready to encrypt or decrypt single 8-byte blocks.
///
/// The key schedule runs once in [`Sparx64::new`]; encryption then costs 24 ARX rounds.
/// The round keys are wiped when the value is dropped and never printed by `Debug`.
#[derive(Clone)]
pub struct Sparx64 {
    subkeys: [Subkey; SUBKEY_COUNT],
}

/// The ARX-box: one Speck-32 round without the key addition.
#[inline(always)]
fn arx(left: u16, right: u16) -> (u16, u16) {
    let left = left.rotate_left(9).wrapping_add(right);
    let right = right.rotate_left(2) ^ left;
    (left, right)
}

#[inline(always)]
fn arx_inverse(left: u16, right: u16) -> (u16, u16) {
    let right = (right ^ left).rotate_left(14);
    let left = left.wrapping_sub(right).rotate_left(7);
    (left, right)
}

/// The linear layer: mixes the left branch into the right one, then swaps the branches.
#[inline(always)]
fn linear([a, b, c, d]: [u16; 4]) -> [u16; 4] {
    let mix = (a ^ b).rotate_left(8);
    [c ^ a ^ mix, d ^ b ^ mix, a, b]
}

#[inline(always)]
fn linear_inverse([a, b, c, d]: [u16; 4]) -> [u16; 4] {
    let mix = (c ^ d).rotate_left(8);
    [c, d, a ^ c ^ mix, b ^ d ^ mix]
}

/// Three keyed ARX rounds on one 32-bit branch.
#[inline(always)]
fn branch_rounds(mut left: u16, mut right: u16, subkey: &Subkey) -> (u16, u16) {
    for round in 0..ROUNDS_PER_STEP {
        (left, right) = arx(left ^ subkey[2 * round], right ^ subkey[2 * round + 1]);
    }
    (left, right)
}

#[inline(always)]
fn branch_rounds_inverse(mut left: u16, mut right: u16, subkey: &Subkey) -> (u16, u16) {
    for round in (0..ROUNDS_PER_STEP).rev() {
        let (l, r) = arx_inverse(left, right);
        (left, right) = (l ^ subkey[2 * round], r ^ subkey[2 * round + 1]);
    }
    (left, right)
}

fn expand_key(key: &[u8; 16]) -> [Subkey; SUBKEY_COUNT] {
    let mut state = [0u16; 8];
    for (word, pair) in state.iter_mut().zip(key.chunks_exact(2)) {
        *word = u16::from_be_bytes([pair[0], pair[1]]);
    }
    let mut subkeys = [[0u16; 2 * ROUNDS_PER_STEP]; SUBKEY_COUNT];
    for (counter, subkey) in (1u16..).zip(subkeys.iter_mut()) {
        subkey.copy_from_slice(&state[..2 * ROUNDS_PER_STEP]);
        let (left, right) = arx(state[0], state[1]);
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

/// Overwrites key material in a way the optimiser may not elide.
fn wipe(words: &mut [u16]) {
    for word in words.iter_mut() {
        // SAFETY: `word` is a valid, aligned, exclusive reference.
        unsafe { core::ptr::write_volatile(word, 0) };
    }
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
}

fn words_of(block: [u8; 8]) -> [u16; 4] {
    [
        u16::from_be_bytes([block[0], block[1]]),
        u16::from_be_bytes([block[2], block[3]]),
        u16::from_be_bytes([block[4], block[5]]),
        u16::from_be_bytes([block[6], block[7]]),
    ]
}

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
        let mut x = words_of(block);
        for step in 0..STEPS {
            let (a, b) = branch_rounds(x[0], x[1], &self.subkeys[BRANCHES * step]);
            let (c, d) = branch_rounds(x[2], x[3], &self.subkeys[BRANCHES * step + 1]);
            x = linear([a, b, c, d]);
        }
        let whitening = &self.subkeys[SUBKEY_COUNT - 1];
        block_of([x[0] ^ whitening[0], x[1] ^ whitening[1], x[2] ^ whitening[2], x[3] ^ whitening[3]])
    }

    /// Decrypts one 8-byte block: the exact inverse of [`Sparx64::encrypt_block`].
    #[inline]
    pub fn decrypt_block(&self, block: [u8; 8]) -> [u8; 8] {
        let whitening = &self.subkeys[SUBKEY_COUNT - 1];
        let w = words_of(block);
        let mut x = [w[0] ^ whitening[0], w[1] ^ whitening[1], w[2] ^ whitening[2], w[3] ^ whitening[3]];
        for step in (0..STEPS).rev() {
            let [a, b, c, d] = linear_inverse(x);
            let (a, b) = branch_rounds_inverse(a, b, &self.subkeys[BRANCHES * step]);
            let (c, d) = branch_rounds_inverse(c, d, &self.subkeys[BRANCHES * step + 1]);
            x = [a, b, c, d];
        }
        block_of(x)
    }
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

    #[test]
    fn arx_box_and_linear_layer_invert() {
        for (left, right) in [(0u16, 0u16), (1, 0xffff), (0x1234, 0xabcd), (0xffff, 0xffff)] {
            let (l, r) = arx(left, right);
            assert_eq!(arx_inverse(l, r), (left, right));
        }
        let original = [0x0123, 0x4567, 0x89ab, 0xcdef];
        assert_ne!(linear(original), original);
        assert_eq!(linear_inverse(linear(original)), original);
    }

    #[test]
    fn debug_output_hides_round_keys() {
        let cipher = Sparx64::new(&[0xab; 16]);
        let printed = format!("{cipher:?}");
        assert!(printed.contains("redacted"));
        assert!(!printed.to_lowercase().contains("ab"), "{printed}");
    }
}
