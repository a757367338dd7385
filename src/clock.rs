//! The wall clock that IDs carry.
//!
//! Randflake timestamps are Unix seconds, so generation reads the real-time clock, steps and
//! all: the generator refuses readings that go backwards, and a monotonic clock would hide the
//! very steps that can cause duplicates across restarts. Only whole seconds matter, so on Linux
//! the coarse variant is read: the same clock at the kernel tick's resolution, for a fraction of
//! the cost, on a path that runs once per ID. Every reading in the extension comes from here,
//! so all processes see the same clock.

use std::time::Duration;

/// Time since the Unix epoch; zero if the clock reads before 1970 (the generator refuses it).
#[inline]
pub fn unix_time() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `now` is a valid timespec for the kernel to fill.
        let read = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut now) } == 0;
        match (read, u64::try_from(now.tv_sec)) {
            (true, Ok(seconds)) => Duration::new(seconds, now.tv_nsec as u32),
            _ => Duration::ZERO,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        use std::time::{SystemTime, UNIX_EPOCH};
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
    }
}
