//! The 16-bit words SPARX computes on: one word, or sixteen side by side.
//!
//! The cipher is written once over [`Word`]; `u16` runs a single block, [`Wide`] runs
//! [`LANES`] independent blocks in SIMD registers. One block is a long chain of dependent
//! operations that leaves the CPU mostly idle, so sixteen cost little more than one.

use core::ops::BitXor;

/// Blocks a [`Wide`] word holds.
pub const LANES: usize = 16;

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

pub use wide::Wide;

#[cfg(target_arch = "x86_64")]
mod wide {
    use core::arch::x86_64::*;
    use core::ops::BitXor;

    use super::{Word, LANES};

    /// Sixteen 16-bit lanes in two SSE2 registers (SSE2 is part of every x86-64 CPU).
    #[derive(Clone, Copy)]
    pub struct Wide([__m128i; 2]);

    impl Wide {
        /// Loads sixteen lanes.
        #[inline(always)]
        pub fn from_array(lanes: [u16; LANES]) -> Self {
            // SAFETY: SSE2 is always available on x86-64; the loads are unaligned loads of
            // 8 u16 each from a 16-element array.
            unsafe {
                Self([
                    _mm_loadu_si128(lanes.as_ptr().cast()),
                    _mm_loadu_si128(lanes.as_ptr().add(8).cast()),
                ])
            }
        }

        /// Stores the sixteen lanes.
        #[inline(always)]
        pub fn to_array(self) -> [u16; LANES] {
            let mut lanes = [0u16; LANES];
            // SAFETY: as in `from_array`.
            unsafe {
                _mm_storeu_si128(lanes.as_mut_ptr().cast(), self.0[0]);
                _mm_storeu_si128(lanes.as_mut_ptr().add(8).cast(), self.0[1]);
            }
            lanes
        }

        #[inline(always)]
        fn map2(self, other: Self, op: impl Fn(__m128i, __m128i) -> __m128i) -> Self {
            Self([op(self.0[0], other.0[0]), op(self.0[1], other.0[1])])
        }
    }

    impl BitXor for Wide {
        type Output = Self;
        #[inline(always)]
        fn bitxor(self, other: Self) -> Self {
            // SAFETY: SSE2 is always available on x86-64.
            self.map2(other, |a, b| unsafe { _mm_xor_si128(a, b) })
        }
    }

    impl Word for Wide {
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
            // SAFETY: SSE2 is always available on x86-64. Shift counts in a register; with
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

#[cfg(not(target_arch = "x86_64"))]
mod wide {
    use core::ops::BitXor;

    use super::{Word, LANES};

    /// Sixteen 16-bit lanes as a plain array, for targets without a SIMD path here.
    #[derive(Clone, Copy)]
    pub struct Wide([u16; LANES]);

    impl Wide {
        /// Loads sixteen lanes.
        pub fn from_array(lanes: [u16; LANES]) -> Self {
            Self(lanes)
        }
        /// Stores the sixteen lanes.
        pub fn to_array(self) -> [u16; LANES] {
            self.0
        }
        fn zip(self, other: Self, op: impl Fn(u16, u16) -> u16) -> Self {
            Self(core::array::from_fn(|i| op(self.0[i], other.0[i])))
        }
    }

    impl BitXor for Wide {
        type Output = Self;
        fn bitxor(self, other: Self) -> Self {
            self.zip(other, |a, b| a ^ b)
        }
    }

    impl Word for Wide {
        fn splat(value: u16) -> Self {
            Self([value; LANES])
        }
        fn wrapping_add(self, other: Self) -> Self {
            self.zip(other, u16::wrapping_add)
        }
        fn wrapping_sub(self, other: Self) -> Self {
            self.zip(other, u16::wrapping_sub)
        }
        fn rotate_left(self, bits: u32) -> Self {
            Self(self.0.map(|lane| lane.rotate_left(bits)))
        }
    }
}
