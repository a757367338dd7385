//! The protocols of randflake_pg's shared memory, which every process of a server reads and
//! writes without a lock: the server's position that every backend takes its IDs from
//! ([`server_position`]), the sequence lock ([`seqlock`]) and the lease board behind it
//! ([`lease_board_protocol`]). Each file is named for its protocol; randflake_pg's `src/shmem/`
//! places each word and board in a segment of PostgreSQL's shared memory.
//!
//! Each is generic over [`Atomics`], the atomic types and fences it runs on. The extension
//! places them in PostgreSQL's shared memory over [`StdAtomics`]; with the `loom` feature,
//! `randflake/tests/shared_memory_model.rs` runs the very same code over [`LoomAtomics`], whose
//! model checker tries every interleaving of a few processes and every value a weakly ordered
//! load may return (`make loom`).
#![forbid(unsafe_code)]

pub mod lease_board_protocol;
pub mod seqlock;
pub mod server_position;

use core::sync::atomic::Ordering;

/// An atomic cell holding a `T`: the few operations the protocols use.
pub trait Atomic<T>: Default + Send + Sync {
    /// A cell holding `value`.
    fn new(value: T) -> Self;
    /// Loads the value.
    fn load(&self, order: Ordering) -> T;
    /// Stores `value`.
    fn store(&self, value: T, order: Ordering);
    /// Stores `new` if the value is `current`; `Err` holds the value found otherwise.
    fn compare_exchange(&self, current: T, new: T, success: Ordering, failure: Ordering) -> Result<T, T>;
    /// Adds `value`, returning the value before.
    fn fetch_add(&self, value: T, order: Ordering) -> T;
    /// Stores the larger of the value and `value`, returning the value before.
    fn fetch_max(&self, value: T, order: Ordering) -> T;
}

/// The atomic types and fences a protocol runs on.
pub trait Atomics: 'static {
    /// An atomic `u32`.
    type U32: Atomic<u32>;
    /// An atomic `u64`.
    type U64: Atomic<u64>;
    /// An atomic `i32` (a process id).
    type I32: Atomic<i32>;
    /// A memory fence.
    fn fence(order: Ordering);
    /// Tells the processor (or the model checker) that the caller is waiting in a loop.
    fn spin_loop();
}

macro_rules! impl_atomic {
    ($value:ty, $cell:ty) => {
        impl Atomic<$value> for $cell {
            #[inline]
            fn new(value: $value) -> Self {
                <$cell>::new(value)
            }
            #[inline]
            fn load(&self, order: Ordering) -> $value {
                <$cell>::load(self, order)
            }
            #[inline]
            fn store(&self, value: $value, order: Ordering) {
                <$cell>::store(self, value, order)
            }
            #[inline]
            fn compare_exchange(
                &self,
                current: $value,
                new: $value,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$value, $value> {
                <$cell>::compare_exchange(self, current, new, success, failure)
            }
            #[inline]
            fn fetch_add(&self, value: $value, order: Ordering) -> $value {
                <$cell>::fetch_add(self, value, order)
            }
            #[inline]
            fn fetch_max(&self, value: $value, order: Ordering) -> $value {
                <$cell>::fetch_max(self, value, order)
            }
        }
    };
}

/// The standard library's atomics: what the extension runs on.
#[derive(Default)]
pub struct StdAtomics;

impl_atomic!(u32, core::sync::atomic::AtomicU32);
impl_atomic!(u64, core::sync::atomic::AtomicU64);
impl_atomic!(i32, core::sync::atomic::AtomicI32);

impl Atomics for StdAtomics {
    type U32 = core::sync::atomic::AtomicU32;
    type U64 = core::sync::atomic::AtomicU64;
    type I32 = core::sync::atomic::AtomicI32;

    #[inline]
    fn fence(order: Ordering) {
        core::sync::atomic::fence(order);
    }

    #[inline]
    fn spin_loop() {
        core::hint::spin_loop();
    }
}

/// loom's atomics, for the model checker: usable only inside `loom::model`.
#[cfg(feature = "loom")]
#[derive(Default)]
pub struct LoomAtomics;

#[cfg(feature = "loom")]
impl_atomic!(u32, loom::sync::atomic::AtomicU32);
#[cfg(feature = "loom")]
impl_atomic!(u64, loom::sync::atomic::AtomicU64);
#[cfg(feature = "loom")]
impl_atomic!(i32, loom::sync::atomic::AtomicI32);

#[cfg(feature = "loom")]
impl Atomics for LoomAtomics {
    type U32 = loom::sync::atomic::AtomicU32;
    type U64 = loom::sync::atomic::AtomicU64;
    type I32 = loom::sync::atomic::AtomicI32;

    fn fence(order: Ordering) {
        loom::sync::atomic::fence(order);
    }

    /// A spinning thread yields, so that the model lets the thread it waits for run.
    fn spin_loop() {
        loom::hint::spin_loop();
    }
}
