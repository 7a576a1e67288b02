//! Helpers the core's integration tests share (each test file compiles its own copy, so an
//! unused helper is no warning).
#![allow(dead_code, clippy::unwrap_used)]

use stormguard_core::{Backoff, CallSettings, Duration, Jitter};

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `n` seconds.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The default call settings with no jitter, so waits read exactly.
pub fn no_jitter() -> CallSettings {
    CallSettings::builder()
        .backoff(Backoff::builder().jitter(Jitter::None).build().unwrap())
        .build()
        .unwrap()
}
