//! Every published known-answer vector (copied from the reference implementation's test data
//! into `tests/data/reference_vectors.json`) must hold exactly.

use randflake::cipher::sparx::Sparx64;
use randflake::{codec, Generator, IdCipher, Kernel, Parts, Secret, Step, Window, BATCH};
use serde_json::Value;

fn vectors() -> Value {
    let text = include_str!("data/reference_vectors.json");
    serde_json::from_str(text).expect("vector file is JSON")
}

fn hex_bytes<const N: usize>(text: &str) -> [u8; N] {
    let mut bytes = [0u8; N];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * index..2 * index + 2], 16).unwrap();
    }
    bytes
}

fn field<'a>(vector: &'a Value, name: &str) -> &'a Value {
    vector.get(name).unwrap_or_else(|| panic!("vector lacks {name}"))
}

fn number(vector: &Value, name: &str) -> u64 {
    field(vector, name).as_u64().unwrap()
}

fn text<'a>(vector: &'a Value, name: &str) -> &'a str {
    field(vector, name).as_str().unwrap()
}

#[test]
fn sparx_paper_vector() {
    let vectors = vectors();
    let cases = vectors["sparx64_128"].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let cipher = Sparx64::new(&hex_bytes(text(case, "key")));
        let plaintext = hex_bytes(text(case, "plaintext"));
        let ciphertext = hex_bytes(text(case, "ciphertext"));
        assert_eq!(cipher.encrypt_block(plaintext), ciphertext);
        assert_eq!(cipher.decrypt_block(ciphertext), plaintext);
    }
}

#[test]
fn all_randflake_vectors() {
    let vectors = vectors();
    let cases = vectors["randflake"].as_array().unwrap();
    assert_eq!(cases.len(), 18, "the published set has 18 vectors");
    for case in cases {
        let cipher = IdCipher::new(&Secret::from_hex(text(case, "secret")).unwrap());
        let parts =
            Parts::new(number(case, "timestamp"), number(case, "node_id") as u32, number(case, "sequence") as u32)
                .unwrap();
        let raw: u64 = text(case, "raw_id").parse().unwrap();
        let id: i64 = text(case, "encrypted_id").parse().unwrap();
        let encoded = text(case, "encoded_id");

        assert_eq!(parts.to_raw(), raw, "{case}");
        assert_eq!(Parts::from_raw(raw), parts, "{case}");
        assert_eq!(cipher.encrypt(parts), id, "{case}");
        assert_eq!(cipher.decrypt(id), parts, "{case}");
        assert_eq!(codec::encode(id).as_str(), encoded, "{case}");
        assert_eq!(codec::decode(encoded), Ok(id), "{case}");
    }
}

/// Every batch kernel this CPU runs, in every lane position: each vector's raw value is placed
/// at one lane of a batch whose other lanes hold its neighbours, and must come out as the
/// vector's ID, exactly as the single-block reference computes it.
#[test]
fn every_batch_kernel_reproduces_every_vector_in_every_lane() {
    let vectors = vectors();
    let cases = vectors["randflake"].as_array().unwrap();
    for kernel in Kernel::available() {
        for case in cases {
            let cipher = IdCipher::with_kernel(&Secret::from_hex(text(case, "secret")).unwrap(), kernel);
            let raw: u64 = text(case, "raw_id").parse().unwrap();
            let id: i64 = text(case, "encrypted_id").parse().unwrap();
            for lane in 0..BATCH {
                let raws: [u64; BATCH] =
                    std::array::from_fn(|other| raw.wrapping_add(other as u64).wrapping_sub(lane as u64));
                let ids = cipher.encrypt_raw_batch(&raws);
                assert_eq!(ids[lane], id, "kernel {kernel:?}, lane {lane}: {case}");
                for (other, (&other_raw, &other_id)) in raws.iter().zip(&ids).enumerate() {
                    assert_eq!(other_id, cipher.encrypt_raw(other_raw), "kernel {kernel:?}, lane {other}");
                }
            }
        }
    }
}

/// The generator, given each vector's lease as its window and its node, reaches the vector's
/// ID by issuing sequences 0..=sequence in the vector's second.
#[test]
fn generator_reproduces_vectors_within_their_leases() {
    let vectors = vectors();
    for case in vectors["randflake"].as_array().unwrap() {
        let cipher = IdCipher::new(&Secret::from_hex(text(case, "secret")).unwrap());
        let window = Window::new(number(case, "lease_start"), number(case, "lease_end")).unwrap();
        let second = number(case, "timestamp");
        let sequence = number(case, "sequence") as u32;
        let mut generator = Generator::new(window);
        assert_eq!(generator.next(second, 1, 1), Ok(Step::NeedNode { release: None }));
        generator.adopt(number(case, "node_id") as u32, window.first() - 1);
        let mut last = None;
        for _ in 0..=sequence {
            match generator.next(second, 1, 1) {
                Ok(Step::Issued { first, .. }) => last = Some(first),
                other => panic!("{other:?} for {case}"),
            }
        }
        let id: i64 = text(case, "encrypted_id").parse().unwrap();
        assert_eq!(cipher.encrypt(last.unwrap()), id, "{case}");
    }
}
