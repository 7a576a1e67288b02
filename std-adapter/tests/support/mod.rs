//! Helpers the std adapter's integration tests share (each test file compiles its own copy, so
//! an unused helper is no warning).
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use stormguard_std::{Backoff, Jitter};

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A backoff with the default curve and no jitter, so waits read exactly.
pub fn no_jitter() -> Backoff {
    Backoff::builder().jitter(Jitter::None).build().unwrap()
}
