//! A sequence lock over values in shared memory: readers take no lock and write nothing, so
//! backends can read on every cache refill; writers are rare (the keeper, the launcher).

use core::sync::atomic::Ordering;

use super::{Atomic, Atomics, StdAtomics};

/// The version is odd while a writer changes the values it guards; a reader reads them again
/// until it sees the same even version before and after. Writers take turns through a flag.
#[derive(Default)]
pub struct SeqLock<A: Atomics = StdAtomics> {
    version: A::U64,
    /// 1 while a writer holds the lock.
    writing: A::U32,
}

/// How the reader loads the version before reading the values. Acquire, so that the values it
/// then reads are at least as new as the write that left that version. The
/// `fault-seqlock-relaxed-reader` feature weakens it, for the model check that must catch it.
const READ_VERSION_FIRST: Ordering =
    if cfg!(feature = "fault-seqlock-relaxed-reader") { Ordering::Relaxed } else { Ordering::Acquire };

impl<A: Atomics> SeqLock<A> {
    /// Changes whenever the guarded values do.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// What `read` returns, with the version it was read at, read again until no write
    /// overlapped it. `read` must only load the guarded values (relaxed loads suffice).
    pub fn read<T>(&self, read: impl Fn() -> T) -> (u64, T) {
        loop {
            let before = self.version.load(READ_VERSION_FIRST);
            if before % 2 == 1 {
                A::spin_loop();
                continue;
            }
            let value = read();
            // Orders the loads of the values before the version's second load: a write that
            // overlapped them has made the version odd or larger by then.
            A::fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) == before {
                return (before, value);
            }
        }
    }

    /// Makes `change` to the guarded values, after any other writer's change.
    pub fn write(&self, change: impl FnOnce()) {
        while self.writing.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            A::spin_loop();
        }
        let before = self.version.load(Ordering::Relaxed);
        self.version.store(before + 1, Ordering::Relaxed);
        // The odd version is visible before any changed value: a reader that loads a changed
        // value and then the version (after its fence) sees the version moved.
        A::fence(Ordering::Release);
        change();
        self.version.store(before + 2, Ordering::Release);
        self.writing.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Two values written together are never read apart, while two writers and a reader race
    /// on real threads (the model check in `tests/shared_memory_model.rs` tries every
    /// interleaving of a smaller race).
    #[test]
    fn readers_see_each_write_whole() {
        struct Pair {
            lock: SeqLock,
            a: AtomicU64,
            b: AtomicU64,
        }
        let pair = Arc::new(Pair { lock: SeqLock::default(), a: AtomicU64::new(0), b: AtomicU64::new(0) });
        let writers: Vec<_> = (0..2)
            .map(|writer| {
                let pair = Arc::clone(&pair);
                std::thread::spawn(move || {
                    for round in 1..=20_000u64 {
                        let value = round * 2 + writer;
                        pair.lock.write(|| {
                            pair.a.store(value, Ordering::Relaxed);
                            pair.b.store(value, Ordering::Relaxed);
                        });
                    }
                })
            })
            .collect();
        for _ in 0..50_000 {
            let (version, (a, b)) = pair.lock.read(|| (pair.a.load(Ordering::Relaxed), pair.b.load(Ordering::Relaxed)));
            assert_eq!(a, b, "torn read at version {version}");
            assert_eq!(version % 2, 0);
        }
        for writer in writers {
            writer.join().unwrap();
        }
        assert_eq!(pair.lock.version(), 2 * 2 * 20_000);
    }
}
