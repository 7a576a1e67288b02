//! Helpers the simulator's tests share (each test file compiles its own copy, so an unused
//! helper is no warning).
#![allow(dead_code)]

use stormguard_core::Duration;

/// `n` seconds of the core's time.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
