//! Every batch kernel this CPU runs, under arbitrary keys and on arbitrary values: each lane
//! equals the single-block reference.
#![no_main]

use libfuzzer_sys::fuzz_target;
use randflake::{IdCipher, Kernel, Secret, BATCH};

fuzz_target!(|input: ([u8; 16], u64, u64)| {
    // A run of consecutive values, as the generator reserves them, plus one arbitrary lane.
    let (key, first, odd_one) = input;
    let mut raws: [u64; BATCH] = core::array::from_fn(|lane| first.wrapping_add(lane as u64));
    raws[(odd_one % BATCH as u64) as usize] = odd_one;
    for kernel in Kernel::available() {
        let cipher = IdCipher::with_kernel(&Secret::from_bytes(key), kernel);
        let ids = cipher.encrypt_raw_batch(&raws);
        for (raw, id) in raws.iter().zip(ids) {
            assert_eq!(cipher.encrypt_raw(*raw), id, "kernel {kernel:?}");
        }
    }
});
