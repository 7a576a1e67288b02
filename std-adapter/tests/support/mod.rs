//! Helpers the std adapter's integration tests share (each test binary compiles its own copy, so
//! an unused helper is no warning).
#![allow(dead_code, clippy::unwrap_used, clippy::arithmetic_side_effects)]

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

/// A small seeded generator (xorshift64*), so that a failing run or case can be replayed.
pub struct Seeded(u64);

impl Seeded {
    /// A generator from `seed` (any value, zero included).
    pub fn new(seed: u64) -> Seeded {
        Seeded(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A writer into a shared buffer, for a `tracing` subscriber whose lines a test reads.
#[derive(Clone, Default)]
pub struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    /// The lines written so far that contain `needle`.
    pub fn with(&self, needle: &str) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }
}

/// An attempt that takes `took` (on tokio's clock), then fails with "reset" if it is the first
/// and answers its number if not: a call that succeeds on its retry.
pub async fn reset_on_first(attempt: u32, took: Duration) -> Result<u32, &'static str> {
    tokio::time::sleep(took).await;
    if attempt == 1 {
        Err("reset")
    } else {
        Ok(attempt)
    }
}
