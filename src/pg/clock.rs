//! The wall clock that IDs carry.
//!
//! Randflake timestamps are Unix seconds, so generation reads the real-time clock, steps and
//! all: the generator refuses readings that go backwards, and a monotonic clock would hide the
//! very steps that can cause duplicates across restarts. Only whole seconds matter, so on Linux
//! the coarse variant is read: the same clock at the kernel tick's resolution, for a fraction of
//! the cost. Every reading in the extension comes from here, so all processes see the same clock.

use std::time::Duration;

/// The current Unix second, for the path that runs once per ID; zero before 1970.
///
/// `time()` is the cheapest reading of that same coarse clock: on Linux it is answered in user
/// space from the second the kernel publishes at each tick, which `CLOCK_REALTIME_COARSE`
/// reports too, for about a third of what `clock_gettime` costs (docs/performance.md).
#[inline]
pub fn unix_second() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `time` accepts a null pointer and then only returns the reading.
        u64::try_from(unsafe { libc::time(std::ptr::null_mut()) }).unwrap_or(0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        unix_time().as_secs()
    }
}

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
