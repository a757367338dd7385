//! A sequence lock over values in shared memory: readers take no lock and write nothing, so
//! backends can read on every cache refill; writers are rare (the keeper, the launcher).
#![forbid(unsafe_code)]

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};

/// The version is odd while a writer changes the values it guards; a reader reads them again
/// until it sees the same even version before and after. Writers take turns through a flag.
#[derive(Default)]
pub struct SeqLock {
    version: AtomicU64,
    writing: AtomicBool,
}

impl SeqLock {
    /// Changes whenever the guarded values do.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// What `read` returns, with the version it was read at, read again until no write
    /// overlapped it. `read` must only load the guarded values (relaxed loads suffice).
    pub fn read<T>(&self, read: impl Fn() -> T) -> (u64, T) {
        loop {
            let before = self.version.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let value = read();
            fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) == before {
                return (before, value);
            }
        }
    }

    /// Makes `change` to the guarded values, after any other writer's change.
    pub fn write(&self, change: impl FnOnce()) {
        while self.writing.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::hint::spin_loop();
        }
        let before = self.version.load(Ordering::Relaxed);
        self.version.store(before + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        change();
        self.version.store(before + 2, Ordering::Release);
        self.writing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Two values written together are never read apart, while two writers and a reader race.
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
