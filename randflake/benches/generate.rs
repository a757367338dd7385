//! Micro-benchmark of the pure hot path, without PostgreSQL: `cargo bench -p randflake`.
//! Prints the median ns per operation over several samples.

use std::hint::black_box;
use std::time::Instant;

use randflake::{IdCipher, Generator, Secret, Step, Window};

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
    let cipher = IdCipher::new(&Secret::from_hex("dffd6021bb2bd5b0af676290809ec3a5").unwrap());

    let encrypt = median_ns_per_op(|n| {
        for raw in 0..n {
            black_box(cipher.encrypt_raw(black_box(raw)));
        }
    });
    println!("encrypt (SPARX-64/128, one ID)      {encrypt:6.1} ns");

    let decrypt = median_ns_per_op(|n| {
        for id in 0..n {
            black_box(cipher.decrypt_raw(black_box(id as i64)));
        }
    });
    println!("decrypt                             {decrypt:6.1} ns");

    // The generator walks seconds and nodes as a backend does: a new second every 100000 IDs,
    // a new node when one runs dry.
    let generate = median_ns_per_op(|n| {
        let mut generator = Generator::new(Window::ALL);
        let mut second = 1_800_000_000u64;
        let mut node = 0u32;
        for i in 0..n {
            if i % 100_000 == 0 {
                second += 1;
            }
            loop {
                match generator.next(second, u32::MAX) {
                    Ok(Step::Issued { parts, .. }) => {
                        black_box(cipher.encrypt(parts));
                        break;
                    }
                    Ok(Step::NeedNode { .. }) => {
                        node = (node + 1) % 131_072;
                        generator.adopt(node, second - 1, second);
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    });
    println!("generate + encrypt (one ID)         {generate:6.1} ns");
}
