//! Encrypting [`BATCH`] IDs at once, with the widest vector instructions the CPU offers.
//!
//! The cipher code is the same for every kernel: [`Sparx64::encrypt_words`] over
//! [`Lanes<N>`](Lanes), inlined into a function compiled for one instruction set. Which one runs
//! is decided once per process by asking the CPU, so one build serves every x86-64 machine.
//! The single-block path ([`IdCipher::encrypt_raw`](crate::IdCipher::encrypt_raw)) is the
//! reference: the tests hold every kernel this machine can run to it, on every published
//! vector and on random keys and values.

use core::fmt;

use crate::cipher::sparx::Sparx64;
use crate::cipher::words::{Lanes, Word};

/// IDs encrypted per batch. A multiple of every kernel's lane count.
pub const BATCH: usize = 64;

/// A way of encrypting a batch that this CPU supports. Only obtainable from [`Kernel::best`]
/// and [`Kernel::available`], which check the CPU first, so holding one proves it can run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Kernel(Isa);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Isa {
    /// What every CPU of the target has: SSE2 on x86-64; elsewhere, 16-lane arrays left to the
    /// compiler's vectoriser.
    Baseline,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512BW for 16-bit lanes, VBMI2 for a one-instruction 16-bit rotate.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    pub fn best() -> Self {
        Self::available().last().unwrap_or(Self(Isa::Baseline))
    }

    /// Every kernel this CPU runs, slowest first; the baseline is always there.
    pub fn available() -> impl Iterator<Item = Self> {
        let mut kernels = vec![Self(Isa::Baseline)];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                kernels.push(Self(Isa::Avx2));
            }
            if std::is_x86_feature_detected!("avx512bw") && std::is_x86_feature_detected!("avx512vbmi2") {
                kernels.push(Self(Isa::Avx512));
            }
        }
        kernels.into_iter()
    }

    /// A short name for logs and benchmarks: `baseline`, `avx2` or `avx512`.
    pub fn name(self) -> &'static str {
        match self.0 {
            Isa::Baseline => "baseline",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => "avx512",
        }
    }

    /// Encrypts `raws` (unencrypted layout values) into IDs, lane for lane.
    #[inline]
    pub(crate) fn encrypt(self, cipher: &Sparx64, raws: &[u64; BATCH]) -> [i64; BATCH] {
        match self.0 {
            Isa::Baseline => encrypt_baseline(cipher, raws),
            // SAFETY: a `Kernel` holding `Avx2` is only made by `available()`, after the CPU
            // reported AVX2.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { encrypt_avx2(cipher, raws) },
            // SAFETY: as above, after the CPU reported AVX-512BW and VBMI2 (AVX-512F is implied
            // by both).
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { encrypt_avx512(cipher, raws) },
        }
    }
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn encrypt_baseline(cipher: &Sparx64, raws: &[u64; BATCH]) -> [i64; BATCH] {
    #[cfg(target_arch = "x86_64")]
    return encrypt_in_lanes::<16, crate::cipher::words::Sse2Lanes>(cipher, raws);
    #[cfg(not(target_arch = "x86_64"))]
    return encrypt_in_lanes::<16, Lanes<16>>(cipher, raws);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn encrypt_avx2(cipher: &Sparx64, raws: &[u64; BATCH]) -> [i64; BATCH] {
    encrypt_in_lanes::<32, Lanes<32>>(cipher, raws)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
fn encrypt_avx512(cipher: &Sparx64, raws: &[u64; BATCH]) -> [i64; BATCH] {
    encrypt_in_lanes::<64, Lanes<64>>(cipher, raws)
}

/// The batch as `N`-lane vectors, a chunk of `N` values at a time, kept in registers from the
/// raw values to the IDs. The cipher reads a value's little-endian bytes as big-endian 16-bit
/// words, i.e. its 16-bit quarters byte-swapped; the ID is put back together the same way.
#[inline(always)]
fn encrypt_in_lanes<const N: usize, W>(cipher: &Sparx64, raws: &[u64; BATCH]) -> [i64; BATCH]
where
    W: Word + From<Lanes<N>> + Into<Lanes<N>>,
{
    let mut ids = [0i64; BATCH];
    for (raws, ids) in raws.chunks_exact(N).zip(ids.chunks_exact_mut(N)) {
        let block: [W; 4] = core::array::from_fn(|word| {
            W::from(Lanes(core::array::from_fn(|lane| ((raws[lane] >> (16 * word)) as u16).swap_bytes())))
        });
        let [a, b, c, d] =
            cipher.encrypt_words(block).map(|word| word.into().0.map(|quarter| u64::from(quarter.swap_bytes())));
        for (lane, id) in ids.iter_mut().enumerate() {
            *id = (a[lane] | b[lane] << 16 | c[lane] << 32 | d[lane] << 48) as i64;
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_kernel_is_the_last_available_one() {
        let available: Vec<Kernel> = Kernel::available().collect();
        assert_eq!(available[0].name(), "baseline");
        assert_eq!(Kernel::best(), *available.last().unwrap());
        eprintln!("kernels on this CPU: {available:?}");
    }
}
