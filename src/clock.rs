//! The wall clock that IDs carry.
//!
//! Randflake timestamps are Unix seconds, so generation must read the real-time clock, with its
//! steps and all; the generator refuses readings that go backwards. A monotonic clock would hide
//! exactly the steps that can cause duplicates across restarts.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Time since the Unix epoch; zero if the clock reads before 1970 (the generator refuses it).
#[inline]
pub fn unix_time() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
}
