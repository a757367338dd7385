//! Micro-benchmark of the pure hot path, without PostgreSQL: `cargo bench -p randflake`.
//! Prints the median ns per operation over several samples.

use std::hint::black_box;
use std::time::Instant;

use randflake::{Generator, IdCipher, Kernel, Secret, Step, Window, BATCH};

const SAMPLES: usize = 15;
const ITERATIONS: u64 = 2_000_000;

fn median_ns_per_op(mut run: impl FnMut(u64)) -> f64 {
    run(ITERATIONS / 10); // warm-up
    let mut samples: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let start = Instant::now();
            run(ITERATIONS);
            start.elapsed().as_nanos() as f64 / ITERATIONS as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[SAMPLES / 2]
}

fn main() {
    let secret = Secret::from_hex("dffd6021bb2bd5b0af676290809ec3a5").unwrap();
    let cipher = IdCipher::new(&secret);

    let encrypt = median_ns_per_op(|n| {
        for raw in 0..n {
            black_box(cipher.encrypt_raw(black_box(raw)));
        }
    });
    println!("encrypt (SPARX-64/128, one ID)            {encrypt:6.1} ns");

    for kernel in Kernel::available() {
        let cipher = IdCipher::with_kernel(&secret, kernel);
        let batch = median_ns_per_op(|n| {
            for raw in (0..n).step_by(BATCH) {
                black_box(cipher.encrypt_raw_batch(&std::array::from_fn(|i| black_box(raw) + i as u64)));
            }
        });
        println!("encrypt, {BATCH} at a time, {:<8} (per ID) {batch:6.1} ns", kernel.name());
    }

    let decrypt = median_ns_per_op(|n| {
        for id in 0..n {
            black_box(cipher.decrypt_raw(black_box(id as i64)));
        }
    });
    println!("decrypt                                   {decrypt:6.1} ns");

    let single = median_ns_per_op(|n| generate(&cipher, n, false));
    println!("generate + encrypt, one at a time         {single:6.1} ns");
    let batched = median_ns_per_op(|n| generate(&cipher, n, true));
    println!("generate + encrypt, {BATCH} at a time ({})  {batched:6.1} ns", cipher.kernel().name());
}

/// Walks seconds and nodes as a backend does: a new second every 100000 IDs, a new node when
/// one runs dry; encrypting the IDs one by one or a run of `BATCH` at once.
fn generate(cipher: &IdCipher, n: u64, batched: bool) {
    let mut generator = Generator::new(Window::ALL);
    let mut second = 1_800_000_000u64;
    let mut node = 0u32;
    let mut made = 0u64;
    while made < n {
        if made % 100_000 < BATCH as u64 {
            second += 1;
        }
        match generator.next(second, u32::MAX, if batched { BATCH as u32 } else { 1 }) {
            Ok(Step::Issued { first, count, .. }) => {
                let raw = first.to_raw();
                if batched {
                    black_box(cipher.encrypt_raw_batch(&std::array::from_fn(|i| raw + i as u64)));
                } else {
                    black_box(cipher.encrypt_raw(raw));
                }
                made += u64::from(count);
            }
            Ok(Step::NeedNode { .. }) => {
                node = (node + 1) % 131_072;
                generator.adopt(node, second - 1);
            }
            other => panic!("{other:?}"),
        }
    }
}
