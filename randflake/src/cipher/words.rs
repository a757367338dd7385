//! The 16-bit words SPARX computes on: one word, or many side by side.
//!
//! The cipher is written once over [`Word`]. `u16` runs a single block: the reference every faster
//! path is tested against. [`Lanes`] runs `N` independent blocks, one per lane, as plain arrays
//! with no intrinsics: the compiler turns the lane-wise loops into SIMD instructions for whatever
//! vector width the calling function is compiled for (see [`crate::cipher::batch`]). One block is a
//! long chain of dependent operations that leaves the CPU mostly idle, so a vector of blocks costs
//! little more than one.

use core::ops::BitXor;

/// The operations SPARX needs on 16-bit words, lane by lane.
pub trait Word: Copy + BitXor<Output = Self> {
    /// The same value in every lane.
    fn splat(value: u16) -> Self;
    /// Lane-wise addition modulo 2^16.
    fn wrapping_add(self, other: Self) -> Self;
    /// Lane-wise subtraction modulo 2^16.
    fn wrapping_sub(self, other: Self) -> Self;
    /// Lane-wise left rotation by `bits` (1 to 15).
    fn rotate_left(self, bits: u32) -> Self;
}

impl Word for u16 {
    #[inline(always)]
    fn splat(value: u16) -> Self {
        value
    }
    #[inline(always)]
    fn wrapping_add(self, other: Self) -> Self {
        u16::wrapping_add(self, other)
    }
    #[inline(always)]
    fn wrapping_sub(self, other: Self) -> Self {
        u16::wrapping_sub(self, other)
    }
    #[inline(always)]
    fn rotate_left(self, bits: u32) -> Self {
        u16::rotate_left(self, bits)
    }
}

/// `N` words side by side, one per block.
#[derive(Clone, Copy)]
pub struct Lanes<const N: usize>(pub [u16; N]);

impl<const N: usize> Lanes<N> {
    #[inline(always)]
    fn zip(self, other: Self, op: impl Fn(u16, u16) -> u16) -> Self {
        Self(core::array::from_fn(|lane| op(self.0[lane], other.0[lane])))
    }
}

impl<const N: usize> BitXor for Lanes<N> {
    type Output = Self;
    #[inline(always)]
    fn bitxor(self, other: Self) -> Self {
        self.zip(other, |a, b| a ^ b)
    }
}

impl<const N: usize> Word for Lanes<N> {
    #[inline(always)]
    fn splat(value: u16) -> Self {
        Self([value; N])
    }
    #[inline(always)]
    fn wrapping_add(self, other: Self) -> Self {
        self.zip(other, u16::wrapping_add)
    }
    #[inline(always)]
    fn wrapping_sub(self, other: Self) -> Self {
        self.zip(other, u16::wrapping_sub)
    }
    #[inline(always)]
    fn rotate_left(self, bits: u32) -> Self {
        Self(self.0.map(|lane| lane.rotate_left(bits)))
    }
}

#[cfg(target_arch = "x86_64")]
pub use sse2::Sse2Lanes;

/// The compiler keeps [`Lanes`] scalar where the target has no 16-bit rotate, as on SSE2, so the
/// x86-64 baseline spells the SSE2 instructions out.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use core::arch::x86_64::*;
    use core::ops::BitXor;

    use super::{Lanes, Word};

    /// Sixteen 16-bit lanes in two SSE2 registers. SSE2 is part of every x86-64 CPU, so every
    /// intrinsic below is always available; that is the whole safety argument for each
    /// `unsafe` block in this module.
    #[derive(Clone, Copy)]
    pub struct Sse2Lanes([__m128i; 2]);

    impl Sse2Lanes {
        #[inline(always)]
        fn map2(self, other: Self, op: impl Fn(__m128i, __m128i) -> __m128i) -> Self {
            Self([op(self.0[0], other.0[0]), op(self.0[1], other.0[1])])
        }
    }

    impl From<Lanes<16>> for Sse2Lanes {
        #[inline(always)]
        fn from(lanes: Lanes<16>) -> Self {
            // SAFETY: SSE2 is always available; two unaligned loads of 8 u16 each from a
            // 16-element array.
            unsafe { Self([_mm_loadu_si128(lanes.0.as_ptr().cast()), _mm_loadu_si128(lanes.0.as_ptr().add(8).cast())]) }
        }
    }

    impl From<Sse2Lanes> for Lanes<16> {
        #[inline(always)]
        fn from(wide: Sse2Lanes) -> Self {
            let mut lanes = [0u16; 16];
            // SAFETY: as in the load above, two stores into the same 16-element array.
            unsafe {
                _mm_storeu_si128(lanes.as_mut_ptr().cast(), wide.0[0]);
                _mm_storeu_si128(lanes.as_mut_ptr().add(8).cast(), wide.0[1]);
            }
            Lanes(lanes)
        }
    }

    impl BitXor for Sse2Lanes {
        type Output = Self;
        #[inline(always)]
        fn bitxor(self, other: Self) -> Self {
            // SAFETY: SSE2 is always available on x86-64.
            self.map2(other, |a, b| unsafe { _mm_xor_si128(a, b) })
        }
    }

    impl Word for Sse2Lanes {
        #[inline(always)]
        fn splat(value: u16) -> Self {
            // SAFETY: SSE2 is always available on x86-64.
            let lane = unsafe { _mm_set1_epi16(value as i16) };
            Self([lane, lane])
        }
        #[inline(always)]
        fn wrapping_add(self, other: Self) -> Self {
            // SAFETY: SSE2 is always available on x86-64.
            self.map2(other, |a, b| unsafe { _mm_add_epi16(a, b) })
        }
        #[inline(always)]
        fn wrapping_sub(self, other: Self) -> Self {
            // SAFETY: SSE2 is always available on x86-64.
            self.map2(other, |a, b| unsafe { _mm_sub_epi16(a, b) })
        }
        #[inline(always)]
        fn rotate_left(self, bits: u32) -> Self {
            // SAFETY: SSE2 is always available on x86-64. The counts go in registers; with a
            // constant `bits` the compiler emits the immediate forms.
            unsafe {
                let left = _mm_cvtsi32_si128(bits as i32);
                let right = _mm_cvtsi32_si128(16 - bits as i32);
                let rotate = |x| _mm_or_si128(_mm_sll_epi16(x, left), _mm_srl_epi16(x, right));
                Self([rotate(self.0[0]), rotate(self.0[1])])
            }
        }
    }
}
