//! Properties over many random values: the cipher is a permutation and the string codec is a
//! bijection onto its canonical strings.

use randflake::cipher::sparx::Sparx64;
use randflake::{codec, IdCipher, Kernel, Parts, Secret, BATCH};

/// xorshift64*: a fixed-seed generator, so a failure names a reproducible case.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn key(&mut self) -> [u8; 16] {
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&self.next().to_le_bytes());
        key[8..].copy_from_slice(&self.next().to_le_bytes());
        key
    }
}

#[test]
fn decrypt_inverts_encrypt_for_a_million_values_and_keys() {
    let mut random = Random(0x5eed_1234_abcd_ef01);
    let mut changed = 0u32;
    for _ in 0..1_000 {
        let cipher = Sparx64::new(&random.key());
        for _ in 0..1_000 {
            let block = random.next().to_le_bytes();
            let encrypted = cipher.encrypt_block(block);
            changed += u32::from(encrypted != block);
            assert_eq!(cipher.decrypt_block(encrypted), block);
        }
    }
    assert!(changed > 999_000, "encryption left {} blocks unchanged", 1_000_000 - changed);
}

#[test]
fn ids_decrypt_to_the_parts_they_were_made_from() {
    let mut random = Random(42);
    for _ in 0..200 {
        let cipher = IdCipher::new(&Secret::from_bytes(random.key()));
        for _ in 0..500 {
            let parts = Parts::from_raw(random.next());
            assert_eq!(cipher.decrypt(cipher.encrypt(parts)), parts);
        }
    }
}

#[test]
fn string_codec_round_trips_sampled_values() {
    let mut random = Random(7);
    for _ in 0..1_000_000 {
        // Mix full-width values with short ones so every string length is sampled.
        let value = random.next() >> (random.next() % 64);
        let id = value as i64;
        let text = codec::encode(id);
        assert_eq!(codec::decode(text.as_str()), Ok(id), "{text}");
    }
}

#[test]
fn parser_rejects_the_listed_non_canonical_strings() {
    for text in ["", "00", "A", "0=", "g000000000000", "vvvvvvvvvvvvv", "-1", " 1"] {
        assert!(codec::decode(text).is_err(), "{text:?} must be rejected");
    }
}

#[test]
fn every_kernel_encrypts_batches_exactly_as_single_ids() {
    for kernel in Kernel::available() {
        let mut random = Random(99);
        for _ in 0..2_000 {
            let cipher = IdCipher::with_kernel(&Secret::from_bytes(random.key()), kernel);
            let raws: [u64; BATCH] = std::array::from_fn(|_| random.next());
            let batch = cipher.encrypt_raw_batch(&raws);
            for (raw, id) in raws.into_iter().zip(batch) {
                assert_eq!(cipher.encrypt_raw(raw), id, "kernel {kernel:?}");
            }
        }
    }
}
